"""Truncated, garbled and incomplete model, checkpoint and tokenizer files are user
errors: a MissingInputError naming --checkpoint or tokenizer.path (one line, exit 2
from experiments/evaluate.py), and the readers say "truncated" where they can tell."""

import gc
import json
import os
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest

from configs import grpo_arithmetic
from rl_post import models
from rl_post.checkpoint.params import save_params
from rl_post.errors import MissingInputError
from rl_post.evaluate import checkpoint_eval
from rl_post.models import ModelConfig, gguf, hf, safetensors_io
from rl_post.parallel import mesh as mesh_lib

import gguf as gguf_lib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = ModelConfig(vocab_size=512, num_layers=2, embed_dim=16, num_heads=2, num_kv_heads=1,
                   head_dim=8, mlp_dim=32)


@pytest.fixture(scope="module")
def config(tokenizer_path):
  c = grpo_arithmetic.get_config("tiny")
  c.tokenizer.path = tokenizer_path
  return c


@pytest.fixture(scope="module")
def originals(tmp_path_factory):
  """One tiny model saved as an export, a one-file and a sharded HF folder, and a GGUF file."""
  root = tmp_path_factory.mktemp("models")
  params = models.init_params(TINY, jax.random.key(0))
  paths = {"export": save_params(str(root / "export"), TINY, params),
           "hf": hf.save(str(root / "hf"), TINY, params),
           "hf_sharded": hf.save(str(root / "hf_sharded"), TINY, params, max_shard_bytes=20_000),
           "gguf": str(root / "model.gguf")}
  writer = gguf_lib.GGUFWriter(paths["gguf"], "llama")
  writer.add_tensor("token_embd.weight", np.zeros((64, 16), np.float32))
  writer.write_header_to_file()
  writer.write_kv_data_to_file()
  writer.write_tensors_to_file()
  writer.close()
  return paths


def _truncate_all(directory: str, size: int):
  for name in os.listdir(directory):
    with open(os.path.join(directory, name), "r+b") as f:
      f.truncate(size)


def _write(path: str, text: str):
  with open(path, "w") as f:
    f.write(text)


def _safetensors(path):
  return os.path.join(path, safetensors_io.SINGLE_FILE)


def _shards(path):
  return sorted(n for n in os.listdir(path) if n.startswith("model-"))


# kind of original -> (how it is damaged, what the error says)
DAMAGE = {
    "export_truncated_data": ("export", lambda p: _truncate_all(
        os.path.join(p, "params", "ocdbt.process_0", "d"), 100), "truncated or corrupt"),
    "export_garbage_model_config": ("export", lambda p: _write(
        os.path.join(p, "model_config.json"), "{\x01"), "model_config.json is not valid JSON"),
    "export_unknown_model_field": ("export", lambda p: _write(
        os.path.join(p, "model_config.json"), json.dumps({**TINY.to_dict(), "bogus": 1})),
        "unknown model config field"),
    "export_without_params": ("export", lambda p: shutil.rmtree(os.path.join(p, "params")),
                              "has no params/ folder"),
    "export_garbage_manifest": ("export", lambda p: _write(
        os.path.join(p, "params", "manifest.ocdbt"), "garbage"), "corrupt"),
    "hf_truncated_data": ("hf", lambda p: os.truncate(_safetensors(p), 20_000), "truncated"),
    "hf_truncated_to_5_bytes": ("hf", lambda p: os.truncate(_safetensors(p), 5), "truncated"),
    "hf_no_safetensors": ("hf", lambda p: os.remove(_safetensors(p)), "no \\*.safetensors"),
    "hf_garbage_config": ("hf", lambda p: _write(os.path.join(p, "config.json"), "{\x01"),
                          "config.json is not valid JSON"),
    "hf_unsupported_architecture": ("hf", lambda p: _write(
        os.path.join(p, "config.json"), json.dumps({"architectures": ["GPT2LMHeadModel"]})),
        "unsupported architecture"),
    "hf_missing_shard": ("hf_sharded", lambda p: os.remove(os.path.join(p, _shards(p)[1])),
                         "listed in model.safetensors.index.json is missing"),
    "hf_garbage_index": ("hf_sharded", lambda p: _write(
        os.path.join(p, safetensors_io.INDEX_FILE), "{\n"), "JSONDecodeError"),
    "gguf_truncated": ("gguf", lambda p: os.truncate(p, os.path.getsize(p) - 100),
                       "is truncated: tensor 'token_embd.weight' ends at byte"),
    "gguf_garbage": ("gguf", lambda p: _write(p, "x" * 4096), "is not a GGUF file"),
    "gguf_empty": ("gguf", lambda p: os.truncate(p, 0), "is empty"),
}


