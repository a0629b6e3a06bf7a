"""Multi-turn episodes with tools as the RL trainer's rollout source.

  c.episodes = dict(enabled=True, domains=("data_questions",), max_turns=3, turn_tokens=24)
  python experiments/train_rl.py --config=configs/grpo_episodes.py:tiny --workdir=/tmp/ep

The rounds themselves are `rl_post.envs.trainer_rounds.EpisodeRounds` (B
tasks x G episodes from the multi-step domains, scored at each episode's end,
the tool sandbox held for the run); the held-out evaluation is
`rl_post.eval.episodes`. This module adapts them to `RolloutSource` and
refuses the trainer settings that assume one prompt and one response per row.
On several processes every process drives every episode through the sampler
and runs the tools and verification of its own rows on its own sandbox
(`rl_post.envs.process_rows`); rollouts, rewards and metrics are the whole
batch's on every process.
"""

from rl_post.envs import trainer_rounds
from rl_post.errors import ConfigError
from rl_post.eval import episodes as episode_eval
from rl_post.rl.rollout_source import Round, RolloutSource


class EpisodeSource(RolloutSource):
  """B tasks x G episodes per round (`episodes` config section)."""

  @classmethod
  def tokenizer_for(cls, components, config):
    del config
    return trainer_rounds.tokenizer_for(components.episodes)

  def __init__(self, components, config):
    del config  # every setting it reads is in the parsed components (`components.episodes`)
    c, rl = components, components.rl
    self.c = c
    self.rounds = trainer_rounds.rounds_for(
        c.episodes, tasks_heldout_size=c.tasks.heldout_size, seed=c.run.seed, rl=rl,
        tokenizer=c.ctx.tokenizer, sampling=c.sampling)
    if self.rounds is None:
      raise ConfigError("rl.rollout_source", "episodes", "needs the episodes section with "
                        "episodes.enabled=True")
    if rl.shared_prefix:
      raise ConfigError("rl.shared_prefix", True, "applies to prompt x G rollouts; multi-turn "
                        "episodes (episodes.enabled) do not share a fixed prompt region: turn "
                        "it off")
    if rl.process_credit == "token":
      raise ConfigError("rl.process_credit", "token", "maps a verifier's step spans onto one "
                        "response; an episode's turns are several: use 'sequence'")
    if rl.recomputes_logp:
      raise ConfigError("rl.rollout_precision", rl.rollout_precision, "low-precision rollouts "
                        "and their correction (rl.tis_cap, rl.mis_high) run in single-turn "
                        "rounds, not episodes: keep float32 and 0")

  def launch(self, params, ref_params, *, it: int, rnd: int, key, timer) -> Round:
    return self.rounds.launch(self.c, params, ref_params, timer, it, rnd, key)

  def observe(self, scored: dict) -> dict:
    return self.rounds.step_metrics(scored)  # episode tasks are not the mixture's

  def evaluate(self, params, *, step: int, key) -> dict:
    """Verified success, tool use, turns, tokens and pass@k of the held-out episodes."""
    del step
    return episode_eval.evaluate(self.rounds, params, model_config=self.c.model_config,
                                 rng=key, batch_size=self.c.rl.rollouts_per_step)

  def close(self):
    self.rounds.close()
