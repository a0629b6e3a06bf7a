"""Evaluates one checkpoint on the fixed held-out task set: JSON + Markdown.

    result = evaluate_checkpoint(config, "/tmp/rl_post/sft/export",
                                 EvalSettings(num_samples=8, ks=(1, 4, 8)))
    write_outputs("/tmp/rl_post/eval", result)    # eval.json, eval.md

A checkpoint is any of: an exported params folder (`export/` of an SFT run,
with model_config.json), a training workdir (its newest readable
`checkpoints/` step, with the workdir's config.json; read only, so a corrupt
newer step is skipped and logged, never moved aside), a HF safetensors folder
or a .gguf file. A file that cannot be read is a `MissingInputError` naming
`--checkpoint` (or `tokenizer.path`). The held-out tasks come from
`config.tasks` and `config.seed` (the same set the trainers hold out: the
fixed eval sets of `tasks.eval_sets`, else drawn from the held-out stream),
so two checkpoints evaluated with one config are scored on the same
problems, in the same order.

Two decodings: greedy (one response per problem: completion rate) and
sampled at `temperature` (n = `num_samples` responses per problem: pass@k
with the unbiased estimator for every k in `ks`). Both are broken down per
domain and per difficulty level.
"""

import contextlib
import dataclasses
import functools
import json
import os
from typing import Any

from absl import logging
import jax
import ml_collections
import numpy as np

from rl_post import errors
from rl_post.checkpoint.manager import CheckpointManager, CorruptCheckpointError
from rl_post.checkpoint.params import innermost_error, load_model_config, load_params
from rl_post.config_sections import from_section
from rl_post.data.hf_tokenizer import load_tokenizer
from rl_post.data import batching, eval_sets, tokenizer_fingerprint
from rl_post.data.mixture import TaskConfig
from rl_post.errors import ConfigError, MissingInputError
from rl_post.eval import completion, report, stats
from rl_post.models import ModelConfig, pretrained
from rl_post.models.lora import LoraConfig
from rl_post.parallel import mesh as mesh_lib
from rl_post.parallel import sharding
from rl_post.rewards.pool import RewardPool
from rl_post.rewards.scoring import RewardConfig
from rl_post.rl import config as rl_config
from rl_post.rl import critic as critic_lib
from rl_post.sampling.sampler import SamplingConfig
from rl_post.training import state as state_lib
from rl_post.training.optimizer import OptimizerConfig, make_optimizer
from rl_post.training.run import model_config_from

JSON_NAME, MARKDOWN_NAME = "eval.json", "eval.md"
EVAL_STREAM = 0xE7A1  # the evaluation's sampling key: fold_in(key(config.seed), EVAL_STREAM)


@dataclasses.dataclass(frozen=True)
class EvalSettings:
  """How a checkpoint is evaluated (fields are the flags of experiments/evaluate.py).

  Attributes:
    num_samples: n, sampled responses per problem.
    ks: the k of each pass@k reported, 1 <= k <= n.
    temperature: sampling temperature of the sampled decoding.
    max_new_tokens: response length cap.
    max_prompt_len: prompt length (prompts are left-padded to it).
    batch_size: problems per generate call.
  """
  num_samples: int = 8
  ks: tuple[int, ...] = (1, 4, 8)
  temperature: float = 1.0
  max_new_tokens: int = 64
  max_prompt_len: int = 32
  batch_size: int = 16

  def __post_init__(self):
    for name in ("num_samples", "max_new_tokens", "max_prompt_len", "batch_size"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"--{name}", value, "must be an integer >= 1")
    if not self.temperature > 0:
      raise ConfigError("--temperature", self.temperature, "must be > 0")
    ks = tuple(self.ks)
    if not ks or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in ks):
      raise ConfigError("--ks", ks, "must be a non-empty list of integers >= 1")
    if max(ks) > self.num_samples:
      raise ConfigError("--ks", ks, f"every k must be <= --num_samples={self.num_samples} "
                        "(pass@k needs at least k samples per problem)")
    object.__setattr__(self, "ks", tuple(sorted(set(ks))))


