"""The trainer loop's pieces, reachable on their own now that they take explicit state."""

import jax.numpy as jnp

from rl_post.rl import trainer
from rl_post.rl.loop_state import LoopState, Outcome, Step


def test_awaiting_an_update_adds_the_wait_to_its_train_time_once():
  step = Step(done=3, device=[{"loss": jnp.ones(())}], host={"time/train_s": 1.0}, start=0.0,
              response_tokens=5)
  trainer._await_update(step)
  assert step.end is not None and step.host["time/train_s"] >= 1.0
  end, train_s = step.end, step.host["time/train_s"]
  trainer._await_update(step)  # already awaited (or read at once): nothing changes
  assert (step.end, step.host["time/train_s"]) == (end, train_s)


def test_loop_state_starts_with_nothing_dispatched():
  loop = LoopState(state="s", it=4)
  assert loop.dispatched is None and loop.last_metrics == {} and loop.setup_metrics is None
  assert {o.value for o in Outcome} == {"ok", "rolled_back", "preempted"}
