r"""Attention benchmarks: prints a table and writes JSON.

CPU (default), causal attention forward+backward, B=1, H=Hkv=1, D=64, f32,
our XLA path vs naive full-matrix attention vs `jax.nn.dot_product_attention`:

  python experiments/benchmarks/attention.py --out=/tmp/attention_cpu.json

Each (impl, length) runs in a fresh subprocess. Memory is reported two ways:
`compiled_mb` = XLA's `memory_analysis()` temp + output bytes of the jitted
step (exact, needs no execution), and `rss_peak_mb` = peak resident memory
above the pre-run level, sampled every 1 ms during the first run (later
runs reuse pages the allocator holds). Times are the best of --repeats runs
after that first one. A step whose
compiled size exceeds --max_run_gb is compiled but not run.

The tiny model (4 layers, E=128, 4 heads / 2 KV heads of 32) forward+backward
at 32,768 tokens with the XLA attention:

  python experiments/benchmarks/attention.py --model_tokens=32768

GPU (run on an H200; bf16, D=128, H=Hkv=16, B=1): TFLOP/s of our Pallas
kernels vs JAX's bundled Pallas attention and cuDNN (via
`jax.nn.dot_product_attention`), and decode attention bandwidth vs a measured
HBM copy bandwidth:

  python experiments/benchmarks/attention.py --mode=gpu --out=/tmp/attention_gpu.json

(--mode=gpu_smoke runs that script on CPU with tiny shapes, kernels in
interpret mode, to check it end to end.)
"""

import dataclasses
import json
import math
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from absl import app, flags  # noqa: E402

_MODE = flags.DEFINE_enum("mode", "cpu", ["cpu", "gpu", "gpu_smoke"],
                          "Benchmark set; gpu_smoke runs the GPU script on CPU "
                          "with tiny shapes and interpreted kernels.")
_SEQ_LENS = flags.DEFINE_list("seq_lens", None, "Sequence lengths (default per mode).")
_IMPLS = flags.DEFINE_list("impls", ["xla", "naive", "jax_dpa"], "CPU impls.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed runs per point (best is kept).")
_MAX_RUN_GB = flags.DEFINE_float("max_run_gb", 3.0, "Do not run steps compiled above this.")
_MODEL_TOKENS = flags.DEFINE_integer("model_tokens", 0, "Tiny-model fwd+bwd at this length.")
_OUT = flags.DEFINE_string("out", "/tmp/attention_bench.json", "JSON output path.")
_CHILD = flags.DEFINE_string("child", None, "Internal: one measurement, as JSON.")

MB = 2 ** 20


def _rss_bytes():
  with open("/proc/self/statm") as f:
    return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_rss_during(fn):
  """Runs fn once; returns peak RSS above the level before it, in bytes.

  Call on the first execution: later runs reuse pages the allocator already
  holds, which would hide the step's footprint.
  """
  import jax
  base, peak, done = _rss_bytes(), [0], threading.Event()

  def sample():
    while not done.is_set():
      peak[0] = max(peak[0], _rss_bytes())
      time.sleep(0.001)

  thread = threading.Thread(target=sample, daemon=True)
  thread.start()
  jax.block_until_ready(fn())
  done.set()
  thread.join()
  return max(peak[0], _rss_bytes()) - base


def _best_time(fn, repeats):
  import jax
  best = math.inf
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn())
    best = min(best, time.perf_counter() - start)
  return best


def _compiled_bytes(compiled):
  mem = compiled.memory_analysis()
  return mem.temp_size_in_bytes + mem.output_size_in_bytes


# ---------------------------------------------------------------- CPU kernels

def naive_attention(q, k, v):
  """Causal attention through the full [T, T] score matrix."""
  import jax
  import jax.numpy as jnp
  t, d = q.shape[1], q.shape[-1]
  s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(d)
  s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, -1e30)
  return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, axis=-1), v)


def _attention_fn(impl):
  import jax
  from rl_post.kernels import attention
  if impl == "naive":
    return naive_attention
  if impl == "jax_dpa":
    return lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=True)
  return lambda q, k, v: attention.flash_attention(q, k, v, causal=True, impl=impl)


def _measure_attention(impl, seq_len, repeats, max_run_bytes):
  import jax
  import jax.numpy as jnp
  shape = (1, seq_len, 1, 64)
  keys = jax.random.split(jax.random.key(0), 4)
  q, k, v, do = (jax.random.normal(key, shape, jnp.float32) for key in keys)
  fn = _attention_fn(impl)

  def step(q, k, v, do):
    out, vjp = jax.vjp(fn, q, k, v)
    return vjp(do)

  compiled = jax.jit(step).lower(q, k, v, do).compile()
  result = dict(impl=impl, seq_len=seq_len, compiled_mb=_compiled_bytes(compiled) / MB)
  if _compiled_bytes(compiled) > max_run_bytes:
    result.update(ran=False, note="compiled size over --max_run_gb: not run")
    return result
  run = lambda: compiled(q, k, v, do)
  peak = _peak_rss_during(run)  # first run doubles as the warm-up
  return dict(result, ran=True, seconds=_best_time(run, repeats),
              rss_peak_mb=peak / MB)


