r"""An RL run's rollout pass rate per domain and level, pooled over windows of steps.

  python experiments/rollout_trend.py --runs=/tmp/rl_post_seeds/seed_0/rl --window=10
  python experiments/rollout_trend.py \
      --runs=/tmp/rl_post_seeds/seed_0/rl,/tmp/rl_post_seeds/seed_1/rl --window=20

  # the share of right steps (arithmetic columns, countdown steps) per domain:
  python experiments/rollout_trend.py --runs=/tmp/demo_arith --component=process

Each run is an RL workdir (its metrics.jsonl); one table per run is printed:
did the policy's own samples get better where RL trained on them?
"""

import _bootstrap  # noqa: F401
from absl import flags

from experiments.demo import rollout_trend
from rl_post import cli

_RUNS = flags.DEFINE_list("runs", None, "Comma-separated RL workdirs (holding metrics.jsonl).",
                          required=True)
_WINDOW = flags.DEFINE_integer("window", 10, "Steps pooled per column.")
_COMPONENT = flags.DEFINE_string(
    "component", "pass_rate", "pass_rate (per level), or a reward component logged per "
    "domain (e.g. process, format), pooled per domain.")


def main(argv):
  del argv
  for table in rollout_trend.trend_tables(_RUNS.value, _WINDOW.value, _COMPONENT.value):
    print(table)


if __name__ == "__main__":
  cli.run(main)
