"""The Pallas kernels lower for real GPUs (Triton) and TPUs (Mosaic).

Cross-platform lowering needs no accelerator: it runs the Pallas -> Triton
and Pallas -> Mosaic lowerings on the CPU, which catches most block-shape,
tiling and op-support errors the interpreter cannot see. (Backend
compilation to PTX / TPU code still needs the device.)
"""

import jax
import jax.numpy as jnp
import pytest

from rl_post.kernels import pallas_decode
from rl_post.kernels import pallas_gpu
from rl_post.kernels import pallas_tpu

B, T, H, KV_H, D = 1, 1024, 4, 2, 128


def _train_step(flash):
  def step(q, k, v, seg):
    out, vjp = jax.vjp(lambda q, k, v: flash(
        q, k, v, causal=True, segment_ids=seg, sliding_window=300), q, k, v)
    return out, vjp(out)
  return step


def _specs():
  q = jax.ShapeDtypeStruct((B, T, H, D), jnp.bfloat16)
  kv = jax.ShapeDtypeStruct((B, T, KV_H, D), jnp.bfloat16)
  return q, kv, kv, jax.ShapeDtypeStruct((B, T), jnp.int32)


def _decode_specs():
  return (jax.ShapeDtypeStruct((4, 32, D), jnp.bfloat16),
          jax.ShapeDtypeStruct((4, 4096, 8, D), jnp.bfloat16),
          jax.ShapeDtypeStruct((4, 4096, 8, D), jnp.bfloat16),
          jax.ShapeDtypeStruct((4,), jnp.int32))


def _lower(fn, specs, platform):
  text = jax.jit(fn).trace(*specs).lower(lowering_platforms=(platform,)).as_text()
  assert text


def test_gpu_kernels_lower_to_triton():
  _lower(_train_step(pallas_gpu.flash_attention), _specs(), "cuda")
  _lower(lambda *a: pallas_decode.decode_attention(*a, platform="gpu"),
         _decode_specs(), "cuda")


def test_tpu_kernels_lower_to_mosaic():
  mesh_lib = pytest.importorskip("jax._src.mesh")
  device = mesh_lib.AbstractDevice(device_kind="TPU v5 lite", num_cores=1,
                                   platform="tpu")
  mesh = jax.sharding.AbstractMesh((1,), ("x",), abstract_device=device)
  with jax.sharding.use_abstract_mesh(mesh):
    _lower(_train_step(pallas_tpu.flash_attention), _specs(), "tpu")
    _lower(lambda *a: pallas_decode.decode_attention(*a, platform="tpu"),
           _decode_specs(), "tpu")
