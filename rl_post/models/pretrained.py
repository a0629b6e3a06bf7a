"""One entry point for pretrained checkpoints: HF safetensors dirs and GGUF files.

Trainers start from `config.pretrained.path`; this module picks the reader
from the path (a `.gguf` file or a directory with config.json).

  config, params = pretrained.load(path, mesh=mesh, rules=rules)
  config, frozen = pretrained.load_base(path, "q4_1", 32, mesh=mesh, rules=rules)

`load_base` is the start of a QLoRA run (`lora.base_quant` set): it returns
the quantized frozen base and never holds every projection in float. A GGUF
file whose block projections are the 4-bit blocks `base_quant` names
(`gguf_q4.keeps_blocks`: "q4_1" over Q4_0/Q4_1 blocks, "int4" over Q4_0
ones, blocks of 32) gives them as they are (`gguf_q4.load_q4_base`); any
other file or format is quantized one projection layer at a time as it is
read (`quant_load.place_quantized`).
"""

import functools
import os

from absl import logging

from rl_post.models import gguf, gguf_q4, hf, quant_load, safetensors_io
from rl_post.models.config import ModelConfig

_FLOAT_TYPES = ("F32", "F16", "BF16", "F64")


def _check(path: str):
  if path.endswith(".gguf"):
    return "gguf"
  if os.path.isdir(path):
    return "hf"
  raise FileNotFoundError(f"pretrained checkpoint {path!r} is neither a .gguf file nor a "
                          "directory with config.json and *.safetensors")


@functools.lru_cache(maxsize=2)
def _reader(path: str):
  # parsing a GGUF vocabulary takes seconds; read_config then load share one (load drops it)
  return gguf.open_reader(path)


def read_config(path: str, *, dtype: str | None = None) -> ModelConfig:
  """The checkpoint's ModelConfig without reading any weights."""
  if _check(path) == "gguf":
    config, _ = gguf.config_from_gguf(_reader(path), dtype=dtype or "float32")
    return config
  return hf.read_config(path, dtype=dtype)


def load(path: str, *, mesh=None, rules=None, dtype: str | None = None):
  """(ModelConfig, params) from a .gguf file or a HF checkpoint directory."""
  if _check(path) == "gguf":
    try:
      return gguf.load(_reader(path), mesh=mesh, rules=rules, dtype=dtype or "float32")
    finally:  # the reader maps the whole file: kept, its pages would stay resident
      _reader.cache_clear()
  return hf.load(path, mesh=mesh, rules=rules, dtype=dtype)


def requantize_note(types, base_quant: str, block_size: int) -> str:
  """What loading block projections of the GGUF `types` as a `base_quant` base
  does, when it cannot keep them as they are (logged by `load_base`)."""
  held = "/".join(sorted(types))
  target = base_quant if base_quant == "int8" else f"{base_quant} in blocks of {block_size}"
  if set(types) <= set(_FLOAT_TYPES):
    return f"its block projections are {held}: each is quantized to {target} as it is read"
  if set(types) <= set(gguf_q4.Q4_TYPES):
    return (f"its block projections are {held} blocks, which the {base_quant} base does not "
            f"keep: each is dequantized and quantized again, to {target}, as it is read "
            f"(lora.base_quant='q4_1' with base_quant_block_size={gguf_q4.BLOCK} keeps them)")
  return (f"its block projections are {held}, not only {' or '.join(gguf_q4.Q4_TYPES)} "
          f"blocks: each is dequantized and quantized to {target} as it is read")


def load_base(path: str, base_quant: str, block_size: int, *, mesh=None, rules=None,
              dtype: str | None = None) -> tuple[ModelConfig, dict]:
  """(ModelConfig, quantized frozen base) from a .gguf file or a HF checkpoint
  directory: the tree `quant.quantize_base(load(path)[1], base_quant, block_size)`
  has, made without a float copy of the block projections (module docstring).

  Raises:
    gguf_q4.BlockMismatch: a GGUF file's 4-bit blocks and a `base_quant` /
      `block_size` that names another GGUF block format (`keeps_blocks`).
    ValueError: as `load`, or a block size that does not divide a projection.
  """
  if _check(path) == "hf":
    config = hf.read_config(path, dtype=dtype)
    return config, quant_load.place_quantized(config, safetensors_io.SafetensorsDir(path),
                                              base_quant, block_size, mesh=mesh, rules=rules)
  try:
    reader = _reader(path)
    config, arch = gguf.config_from_gguf(reader, dtype=dtype or "float32")
    source = gguf.GGUFSource(reader, config, arch, cache_size=1)  # each tensor read once
    hf.check_tensors(config, source)
    types = gguf_q4.projection_types(source, config)
    if gguf_q4.keeps_blocks(types, base_quant, block_size):
      return gguf_q4.load_q4_base(reader, dtype=dtype or "float32", base_quant=base_quant)
    log = logging.info if types <= set(_FLOAT_TYPES) else logging.warning
    log("pretrained.path=%s: %s", path, requantize_note(types, base_quant, block_size))
    return config, quant_load.place_quantized(config, source, base_quant, block_size,
                                              mesh=mesh, rules=rules)
  finally:  # the reader maps the whole file: kept, its pages would stay resident
    _reader.cache_clear()
