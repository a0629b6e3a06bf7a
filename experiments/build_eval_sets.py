r"""Builds the fixed evaluation sets a config names (tfds array_record, once).

  python experiments/build_eval_sets.py --config=configs/grpo_arithmetic.py \
      --config.tasks.eval_sets='("arithmetic",)' \
      --config.tasks.eval_data_dir=/tmp/rl_post/eval_sets
"""

import _bootstrap  # noqa: F401
from absl import flags, logging
from ml_collections import config_flags

from rl_post import cli
from rl_post.config_sections import from_section
from rl_post.data import eval_sets
from rl_post.data.mixture import TaskConfig
from rl_post.errors import ConfigError
from rl_post.output_paths import ensure_workdir

_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file.", lock_config=True)


def main(argv):
  del argv
  config = _CONFIG.value
  tasks = from_section(TaskConfig, config.get("tasks"), "tasks")
  if not tasks.eval_sets:
    raise ConfigError("tasks.eval_sets", tasks.eval_sets, "is empty: name the domains to build")
  ensure_workdir(tasks.eval_data_dir, "tasks.eval_data_dir")
  for spec, path in eval_sets.build_all(tasks, int(config.seed)):
    records = eval_sets.read_records(spec, tasks.eval_data_dir)
    logging.info("%s: %d tasks in %s (sha256 %s)", spec.domain, len(records), path,
                 eval_sets.record_digest(records)[:16])


if __name__ == "__main__":
  flags.mark_flags_as_required(["config"])
  cli.run(main)
