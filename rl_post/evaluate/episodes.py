"""Evaluates one checkpoint on an episodes run's held-out tasks: JSON + Markdown.

    python experiments/evaluate.py --config=configs/smollm2_135m_episodes.py \
        --checkpoint=/tmp/rl_post/smollm2_cold/sft/export --workdir=/tmp/eval_cold \
        --num_samples=4 --ks=1,4

For a config with an enabled `episodes` section, experiments/evaluate.py
runs this instead of the single-turn evaluation. The held-out set is the
one the RL run of the same config and seed evaluates
(`episodes.heldout_size` tasks, `rl_post.envs.heldout`: never drawn for
training or the cold start), run in the episodes' own sandbox, tools,
limits, chat template and tokenizer: one greedy episode per task and
--num_samples sampled at --temperature, --max_new_tokens tokens an episode.
The metrics are the trainer's (`rl_post.eval.episodes`: `eval/` greedy,
`eval_sampled/` with pass@k for --ks): verified task success (the verifier
alone), tool-call success, turns and tokens per episode, overall, per
domain and per domain and level.
"""

import dataclasses
import json
import os

import jax
import ml_collections

from rl_post.envs import trainer_rounds
from rl_post.envs.section import EpisodesConfig
from rl_post.errors import ConfigError
from rl_post.eval.episodes import heldout_metrics
from rl_post.evaluate import checkpoint_eval
from rl_post.sampling.sampler import SamplingConfig

def evaluate_checkpoint(config: ml_collections.ConfigDict, checkpoint: str,
                        settings: checkpoint_eval.EvalSettings, *,
                        section: EpisodesConfig | None = None) -> dict:
  """Greedy and sampled episodes of `checkpoint` on the held-out episode tasks.

  `section`: the config's `episodes` section as the entry point parsed it
  (`trainer_rounds.load`); parsed here when None.

  Returns:
    The eval.json content: the checkpoint, its training step and skipped
    steps (as `checkpoint_eval.evaluate_checkpoint`), settings, the flat
    metrics, and per episode (greedy and sampled) its task index, domain,
    level, score, calls, turns and tokens.

  Raises:
    ConfigError: no enabled episodes section, `episodes.heldout_size` 0, or
      an episode budget (--max_new_tokens) below `episodes.turn_tokens`.
  """
  if section is None:
    section = trainer_rounds.load(config.get("episodes"))
  if section is None:
    raise ConfigError("episodes.enabled", False, "evaluating episodes needs the config's "
                      "enabled episodes section")
  if not section.heldout_size:
    raise ConfigError("episodes.heldout_size", 0, "must be > 0 to evaluate")
  if settings.max_new_tokens < section.turn_tokens:
    raise ConfigError("--max_new_tokens", settings.max_new_tokens, "is an episode's token "
                      f"budget: it must be >= episodes.turn_tokens ({section.turn_tokens})")
  tokenizer, _, _, loaded = checkpoint_eval.load_for_eval(
      config, checkpoint, tokenizer=trainer_rounds.tokenizer_for(section))
  rounds = trainer_rounds.EpisodeRounds(
      section, seed=int(config.seed), tokenizer=tokenizer,
      sampling=SamplingConfig(settings.max_new_tokens, settings.temperature))
  rng = jax.random.fold_in(jax.random.key(int(config.seed)), checkpoint_eval.EVAL_STREAM)
  try:
    run = lambda greedy, key, samples: rounds.heldout_records(
        loaded.params, model_config=loaded.model_config, rng=key,
        batch_size=settings.batch_size, greedy=greedy, samples=samples)
    greedy = run(True, rng, 1)
    sampled = run(False, jax.random.fold_in(rng, 1), settings.num_samples)
  finally:
    rounds.close()
  metrics = heldout_metrics(greedy, "eval")
  metrics.update(heldout_metrics(sampled, "eval_sampled", settings.ks))
  return {"checkpoint": os.path.abspath(checkpoint), "checkpoint_step": loaded.step,
          "skipped_steps": list(loaded.skipped_steps),
          "settings": dataclasses.asdict(settings), "metrics": metrics,
          "per_episode": {"greedy": [dataclasses.asdict(r) for r in greedy],
                          "sampled": [dataclasses.asdict(r) for r in sampled]}}


def _pct(value) -> str:
  return "-" if value is None else f"{100 * value:.1f}%"


def render_markdown(result: dict) -> str:
  """eval.md: one row per group (all, each domain, each domain and level)."""
  settings, metrics = result["settings"], result["metrics"]
  ks = [str(k) for k in settings["ks"]]
  groups = ["all"] + sorted({k.split("/")[1] for k in metrics
                             if k.startswith("eval/") and k.endswith("/pass_rate")
                             and k.count("/") >= 2 and not k.startswith("eval/domain_mean/")})
  lines = [f"# Held-out episodes of `{result['checkpoint']}`", "",
           f"{int(metrics['eval/episodes'])} held-out tasks; one greedy episode each and "
           f"{settings['num_samples']} sampled at T={settings['temperature']} (pass@k: the "
           f"unbiased estimator), at most {settings['max_new_tokens']} tokens an episode. "
           "Success is the verifier's alone (no shaping); call success counts the calls "
           "whose tool ran, the ending submit not counted; call success, turns and tokens "
           "are the greedy episodes'.", "",
           "| group | greedy | " + " | ".join(f"pass@{k}" for k in ks)
           + " | call success | turns | tokens | turns when solved |",
           "|---|---|" + "---|" * len(ks) + "---|---|---|---|"]
  rows = []
  for group in groups:
    prefix = "" if group == "all" else f"{group}/"
    rows.append((group, prefix))
    levels = sorted({int(k.split("/")[2].removeprefix("difficulty_")) for k in metrics
                     if k.startswith(f"eval/{group}/difficulty_")})
    rows += [(f"{group}/difficulty={level}", f"{group}/difficulty_{level}/")
             for level in levels]
  for name, prefix in rows:
    get = lambda mode, key: metrics.get(f"{mode}/{prefix}{key}")
    turns_solved = get("eval", "turns_per_solved")
    lines.append(f"| {name} | {_pct(get('eval', 'pass_rate'))} | "
                 + " | ".join(_pct(get("eval_sampled", f"pass@{k}")) for k in ks)
                 + f" | {_pct(get('eval', 'call_success'))} | "
                 f"{get('eval', 'turns_per_episode'):.2f} | "
                 f"{get('eval', 'tokens_per_episode'):.1f} | "
                 + ("-" if turns_solved is None else f"{turns_solved:.2f}") + " |")
  lines += ["", f"Mean over domains, greedy: {_pct(metrics['eval/domain_mean/pass_rate'])}. "
            f"Verification runs that failed (scored 0): {int(metrics['eval/verify_errors'])} "
            f"greedy, {int(metrics['eval_sampled/verify_errors'])} sampled."]
  return "\n".join(lines) + "\n"


def write_outputs(workdir: str, result: dict) -> dict[str, str]:
  """Writes eval.json and eval.md into `workdir`; returns their paths."""
  os.makedirs(workdir, exist_ok=True)
  paths = {"json": os.path.join(workdir, checkpoint_eval.JSON_NAME),
           "markdown": os.path.join(workdir, checkpoint_eval.MARKDOWN_NAME)}
  with open(paths["json"], "w", encoding="utf-8") as f:
    json.dump(result, f, indent=2)
  with open(paths["markdown"], "w", encoding="utf-8") as f:
    f.write(render_markdown(result))
  return paths
