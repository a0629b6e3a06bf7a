"""Pallas flash attention (GPU and TPU kernel families) in interpret mode."""

import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.pallas import tpu as pltpu

from attention_cases import CASES, IDS, check_against_reference
from attention_cases import fwd_and_grads
from rl_post.kernels import pallas_gpu
from rl_post.kernels import pallas_tpu
from rl_post.kernels import reference

# Small, unequal fwd/bwd tiles so every loop, bound and padding path runs.
_GPU_BLOCKS = pallas_gpu.GpuBlockSizes(block_q=16, block_k=8, block_q_bwd=8,
                                       block_k_bwd=16)
_TPU_BLOCKS = pallas_tpu.TpuBlockSizes(block_q=16, block_k=8, block_q_bwd=8,
                                       block_k_bwd=16)


def _gpu(q, k, v, **kw):
  return pallas_gpu.flash_attention(q, k, v, block_sizes=_GPU_BLOCKS,
                                    interpret=True, **kw)


def _tpu(q, k, v, **kw):
  return pallas_tpu.flash_attention(q, k, v, block_sizes=_TPU_BLOCKS,
                                    interpret=True, **kw)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_gpu_kernels_match_reference(case):
  check_against_reference(_gpu, case, seed=zlib.crc32(case.name.encode()))


# The window and MQA paths of the TPU kernels run in the interpreter test below.
@pytest.mark.parametrize("case", CASES[:1], ids=IDS[:1])
def test_tpu_kernels_match_reference(case):
  check_against_reference(_tpu, case, seed=zlib.crc32(case.name.encode()) + 1)


def test_tpu_kernels_in_tpu_interpreter():
  """The TPU interpreter simulates VMEM/HBM: scratch starts as NaN (so a
  missing init shows), out-of-bounds reads raise, and races are detected."""
  from jax._src.pallas.mosaic.interpret import interpret_pallas_call as tpu_interp
  params = pltpu.InterpretParams(detect_races=True, uninitialized_memory="nan",
                                 out_of_bounds_reads="raise")
  # MQA, a segment boundary, a window and a ragged tail (14 = 8 + 6).
  q = jax.random.normal(jax.random.key(0), (1, 14, 2, 8))
  k = jax.random.normal(jax.random.key(1), (1, 14, 1, 8))
  v = jax.random.normal(jax.random.key(2), (1, 14, 1, 8))
  do = jax.random.normal(jax.random.key(3), q.shape)
  seg = jnp.asarray([[0] * 5 + [1] * 9], jnp.int32)
  kw = dict(causal=True, sliding_window=7)
  blocks = pallas_tpu.TpuBlockSizes(8, 8, 8, 8)
  out, grads = fwd_and_grads(
      lambda q, k, v, **kw: pallas_tpu.flash_attention(
          q, k, v, block_sizes=blocks, interpret=params, **kw),
      q, k, v, do, segment_ids=seg, **kw)
  ref_out, ref_grads = fwd_and_grads(reference.reference_attention, q, k, v,
                                     do, segment_ids=seg, **kw)
  assert not tpu_interp.races.races_found
  np.testing.assert_allclose(out, ref_out, atol=2e-5, rtol=2e-5)
  for got, want in zip(grads, ref_grads):
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)


def test_default_block_sizes():
  assert pallas_gpu.GpuBlockSizes.for_head_dim(128).block_q == 128
  assert pallas_gpu.GpuBlockSizes.for_head_dim(64).block_q == 64
  assert pallas_tpu.TpuBlockSizes().block_k % 128 == 0
  with pytest.raises(ValueError, match="block_q must be positive"):
    _ = pallas_gpu.flash_attention(
        jnp.zeros((1, 8, 1, 8)), jnp.zeros((1, 8, 1, 8)),
        jnp.zeros((1, 8, 1, 8)), interpret=True,
        block_sizes=pallas_gpu.GpuBlockSizes(block_q=0))
