r"""Rejection-sampling fine-tuning data: the RL run's sample budget, verified, kept if right.

  python experiments/rft_collect.py --config=configs/smollm2_135m_grpo.py \
      --out=/tmp/rft/samples.jsonl
  python experiments/train_sft.py --config=configs/smollm2_135m_grpo.py \
      --config.sft.dataset=/tmp/rft/samples.jsonl --workdir=/tmp/rft/sft

The same tasks (steps 0 .. rl.num_steps-1 of the train stream), group size,
temperature and lengths as the RL run the config describes; prints the
counts and writes them next to the samples (<out>.stats.json).
"""

import json

import _bootstrap  # noqa: F401
from absl import flags
from ml_collections import config_flags

from rl_post import cli
from rl_post.sft import rejection

_CONFIG = config_flags.DEFINE_config_file("config", None, "RL config file.", lock_config=True)
_CHECKPOINT = flags.DEFINE_string("checkpoint", None, "Model to sample (.gguf, HF, export, "
                                  "workdir); default: the config's pretrained.path.")
_OUT = flags.DEFINE_string("out", None, "JSONL file for the verified samples.")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 0, "Responses per generate call (0: B*G).")


def main(argv):
  del argv
  checkpoint = cli.checkpoint_or_pretrained(_CHECKPOINT.value, _CONFIG.value)
  stats = rejection.collect(_CONFIG.value, checkpoint, _OUT.value,
                            batch_size=_BATCH_SIZE.value)
  with open(_OUT.value + ".stats.json", "w", encoding="utf-8") as f:
    json.dump(stats, f, indent=2)
  print(f"{stats['correct']} of {stats['samples']} samples correct, {stats['kept']} distinct "
        f"kept -> {stats['path']}")
  for domain, counts in sorted(stats["per_domain"].items()):
    print(f"  {domain}: {counts['correct']} / {counts['samples']}")


if __name__ == "__main__":
  flags.mark_flags_as_required(["config", "out"])
  cli.run(main)
