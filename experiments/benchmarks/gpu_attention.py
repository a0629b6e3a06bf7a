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

TOKENS_PER_BATCH = 32768
HEADS = 16
HEAD_DIM = 128


def _time(fn, *args, iters=10):
  """Median seconds of a jitted call (after a warm-up)."""
  jax.block_until_ready(fn(*args))
  times = []
  for _ in range(iters):
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def _impls():
  from jax.experimental.pallas.ops.gpu import attention as jax_gpu_attention
  from rl_post.kernels import pallas_gpu
  scale = 1.0 / math.sqrt(HEAD_DIM)
  return {
      "ours": lambda q, k, v: pallas_gpu.flash_attention(q, k, v, causal=True),
      "jax_pallas": lambda q, k, v: jax_gpu_attention.mha(
          q, k, v, segment_ids=None, sm_scale=scale, causal=True),
      "cudnn": lambda q, k, v: jax.nn.dot_product_attention(
          q, k, v, is_causal=True, implementation="cudnn"),
  }


def flash_point(name, fn, seq_len):
  batch = max(1, TOKENS_PER_BATCH // seq_len)
  keys = jax.random.split(jax.random.key(0), 4)
  shape = (batch, seq_len, HEADS, HEAD_DIM)
  q, k, v, do = (jax.random.normal(key, shape, jnp.bfloat16) for key in keys)
  fwd = jax.jit(fn)
  fwd_bwd = jax.jit(lambda q, k, v, do: jax.vjp(fn, q, k, v)[1](do))
  flops_fwd = 4 * batch * HEADS * seq_len * seq_len * HEAD_DIM / 2
  result = dict(kind="flash", impl=name, seq_len=seq_len, batch=batch)
  try:
    t_fwd = _time(fwd, q, k, v)
    t_all = _time(fwd_bwd, q, k, v, do)
  except Exception as e:  # a missing backend must not stop the table
    return dict(result, error=f"{type(e).__name__}: {str(e)[:200]}")
  return dict(result, fwd_ms=t_fwd * 1e3, bwd_ms=(t_all - t_fwd) * 1e3,
              fwd_tflops=flops_fwd / t_fwd / 1e12,
              bwd_tflops=2.5 * flops_fwd / max(t_all - t_fwd, 1e-9) / 1e12)


def hbm_bandwidth():
  """Bytes/s of a 4 GiB elementwise op (read + write)."""
  x = jnp.ones((2 ** 31,), jnp.bfloat16)
  seconds = _time(jax.jit(lambda x: x * 2), x)
  return 2 * x.size * x.dtype.itemsize / seconds


def decode_points(bandwidth):
  from rl_post.kernels import attention
  batch, heads, kv_heads, max_len = 8, 32, 8, 32768
  keys = jax.random.split(jax.random.key(1), 3)
  q = jax.random.normal(keys[0], (batch, heads, HEAD_DIM), jnp.bfloat16)
  cache = (batch, max_len, kv_heads, HEAD_DIM)
  kc = jax.random.normal(keys[1], cache, jnp.bfloat16)
  vc = jax.random.normal(keys[2], cache, jnp.bfloat16)
  lengths = jnp.linspace(max_len // 2, max_len, batch).astype(jnp.int32)
  bytes_read = 2 * int(lengths.sum()) * kv_heads * HEAD_DIM * 2
  out = []
  for impl in ("pallas", "xla"):
    fn = jax.jit(lambda q, kc, vc, n, impl=impl: attention.decode_attention(
        q, kc, vc, n, impl=impl))
    try:
      seconds = _time(fn, q, kc, vc, lengths)
    except Exception as e:
      out.append(dict(kind="decode", impl=impl, error=str(e)[:200]))
      continue
    achieved = bytes_read / seconds
    out.append(dict(kind="decode", impl=impl, us=seconds * 1e6,
                    gb_per_s=achieved / 1e9,
                    fraction_of_hbm=achieved / bandwidth))
  return out


def run_gpu(seq_lens=None):
  seq_lens = [int(s) for s in (seq_lens or [4096, 8192, 16384, 32768])]
  results = []
  print(f"{'impl':<11}{'tokens':>7}{'batch':>6}{'fwd TF/s':>10}{'bwd TF/s':>10}")
  for seq_len in seq_lens:
    for name, fn in _impls().items():
      r = flash_point(name, fn, seq_len)
      results.append(r)
      if "error" in r:
        print(f"{name:<11}{seq_len:>7}  error: {r['error'][:60]}")
      else:
        print(f"{name:<11}{seq_len:>7}{r['batch']:>6}{r['fwd_tflops']:>10.1f}"
              f"{r['bwd_tflops']:>10.1f}", flush=True)
  bandwidth = hbm_bandwidth()
  results.append(dict(kind="hbm", gb_per_s=bandwidth / 1e9))
  print(f"measured HBM bandwidth: {bandwidth / 1e9:.0f} GB/s")
  for r in decode_points(bandwidth):
    results.append(r)
    if "error" in r:
      print(f"decode {r['impl']}: error {r['error'][:80]}")
    else:
      print(f"decode {r['impl']:<7}{r['us']:>9.1f} us {r['gb_per_s']:>7.0f} GB/s"
            f" = {100 * r['fraction_of_hbm']:.0f}% of measured HBM")
  return results
