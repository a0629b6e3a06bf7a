"""Pallas decode attention over ragged caches, both platform variants."""

import jax.numpy as jnp
import numpy as np
import pytest

from rl_post.kernels import pallas_decode
from rl_post.kernels import reference


@pytest.mark.parametrize("platform", ["gpu", "tpu"])
@pytest.mark.parametrize(
    "batch,max_len,heads,kv_heads,head_dim,block_k,splits",
    [(3, 40, 4, 2, 8, 16, 0),   # cache not a block multiple, auto splits
     (2, 64, 8, 1, 16, 8, 4)],  # MQA, explicit split-K
)
def test_matches_reference(rng, platform, batch, max_len, heads, kv_heads,
                           head_dim, block_k, splits):
  q = jnp.asarray(rng.normal(size=(batch, heads, head_dim)), jnp.float32)
  shape = (batch, max_len, kv_heads, head_dim)
  kc = jnp.asarray(rng.normal(size=shape), jnp.float32)
  vc = jnp.asarray(rng.normal(size=shape), jnp.float32)
  lengths = rng.integers(1, max_len + 1, size=batch)
  lengths[0] = 0  # an empty row gives zeros
  lengths[-1] = max_len
  lengths = jnp.asarray(lengths)
  blocks = pallas_decode.DecodeBlockSizes(block_k=block_k, num_splits=splits)
  out = pallas_decode.decode_attention(q, kc, vc, lengths, block_sizes=blocks,
                                       platform=platform, interpret=True)
  want = reference.reference_decode_attention(q, kc, vc, lengths)
  np.testing.assert_allclose(out, want, atol=2e-5, rtol=2e-5)
  np.testing.assert_array_equal(out[0], 0.0)


def test_split_count_tiles_the_cache():
  blocks = pallas_decode.DecodeBlockSizes(block_k=128)
  assert pallas_decode._num_splits(blocks, 1, 8, 32768) == 32  # fills GPU
  assert pallas_decode._num_splits(blocks, 64, 8, 32768) == 1
  assert pallas_decode._num_splits(blocks, 1, 1, 384) == 3
  # TPU: K block of split x Hkv=8 x D=128 bf16 within 2 MiB.
  assert pallas_decode._tpu_splits(blocks, 32768, 8 * 128 * 2) == 32


def test_bad_inputs():
  q = jnp.zeros((2, 4, 8))
  cache = jnp.zeros((2, 16, 2, 8))
  with pytest.raises(ValueError, match="lengths must be"):
    pallas_decode.decode_attention(q, cache, cache, jnp.zeros((3,), jnp.int32),
                                   interpret=True)
  with pytest.raises(ValueError, match="does not fit"):
    pallas_decode.decode_attention(jnp.zeros((2, 3, 8)), cache, cache,
                                   jnp.zeros((2,), jnp.int32), interpret=True)
