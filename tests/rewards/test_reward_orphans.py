"""kill -9 of the trainer leaves no reward worker (or its sandbox) behind."""

import os
import signal
import subprocess
import sys
import textwrap
import time

from process_tree import alive, descendants

TRAINER = textwrap.dedent("""
    import sys
    from rl_fixtures import BATCH_DOMAIN, FAULTY_DOMAIN
    from rl_post.rewards.pool import RewardPool
    from rl_post.rewards.scoring import RewardConfig
    from rl_post.tasks.base import Task

    pool = RewardPool(RewardConfig(num_workers=2, timeout_s=600,
                                   sandbox={"isolation": "process", "num_workers": 1}))
    # both workers start their sandbox ...
    assert pool.score([Task(str(i), BATCH_DOMAIN, "p", 1, None) for i in range(2)],
                      ["print(1)"] * 2).correct_N.all()
    # ... then one stays idle and one is inside a verifier that sleeps for 600 s
    pending = pool.submit([Task("0", FAULTY_DOMAIN, "p", 1, "hang")], ["1"])
    print(" ".join(map(str, pool.worker_pids())), flush=True)
    pending.result()
""")


def test_workers_and_their_sandboxes_die_with_a_killed_trainer():
  support = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support")
  env = dict(os.environ, PYTHONPATH=os.pathsep.join([support] + sys.path))
  trainer = subprocess.Popen([sys.executable, "-c", TRAINER], stdout=subprocess.PIPE, env=env,
                             text=True)
  pids = [int(p) for p in trainer.stdout.readline().split()]
  assert len(pids) == 2 and all(alive(p) for p in pids)
  time.sleep(1.0)  # let one worker enter the hanging verifier
  sandboxes = descendants(pids)
  assert len(sandboxes) >= 2  # at least one sandbox process per worker
  pids += sorted(sandboxes)
  os.kill(trainer.pid, signal.SIGKILL)
  trainer.wait()
  deadline = time.monotonic() + 20
  while any(alive(p) for p in pids) and time.monotonic() < deadline:
    time.sleep(0.1)
  assert not any(alive(p) for p in pids)
