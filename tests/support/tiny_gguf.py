"""A tiny llama GGUF file whose block projections gguf itself quantizes (Q4_0,
Q4_1, Q8_0, ...) or keeps float (F32): the 4-bit base loaders' test input."""

import numpy as np

import gguf as gguf_lib

V, E, F, H, K, D, L = 40, 64, 128, 2, 1, 64, 2  # every matmul input a multiple of 64
Q = gguf_lib.GGMLQuantizationType
_LAYER = {"attn_q.weight": (H * D, E), "attn_k.weight": (K * D, E), "attn_v.weight": (K * D, E),
          "attn_output.weight": (E, H * D), "ffn_gate.weight": (F, E), "ffn_up.weight": (F, E),
          "ffn_down.weight": (E, F)}


def write(path, qtypes, vocab_size: int = V) -> str:
  """Writes the model to `path` and returns it: `qtypes` cycle over the block
  projections (norms and the embedding are float32), weights from seed 0."""
  rng = np.random.default_rng(0)
  writer = gguf_lib.GGUFWriter(str(path), "llama")
  for add, value in [(writer.add_block_count, L), (writer.add_context_length, 64),
                     (writer.add_embedding_length, E), (writer.add_feed_forward_length, F),
                     (writer.add_head_count, H), (writer.add_head_count_kv, K),
                     (writer.add_key_length, D), (writer.add_layer_norm_rms_eps, 1e-5),
                     (writer.add_rope_freq_base, 10_000.0), (writer.add_vocab_size, vocab_size)]:
    add(value)
  writer.add_tensor("token_embd.weight",
                    (rng.standard_normal((vocab_size, E)) * 0.3).astype(np.float32))
  writer.add_tensor("output_norm.weight", (1 + 0.1 * rng.standard_normal(E)).astype(np.float32))
  count = 0
  for i in range(L):
    for norm in ("attn_norm.weight", "ffn_norm.weight"):
      writer.add_tensor(f"blk.{i}.{norm}", (1 + 0.1 * rng.standard_normal(E)).astype(np.float32))
    for name, shape in _LAYER.items():
      qtype = qtypes[count % len(qtypes)]
      count += 1
      value = (rng.standard_normal(shape) * 0.3 + 0.05).astype(np.float32)
      if qtype == Q.F32:
        writer.add_tensor(f"blk.{i}.{name}", value)
      else:
        writer.add_tensor(f"blk.{i}.{name}", gguf_lib.quants.quantize(value, qtype),
                          raw_dtype=qtype)
  writer.write_header_to_file()
  writer.write_kv_data_to_file()
  writer.write_tensors_to_file()
  writer.close()
  return str(path)
