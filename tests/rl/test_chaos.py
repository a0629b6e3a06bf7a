"""Chaos: faulty verifiers, NaN, SIGKILL, a corrupted checkpoint and SIGTERM.

Every run here has a NaN loss injected at iteration 2 (its update is skipped)
and a verifier mix that raises, returns NaN or kills its worker process (those
rollouts score 0 as counted errors): both change the learning signal, so the
reference run has them too.
Everything else (a kill -9 under the supervisor, bit flips in the newest
checkpoint, a SIGTERM) must leave the metrics and the final state exactly
as in the reference run, with every fault counted in metrics.jsonl.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from rl_post.checkpoint import CheckpointManager
from rl_post.checkpoint import integrity
from rl_post.metrics.writers import read_metrics
from rl_post.rl import trainer
from run_metrics import MEASURED

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NUM_STEPS = 6
VOLATILE = MEASURED + ("faults/", "guard/")  # differ by design

_CONFIG_FILE = '''
from configs import grpo_arithmetic
from rl_fixtures import DIGIT_DOMAIN, FAULTY_DOMAIN


def get_config():
  c = grpo_arithmetic.get_config("tiny")
  c.tokenizer.path = {tokenizer!r}
  # Half the tasks go to a verifier that raises, returns NaN or exits on schedule.
  c.tasks.update(domains=(DIGIT_DOMAIN, FAULTY_DOMAIN), weights=(0.5, 0.5), difficulties=(1,),
                 domain_options={{FAULTY_DOMAIN: dict(faults=("raise", "nan", "exit", None))}},
                 heldout_size=8)
  c.rl.update(max_prompt_len=24, max_new_tokens=6, batch_size=4, num_generations=8,
              checkpoint_every=2, eval_every=0, num_steps={num_steps})
  c.rewards.num_workers = 1
  c.faults.update({faults!r})
  return c
'''


def _config(tokenizer_path, tmp_path, name, **faults):
  """Writes a config file (for subprocesses) and returns (path, ConfigDict)."""
  faults = dict(nonfinite_loss_at_steps=(2,), **faults)
  path = tmp_path / f"{name}.py"
  path.write_text(_CONFIG_FILE.format(tokenizer=tokenizer_path, num_steps=NUM_STEPS,
                                      faults=faults))
  sys.path.insert(0, str(tmp_path))
  try:
    module = __import__(name)
  finally:
    sys.path.remove(str(tmp_path))
  return str(path), module.get_config()


def _learning_rows(workdir):
  return [{k: v for k, v in r.items() if not k.startswith(VOLATILE)}
          for r in read_metrics(workdir)]


def _final_state(workdir):
  with CheckpointManager(os.path.join(workdir, "checkpoints")) as ckpt:
    return integrity.host_leaves(ckpt._mgr.restore(NUM_STEPS)["state"])


def _assert_same_state(a, b):
  assert sorted(a) == sorted(b)
  for name in a:
    np.testing.assert_array_equal(a[name], b[name], err_msg=name)


@pytest.fixture(scope="module")
def reference(tokenizer_path, tmp_path_factory):
  tmp = tmp_path_factory.mktemp("reference")
  _, config = _config(tokenizer_path, tmp, "reference_config")
  trainer.train(config, str(tmp / "run"))
  return str(tmp / "run")


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_kill_and_corrupt_checkpoint_under_supervisor_match_clean_run(
    tokenizer_path, tmp_path, reference):
  # Iteration 4's checkpoint gets 64 flipped bytes, then the run is killed -9
  # after iteration 5: the restart must reject checkpoint 4 (checksum), move it
  # aside, resume from 2, save 4 again and finish.
  config_path, _ = _config(tokenizer_path, tmp_path, "chaos_config",
                           corrupt_checkpoint_at_steps=(4,), kill_at_steps=(5,))
  workdir = str(tmp_path / "run")
  env = dict(os.environ, JAX_PLATFORMS="cpu",
             PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "tests", "support")]))
  proc = subprocess.run(
      [sys.executable, os.path.join(ROOT, "launch", "supervise.py"), "--restart_on_failure=2",
       "--backoff_s=0.1", "--", sys.executable, os.path.join(ROOT, "experiments", "train_rl.py"),
       f"--config={config_path}", f"--workdir={workdir}"],
      capture_output=True, text=True, timeout=300, env=env)
  assert proc.returncode == 0, proc.stderr[-3000:]
  restarts = [json.loads(x) for x in open(os.path.join(workdir, "restarts.jsonl"))]
  assert [r["reason"] for r in restarts] == ["killed by SIGKILL"]
  assert os.listdir(os.path.join(workdir, "checkpoints", "corrupt")) == ["4-checksum"]

  rows = read_metrics(workdir)
  assert [r["step"] for r in rows] == list(range(1, NUM_STEPS + 1))  # no duplicates
  assert _learning_rows(workdir) == _learning_rows(reference)
  _assert_same_state(_final_state(workdir), _final_state(reference))
  final = rows[-1]
  errors = {k: sum(r[k] for r in rows) for k in rows[0] if k.startswith("reward/errors/")}
  assert errors["reward/errors/crash"] > 0 and errors["reward/errors/verifier_error"] > 0
  assert errors["reward/errors/invalid_verdict"] > 0
  assert all(r["reward/mean"] is not None for r in rows)
  assert {k: final[k] for k in final if k.startswith(("faults/", "guard/"))} == {
      "faults/injected_nonfinite_loss": 1, "faults/nonfinite_update_skipped": 1,
      "faults/injected_checkpoint_corruption": 1, "faults/injected_kill": 1,
      "faults/checkpoint_moved_aside": 1, "faults/restarts": 1,
      "guard/skipped": 0, "guard/skipped_steps": 1, "guard/rollbacks": 0}


def test_sigterm_checkpoints_exits_cleanly_and_rerun_resumes(tokenizer_path, tmp_path, reference):
  _, config = _config(tokenizer_path, tmp_path, "sigterm_config", sigterm_at_steps=(3,))
  workdir = str(tmp_path / "run")
  first = trainer.train(config, workdir)
  assert first["preempted"]
  assert [r["step"] for r in read_metrics(workdir)] == [1, 2, 3]
  with CheckpointManager(os.path.join(workdir, "checkpoints")) as ckpt:
    assert ckpt.latest_step() == 3  # off the checkpoint_every=2 grid: saved for SIGTERM
  second = trainer.train(config, workdir)
  assert not second["preempted"]
  assert _learning_rows(workdir) == _learning_rows(reference)
  _assert_same_state(_final_state(workdir), _final_state(reference))
  final = read_metrics(workdir)[-1]
  assert final["faults/injected_sigterm"] == 1 and final["faults/sigterm_checkpointed"] == 1
