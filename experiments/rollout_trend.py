r"""An RL run's rollout pass rate per domain and level, pooled over windows of steps.

  python experiments/rollout_trend.py --runs=/tmp/rl_post_seeds/seed_0/rl --window=10
  python experiments/rollout_trend.py \
      --runs=/tmp/rl_post_seeds/seed_0/rl,/tmp/rl_post_seeds/seed_1/rl --window=20

Each run is an RL workdir (its metrics.jsonl); one table per run is printed:
did the policy's own samples get better where RL trained on them?
"""

import _bootstrap  # noqa: F401
from absl import flags

from rl_post import cli
from rl_post.eval import rollout_trend
from rl_post.metrics.writers import read_metrics

_RUNS = flags.DEFINE_list("runs", None, "Comma-separated RL workdirs (holding metrics.jsonl).",
                          required=True)
_WINDOW = flags.DEFINE_integer("window", 10, "Steps pooled per column.")


def main(argv):
  del argv
  for run in _RUNS.value:
    trend = rollout_trend.windowed_pass_rates(read_metrics(run), _WINDOW.value)
    print(rollout_trend.trend_table_md(trend, title=f"Rollout pass rate (%), {run}"))


if __name__ == "__main__":
  cli.run(main)
