"""Update metrics read one step late: the order of rollouts and metric reads, same numbers."""

import jax
import numpy as np

from rl_post.metrics.writers import read_metrics
from rl_post.rl import single_turn_source, trainer
from tiny_grpo import tiny_digit_config
from run_metrics import MEASURED

VOLATILE = MEASURED


def _config(tokenizer_path, late: bool):
  return tiny_digit_config(tokenizer_path, num_steps=3, metrics_one_step_late=late)


def _record_events(monkeypatch) -> list[str]:
  """Logs "rollout" per generate call and "metrics" per read of an update's metrics."""
  events = []
  generate, device_get = single_turn_source.generate, jax.device_get

  def spy_generate(*args, **kwargs):
    events.append("rollout")
    return generate(*args, **kwargs)

  def spy_device_get(tree):
    if isinstance(tree, list) and tree and isinstance(tree[0], dict) and (
        "guard/skipped" in tree[0]):
      events.append("metrics")
    return device_get(tree)

  monkeypatch.setattr(single_turn_source, "generate", spy_generate)
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
