"""GPU half of experiments/benchmarks/attention.py (run with --mode=gpu).

Causal flash attention, bf16, head_dim 128, 16 heads, batch * tokens = 32k:
TFLOP/s of the forward and of the backward pass for
  ours       rl_post.kernels.pallas_gpu (Pallas/Triton),
  jax_pallas jax.experimental.pallas.ops.gpu.attention.mha,
  cudnn      jax.nn.dot_product_attention(implementation="cudnn"),
and decode attention (GQA 32/8 heads, 32k cache, ragged lengths) as a
fraction of the HBM bandwidth measured by a large copy in the same run.
FLOPs count only the causal half: forward 2 * 2 * B * H * T^2 * D / 2,
backward 2.5x that; the backward time is (forward+backward) - forward.
"""

import math
import statistics
import time

import jax
import jax.numpy as jnp

import dataclasses


@dataclasses.dataclass(frozen=True)
class GpuSetup:
  tokens_per_batch: int = 32768
  heads: int = 16
  head_dim: int = 128
  decode_batch: int = 8
  decode_heads: int = 32
  decode_kv_heads: int = 8
  decode_max_len: int = 32768
  copy_elements: int = 2 ** 31  # 4 GiB of bf16 for the bandwidth probe
  iters: int = 10
  interpret: bool = False  # smoke-test the script on CPU


# Tiny shapes, Pallas in interpret mode: checks the script runs end to end on
# a machine without a GPU (cuDNN then reports an error row).
SMOKE = GpuSetup(tokens_per_batch=256, heads=2, head_dim=16, decode_batch=2,
                 decode_heads=4, decode_kv_heads=2, decode_max_len=256,
                 copy_elements=2 ** 20, iters=1, interpret=True)


def _time(fn, *args, iters):
  """Median seconds of a jitted call (after a warm-up)."""
  jax.block_until_ready(fn(*args))
  times = []
  for _ in range(iters):
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def _impls(setup):
  from jax.experimental.pallas.ops.gpu import attention as jax_gpu_attention
  from rl_post.kernels import pallas_gpu
  scale = 1.0 / math.sqrt(setup.head_dim)
  return {
      "ours": lambda q, k, v: pallas_gpu.flash_attention(
          q, k, v, causal=True, interpret=setup.interpret),
      "jax_pallas": lambda q, k, v: jax_gpu_attention.mha(
          q, k, v, segment_ids=None, sm_scale=scale, causal=True,
          interpret=setup.interpret),
      "cudnn": lambda q, k, v: jax.nn.dot_product_attention(
          q, k, v, is_causal=True, implementation="cudnn"),
  }


def flash_point(setup, name, fn, seq_len):
  batch = max(1, setup.tokens_per_batch // seq_len)
  keys = jax.random.split(jax.random.key(0), 4)
  shape = (batch, seq_len, setup.heads, setup.head_dim)
  q, k, v, do = (jax.random.normal(key, shape, jnp.bfloat16) for key in keys)
  fwd = jax.jit(fn)
  fwd_bwd = jax.jit(lambda q, k, v, do: jax.vjp(fn, q, k, v)[1](do))
  flops_fwd = 4 * batch * setup.heads * seq_len * seq_len * setup.head_dim / 2
  result = dict(kind="flash", impl=name, seq_len=seq_len, batch=batch)
  try:
    t_fwd = _time(fwd, q, k, v, iters=setup.iters)
    t_all = _time(fwd_bwd, q, k, v, do, iters=setup.iters)
  except Exception as e:  # a missing backend must not stop the table
    return dict(result, error=f"{type(e).__name__}: {str(e)[:200]}")
  return dict(result, fwd_ms=t_fwd * 1e3, bwd_ms=(t_all - t_fwd) * 1e3,
              fwd_tflops=flops_fwd / t_fwd / 1e12,
              bwd_tflops=2.5 * flops_fwd / max(t_all - t_fwd, 1e-9) / 1e12)


def hbm_bandwidth(setup):
  """Bytes/s of a large elementwise op (read + write)."""
  x = jnp.ones((setup.copy_elements,), jnp.bfloat16)
  seconds = _time(jax.jit(lambda x: x * 2), x, iters=setup.iters)
  return 2 * x.size * x.dtype.itemsize / seconds


def decode_points(setup, bandwidth):
  from rl_post.kernels import attention
  batch, heads = setup.decode_batch, setup.decode_heads
  kv_heads, max_len, head_dim = setup.decode_kv_heads, setup.decode_max_len, setup.head_dim
  keys = jax.random.split(jax.random.key(1), 3)
  q = jax.random.normal(keys[0], (batch, heads, head_dim), jnp.bfloat16)
  cache = (batch, max_len, kv_heads, head_dim)
  kc = jax.random.normal(keys[1], cache, jnp.bfloat16)
  vc = jax.random.normal(keys[2], cache, jnp.bfloat16)
  lengths = jnp.linspace(max_len // 2, max_len, batch).astype(jnp.int32)
  bytes_read = 2 * int(lengths.sum()) * kv_heads * head_dim * 2
  out = []
  for impl in ("pallas", "xla"):
    fn = jax.jit(lambda q, kc, vc, n, impl=impl: attention.decode_attention(
        q, kc, vc, n, impl=impl))
    try:
      seconds = _time(fn, q, kc, vc, lengths, iters=setup.iters)
    except Exception as e:
      out.append(dict(kind="decode", impl=impl, error=str(e)[:200]))
      continue
    achieved = bytes_read / seconds
    out.append(dict(kind="decode", impl=impl, us=seconds * 1e6,
                    gb_per_s=achieved / 1e9,
                    fraction_of_hbm=achieved / bandwidth))
  return out


def run_gpu(seq_lens=None, setup=GpuSetup()):
  default = [4096, 8192, 16384, 32768] if not setup.interpret else [128, 256]
  seq_lens = [int(s) for s in (seq_lens or default)]
  results = []
  print(f"{'impl':<11}{'tokens':>7}{'batch':>6}{'fwd TF/s':>10}{'bwd TF/s':>10}")
  for seq_len in seq_lens:
    for name, fn in _impls(setup).items():
      r = flash_point(setup, name, fn, seq_len)
      results.append(r)
      if "error" in r:
        print(f"{name:<11}{seq_len:>7}  error: {r['error'][:60]}")
      else:
        print(f"{name:<11}{seq_len:>7}{r['batch']:>6}{r['fwd_tflops']:>10.1f}"
              f"{r['bwd_tflops']:>10.1f}", flush=True)
  bandwidth = hbm_bandwidth(setup)
  results.append(dict(kind="hbm", gb_per_s=bandwidth / 1e9))
  print(f"measured HBM bandwidth: {bandwidth / 1e9:.0f} GB/s")
  for r in decode_points(setup, bandwidth):
    results.append(r)
    if "error" in r:
      print(f"decode {r['impl']}: error {r['error'][:80]}")
    else:
      print(f"decode {r['impl']:<7}{r['us']:>9.1f} us {r['gb_per_s']:>7.0f} GB/s"
            f" = {100 * r['fraction_of_hbm']:.0f}% of measured HBM")
  return results