def settings_from(config: ml_collections.ConfigDict, **flags) -> EvalSettings:
  """EvalSettings from flag values; None takes the config's `rl` section (or the default)."""
  rl = config.get("rl") or {}
  values = {"temperature": rl.get("temperature"), "max_new_tokens": rl.get("max_new_tokens"),
            "max_prompt_len": rl.get("max_prompt_len")}
  values.update({k: v for k, v in flags.items() if v is not None})
  return EvalSettings(**{k: v for k, v in values.items() if v is not None})


@dataclasses.dataclass(frozen=True)
class Loaded:
  """A checkpoint's model, read for evaluation.

  Attributes:
    model_config: the model's ModelConfig.
    params: its params, placed on the mesh.
    step: the training step (a training workdir's checkpoint), else None.
    skipped_steps: the workdir's newer steps that cannot be read, newest
      first: ({"step", "reason" ("unreadable" or "checksum"), "error"}, ...).
  """
  model_config: ModelConfig
  params: Any
  step: int | None = None
  skipped_steps: tuple[dict, ...] = ()


def _exported(path, config, tokenizer, mesh, rules) -> Loaded:
  model_config = load_model_config(path)
  tokenizer_fingerprint.check(tokenizer_fingerprint.read(path), tokenizer, "--checkpoint", path,
                              config.tokenizer.path)
  return Loaded(model_config, load_params(
      path, state_lib.abstract_sharded_params(model_config, mesh, rules)))


def _stored_config(path: str) -> ml_collections.ConfigDict:
  """The config.json a training workdir was trained with."""
  with errors.reading("--checkpoint", path, "has an unreadable config.json"):
    with open(os.path.join(path, "config.json")) as f:
      values = json.load(f)
    if not isinstance(values, dict):
      raise ValueError("config.json is not a JSON object")
  return ml_collections.ConfigDict(values)


@contextlib.contextmanager
def _blamed_on_workdir_config(path: str):
  """A bad value in the workdir's own config.json names --checkpoint (the --config
  field of the same name may be fine: it is not what is read here)."""
  try:
    yield
  except (errors.UserError, ValueError, TypeError, KeyError) as e:
    detail = errors.one_line(e)[:400]
    raise MissingInputError("--checkpoint", path, "holds a config.json (the config its run "
                            f"was trained with) that is not valid: {detail}") from e


def _stored_lora(stored, extra: dict) -> LoraConfig | None:
  """The LoRA section a workdir's run trained with: `rl.lora` for an RL run's
  checkpoints (extra has "rl_step"), else `sft.lora`; None when off."""
  section = (stored.get("rl") or {}) if "rl_step" in extra else (stored.get("sft") or {})
  lora = from_section(LoraConfig, section.get("lora"), "lora")
  return lora if lora.enabled else None


def _abstract_train_state(stored, model_config, mesh, rules, lora=None):
  """The restore target of a workdir's steps: the TrainState its trainer saved, with
  the critic and its optimizer state when its RL algorithm has one (PPO), and with
  `lora` the adapters, their optimizer state and the frozen base."""
  opt = from_section(OptimizerConfig, stored.get("optimizer"), "optimizer")
  optimizer = make_optimizer(opt)
  abstract = state_lib.abstract_state(model_config, optimizer, mesh, rules, lora)
  rl = rl_config.load(stored.get("rl"))
  if not rl.uses_critic:
    return abstract
  critic_optimizer = critic_lib.make_critic_optimizer(opt, rl.algo.critic_learning_rate)
  shardings = critic_lib.with_critic_shardings(
      state_lib.state_shardings(model_config, optimizer, mesh, rules, lora), rl.algo.critic,
      model_config, critic_optimizer, mesh, rules)
  return critic_lib.with_abstract_critic(abstract, shardings, rl.algo.critic, model_config,
                                         critic_optimizer)


def _newest_readable_step(path: str, abstract):
  """(state, extra, step, skipped) of the newest step of the workdir that restores.

  Read only: a corrupt step is logged and skipped, never moved aside (as the
  trainers' own fallback does), so evaluating a run cannot change it.
  """
  with CheckpointManager(os.path.join(path, "checkpoints")) as manager:
    steps = manager.all_steps()
    if not steps:
      raise MissingInputError("--checkpoint", path, "the training workdir has no checkpoint yet")
    skipped = []
    for step in reversed(steps):
      try:
        state, extra = manager.restore(abstract, step, fallback=False)
      except CorruptCheckpointError as e:
        error = f"{e.reason}: {innermost_error(e)}"
        logging.warning("not evaluating checkpoint step %d of %s: %s", step, path, error)
        skipped.append({"step": step, "reason": e.reason, "error": error})
        continue
      return state, extra, step, tuple(skipped)
  raise MissingInputError("--checkpoint", path, f"none of its checkpoint steps {steps} can be "
                          f"read (step {steps[-1]}: {skipped[0]['error']})")


