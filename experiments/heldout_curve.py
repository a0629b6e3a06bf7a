r"""Held-out greedy completion against RL steps, mean ± std over runs (seeds).

  # the demo with a held-out evaluation every 40 RL steps, three seeds:
  python experiments/demo_seeds.py --seeds=0,1,2 --jobs=3 --workdir=/tmp/curve \
      --config.rl.eval_every=40
  python experiments/heldout_curve.py \
      --workdirs=/tmp/curve/seed_0,/tmp/curve/seed_1,/tmp/curve/seed_2 --out=/tmp/curve.json

A workdir is a demo run (rl/ and report/: adds the SFT start and the SFT control
rows) or an RL workdir (its metrics.jsonl). Prints one Markdown table; --out also
writes the rows as JSON.
"""

import json

import _bootstrap  # noqa: F401
from absl import flags

from experiments.demo import heldout_curve
from rl_post import cli

_WORKDIRS = flags.DEFINE_list("workdirs", None, "Comma-separated demo or RL workdirs.",
                              required=True)
_OUT = flags.DEFINE_string("out", None, "Optional JSON file for the rows.")


def main(argv):
  del argv
  workdirs = [w for w in _WORKDIRS.value if w]
  rows = heldout_curve.curve([heldout_curve.read_workdir(w) for w in workdirs])
  print(heldout_curve.curve_markdown(
      rows, f"Held-out greedy completion (%), mean ± std over {len(workdirs)} runs"))
  if _OUT.value:
    with open(_OUT.value, "w", encoding="utf-8") as f:
      json.dump({"workdirs": workdirs, "rows": rows}, f, indent=2)
    print(f"wrote {_OUT.value}")


if __name__ == "__main__":
  cli.run(main)
