"""A rollout source from outside the package, loaded by the trainer from the config:

  c.rl.rollout_source = "fake_source:FixedTasksSource"

The same B tasks every iteration (drawn once from the first configured
domain), sampled with the trainer's key and scored in this process by that
domain's verifier (trusted test domains only: nothing runs in a sandbox).
"""

import concurrent.futures

import numpy as np

from rl_post.data import batching
from rl_post.parallel import process_data
from rl_post.rewards.scoring import combine
from rl_post.rl.rollout_source import Round, RolloutSource
from rl_post.sampling.sampler import generate
from rl_post.tasks import registry

EVENTS = []  # ("start" | "launch" | "close", ...) in call order, for the tests


class FixedTasksSource(RolloutSource):
  """B fixed tasks x G completions per round, verified in-process."""

  def __init__(self, components, config):
    del config  # the library's sections come parsed in `components`
    self.c = components
    self.domain = registry.make_domain(components.tasks.domains[0])
    rng = np.random.default_rng(components.run.seed)
    self.tasks = [self.domain.generate(rng, 1) for _ in range(components.rl.batch_size)]

  def start(self):
    EVENTS.append(("start",))

  def launch(self, params, ref_params, *, it, rnd, key, timer) -> Round:
    EVENTS.append(("launch", it, rnd))
    c, rl, tok = self.c, self.c.rl, self.c.ctx.tokenizer
    with timer("rollout"):
      tasks_N = [t for t in self.tasks for _ in range(rl.num_generations)]
      prompts, lens = c.build_rows(
          lambda ts: batching.encode_prompts(tok, ts, rl.max_prompt_len), tasks_N)
      rollout = generate(params, prompts, lens, key, model_config=c.model_config,
                         config=c.sampling, eos_id=tok.eos_id, pad_id=tok.pad_id,
                         group_size=rl.num_generations)
      host = process_data.fetch(rollout)
    with timer("reward"):
      texts = batching.decode_responses(tok, host.tokens_BxT, host.mask_BxT)
      verdicts = [self.domain.verify(t, text) for t, text in zip(tasks_N, texts)]
      rewards = concurrent.futures.Future()
      rewards.set_result(combine(tasks_N, verdicts, [None] * len(tasks_N), c.rewards))
      ref_logp = None if ref_params is None else c.ref_fn(ref_params, rollout.tokens_BxT,
                                                           rollout.loss_mask_BxT)
    return Round(tasks_N=tasks_N, host=host, pending=rewards, ref_logp=ref_logp,
                 tokens=rollout.tokens_BxT)

  def observe(self, scored):
    return {"fixed_tasks/distinct_prompts": float(len({t.prompt for t in scored["tasks_N"]}))}

  def close(self):
    EVENTS.append(("close",))


class CountingSource(FixedTasksSource):
  """FixedTasksSource with state of its own: the steps it has observed, saved with
  every checkpoint (`state_dict`) and restored on resume (`load_state_dict`). Counted
  in `observe`, never in `launch`: a checkpoint can be written after the next step's
  rounds were launched."""

  def __init__(self, components, config):
    super().__init__(components, config)
    self.steps = 0

  def observe(self, scored):
    self.steps += 1
    return {**super().observe(scored), "counting/steps": float(self.steps)}

  def state_dict(self):
    return {"steps": self.steps}

  def load_state_dict(self, state):
    EVENTS.append(("load_state_dict", dict(state)))
    self.steps = int(state.get("steps", 0))


class NotASource:
  """Has a `launch`, but is not a RolloutSource subclass."""

  def launch(self, *args, **kwargs):
    raise AssertionError("never called")
