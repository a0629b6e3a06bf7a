"""Low-precision rollouts: the sampler's copies, the log-prob gap they open, and
RL runs on them (rl.rollout_precision, rl.tis_cap, rl.mis_*)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl_post import models
from rl_post.metrics.writers import read_metrics
from rl_post.models import quant
from rl_post.models.logprobs import sequence_logprobs
from rl_post.rl import off_policy, single_turn_source, trainer
from rl_post.sampling import low_precision
from rl_post.sampling.sampler import SamplingConfig, generate
from tiny_grpo import tiny_digit_config

MODEL = models.ModelConfig(vocab_size=61, num_layers=2, embed_dim=32, num_heads=4,
                           num_kv_heads=2, head_dim=8, mlp_dim=64, tie_embeddings=False)


@pytest.fixture(scope="module")
def params():
  return models.init_params(MODEL, jax.random.key(0))


def test_float32_is_the_masters_themselves(params):
  assert low_precision.copy_fn("float32")(params) is params
  assert low_precision.sampler_config(MODEL, "float32") is MODEL


def test_copies_hold_their_precision(params):
  bf16 = low_precision.copy_fn("bfloat16")(params)
  assert {x.dtype for x in jax.tree.leaves(bf16)} == {jnp.dtype(jnp.bfloat16)}
  int8 = low_precision.copy_fn("int8")(params)
  _, scales = quant.quantize_base(params).values()
  for module, targets in quant.PROJECTIONS.items():
    for target in targets:
      w, got = params["blocks"][module][target], int8["blocks"][module][target]
      s = scales[module][target]
      s = s.reshape(s.shape[:1] + (1,) * (w.ndim - s.ndim) + s.shape[1:])
      err = np.abs(np.asarray(got, np.float32) - np.asarray(w))
      # int8 rounding (<= s / 2) plus bf16 storage (<= 2^-8 relative)
      assert (err <= s / 2 + np.abs(np.asarray(w)) * 2.0 ** -7 + 1e-9).all(), (module, target)
      assert float(err.max()) > 0
  np.testing.assert_array_equal(np.asarray(int8["embed"]["embedding"]),
                                np.asarray(bf16["embed"]["embedding"]))
  with pytest.raises(ValueError, match="rollout precision must be one of"):
    low_precision.copy_fn("int4")


def _gap(params, precision: str) -> dict:
  n, p = 8, 3
  prompts = np.tile(np.array([[11, 12, 13]], np.int32), (n, 1))
  rollout = generate(low_precision.copy_fn(precision)(params), prompts,
                     np.full((n,), p, np.int32), jax.random.key(3),
                     model_config=low_precision.sampler_config(MODEL, precision),
                     config=SamplingConfig(max_new_tokens=8), eos_id=60, pad_id=0)
  trainer_logp, _ = jax.jit(lambda pr, t: sequence_logprobs(MODEL, pr, t))(params,
                                                                           rollout.tokens_BxT)
  return off_policy.gap_metrics(trainer_logp * rollout.loss_mask_BxT, rollout.logp_BxT,
                                rollout.loss_mask_BxT)


def test_gap_is_near_zero_in_f32_and_larger_in_low_precision(params):
  gaps = {p: _gap(params, p)["offpolicy/logp_abs_diff_mean"] for p in low_precision.PRECISIONS}
  assert all(np.isfinite(g) for g in gaps.values()), gaps
  assert gaps["float32"] < 1e-5, gaps
  assert gaps["bfloat16"] > 10 * gaps["float32"], gaps
  assert gaps["int8"] > 10 * gaps["float32"], gaps


def _run(tokenizer_path, workdir, filtering=False, **rl):
  config = tiny_digit_config(tokenizer_path, num_steps=2, **rl)
  config.rewards.num_workers = 0
  # dynamic filtering gathers the recomputed log-probs of the groups it keeps
  config.filtering.update(enabled=filtering, max_rounds=2)
  out = trainer.train(config, str(workdir))
  return out, read_metrics(str(workdir))


@pytest.mark.parametrize("rl", [dict(rollout_precision="bfloat16"),
                                dict(rollout_precision="int8", tis_cap=2.0, mis_low=0.5,
                                     mis_high=2.0, filtering=True)])
def test_low_precision_runs_end_to_end(tokenizer_path, tmp_path, monkeypatch, rl):
  seen = []  # the model config each rollout ran with
  real = single_turn_source.generate

  def spy(params, *args, model_config, **kwargs):
    seen.append(model_config)
    return real(params, *args, model_config=model_config, **kwargs)

  monkeypatch.setattr(single_turn_source, "generate", spy)
  out, metrics = _run(tokenizer_path, tmp_path, **rl)
  assert [m["step"] for m in metrics] == [1, 2] and not out["preempted"]
  assert len(seen) >= 2 and all(m.dtype == "bfloat16" for m in seen)
  for m in metrics:
    assert np.isfinite(m["loss"]) and m["guard/skipped"] == 0
    gap = m["offpolicy/logp_abs_diff_mean"]
    assert np.isfinite(gap) and 0 < gap < 0.5, m
    assert 0.5 < m["offpolicy/ratio_mean"] < 2.0
    if "tis_cap" in rl:
      assert 0 < m["is_weight_mean"] <= 2.0
      assert 0 <= m["offpolicy/tis_clip_frac"] <= 1 and "offpolicy/mis_drop_frac" in m


def test_episodes_refuse_low_precision_rollouts(tmp_path):
  from configs import grpo_episodes  # noqa: PLC0415
  from rl_post.errors import ConfigError  # noqa: PLC0415
  c = grpo_episodes.get_config("tiny")
  c.rl.rollout_precision = "int8"
  with pytest.raises(ConfigError) as info:
    trainer.train(c, str(tmp_path))
  assert "rl.rollout_precision" in str(info.value) and "not episodes" in str(info.value)
  assert "\n" not in str(info.value)
