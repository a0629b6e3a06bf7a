"""Ahead-of-time memory checks: exact parameter/optimizer/KV bytes, OOM caught before booking."""

import json
import math
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from child_process import xla_flags
from rl_post import models
from rl_post.rl import aot
from rl_post.parallel import mesh as mesh_lib
from rl_post.parallel import sharding

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _aot(tmp_path, *flags):
  out_json = tmp_path / "aot.json"
  env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  env["XLA_FLAGS"] = xla_flags()
  out = subprocess.run([sys.executable, os.path.join(ROOT, "experiments", "aot_check.py"),
                        *flags, f"--json_out={out_json}"], env=env, capture_output=True,
                       text=True, timeout=600, cwd=ROOT)
  reports = json.loads(out_json.read_text()) if out_json.exists() else None
  return out, reports


def test_tiny_config_on_v5e_8_reports_exact_sharded_bytes(tmp_path):
  out, reports = _aot(tmp_path, "--config=configs/grpo_arithmetic.py", "--target=v5e-8",
                      "--mesh=data=2,fsdp=4", "--rows=16", "--seq_len=32")
  assert out.returncode == 0, out.stderr[-3000:]
  assert "fake CPU devices" in out.stdout  # no libtpu here: says how it compiled
  (r,) = reports
  assert r["mesh"] == dict(data=2, fsdp=4, tensor=1, context=1) and r["num_devices"] == 8
  from configs import grpo_arithmetic
  config = grpo_arithmetic.get_config()
  vocab = config.tokenizer.vocab_size
  expected = models.ModelConfig.from_dict(dict(config.model.to_dict(), vocab_size=vocab))
  leaves = jax.tree.leaves(models.abstract_params(expected))
  assert r["num_params"] == sum(math.prod(x.shape) for x in leaves)
  # Every 'embed' dimension is split 4 ways over fsdp; the rest is replicated.
  axes = jax.tree.leaves(models.param_logical_axes(expected),
                         is_leaf=lambda x: isinstance(x, tuple))
  per_device = sum(math.prod(x.shape) // (4 if "embed" in a else 1) for x, a in zip(leaves, axes))
  assert r["params_bytes"] == 4 * per_device
  assert 2 * r["params_bytes"] <= r["opt_state_bytes"] <= 2 * r["params_bytes"] + 64  # Adam mu, nu
  # K and V: layers x (16 rows / 8 batch shards) x 32 x kv_heads x head_dim x f32.
  m = expected
  assert r["kv_cache_bytes"] == 2 * m.num_layers * 2 * 32 * m.num_kv_heads * m.head_dim * 4
  assert 0 < r["activation_bytes"] < r["hbm_bytes"] and r["fits"]
  assert r["total_bytes"] >= r["params_bytes"] + r["opt_state_bytes"]


def test_an_8b_model_replicated_on_v5e_8_is_reported_as_not_fitting(tmp_path):
  out, reports = _aot(tmp_path, "--model=llama-8b", "--target=v5e-8", "--mesh=data=8",
                      "--rows=8", "--seq_len=16")
  assert out.returncode == 1, out.stderr[-3000:]
  assert "do NOT fit" in out.stdout
  (r,) = reports
  assert r["num_params"] == 8_030_261_248  # Llama-3.1-8B
  assert r["params_bytes"] == 4 * r["num_params"] and not r["fits"]


@pytest.mark.parametrize("flags,message", [
    (("--model=llama-8b", "--target=v7x-9000"), "is unknown"),
    (("--model=gpt5",), "give --config or --model"),
    (("--model=llama-1b", "--mesh=data"), "axis=size"),
    (("--model=llama-1b", "--mesh=data=two"), "size must be an int"),
])
def test_bad_flags_are_named(tmp_path, flags, message):
  out, _ = _aot(tmp_path, *flags)
  assert out.returncode != 0 and message in out.stderr


def test_kv_cache_bytes_follow_the_cache_rules():
  mesh = mesh_lib.make_mesh(dict(data=1), jax.devices()[:1])
  cfg = aot.MODELS["llama-1b"]
  got = aot.kv_cache_bytes(cfg, mesh, sharding.DEFAULT_RULES, rows=4, seq_len=100)
  assert got == 2 * 16 * 4 * 100 * 8 * 64 * 4  # K+V x layers x rows x T x K x D x f32


def test_presets_have_the_published_parameter_counts():
  counts = {name: sum(int(np.prod(x.shape)) for x in jax.tree.leaves(models.abstract_params(c)))
            for name, c in aot.MODELS.items()}
  assert counts == {"smollm2-135m": 134_515_008, "llama-1b": 1_235_814_400,
                    "llama-8b": 8_030_261_248}


def test_batch_constraints_split_fsdp_activations_over_the_batch(tmp_path):
  """With fsdp the saved activations follow the params (split over embed) unless the
  model pins its residual stream to `batch`; the constraint must shrink them."""
  flags = ("--config=configs/grpo_arithmetic.py", "--target=8xh100", "--mesh=fsdp=8",
           "--rows=64", "--seq_len=64")
  out, (on,) = _aot(tmp_path, *flags)
  assert out.returncode == 0, out.stderr[-3000:]
  out, (off,) = _aot(tmp_path, *flags, "--noactivation_constraints")
  assert out.returncode == 0, out.stderr[-3000:]
  assert on["constrain_activations"] and not off["constrain_activations"]
  assert on["params_bytes"] == off["params_bytes"]
  assert 3 * on["activation_bytes"] < off["activation_bytes"], (on, off)


@pytest.mark.parametrize("flags,line", [
    (("--model=llama-1b", "--mesh=data=3"), "error: --mesh='data=3': does not lay out"),
    (("--model=llama-1b", "--rows=0"), "error: --rows=0: must be >= 1"),
])
def test_bad_values_are_one_line_and_exit_2_not_the_does_not_fit_status(tmp_path, flags, line):
  out, reports = _aot(tmp_path, *flags)
  assert out.returncode == 2 and reports is None, out.stderr[-3000:]
  assert out.stderr.strip().splitlines()[-1].startswith(line) and "Traceback" not in out.stderr
