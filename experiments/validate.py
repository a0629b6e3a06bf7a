r"""Choose settings on a validation seed: one RL run per grid point, ranked by held-out completion.

  python experiments/validate.py --config=configs/smollm2_135m_grpo.py:quick --seed=100 \
      --grid=rl.grpo.kl_coef=0.01,0.04 --grid=optimizer.learning_rate=5e-6,2e-5 \
      --workdir=/tmp/rl_post_validation
  python experiments/validate.py --config=configs/smollm2_135m_grpo.py:tiny --seed=100 \
      --grid=rl.grpo.kl_coef=0,0.04 --product --jobs=2

Each --grid key=v1,v2 varies one config field (one at a time around the
config as given, or every combination with --product). Point p runs in
workdir/<p> (a rerun resumes it); the table goes to
workdir/validation.{json,md} and is printed. experiments/demo/validation.py
says how the choice is made.
"""

import os
import shlex
import sys

import _bootstrap  # noqa: F401
from absl import flags
from ml_collections import config_flags

from experiments.demo import validation
from rl_post import cli
from rl_post.errors import ConfigError

_CONFIG = config_flags.DEFINE_config_file(
    "config", os.path.join(_bootstrap.ROOT, "configs", "smollm2_135m_grpo.py") + ":quick",
    "Config file.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", "/tmp/rl_post_validation", "Root run directory.")
_SEED = flags.DEFINE_integer("seed", 100, "The validation seed (not one the results report).")
_GRID = flags.DEFINE_multi_string("grid", [], "key=v1,v2,...: a config field and its values.")
_PRODUCT = flags.DEFINE_boolean("product", False, "Every combination of the grid's values "
                                "(default: one key at a time around the config as given).")
_JOBS = flags.DEFINE_integer("jobs", 1, "Points run at once, each in its own process.")


def main(argv):
  del argv
  if "seed" in config_flags.get_override_values(flags.FLAGS["config"]):
    raise ConfigError("--config.seed", _CONFIG.value.seed, "is set by --seed; use --seed")
  grid = validation.parse_grid(_CONFIG.value, _GRID.value)
  points = validation.grid_points(_CONFIG.value, grid, product=_PRODUCT.value)
  command = " ".join(shlex.quote(a) for a in ["python", *sys.argv])
  out = validation.run(_CONFIG.value, _WORKDIR.value, seed=_SEED.value, points=points,
                       command=command, jobs=_JOBS.value)
  with open(out["paths"]["md"]) as f:
    print(f.read())


if __name__ == "__main__":
  cli.run(main)
