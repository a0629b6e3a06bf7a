"""Update metrics read one step late: the order of rollouts and metric reads, same numbers."""

import jax
import numpy as np

from configs import grpo_arithmetic
from rl_fixtures import DIGIT_DOMAIN
from rl_post.metrics.writers import read_metrics
from rl_post.rl import trainer

VOLATILE = ("time/", "throughput/", "perf/", "progress/")


def _config(tokenizer_path, late: bool):
  c = grpo_arithmetic.get_config("tiny")
  c.tokenizer.path = tokenizer_path
  c.tasks.update(domains=(DIGIT_DOMAIN,), difficulties=(1,), domain_options={}, heldout_size=0)
  c.rl.update(max_prompt_len=24, max_new_tokens=6, batch_size=4, num_generations=4,
              checkpoint_every=2, eval_every=0, num_steps=3, metrics_one_step_late=late)
  c.rl.grpo.kl_coef = 0.05
  c.optimizer.learning_rate = 3e-3
  return c


def _record_events(monkeypatch) -> list[str]:
  """Logs "rollout" per generate call and "metrics" per read of an update's metrics."""
  events = []
  generate, device_get = trainer.generate, jax.device_get

  def spy_generate(*args, **kwargs):
    events.append("rollout")
    return generate(*args, **kwargs)

  def spy_device_get(tree):
    if isinstance(tree, list) and tree and isinstance(tree[0], dict) and (
        "guard/skipped" in tree[0]):
      events.append("metrics")
    return device_get(tree)

  monkeypatch.setattr(trainer, "generate", spy_generate)
  monkeypatch.setattr(jax, "device_get", spy_device_get)
  return events


def test_late_metrics_reorder_reads_and_change_no_number(tokenizer_path, tmp_path,
                                                         monkeypatch):
  events = _record_events(monkeypatch)
  late = trainer.train(_config(tokenizer_path, True), str(tmp_path / "late"))
  # step t's update runs on the device while step t + 1's rollout is dispatched
  assert events == ["rollout", "rollout", "metrics", "rollout", "metrics", "metrics"]
  events.clear()
  now = trainer.train(_config(tokenizer_path, False), str(tmp_path / "now"))
  assert events == ["rollout", "metrics"] * 3

  def stable(name):
    return [{k: v for k, v in m.items() if not k.startswith(VOLATILE)}
            for m in read_metrics(str(tmp_path / name))]

  assert [m["step"] for m in stable("late")] == [1, 2, 3]
  assert stable("late") == stable("now")
  assert all(m["time/step_s"] > 0 for m in read_metrics(str(tmp_path / "late")))
  same = jax.tree.map(lambda x, y: np.array_equal(np.asarray(x), np.asarray(y)),
                      late["state"].params, now["state"].params)
  assert all(jax.tree.leaves(same))
  assert late["metrics"]["loss"] == now["metrics"]["loss"]
  assert not late["preempted"] and not now["preempted"]