def _training_workdir(path, config, tokenizer, mesh, rules) -> Loaded:
  stored = _stored_config(path)
  with _blamed_on_workdir_config(path):
    model_config = model_config_from(stored, tokenizer)
  with CheckpointManager(os.path.join(path, "checkpoints")) as manager:
    newest_extra = manager.read_extra() or {}
  with _blamed_on_workdir_config(path):
    lora = _stored_lora(stored, newest_extra)
    abstract = _abstract_train_state(stored, model_config, mesh, rules, lora)
  # before the restore: another tokenizer's size would fail it as a shape mismatch
  tokenizer_fingerprint.check(newest_extra.get("tokenizer"), tokenizer, "--checkpoint", path,
                              config.tokenizer.path)
  state, extra, step, skipped = _newest_readable_step(path, abstract)
  tokenizer_fingerprint.check(extra.get("tokenizer"), tokenizer, "--checkpoint", path,
                              config.tokenizer.path)
  newer = f" (newer steps {[s['step'] for s in skipped]} cannot be read)" if skipped else ""
  logging.info("evaluating checkpoint step %d of %s%s", step, path, newer)
  return Loaded(model_config, state_lib.model_params(state, lora), step, skipped)


def _pretrained(path, config, tokenizer, mesh, rules) -> Loaded:
  return Loaded(*pretrained.load(path, mesh=mesh, rules=rules))


def checkpoint_kind(path: str) -> str:
  """"export", "workdir", "pretrained"; MissingInputError naming --checkpoint otherwise."""
  if os.path.isfile(os.path.join(path, "model_config.json")):
    return "export"
  if os.path.isdir(os.path.join(path, "checkpoints")) and os.path.isfile(
      os.path.join(path, "config.json")):
    return "workdir"
  if (path.endswith(".gguf") and os.path.isfile(path)) or os.path.isfile(
      os.path.join(path, "config.json")):
    return "pretrained"
  raise MissingInputError("--checkpoint", path,
                          "is not an export/ folder (model_config.json), a training workdir "
                          "(config.json + checkpoints/), a HF folder (config.json) or a .gguf file")


_LOADERS = {"export": _exported, "workdir": _training_workdir, "pretrained": _pretrained}


def load_checkpoint(path: str, config, tokenizer, mesh, rules) -> Loaded:
  """The model of any checkpoint kind, its params placed on `mesh`.

  Raises:
    MissingInputError: naming --checkpoint, for a path that holds no
      checkpoint or one whose files cannot be read (truncated, garbled).
    ConfigError: naming tokenizer.path, for a tokenizer bigger than the model.
  """
  with errors.reading("--checkpoint", path):
    loaded = _LOADERS[checkpoint_kind(path)](path, config, tokenizer, mesh, rules)
  if loaded.model_config.vocab_size < tokenizer.vocab_size:
    raise ConfigError("tokenizer.path", config.tokenizer.path,
                      f"has {tokenizer.vocab_size} tokens but the checkpoint's model only "
                      f"{loaded.model_config.vocab_size}")
  return loaded


def heldout_tasks(config: ml_collections.ConfigDict):
  task_config = from_section(TaskConfig, config.get("tasks"), "tasks")
  tasks = eval_sets.make_mixture(task_config, int(config.seed)).heldout  # unbuilt: a user error
  if not tasks:
    raise ConfigError("tasks.heldout_size", config.tasks.get("heldout_size"),
                      "must be > 0 to evaluate")
  return tasks


def _generate_and_score(model_config, params, tokenizer, tasks, sampling, settings, rng, shard,
                        num_samples, reward_pool) -> dict:
  """The one call into rl_post.eval.completion (generation + verification in the pool)."""
  return completion.evaluate(model_config, params, tokenizer, tasks, sampling=sampling,
                             max_prompt_len=settings.max_prompt_len,
                             batch_size=settings.batch_size, rng=rng, shard=shard,
                             num_samples=num_samples, reward_pool=reward_pool)


