"""The RL trainer loop as 2 processes x 4 CPU devices equals 1 process x 8, and resumes after kill -9.

Runs experiments/train_rl.py (tests/parallel/multihost_rl_config.py: GRPO, data=2 x
fsdp=2 x tensor=2) three ways: one 8-device process; two 4-device processes
joined through a localhost coordinator, one of them SIGKILLed after the
first checkpoint; and the two processes again, resuming. The resumed
2-process run must write the same metrics.jsonl rows and end with the same
params as the uninterrupted 1-process run (f32 tolerance).
"""

import os
import subprocess
import sys

import numpy as np

from child_process import xla_flags
from host_faults import free_port, kill_one_host_after
from run_metrics import MEASURED
from run_outputs import final_params, metrics_by_step, wait_all

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TOL = 1e-5
STEPS = 4
# differ between runs by nature (wall time) or by design (the resumed run counts its restart)
VOLATILE = MEASURED + ("faults/",)


def _train(workdir, tok, processes, port=0, process_id=0):
  env = dict(os.environ, JAX_PLATFORMS="cpu",
             PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "tests", "support"),
                                         os.environ.get("PYTHONPATH", "")]),
             XLA_FLAGS=xla_flags(8 // processes))
  if processes > 1:
    env.update(RL_POST_COORDINATOR_ADDRESS=f"localhost:{port}",
               RL_POST_NUM_PROCESSES=str(processes), RL_POST_PROCESS_ID=str(process_id))
  argv = [sys.executable, os.path.join(ROOT, "experiments", "train_rl.py"),
          f"--config={os.path.join(HERE, 'multihost_rl_config.py')}", f"--workdir={workdir}",
          f"--config.tokenizer.path={tok}", "--config.distributed.mode=auto"]
  return subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)


def _pair(workdir, tok):
  port = free_port()
  return [_train(workdir, tok, 2, port, i) for i in (0, 1)]


def test_two_process_rl_resumes_after_kill_9_and_matches_one_process(tokenizer_path, tmp_path):
  one = _train(tmp_path / "one", tokenizer_path, 1)
  two = _pair(tmp_path / "two", tokenizer_path)
  first_checkpoint = tmp_path / "two" / "checkpoints" / "2" / "commit_success.txt"
  kill_one_host_after(first_checkpoint, two)
  assert not (tmp_path / "two" / "checkpoints" / str(STEPS)).exists()  # stopped before the end
  logs = wait_all(_pair(tmp_path / "two", tokenizer_path), "resumed 2-process run failed:\n")
  assert "resumed from iteration" in logs[0]
  wait_all([one], "1-process run failed:\n")

  got = metrics_by_step(tmp_path / "two", VOLATILE)
  want = metrics_by_step(tmp_path / "one", VOLATILE)
  assert sorted(got) == sorted(want) == list(range(1, STEPS + 1))
  assert want[1]["grad_norm"] > 1e-3 and 0 < want[1]["reward/mean"] < 1  # real updates
  assert "eval/pass_rate" in want[STEPS]  # held-out evaluation ran multi-process too
  for step in want:
    assert sorted(got[step]) == sorted(want[step])
    for k, v in want[step].items():
      np.testing.assert_allclose(got[step][k], v, atol=TOL, rtol=TOL, err_msg=f"{step} {k}")
  got, want = final_params(tmp_path / "two", STEPS), final_params(tmp_path / "one", STEPS)
  assert sorted(got) == sorted(want)
  for k in want:
    np.testing.assert_allclose(got[k], want[k], atol=TOL, rtol=TOL, err_msg=k)
  assert len(open(tmp_path / "two" / "metrics.jsonl").read().splitlines()) == STEPS  # process 0
