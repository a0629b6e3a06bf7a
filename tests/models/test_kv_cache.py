"""The KV-cache layouts: picked per platform, written in place, decode the same tokens."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl_post import models
from rl_post.models import kv_cache
from rl_post.sampling import engine
from rl_post.sampling.sampler import SamplingConfig, generate

CONFIG = models.ModelConfig(num_layers=2, embed_dim=32, num_heads=4, num_kv_heads=2,
                            head_dim=8, mlp_dim=64, vocab_size=64)


def test_layout_follows_the_decode_attention():
  assert kv_cache.layout(CONFIG, "cpu") == "transposed"       # XLA decode attention
  assert kv_cache.layout(CONFIG, "tpu") == "bskd"             # Pallas kernels
  assert kv_cache.layout(CONFIG, "gpu") == "bskd"
  odd = dataclasses.replace(CONFIG, num_heads=2, num_kv_heads=1, head_dim=12)
  assert kv_cache.layout(odd, "gpu") == "transposed"          # Triton cannot tile 12
  ref = dataclasses.replace(CONFIG, attention_impl="reference")
  assert kv_cache.layout(ref, "cpu") == "bskd"
  cache = kv_cache.init(CONFIG, 3, 10)
  assert cache["k"].shape == (3, 2, 8, 10) and cache["v"].shape == (3, 2, 10, 8)
  assert kv_cache.init(CONFIG, 3, 10, num_layers=2)["k"].shape == (2, 3, 2, 8, 10)
  assert kv_cache.logical_axes("transposed")["k"][-1] == "cache_length"


def test_cache_dtype_is_the_compute_dtype_except_f32_on_cpu():
  bf16 = dataclasses.replace(CONFIG, dtype="bfloat16")
  assert kv_cache.default_dtype(bf16, "tpu") == kv_cache.default_dtype(bf16, "gpu") == jnp.bfloat16
  assert kv_cache.default_dtype(bf16, "cpu") == jnp.float32  # XLA:CPU attends in f32
  assert kv_cache.default_dtype(CONFIG, "tpu") == jnp.float32
  assert kv_cache.init(bf16, 2, 4)["k"].dtype == jnp.float32  # this test runs on CPU
  assert kv_cache.init(bf16, 2, 4, jnp.bfloat16)["v"].dtype == jnp.bfloat16  # asked for
  # a bf16 decode step never converts the whole cache: no convert of a cache-shaped array
  params = models.init_params(CONFIG, jax.random.key(0))
  prompts, lens = jnp.ones((2, 3), jnp.int32), jnp.full((2,), 3, jnp.int32)
  _, state = generate(params, prompts, lens, jax.random.key(1), model_config=bf16,
                      config=SamplingConfig(max_new_tokens=4), eos_id=None, pad_id=0,
                      return_state=True)
  text = engine.decode.lower(params, state, jnp.int32(4), model_config=bf16,
                             config=SamplingConfig(max_new_tokens=4).device_key(),
                             pad_id=0).compile().as_text()
  shapes = {f"[{','.join(map(str, c.shape))}]" for c in state.caches[0].values()}
  converts = [line for line in text.splitlines() if " convert(" in line
              and any(shape in line.split("=")[1].split(" ")[1] for shape in shapes)]
  assert state.caches[0]["k"].dtype == jnp.float32 and not converts, converts


@pytest.mark.parametrize("layout", kv_cache.LAYOUTS)
def test_write_puts_each_token_at_its_slot_and_drops_past_capacity(layout):
  rng = np.random.default_rng(0)
  b, t, k, d, slots = 3, 2, 2, 4, 6
  shapes = kv_cache.shapes(layout, b, slots, k, d)
  cache = {name: jnp.zeros(shape) for name, shape in shapes.items()}
  k_new = jnp.asarray(rng.normal(size=(b, t, k, d)), jnp.float32)
  v_new = jnp.asarray(rng.normal(size=(b, t, k, d)), jnp.float32)
  positions = jnp.asarray([[0, 1], [4, 5], [5, 6]])  # row 2's second token is past capacity
  got_k, got_v = kv_cache.as_bskd(kv_cache.write(cache, k_new, v_new, positions, layout), layout)
  want_k, want_v = np.zeros((b, slots, k, d)), np.zeros((b, slots, k, d))
  for r in range(b):
    for j in range(t):
      if positions[r, j] < slots:
        want_k[r, positions[r, j]], want_v[r, positions[r, j]] = k_new[r, j], v_new[r, j]
  np.testing.assert_array_equal(got_k, want_k)
  np.testing.assert_array_equal(got_v, want_v)


def test_both_layouts_decode_the_same_tokens_and_logprobs(make_random_params):
  # attention_impl "reference" reads the bskd layout on CPU, "xla" the transposed one
  params = make_random_params(CONFIG, scale=0.3)
  prompts = np.random.default_rng(0).integers(1, 64, (4, 6)).astype(np.int32)
  lens = np.asarray([6, 3, 5, 1], np.int32)
  sampling = SamplingConfig(max_new_tokens=12, length_buckets=(8,))
  out = {}
  for impl in ("xla", "reference"):
    config = dataclasses.replace(CONFIG, attention_impl=impl)
    out[impl] = jax.device_get(generate(params, prompts, lens, None, seeds_B=np.arange(4),
                                        model_config=config, config=sampling, eos_id=None,
                                        pad_id=0))
  np.testing.assert_array_equal(out["xla"].tokens_BxT, out["reference"].tokens_BxT)
  np.testing.assert_allclose(out["xla"].logp_BxT, out["reference"].logp_BxT, atol=1e-5)