def _damaged(originals, tmp_path, case) -> str:
  kind, damage, _ = DAMAGE[case]
  path = str(tmp_path / os.path.basename(originals[kind]))
  (shutil.copytree if os.path.isdir(originals[kind]) else shutil.copy)(originals[kind], path)
  damage(path)
  return path


# orbax leaves its failed reads' tasks behind (reported at garbage collection)
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_damaged_checkpoint_names_the_flag(case, originals, config, tokenizer, tmp_path):
  path = _damaged(originals, tmp_path, case)
  mesh = mesh_lib.make_mesh(dict(config.mesh))
  with pytest.raises(MissingInputError, match=DAMAGE[case][2]) as info:
    checkpoint_eval.load_checkpoint(path, config, tokenizer, mesh,
                                    tuple(tuple(r) for r in config.sharding_rules))
  assert info.value.field == "--checkpoint" and info.value.value == path
  assert "\n" not in str(info.value)
  gc.collect()  # free those tasks now, under this test's filter, not in a later test's


def test_undamaged_originals_load(originals, config, tokenizer):
  mesh = mesh_lib.make_mesh(dict(config.mesh))
  rules = tuple(tuple(r) for r in config.sharding_rules)
  for kind in ("export", "hf", "hf_sharded"):
    loaded = checkpoint_eval.load_checkpoint(originals[kind], config, tokenizer, mesh, rules)
    assert loaded.model_config.num_layers == 2 and loaded.step is None


def test_safetensors_reader_checks_data_offsets(tmp_path):
  path = str(tmp_path / "one.safetensors")
  safetensors_io.write_file(path, {"w": np.arange(12, dtype=np.float32).reshape(3, 4)})
  os.truncate(path, os.path.getsize(path) - 1)
  with pytest.raises(ValueError, match=r"is truncated: tensor 'w' ends at byte \d+, the file "
                     r"has \d+"):
    safetensors_io.SafetensorsDir(str(tmp_path))


def test_gguf_reader_says_truncated(originals, tmp_path):
  path = str(tmp_path / "cut.gguf")
  shutil.copy(originals["gguf"], path)
  os.truncate(path, os.path.getsize(path) - 1)
  with pytest.raises(ValueError, match="is truncated"):
    gguf.open_reader(path)


def _cut_model(tokenizer_path, tmp_path):
  path = str(tmp_path / "cut.model")
  shutil.copy(tokenizer_path, path)
  os.truncate(path, os.path.getsize(path) // 2)
  return path


def _garbage(name):
  def make(tokenizer_path, tmp_path):
    _write(str(tmp_path / name), "{\x01 garbage")
    return str(tmp_path / name)
  return make


def _hf_dir_with_bad_tokenizer_json(tokenizer_path, tmp_path):
  return os.path.dirname(_garbage("tokenizer.json")(tokenizer_path, tmp_path))


BAD_TOKENIZERS = {
    "truncated_model": (_cut_model, "truncated or not a SentencePiece model"),
    "garbage_model": (_garbage("g.model"), "truncated or not a SentencePiece model"),
    "garbage_gguf": (_garbage("g.gguf"), "is not a GGUF file"),
    "bad_tokenizer_json": (_hf_dir_with_bad_tokenizer_json, "is not a valid tokenizer.json"),
    "dir_without_tokenizer_json": (lambda _, tmp_path: str(tmp_path), "no tokenizer.json"),
}


@pytest.mark.parametrize("case", sorted(BAD_TOKENIZERS))
def test_unreadable_tokenizer_names_tokenizer_path(case, tokenizer_path, tmp_path):
  make, match = BAD_TOKENIZERS[case]
  config = grpo_arithmetic.get_config("tiny")
  config.tokenizer.path = make(tokenizer_path, tmp_path)
  with pytest.raises(MissingInputError, match=match) as info:
    checkpoint_eval.evaluate_checkpoint(config, str(tmp_path), checkpoint_eval.EvalSettings())
  assert info.value.field == "tokenizer.path"


def test_evaluate_prints_one_error_line(originals, tokenizer_path, tmp_path):
  path = _damaged(originals, tmp_path, "hf_truncated_data")
  result = subprocess.run(
      [sys.executable, os.path.join(ROOT, "experiments", "evaluate.py"),
       "--config=" + os.path.join(ROOT, "configs", "grpo_arithmetic.py") + ":tiny",
       f"--config.tokenizer.path={tokenizer_path}", f"--checkpoint={path}",
       f"--workdir={tmp_path / 'out'}"],
      capture_output=True, text=True, timeout=300, cwd=ROOT,
      env={**os.environ, "JAX_PLATFORMS": "cpu"})
  assert result.returncode == 2, result.stderr[-3000:]
  errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
  assert len(errors) == 1, result.stderr[-3000:]
  assert errors[0].startswith(f"error: --checkpoint={path!r}: cannot be read (ValueError: "
                              f"{_safetensors(path)} is truncated: tensor ")
  assert "Traceback" not in result.stderr
