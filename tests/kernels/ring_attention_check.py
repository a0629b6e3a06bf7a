"""Ring attention on 8 fake CPU devices against the dense reference.

Run by test_ring_attention.py in a subprocess, because the device count must
be fixed before jax is imported. Exits non-zero on any mismatch.
"""

import os

# first: XLA stops reading its flags at a token it does not know
os.environ["XLA_FLAGS"] = ("--xla_force_host_platform_device_count=8 " +
                           os.environ.get("XLA_FLAGS", ""))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P  # noqa: E402

from rl_post.kernels import reference  # noqa: E402
from rl_post.parallel import ring_attention as ra  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")

# (layout, mesh shape, mesh axes, axis type, batch axis, segments, window)
CASES = [
    ("zigzag", (8,), ("context",), AxisType.Explicit, None, True, 21),
    ("striped", (2, 4), ("data", "context"), AxisType.Auto, "data", True, None),
]


def check(layout, mesh_shape, axes, axis_type, batch_axis, segments, window,
          seed):
  assert len(jax.devices()) == 8
  mesh = jax.make_mesh(mesh_shape, axes, axis_types=(axis_type,) * len(axes))
  rng = np.random.default_rng(seed)
  b, t, h, kvh, d = 2, 64, 4, 2, 8
  draw = lambda *s: jnp.asarray(rng.normal(size=s), jnp.float32)
  q, k, v, do = draw(b, t, h, d), draw(b, t, kvh, d), draw(b, t, kvh, d), draw(b, t, h, d)
  seg = (jnp.asarray(np.sort(rng.integers(0, 3, (b, t)), 1), jnp.int32)
         if segments else None)
  n = mesh.shape["context"]
  perm = ra.layout_permutation(layout, t, n)
  inv = ra.inverse_permutation(perm)
  replicated = NamedSharding(mesh, P())

  def ring(q, k, v):
    out = ra.ring_attention(
        q[:, perm], k[:, perm], v[:, perm], mesh=mesh, layout=layout,
        segment_ids=None if seg is None else seg[:, perm],
        sliding_window=window, batch_axis=batch_axis)
    if axis_type == AxisType.Explicit:
      out = jax.sharding.reshard(out, replicated)
    return out[:, inv]

  def dense(q, k, v):
    return reference.reference_attention(q, k, v, segment_ids=seg,
                                         sliding_window=window)

  def fwd_bwd(fn):
    out, vjp = jax.vjp(fn, q, k, v)
    return (out,) + vjp(do)

  with jax.set_mesh(mesh):
    results = [jax.jit(fwd_bwd, static_argnums=0)(fn) for fn in (ring, dense)]
  for name, got, want in zip(("out", "dq", "dk", "dv"), *results):
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4,
                               err_msg=f"{layout}: {name}")
  print(f"ok {layout} mesh={dict(mesh.shape)} {axis_type}", flush=True)


def main():
  for i, case in enumerate(CASES):
    check(*case, seed=i)


if __name__ == "__main__":
  main()
