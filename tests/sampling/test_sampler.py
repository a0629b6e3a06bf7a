"""Sampler: behaviour log-probs equal the trainer's, stopping, greedy."""


import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl_post import models
from rl_post.models.logprobs import sequence_logprobs
from rl_post.sampling.sampler import SamplingConfig, generate

EOS, PAD = 3, 0


@pytest.fixture(scope="module")
def setup():
  config = models.ModelConfig(vocab_size=61, num_layers=2, embed_dim=32, num_heads=4,
                              num_kv_heads=2, head_dim=8, mlp_dim=64, qkv_bias=True)
  params = models.init_params(config, jax.random.key(0))
  prompts = jax.random.randint(jax.random.key(1), (6, 7), 4, 61)
  lens = jnp.array([7, 3, 1, 5, 7, 2], jnp.int32)
  return config, params, prompts, lens


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_behaviour_logprobs_equal_trainer_logprobs(setup, temperature):
  config, params, prompts, lens = setup
  sampling = SamplingConfig(max_new_tokens=12, temperature=temperature)
  out = generate(params, prompts, lens, jax.random.key(2), model_config=config, config=sampling,
                 eos_id=EOS, pad_id=PAD)
  logp, _ = sequence_logprobs(config, params, out.tokens_BxT, temperature)
  mask = out.mask_BxT.astype(bool)
  assert mask.sum() > 20
  assert float(jnp.max(jnp.abs(jnp.where(mask, logp - out.logp_BxT, 0.0)))) <= 1e-5
  assert float(jnp.abs(jnp.where(mask, 0.0, out.logp_BxT)).max()) == 0.0


def test_layout_and_stopping(setup):
  config, params, prompts, lens = setup
  out = jax.device_get(generate(params, prompts, lens, jax.random.key(3), model_config=config,
                                config=SamplingConfig(max_new_tokens=10), eos_id=EOS,
                                pad_id=PAD))
  assert out.tokens_BxT.shape == (6, 16 + 10)  # prompt width bucketed to 16
  for row in range(6):
    n, r = int(lens[row]), int(out.response_lens_B[row])
    np.testing.assert_array_equal(out.tokens_BxT[row, :n], np.asarray(prompts)[row, :n])
    assert (out.mask_BxT[row, :n] == 0).all() and (out.mask_BxT[row, n:n + r] == 1).all()
    assert (out.mask_BxT[row, n + r:] == 0).all() and (out.tokens_BxT[row, n + r:] == PAD).all()
    response = out.tokens_BxT[row, n:n + r]
    assert (EOS in response) == bool(out.finished_B[row])
    if out.finished_B[row]:
      assert response[-1] == EOS and list(response).count(EOS) == 1
    else:
      assert r == 10


def test_stops_right_after_eos(setup):
  config, params, prompts, lens = setup
  sampling = SamplingConfig(max_new_tokens=9, greedy=True)
  free = generate(params, prompts, lens, jax.random.key(4), model_config=config,
                  config=sampling, eos_id=-1, pad_id=PAD)
  first = int(free.tokens_BxT[0, int(lens[0])])  # row 0's first greedy token
  out = generate(params, prompts, lens, jax.random.key(4), model_config=config, config=sampling,
                 eos_id=first, pad_id=PAD)
  assert bool(out.finished_B[0]) and int(out.response_lens_B[0]) == 1
  assert int(out.tokens_BxT[0, int(lens[0]) + 1]) == PAD


def test_greedy_is_deterministic_and_argmax(setup):
  config, params, prompts, lens = setup
  sampling = SamplingConfig(max_new_tokens=6, greedy=True)
  a = generate(params, prompts, lens, jax.random.key(5), model_config=config, config=sampling,
               eos_id=EOS, pad_id=PAD)
  b = generate(params, prompts, lens, jax.random.key(6), model_config=config, config=sampling,
               eos_id=EOS, pad_id=PAD)
  np.testing.assert_array_equal(a.tokens_BxT, b.tokens_BxT)
  logits = models.apply(config, params, a.tokens_BxT)
  greedy_next = jnp.argmax(logits[:, :-1], axis=-1)
  mask = a.mask_BxT[:, 1:].astype(bool)
  np.testing.assert_array_equal(jnp.where(mask, greedy_next, 0), jnp.where(mask, a.tokens_BxT[:, 1:], 0))


def test_bad_sampling_config():
  with pytest.raises(ValueError, match="temperature must be > 0"):
    SamplingConfig(temperature=0.0)
  with pytest.raises(ValueError, match="max_new_tokens must be > 0"):
    SamplingConfig(max_new_tokens=0)
