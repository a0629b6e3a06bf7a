r"""Cold-start data for RL on episodes: the oracles' solved episodes as multi-turn SFT examples.

  python experiments/build_episode_sft.py --config=configs/smollm2_135m_episodes_sft.py \
      --out=/tmp/rl_post/smollm2_cold/episodes.jsonl
  python experiments/train_sft.py --config=configs/smollm2_135m_episodes_sft.py \
      --config.sft.dataset=/tmp/rl_post/smollm2_cold/episodes.jsonl \
      --workdir=/tmp/rl_post/smollm2_cold/sft

Runs the oracle on the `cold_start` section's domains and levels in the
sandbox, keeps the episodes the verifier scores as solved and that fit the
RL run's budgets, and writes them as {"messages": [...]} lines that
`sft.dataset` reads (rl_post/sft/episodes.py); no task of the RL run's
held-out set (`episodes.heldout_size`, same seed) is drawn. Prints the
counts and writes them next to the examples (<out>.stats.json).
"""

import json

import _bootstrap  # noqa: F401
from absl import flags
from ml_collections import config_flags

from rl_post import cli
from rl_post.sft import episodes

_CONFIG = config_flags.DEFINE_config_file("config", None, "Cold-start config file (episodes "
                                          "and cold_start sections).", lock_config=True)
_OUT = flags.DEFINE_string("out", None, "JSONL file for the kept episodes.")


def main(argv):
  del argv
  stats = episodes.collect(_CONFIG.value, _OUT.value)
  with open(_OUT.value + ".stats.json", "w", encoding="utf-8") as f:
    json.dump(stats, f, indent=2)
  print(f"{stats['kept']} of {stats['drawn']} oracle episodes kept -> {stats['path']} "
        f"({stats['heldout_excluded']} held-out tasks kept out)")
  for reason, n in stats["dropped"].items():
    if n:
      print(f"  dropped, {reason}: {n}")
  for cell, counts in stats["per_level"].items():
    print(f"  {cell}: {counts.get('kept', 0)} / {counts['drawn']}")


if __name__ == "__main__":
  flags.mark_flags_as_required(["config", "out"])
  cli.run(main)
