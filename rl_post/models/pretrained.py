"""One entry point for pretrained checkpoints: HF safetensors dirs and GGUF files.

Trainers start from `config.pretrained.path`; this module picks the reader
from the path (a `.gguf` file or a directory with config.json).
"""

import functools
import os

from rl_post.models import gguf, hf
from rl_post.models.config import ModelConfig


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