def _measure_model(tokens, max_run_bytes):
  """Tiny-model forward+backward at `tokens` tokens with XLA attention."""
  import jax
  from rl_post import models
  config = models.ModelConfig(vocab_size=384, num_layers=4, embed_dim=128,
                              num_heads=4, num_kv_heads=2, head_dim=32,
                              mlp_dim=384, attention_impl="xla")
  params = models.init_params(config, jax.random.key(0))
  tokens_BxT = jax.random.randint(jax.random.key(1), (1, tokens), 0, 384)

  def compile_step(config):
    step = jax.value_and_grad(lambda p, t: _model_loss(config, p, t))
    return jax.jit(step).lower(params, tokens_BxT).compile()

  compiled = compile_step(config)
  # The same model with dense attention, compiled only, for comparison.
  dense = compile_step(dataclasses.replace(config, attention_impl="reference"))
  result = dict(impl="model_xla", seq_len=tokens,
                compiled_mb=_compiled_bytes(compiled) / MB,
                dense_attention_compiled_mb=_compiled_bytes(dense) / MB)
  if _compiled_bytes(compiled) > max_run_bytes:
    return dict(result, ran=False)
  run = lambda: compiled(params, tokens_BxT)
  start = time.perf_counter()
  peak = _peak_rss_during(run)
  return dict(result, ran=True, seconds=time.perf_counter() - start,
              rss_peak_mb=peak / MB)


def _model_loss(config, params, tokens_BxT):
  import jax
  import jax.numpy as jnp
  from rl_post import models
  logits = models.apply(config, params, tokens_BxT)
  logp = jax.nn.log_softmax(logits[:, :-1])
  return -jnp.take_along_axis(logp, tokens_BxT[:, 1:, None], -1).mean()


def _run_child(spec):
  """Runs one measurement in a fresh interpreter; returns its JSON result."""
  cmd = [sys.executable, os.path.abspath(__file__), "--child=" + json.dumps(spec)]
  env = dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"))
  proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
  lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
  if proc.returncode or not lines:
    return dict(spec, ran=False, note="failed: " + proc.stderr.strip()[-300:])
  return json.loads(lines[-1])


def _cpu_table(results):
  print(f"{'impl':<9}{'tokens':>8}{'fwd+bwd s':>11}{'rss peak MB':>13}{'compiled MB':>13}")
  for r in results:
    secs = f"{r['seconds']:.3f}" if r.get("ran") else "not run"
    rss = f"{r['rss_peak_mb']:.0f}" if r.get("ran") else "-"
    print(f"{r['impl']:<9}{r['seq_len']:>8}{secs:>11}{rss:>13}{r.get('compiled_mb', 0):>13.0f}")


def run_cpu():
  lens = [int(x) for x in (_SEQ_LENS.value or ["2048", "8192", "32768"])]
  results = []
  if _MODEL_TOKENS.value:
    results.append(_run_child(dict(kind="model", seq_len=_MODEL_TOKENS.value)))
    r = results[-1]
    print(json.dumps(r, indent=1))
  else:
    for seq_len in lens:
      for impl in _IMPLS.value:
        results.append(_run_child(dict(kind="attention", impl=impl, seq_len=seq_len)))
        print(json.dumps(results[-1]), flush=True)
    _cpu_table(results)
  return results


def main(argv):
  del argv
  if _CHILD.value:
    spec = json.loads(_CHILD.value)
    max_run = _MAX_RUN_GB.value * 2 ** 30
    if spec["kind"] == "model":
      result = _measure_model(spec["seq_len"], max_run)
    else:
      result = _measure_attention(spec["impl"], spec["seq_len"], _REPEATS.value, max_run)
    print(json.dumps(result))
    return
  if _MODE.value.startswith("gpu"):
    from experiments.benchmarks import gpu_attention  # noqa: PLC0415
    setup = (gpu_attention.SMOKE if _MODE.value == "gpu_smoke"
             else gpu_attention.GpuSetup())
    results = gpu_attention.run_gpu(_SEQ_LENS.value, setup)
  else:
    results = run_cpu()
  with open(_OUT.value, "w") as f:
    json.dump(dict(mode=_MODE.value, results=results), f, indent=1)
  print(f"wrote {_OUT.value}")


if __name__ == "__main__":
  app.run(main)
