r"""The demo's plots over seeds from a recorded seeds.json (experiments.demo.seed_plots).

  python experiments/plot_seeds.py --seeds_json=/tmp/rl_post_seeds/seeds.json
  # the README's figures, from the recorded run:
  python experiments/plot_seeds.py \
      --seeds_json=experiments/results/demo_short_first/seeds.json \
      --metrics_dir='experiments/results/demo_short_first/seed_{seed}_rl'

demo_seeds.py writes the same two PNGs (seeds_arms.png, seeds_curves.png)
next to its seeds.json; this script redraws them from files alone.
"""

import os

import _bootstrap  # noqa: F401
from absl import flags

from experiments.demo import seed_plots
from rl_post import cli
from rl_post.output_paths import ensure_workdir

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
  result = seed_plots.load_seeds(path, "--seeds_json")
  folder = os.path.dirname(os.path.abspath(path))
  metrics_dir = _METRICS_DIR.value or os.path.join(folder, "seed_{seed}", "rl")
  out_dir = ensure_workdir(_OUT_DIR.value or folder, "--out_dir")
  paths = seed_plots.write(result, metrics_dir, out_dir, field="--metrics_dir")
  for name in ("arms", "curves"):
    print(f"wrote {paths[name]}")


if __name__ == "__main__":
  cli.run(main)
