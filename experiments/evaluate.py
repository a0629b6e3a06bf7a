r"""Evaluates a checkpoint on the held-out tasks: workdir/eval.json and eval.md.

  python experiments/evaluate.py --config=configs/grpo_arithmetic.py \
      --checkpoint=/tmp/rl_post/sft/export --workdir=/tmp/rl_post/eval_sft \
      --num_samples=8 --ks=1,4,8

--checkpoint: an export/ folder, a training workdir (its newest readable
checkpoint, recorded as checkpoint_step; the workdir is only read), a HF
folder or a .gguf file; default: the config's pretrained.path (the raw
model, e.g. SmolLM2's GGUF for configs/smollm2_135m_grpo.py). The config gives the tokenizer, the held-out tasks
(tasks.*, seed) and the decoding defaults (rl.temperature,
rl.max_new_tokens, rl.max_prompt_len). A checkpoint or tokenizer file that
cannot be read is a one-line error naming --checkpoint or tokenizer.path
(exit status 2; docs/cli.md).

With an enabled `episodes` section the held-out set is the episode tasks
of `episodes.heldout_size` (docs/envs.md, held-out evaluation): greedy and
sampled episodes, verified success, tool-call success, turns, tokens and
pass@k per domain and level.
"""

import _bootstrap  # noqa: F401
from absl import flags
from ml_collections import config_flags

from rl_post import cli
from rl_post.errors import ConfigError
from rl_post.envs import trainer_rounds
from rl_post.evaluate import checkpoint_eval, episodes

_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file.", lock_config=True)
_CHECKPOINT = flags.DEFINE_string("checkpoint", None, "Checkpoint to evaluate (default: the "
                                  "config's pretrained.path, the raw model).")
_WORKDIR = flags.DEFINE_string("workdir", None, "Output folder for eval.json and eval.md.")
_NUM_SAMPLES = flags.DEFINE_integer("num_samples", 8, "Sampled responses per problem (n).")
_KS = flags.DEFINE_list("ks", ["1", "4", "8"], "The k of each pass@k (k <= n).")
_TEMPERATURE = flags.DEFINE_float("temperature", None, "Sampling temperature (default: rl's).")
_MAX_NEW_TOKENS = flags.DEFINE_integer("max_new_tokens", None, "Default: rl.max_new_tokens.")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 16, "Problems per generate call.")


def _ks() -> tuple[int, ...]:
  try:
    return tuple(int(k) for k in _KS.value)
  except ValueError:
    raise ConfigError("--ks", ",".join(_KS.value), "must be comma-separated integers") from None


def main(argv):
  del argv
  settings = checkpoint_eval.settings_from(
      _CONFIG.value, num_samples=_NUM_SAMPLES.value, ks=_ks(), temperature=_TEMPERATURE.value,
      max_new_tokens=_MAX_NEW_TOKENS.value, batch_size=_BATCH_SIZE.value)
  checkpoint = cli.checkpoint_or_pretrained(_CHECKPOINT.value, _CONFIG.value)
  # an episodes config: its held-out episode tasks (rl_post/evaluate/episodes.py)
  section = trainer_rounds.load(_CONFIG.value.get("episodes"))  # parsed once, passed down
  if section is not None:
    result = episodes.evaluate_checkpoint(_CONFIG.value, checkpoint, settings, section=section)
    paths = episodes.write_outputs(_WORKDIR.value, result)
  else:
    result = checkpoint_eval.evaluate_checkpoint(_CONFIG.value, checkpoint, settings)
    paths = checkpoint_eval.write_outputs(_WORKDIR.value, result)
  with open(paths["markdown"]) as f:
    print(f.read())
  print(f"wrote {paths['json']} and {paths['markdown']}")


if __name__ == "__main__":
  flags.mark_flags_as_required(["config", "workdir"])
  cli.run(main)
