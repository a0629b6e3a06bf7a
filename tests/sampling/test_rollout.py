"""Rollout engine: controls vs trainer log-probs, groups, resume, buckets, stop strings."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl_post import models
from rl_post.models.logprobs import sequence_logprobs
from rl_post.sampling import controls, engine
from rl_post.sampling.sampler import SamplingConfig, extend, generate

PAD = 0
CONFIG = models.ModelConfig(vocab_size=61, num_layers=2, embed_dim=32, num_heads=4,
                            num_kv_heads=2, head_dim=8, mlp_dim=64, qkv_bias=True)
ALL_ON = SamplingConfig(max_new_tokens=12, temperature=0.7, top_k=20, top_p=0.9, min_p=0.02,
                        stop_token_ids=frozenset({5, 6}))


@pytest.fixture(scope="module")
def params():
  return models.init_params(CONFIG, jax.random.key(0))


def _prompts(batch=6, width=7, seed=1):
  prompts = jax.random.randint(jax.random.key(seed), (batch, width), 7, CONFIG.vocab_size)
  lens = jnp.array([7, 3, 1, 5, 7, 2][:batch], jnp.int32)
  return prompts, lens


def _gen(params, prompts, lens, config, **kw):
  return generate(params, prompts, lens, jax.random.key(2), model_config=CONFIG, config=config,
                  eos_id=None, pad_id=PAD, **kw)


def test_every_control_on_matches_trainer_logprobs(params):
  prompts, lens = _prompts()
  out = jax.device_get(_gen(params, prompts, lens, ALL_ON))
  mask = out.loss_mask_BxT.astype(bool)
  assert mask.sum() > 20
  logp, _ = sequence_logprobs(CONFIG, params, out.tokens_BxT, ALL_ON.temperature)
  assert float(np.abs(np.where(mask, logp - out.logp_BxT, 0.0)).max()) <= 1e-5
  assert float(np.abs(np.where(mask, 0.0, out.logp_BxT)).max()) == 0.0
  # The sampled token is always drawable, and the recorded kept mass matches.
  logits = models.apply(CONFIG, params, out.tokens_BxT)[:, :-1]
  logp_V, keep_V = controls.behaviour_log_softmax(logits.reshape(-1, logits.shape[-1]), ALL_ON)
  nxt = out.tokens_BxT[:, 1:].reshape(-1)
  sampled = mask[:, 1:].reshape(-1)
  assert np.asarray(keep_V)[np.arange(nxt.size), nxt][sampled].all()
  assert int((~np.asarray(keep_V)[sampled]).sum(-1).min()) > 0  # truncation really active
  logz = jax.nn.logsumexp(jnp.where(keep_V, logp_V, -jnp.inf), axis=-1)
  np.testing.assert_allclose(np.asarray(logz)[sampled], out.trunc_logz_BxT[:, 1:].reshape(-1)[
      sampled], atol=1e-5)
  # Rows end on a stop id (kept in the response) or at the budget.
  for b in range(6):
    r = out.tokens_BxT[b][out.mask_BxT[b].astype(bool)]
    assert bool(out.finished_B[b]) == (r[-1] in (5, 6)) and not np.isin(r[:-1], [5, 6]).any()


def test_inverse_cdf_draws_follow_the_distribution():
  logits = jnp.log(jnp.array([[0.5, 0.3, 0.15, 0.05]]))
  config = SamplingConfig(top_k=3)
  n = 4000
  tokens = jax.vmap(lambda s: controls.choose(logits, s[None], jnp.array([0]), config)[0][0])(
      jnp.arange(n))
  freq = np.bincount(np.asarray(tokens), minlength=4) / n
  np.testing.assert_allclose(freq, [0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0.0], atol=0.03)


def test_two_level_inverse_cdf_matches_searchsorted():
  rng = np.random.default_rng(0)
  probs = rng.random((64, 1000)) * (rng.random((64, 1000)) < 0.3)  # many zero-mass tokens
  u = 1.0 - rng.random(64)
  got = np.asarray(controls.inverse_cdf(jnp.asarray(probs, jnp.float32),
                                        jnp.asarray(u, jnp.float32), block=32))
  cdf = np.cumsum(probs, axis=-1)
  want = np.array([np.searchsorted(c, x * c[-1]) for c, x in zip(cdf, u)])
  assert (probs[np.arange(64), got] > 0).all()
  assert (got == want).mean() >= 0.95  # f32 vs f64 may differ only at boundaries
  assert (np.abs(got - want) <= 2).all()


def test_group_prefill_equals_per_row_prefill(params):
  base, lens = _prompts(batch=2)
  prompts, lens = jnp.repeat(base, 4, axis=0), jnp.repeat(lens, 4)
  seeds = jnp.arange(8, dtype=jnp.int32) + 11
  shared = _gen(params, prompts, lens, ALL_ON, group_size=4, seeds_B=seeds)
  single = _gen(params, prompts, lens, ALL_ON, group_size=1, seeds_B=seeds)
  np.testing.assert_array_equal(shared.tokens_BxT, single.tokens_BxT)
  np.testing.assert_allclose(shared.logp_BxT, single.logp_BxT, atol=1e-5)
  assert len(set(map(tuple, np.asarray(shared.tokens_BxT)[:4].tolist()))) > 1  # rows differ
  with pytest.raises(ValueError, match="same prompt"):
    _gen(params, jnp.concatenate([base, base]), jnp.array([7, 3, 7, 3]), ALL_ON, group_size=2)


def test_stop_append_seven_continue_equals_forced_pass(params):
  prompts, lens = _prompts()
  config = dataclasses.replace(ALL_ON, max_new_tokens=30)
  first, state = _gen(params, prompts, lens, config, return_state=True, max_new_tokens=10)
  first = jax.device_get(first)
  appended = [[9, 10, 11, 12, 13, 14, 15], [20, 21, 22, 23, 24, 25, 26]]
  rows = [0, 3]
  out, state = extend(params, state, rows, appended, model_config=CONFIG, config=config,
                      eos_id=None, pad_id=PAD, max_new_tokens=8)
  out = jax.device_get(out)
  for row, toks in zip(rows, appended):
    start = int(first.prompt_lens_B[row] + first.response_lens_B[row])
    np.testing.assert_array_equal(out.tokens_BxT[row, :start], first.tokens_BxT[row, :start])
    np.testing.assert_array_equal(out.tokens_BxT[row, start:start + 7], toks)
    assert (out.mask_BxT[row, start:start + 7] == 1).all()
    assert (out.loss_mask_BxT[row, start:start + 7] == 0).all()
    assert (out.logp_BxT[row, start:start + 7] == 0).all()
    assert out.loss_mask_BxT[row, start + 7] == 1  # sampling resumed
  untouched = [b for b in range(6) if b not in rows]
  np.testing.assert_array_equal(out.tokens_BxT[untouched], first.tokens_BxT[untouched])
  # One forced forward pass over the final sequences gives the same numbers.
  logp, _ = sequence_logprobs(CONFIG, params, out.tokens_BxT, config.temperature)
  mask = out.loss_mask_BxT.astype(bool)
  assert float(np.abs(np.where(mask, logp - out.logp_BxT, 0.0)).max()) <= 1e-5
  full = models.apply(CONFIG, params, out.tokens_BxT)
  lengths = np.asarray(state.lengths_B)
  last = full[np.arange(6), lengths - 1]
  np.testing.assert_allclose(state.logits_BxV, last, atol=1e-5)


def test_buckets_avoid_recompiles(params):
  config = SamplingConfig(max_new_tokens=8, length_buckets=(8, 16))
  rng = np.random.default_rng(0)
  generate_once = lambda p, n: _gen(params, p, n, config,
                                    max_new_tokens=int(rng.integers(1, 9)))
  generate_once(*_prompts(4, 7))  # warm both code paths of the small bucket
  before = dict(engine.TRACE_COUNTS)
  for i in range(10):
    width = int(rng.integers(1, 17))
    prompts = jnp.asarray(rng.integers(7, 61, (4, width)), jnp.int32)
    lens = jnp.asarray(rng.integers(1, width + 1, 4), jnp.int32)
    generate_once(prompts, lens)
  new = {k: engine.TRACE_COUNTS[k] - before.get(k, 0) for k in engine.TRACE_COUNTS}
  assert new["prefill"] <= 1 and new["decode"] <= 1, new  # only the 16-wide bucket is new


def test_stop_strings_cut_after_the_match(params):
  prompts, lens = _prompts()
  detok = lambda ids: "".join(chr(ord("a") + t % 26) for t in ids)
  greedy = SamplingConfig(max_new_tokens=12, greedy=True, stop_check_interval=3)
  free = jax.device_get(_gen(params, prompts, lens, greedy))
  n = int(lens[1])
  text = detok(free.tokens_BxT[1, n:n + 12])
  stop = text[4:6]
  cut = text.index(stop) + 2
  out = jax.device_get(_gen(params, prompts, lens,
                            dataclasses.replace(greedy, stop_strings=(stop,)), detokenize=detok))
  assert int(out.response_lens_B[1]) == cut and bool(out.finished_B[1])
  np.testing.assert_array_equal(out.tokens_BxT[1, :n + cut], free.tokens_BxT[1, :n + cut])
  assert (out.tokens_BxT[1, n + cut:] == PAD).all() and (out.loss_mask_BxT[1, n + cut:] == 0).all()
  with pytest.raises(ValueError, match="detokenize"):
    _gen(params, prompts, lens, dataclasses.replace(greedy, stop_strings=("x",)))


def test_bad_inputs(params):
  prompts, lens = _prompts()
  with pytest.raises(ValueError, match="top_p"):
    SamplingConfig(top_p=0.0)
  with pytest.raises(ValueError, match="max_new_tokens must be in"):
    _gen(params, prompts, lens, ALL_ON, max_new_tokens=13)
  with pytest.raises(ValueError, match="largest length bucket"):
    _gen(params, prompts, lens, dataclasses.replace(ALL_ON, length_buckets=(4,)))
  _, state = _gen(params, prompts, lens, ALL_ON, return_state=True)
  with pytest.raises(ValueError, match="capacity"):
    extend(params, state, [0], [[1] * 20], model_config=CONFIG, config=ALL_ON, eos_id=None,
           pad_id=PAD)


def test_continuous_batching_equals_static_token_for_token(params):
  from rl_post.sampling.continuous import generate_continuous
  rng = np.random.default_rng(3)
  n = 10
  prompts = jnp.asarray(rng.integers(7, 61, (n, 6)), jnp.int32)
  lens = jnp.asarray(rng.integers(1, 7, n), jnp.int32)
  seeds = jnp.arange(n, dtype=jnp.int32) * 7 + 1
  budgets = rng.integers(1, 13, n)
  static = jax.device_get(_gen(params, prompts, lens, ALL_ON, seeds_B=seeds,
                               max_new_tokens=budgets))
  cont, stats = generate_continuous(params, prompts, lens, seeds, model_config=CONFIG,
                                    config=ALL_ON, num_slots=4, eos_id=None, pad_id=PAD,
                                    max_new_tokens=budgets)
  assert stats.refills >= 2 and stats.prefilled_rows == n - 4 and stats.shrinks >= 1, stats
  np.testing.assert_array_equal(cont.tokens_BxT, static.tokens_BxT)
  np.testing.assert_array_equal(cont.loss_mask_BxT, static.loss_mask_BxT)
  np.testing.assert_array_equal(cont.finished_B, static.finished_B)
  np.testing.assert_allclose(cont.logp_BxT, static.logp_BxT, atol=1e-5)
  assert (cont.response_lens_B <= budgets).all() and (cont.response_lens_B >= 1).all()


def test_continuous_stop_strings_equal_static(params):
  from rl_post.sampling.continuous import generate_continuous
  rng = np.random.default_rng(4)
  n = 10
  prompts = jnp.asarray(rng.integers(7, 61, (n, 6)), jnp.int32)
  lens = jnp.asarray(rng.integers(1, 7, n), jnp.int32)
  seeds = jnp.arange(n, dtype=jnp.int32) * 11 + 3
  budgets = rng.integers(4, 13, n)
  detok = lambda ids: "".join(chr(ord("a") + t % 26) for t in ids)
  config = dataclasses.replace(ALL_ON, stop_strings=("g", "xa"), stop_check_interval=3)
  static = jax.device_get(_gen(params, prompts, lens, config, seeds_B=seeds,
                               max_new_tokens=budgets, detokenize=detok))
  cont, _ = generate_continuous(params, prompts, lens, seeds, model_config=CONFIG,
                                config=config, num_slots=4, eos_id=None, pad_id=PAD,
                                max_new_tokens=budgets, detokenize=detok)
  cut = [detok(static.tokens_BxT[b, int(lens[b]):int(lens[b]) + int(static.response_lens_B[b])])
         for b in range(n)]
  by_string = [b for b in range(n) if cut[b].endswith(("g", "xa"))]
  assert len(by_string) >= 4 and all(static.finished_B[b] for b in by_string), cut
  assert all("g" not in c[:-1] and "xa" not in c[:-1] for c in cut), cut
  assert any(c.endswith("xa") for c in cut), cut
  # checking every step, the two tokens of "xa" land in different checks: same cut
  every_step = jax.device_get(_gen(params, prompts, lens,
                                   dataclasses.replace(config, stop_check_interval=1),
                                   seeds_B=seeds, max_new_tokens=budgets, detokenize=detok))
  np.testing.assert_array_equal(every_step.tokens_BxT, static.tokens_BxT)
  np.testing.assert_array_equal(cont.tokens_BxT, static.tokens_BxT)
  np.testing.assert_array_equal(cont.loss_mask_BxT, static.loss_mask_BxT)
  np.testing.assert_array_equal(cont.finished_B, static.finished_B)
  np.testing.assert_allclose(cont.logp_BxT, static.logp_BxT, atol=1e-5)
  with pytest.raises(ValueError, match="detokenize"):
    generate_continuous(params, prompts, lens, seeds, model_config=CONFIG, config=config,
                        num_slots=4, eos_id=None, pad_id=PAD)
