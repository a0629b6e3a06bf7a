r"""Learnability scan: greedy, pass@1 and pass@k per domain and level of a checkpoint.

  # every registered domain's easiest level, SmolLM2-135M-Instruct as shipped (the
  # config's pretrained.path is the default --checkpoint):
  python experiments/scan_domains.py --config=configs/smollm2_135m_grpo.py \
      --domains=all --levels=easiest --problems=4 --samples=8 --ks=1,8 --workdir=/tmp/scan
  # then every level of the domains found in reach:
  python experiments/scan_domains.py ... --domains=arithmetic,rg/chain_sum --levels=all

--domains: comma-separated names, "all" (every registered domain) or prefixes
ending in "*" ("rg/*"). --answer_format: "auto" (per domain: final_number
for numeric answers, code_block for programs, else last_line), "config"
(tasks.domain_options) or one format for all. Writes workdir/scan.json and
workdir/scan.md and prints the table; the recipe's mixture is read from it
(the rows marked in reach: pass@k well above pass@1). While it runs,
workdir/scan.partial.{json,md} hold the rows finished so far.
"""

import json
import os

import _bootstrap  # noqa: F401
from absl import flags
from ml_collections import config_flags

from rl_post import cli
from rl_post.errors import ConfigError
from rl_post.evaluate import scan
from rl_post.tasks import registry

_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file.", lock_config=True)
_CHECKPOINT = flags.DEFINE_string("checkpoint", None, "Checkpoint (export, workdir, HF, .gguf); "
                                  "default: the config's pretrained.path.")
_WORKDIR = flags.DEFINE_string("workdir", None, "Output folder for scan.json and scan.md.")
_DOMAINS = flags.DEFINE_list("domains", ["all"], "Domains: names, 'all', or 'prefix*'.")
_LEVELS = flags.DEFINE_enum("levels", "all", ["all", "easiest"], "Levels per domain.")
_PROBLEMS = flags.DEFINE_integer("problems", 8, "Problems per (domain, level).")
_SAMPLES = flags.DEFINE_integer("samples", 16, "Sampled responses per problem.")
_KS = flags.DEFINE_list("ks", ["1", "4", "16"], "The k of each pass@k (k <= --samples).")
_TEMPERATURE = flags.DEFINE_float("temperature", 1.0, "Sampling temperature.")
_MAX_NEW_TOKENS = flags.DEFINE_integer("max_new_tokens", 96, "Response length cap.")
_MAX_PROMPT_LEN = flags.DEFINE_integer("max_prompt_len", 256, "Longer prompts are skipped.")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 32, "Prompts per generate call.")
_ANSWER_FORMAT = flags.DEFINE_string("answer_format", "auto", "'auto', 'config' or a format.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the task draws and sampling.")


def domain_names(patterns) -> list[str]:
  """Registered domains matching `patterns` ("all", "prefix*" or names), in order."""
  names = []
  for pattern in patterns:
    if pattern == "all":
      found = registry.available()
    elif pattern.endswith("*"):
      found = [d for d in registry.available() if d.startswith(pattern[:-1])]
    else:
      found = [pattern]
    if not found:
      raise ConfigError("--domains", pattern, "matches no registered domain")
    names += [d for d in found if d not in names]
  return names


def main(argv):
  del argv
  try:
    ks = tuple(int(k) for k in _KS.value)
  except ValueError:
    raise ConfigError("--ks", ",".join(_KS.value), "must be comma-separated integers") from None
  settings = scan.ScanSettings(
      problems=_PROBLEMS.value, samples=_SAMPLES.value, ks=ks, temperature=_TEMPERATURE.value,
      max_new_tokens=_MAX_NEW_TOKENS.value, max_prompt_len=_MAX_PROMPT_LEN.value,
      batch_size=_BATCH_SIZE.value, levels=_LEVELS.value, answer_format=_ANSWER_FORMAT.value,
      seed=_SEED.value)
  checkpoint = os.path.abspath(cli.checkpoint_or_pretrained(_CHECKPOINT.value, _CONFIG.value))
  os.makedirs(_WORKDIR.value, exist_ok=True)

  def write(result, name="scan"):
    result = dict(result, checkpoint=checkpoint)
    with open(os.path.join(_WORKDIR.value, f"{name}.json"), "w", encoding="utf-8") as f:
      json.dump(result, f, indent=2)
    with open(os.path.join(_WORKDIR.value, f"{name}.md"), "w", encoding="utf-8") as f:
      f.write(scan.render_markdown(result))
    return result

  result = write(scan.scan(_CONFIG.value, checkpoint, domain_names(_DOMAINS.value),
                           settings, on_rows=lambda rows: write(rows, "scan.partial")))
  for name in ("scan.partial.json", "scan.partial.md"):
    if os.path.exists(os.path.join(_WORKDIR.value, name)):
      os.remove(os.path.join(_WORKDIR.value, name))
  print(scan.render_markdown(result))
  print(f"wrote {_WORKDIR.value}/scan.json and scan.md")


if __name__ == "__main__":
  flags.mark_flags_as_required(["config", "workdir"])
  cli.run(main)