def load_for_eval(config: ml_collections.ConfigDict, checkpoint: str, tokenizer=None):
  """(tokenizer with the config's prompt settings, mesh, rules, Loaded checkpoint).

  tokenizer: use this one instead of loading `tokenizer.path` (an episodes
  run's call-vocabulary tokenizer).

  Raises MissingInputError naming --checkpoint or tokenizer.path when absent.
  """
  if not os.path.exists(checkpoint):
    raise MissingInputError("--checkpoint", checkpoint, "does not exist")
  if tokenizer is None:
    if not os.path.exists(config.tokenizer.path):
      raise MissingInputError("tokenizer.path", config.tokenizer.path, "does not exist")
    with errors.reading("tokenizer.path", config.tokenizer.path):
      tokenizer = load_tokenizer(config.tokenizer.path)
  batching.configure_prompts(tokenizer, config.tokenizer)
  mesh = mesh_lib.make_mesh(dict(config.mesh))
  rules = tuple(tuple(r) for r in config.get("sharding_rules", sharding.DEFAULT_RULES))
  return tokenizer, mesh, rules, load_checkpoint(checkpoint, config, tokenizer, mesh, rules)


def reward_config(config: ml_collections.ConfigDict) -> RewardConfig:
  """The `rewards` section: verifier workers and time limits, as in training."""
  return from_section(RewardConfig, config.get("rewards"), "rewards")


def evaluate_checkpoint(config: ml_collections.ConfigDict, checkpoint: str,
                        settings: EvalSettings) -> dict:
  """Greedy and sampled evaluation of `checkpoint` on the held-out tasks.

  Verifiers run in a `RewardPool` (config.rewards: worker processes, time
  limit), as in training; their errors are counted under "verifier_errors".

  Returns:
    The eval.json content: the checkpoint, its training step (`checkpoint_step`,
    None unless a training workdir) and the newer steps skipped as unreadable
    (`skipped_steps`), settings, per-group summaries (`summarize`),
    verifier error counts and per-problem arrays (domain, difficulty,
    greedy_correct, sampled_num_correct).
  """
  tokenizer, mesh, rules, loaded = load_for_eval(config, checkpoint)
  model_config, params = loaded.model_config, loaded.params
  tasks = heldout_tasks(config)
  shard = functools.partial(sharding.shard_batch, mesh=mesh, rules=rules)
  domain_options = config.tasks.get("domain_options")
  if hasattr(domain_options, "to_dict"):
    domain_options = domain_options.to_dict()
  rng = jax.random.fold_in(jax.random.key(int(config.seed)), EVAL_STREAM)
  with RewardPool(reward_config(config), domain_options) as pool:
    run = functools.partial(_generate_and_score, model_config, params, tokenizer, tasks,
                            settings=settings, shard=shard, reward_pool=pool)
    greedy = run(SamplingConfig(settings.max_new_tokens, greedy=True), rng=rng, num_samples=1)
    sampled = run(SamplingConfig(settings.max_new_tokens, settings.temperature),
                  rng=jax.random.fold_in(rng, 1), num_samples=settings.num_samples)
  return {
      "checkpoint": os.path.abspath(checkpoint),
      "checkpoint_step": loaded.step,
      "skipped_steps": list(loaded.skipped_steps),
      "settings": dataclasses.asdict(settings),
      "groups": summarize(greedy, sampled, settings.ks),
      "verifier_errors": {"greedy": dict(greedy.get("errors", {})),
                          "sampled": dict(sampled.get("errors", {}))},
      "per_problem": {
          "domain": list(greedy["domain"]),
          "difficulty": np.asarray(greedy["difficulty"]).tolist(),
          "greedy_correct": np.asarray(greedy["correct"]).tolist(),
          "greedy_strict_correct": np.asarray(greedy["strict_correct"]).tolist(),
          "sampled_num_correct": np.asarray(sampled["num_correct"]).tolist(),
      },
  }


