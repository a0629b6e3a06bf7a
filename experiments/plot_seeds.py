r"""The demo's plots over seeds from a recorded seeds.json (rl_post.eval.seed_plots).

  python experiments/plot_seeds.py --seeds_json=/tmp/rl_post_seeds/seeds.json
  # the README's figures, from the recorded run:
  python experiments/plot_seeds.py \
      --seeds_json=experiments/results/demo_short_first/seeds.json \
      --metrics_dir='experiments/results/demo_short_first/seed_{seed}_rl'

demo_seeds.py writes the same two PNGs (seeds_arms.png, seeds_curves.png)
next to its seeds.json; this script redraws them from files alone.
"""

import json
import os

import _bootstrap  # noqa: F401
from absl import flags

from rl_post import cli
from rl_post.errors import MissingInputError
from rl_post.eval import seed_plots

_SEEDS_JSON = flags.DEFINE_string("seeds_json", None, "seeds.json written by demo_seeds.py.",
                                  required=True)
_METRICS_DIR = flags.DEFINE_string(
    "metrics_dir", None, "Folder of seed {seed}'s RL metrics.jsonl, with '{seed}' in it "
    "(default: demo_seeds.py's layout, <seeds.json's folder>/seed_{seed}/rl).")
_OUT_DIR = flags.DEFINE_string("out_dir", None, "Where the PNGs go (default: seeds.json's "
                               "folder).")


def main(argv):
  del argv
  path = _SEEDS_JSON.value
  if not os.path.isfile(path):
    raise MissingInputError("--seeds_json", path, "no such file (demo_seeds.py writes one)")
  with open(path, encoding="utf-8") as f:
    result = json.load(f)
  folder = os.path.dirname(os.path.abspath(path))
  metrics_dir = _METRICS_DIR.value or os.path.join(folder, "seed_{seed}", "rl")
  paths = seed_plots.write(result, metrics_dir, _OUT_DIR.value or folder)
  for name in ("arms", "curves"):
    print(f"wrote {paths[name]}")


if __name__ == "__main__":
  cli.run(main)
