r"""The demo over several seeds: per-seed rows, mean, spread and 95% interval.

  python experiments/demo_seeds.py --seeds=0,1,2 --workdir=/tmp/rl_post_seeds   # the quickstart
  python experiments/demo_seeds.py --config=configs/smollm2_135m_grpo.py --seeds=0,1,2 \
      --workdir=/tmp/recipe_seeds   # the seven-domain recipe
  python experiments/demo_seeds.py --seeds=0,1,2 --jobs=3   # the seeds side by side
  python experiments/demo_seeds.py --config=configs/smollm2_135m_grpo.py:tiny --seeds=0,1 \
      --workdir=/tmp/demo_seeds_tiny
  python experiments/demo_seeds.py --config=configs/demo.py --seeds=0,1,2   # from scratch

Seed s runs in workdir/seed_<s> (a rerun resumes); the table goes to
workdir/seeds.{json,md} and is printed.
"""

import os
import shlex
import sys

import _bootstrap  # noqa: F401
from absl import flags
from ml_collections import config_flags

from experiments.demo import seed_runs
from rl_post import cli
from rl_post.errors import ConfigError

_CONFIG = config_flags.DEFINE_config_file(
    "config", os.path.join(_bootstrap.ROOT, "configs", "smollm2_135m_grpo.py") + ":quick",
    "Config file.",
    lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", "/tmp/rl_post_seeds", "Root run directory.")
_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2"], "Comma-separated seeds.")
_JOBS = flags.DEFINE_integer("jobs", 1, "Seeds run at once, each in its own process (the "
                             "numbers of a seed do not depend on it; wall-clock figures do).")


def main(argv):
  del argv
  if "seed" in config_flags.get_override_values(flags.FLAGS["config"]):
    raise ConfigError("--config.seed", _CONFIG.value.seed, "is set for each run by --seeds; "
                      "use --seeds instead")
  command = " ".join(shlex.quote(a) for a in ["python", *sys.argv])
  result = seed_runs.run(_CONFIG.value, _WORKDIR.value, _SEEDS.value, command=command,
                         jobs=_JOBS.value)
  with open(result["paths"]["md"]) as f:
    print(f.read())


if __name__ == "__main__":
  cli.run(main)