def _group_summary(greedy: dict, sampled: dict, sel_N: np.ndarray, ks) -> dict:
  n_problems = int(sel_N.sum())
  greedy_N = np.asarray(greedy["correct"])[sel_N]
  low, high = stats.wilson_interval(int(greedy_N.sum()), n_problems)
  num_correct_N = np.asarray(sampled["num_correct"])[sel_N]
  n = int(sampled["num_samples"])
  return {
      "n": n_problems,
      "greedy": {"completion_rate": float(greedy_N.mean()), "ci_low": low, "ci_high": high,
                 "strict_completion_rate": _strict_rate(greedy, "strict_correct", sel_N),
                 "mean_response_len": float(np.mean(greedy["response_len"][sel_N])),
                 "mean_reward": float(np.mean(np.asarray(greedy["reward"])[sel_N])),
                 "reward_components": {name: float(np.mean(np.asarray(values)[sel_N]))
                                       for name, values in greedy["components"].items()}},
      "sampled": {
          "num_samples": n,
          "completion_rate": float(num_correct_N.sum() / (n * n_problems)),
          "strict_completion_rate": _strict_rate(sampled, "num_strict_correct", sel_N) / n,
          "pass_at_k": {str(k): float(np.mean(stats.pass_at_k(n, num_correct_N, k)))
                        for k in ks},
          "mean_response_len": float(np.mean(sampled["response_len"][sel_N])),
      },
  }


def _strict_rate(result: dict, key: str, sel_N: np.ndarray) -> float:
  """Mean of result[key] over the selected problems (format-strict completion)."""
  return float(np.mean(np.asarray(result[key])[sel_N]))


def summarize(greedy: dict, sampled: dict, ks) -> dict:
  """Per-group summaries: "all", "domain=<d>", "difficulty=<l>" and "<d>/difficulty=<l>".

  Args:
    greedy, sampled: results of `rl_post.eval.completion.evaluate` on the same
      tasks (greedy with one sample, sampled with n >= max(ks)).
    ks: the k of each pass@k.

  Returns:
    {group: {"n", "greedy": {completion_rate, ci_low, ci_high, strict_completion_rate,
                             mean_response_len, mean_reward, reward_components {name: mean}},
             "sampled": {num_samples, completion_rate, strict_completion_rate,
                         pass_at_k {k: value}, mean_response_len}}}
    Completion rates are answer-only; the strict ones also need the domain's
    strict answer format. The sampled completion rate is the mean over all n
    samples (= pass@1).
  """
  domain_N = np.asarray(greedy["domain"])
  level_N = np.asarray(greedy["difficulty"])
  if list(domain_N) != list(sampled["domain"]) or not np.array_equal(level_N,
                                                                      sampled["difficulty"]):
    raise ValueError("greedy and sampled results must cover the same tasks in the same order")
  groups = {"all": np.ones(domain_N.shape, bool)}
  for domain in sorted(set(domain_N.tolist())):
    groups[f"domain={domain}"] = domain_N == domain
  for level in sorted(set(level_N.tolist())):
    groups[f"difficulty={level}"] = level_N == level
  for domain in sorted(set(domain_N.tolist())):
    for level in sorted(set(level_N[domain_N == domain].tolist())):
      groups[f"{domain}/difficulty={level}"] = (domain_N == domain) & (level_N == level)
  return {name: _group_summary(greedy, sampled, sel_N, ks) for name, sel_N in groups.items()}


def write_outputs(workdir: str, result: dict) -> dict[str, str]:
  """Writes eval.json and eval.md into `workdir`; returns their paths."""
  os.makedirs(workdir, exist_ok=True)
  paths = {"json": os.path.join(workdir, JSON_NAME),
           "markdown": os.path.join(workdir, MARKDOWN_NAME)}
  with open(paths["json"], "w", encoding="utf-8") as f:
    json.dump(result, f, indent=2)
  with open(paths["markdown"], "w", encoding="utf-8") as f:
    f.write(_with_step_note(report.render_checkpoint_eval(result), result))
  return paths


def _with_step_note(markdown: str, result: dict) -> str:
  """eval.md with the evaluated training step (and the skipped newer ones) under its title."""
  step = result.get("checkpoint_step")
  if step is None:
    return markdown
  note = f"Training checkpoint step {step}."
  skipped = result.get("skipped_steps") or []
  if skipped:
    note += " Newer steps skipped, they cannot be read: " + ", ".join(
        f"{s['step']} ({s['reason']})" for s in skipped) + "."
  title, _, rest = markdown.partition("\n")
  return f"{title}\n\n{note}\n{rest}"
