"""The episode loop on the rollout engine, with a random tiny model that calls tools."""

import jax
import numpy as np
import pytest

from rl_post import models
from rl_post.envs import protocol
from rl_post.envs.call_vocab import CallVocabTokenizer
from rl_post.envs.domains import DOMAINS, make_env
from rl_post.envs.episodes import EpisodeConfig, run_episodes
from rl_post.envs.tools import ToolLimits
from rl_post.models.logprobs import sequence_logprobs
from rl_post.sampling.sampler import SamplingConfig

TOKENIZER = CallVocabTokenizer(copies=6)
CONFIG = models.ModelConfig(vocab_size=TOKENIZER.vocab_size, num_layers=2, embed_dim=32,
                            num_heads=4, num_kv_heads=2, head_dim=8, mlp_dim=64)
SAMPLING = SamplingConfig(max_new_tokens=384, temperature=1.0, stop_check_interval=8)
LIMITS = ToolLimits(per_call_s=3.0, per_episode_s=10.0, max_output_chars=120)


@pytest.fixture(scope="module")
def episodes(sandbox):
  params = models.init_params(CONFIG, jax.random.key(0))
  rng = np.random.default_rng(0)
  names = ["fs_chores", "data_questions"] * 4
  tasks = [DOMAINS[n].generate(rng, 1) for n in names]
  envs = [make_env(n, limits=LIMITS, max_turns=8) for n in names]
  result = run_episodes(params, envs, tasks, tokenizer=TOKENIZER, model_config=CONFIG,
                        sampling=SAMPLING, sandbox=sandbox, seeds_B=np.arange(8) + 11,
                        config=EpisodeConfig(max_turns=4, turn_tokens=48))
  return params, envs, result


def _runs(flags):
  """[start, end) of the runs of True in a 1-D bool array."""
  edges = np.flatnonzero(np.diff(np.concatenate([[0], flags.astype(int), [0]])))
  return list(zip(edges[::2], edges[1::2]))


def test_episodes_are_multi_turn_and_sequences_match_transcripts(episodes):
  _, envs, result = episodes
  r = result.rollout
  assert result.turns_B.max() >= 2 and result.calls_B.sum() >= 4
  summary = result.metrics.summary()
  assert summary["tool_calls"] == result.calls_B.sum()
  assert 0 < summary["tool_call_success_rate"] < 1  # valid calls and counted errors
  for b, env in enumerate(envs):
    start = int(r.prompt_lens_B[b])
    response = r.tokens_BxT[b, start:start + int(r.response_lens_B[b])]
    assert TOKENIZER.decode(response) == env.transcript
    assert env.done


def test_tool_responses_have_zero_loss_weight_and_logprobs_match(episodes):
  params, _, result = episodes
  r = result.rollout
  appended = (r.mask_BxT == 1) & (r.loss_mask_BxT == 0)
  assert appended.sum() > 0
  assert (r.logp_BxT[appended] == 0).all()
  for b in range(r.tokens_BxT.shape[0]):
    for s, e in _runs(appended[b]):
      text = TOKENIZER.decode(r.tokens_BxT[b, s:e])
      assert text.startswith("\n" + protocol.RESPONSE_OPEN), text
      assert text.endswith(protocol.RESPONSE_CLOSE + "\n"), text
      assert r.loss_mask_BxT[b, e] == 1  # the model's next turn follows each response
  logp, _ = sequence_logprobs(CONFIG, params, r.tokens_BxT, SAMPLING.temperature)
  trainable = r.loss_mask_BxT.astype(bool)
  assert trainable.sum() > 20
  assert float(np.abs(np.where(trainable, np.asarray(logp) - r.logp_BxT, 0.0)).max()) <= 1e-5


def test_budgets_and_bad_config(sandbox):
  params = models.init_params(CONFIG, jax.random.key(0))
  task = DOMAINS["fs_chores"].generate(np.random.default_rng(1), 1)
  env = make_env("fs_chores", limits=LIMITS)
  with pytest.raises(ValueError, match="turn_tokens"):
    run_episodes(params, [env], [task], tokenizer=TOKENIZER, model_config=CONFIG,
                 sampling=SAMPLING, sandbox=sandbox, seeds_B=[0],
                 config=EpisodeConfig(turn_tokens=1000))
  with pytest.raises(ValueError, match="rng or seeds_B"):
    run_episodes(params, [env], [task], tokenizer=TOKENIZER, model_config=CONFIG,
                 sampling=SAMPLING, sandbox=sandbox)
  with pytest.raises(ValueError, match="max_turns"):
    EpisodeConfig(max_turns=0)
