"""Tool-use episodes as 2 processes x 1 CPU device equal 1 process x 2.

Runs experiments/train_rl.py (tests/parallel/multihost_episodes_config.py:
GRPO over `data_questions` and `fs_chores` episodes, fsdp=2, held-out
evaluation after the last step) as one 2-device process and as two 1-device processes joined
through a localhost coordinator. Each of the two runs the tools and the
verification of its own rows on its own sandbox (rl_post/envs/process_rows.py);
the step results are gathered, so the update must see the batch the
1-process run sees: the same metrics.jsonl rows (every metric but wall
times, episode metrics over both processes' rows) and the same final params.
"""

import os
import subprocess
import sys

import numpy as np

from child_process import xla_flags
from host_faults import free_port
from run_metrics import MEASURED
from run_outputs import final_params, metrics_by_step, wait_all

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TOL = 1e-5
STEPS = 2
# wall times: the episodes' split of time between generation, tools and verification
VOLATILE = MEASURED + ("episodes/tool_seconds", "episodes/generation_seconds",
                       "episodes/verify_seconds", "episodes/tool_time_frac")


def _train(workdir, processes, port=0, process_id=0):
  env = dict(os.environ, JAX_PLATFORMS="cpu",
             PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "tests", "support"),
                                         os.environ.get("PYTHONPATH", "")]),
             XLA_FLAGS=xla_flags(2 // processes))
  if processes > 1:
    env.update(RL_POST_COORDINATOR_ADDRESS=f"localhost:{port}",
               RL_POST_NUM_PROCESSES=str(processes), RL_POST_PROCESS_ID=str(process_id))
  argv = [sys.executable, os.path.join(ROOT, "experiments", "train_rl.py"),
          f"--config={os.path.join(HERE, 'multihost_episodes_config.py')}",
          f"--workdir={workdir}", "--config.distributed.mode=auto"]
  return subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)


def test_two_process_episodes_match_one_process(tmp_path):
  port = free_port()
  one = _train(tmp_path / "one", 1)
  two = [_train(tmp_path / "two", 2, port, i) for i in (0, 1)]
  try:
    wait_all(two, "2-process episodes run failed:\n")
    wait_all([one], "1-process episodes run failed:\n")
  finally:  # a failed run leaves no process behind
    for p in [one] + two:
      if p.poll() is None:
        p.kill()
        p.wait()

  got = metrics_by_step(tmp_path / "two", VOLATILE)
  want = metrics_by_step(tmp_path / "one", VOLATILE)
  assert sorted(got) == sorted(want) == list(range(1, STEPS + 1))
  assert max(want[step]["grad_norm"] for step in want) > 0  # some step had rewards to learn
  for step in want:
    # every episode of the step, both processes' rows, in the episode metrics
    assert want[step]["episodes/episodes"] == 8 and want[step]["episodes/tool_calls"] > 0
    assert sorted(got[step]) == sorted(want[step])
    for k, v in want[step].items():
      np.testing.assert_allclose(got[step][k], v, atol=TOL, rtol=TOL, err_msg=f"{step} {k}")
  assert want[STEPS]["eval/episodes"] == 2  # the held-out set, split over the processes
  got, want = final_params(tmp_path / "two", STEPS), final_params(tmp_path / "one", STEPS)
  assert sorted(got) == sorted(want)
  for k in want:
    np.testing.assert_allclose(got[k], want[k], atol=TOL, rtol=TOL, err_msg=k)
  assert len(open(tmp_path / "two" / "metrics.jsonl").read().splitlines()) == STEPS  # process 0
