"""Learnability scan: where does a checkpoint sometimes succeed?

GRPO can only reinforce successes the policy already samples, so a recipe's
mixture should hold the domains and levels where pass@k is well above
pass@1: the model knows the answer and samples it rarely. For every
(domain, level) asked for, the scan draws `problems` tasks, decodes each
greedily once and `samples` times at `temperature`, and reports greedy and
sampled completion (answer-only and format-strict apart), pass@k with the
unbiased estimator, Wilson intervals, and whether the level is "in reach".

    rows = scan(config, checkpoint, ["arithmetic", "rg/chain_sum"], ScanSettings())

Answer formats: "config" keeps each domain's configured one; a format name
applies it to every domain that offers it; "auto" picks per domain the
format a chat model answers in most naturally for that domain's answers
(`auto_format`). Prompts longer than `max_prompt_len` tokens are counted as
skipped, not truncated. Verification runs in a RewardPool, as in training.
"""

import dataclasses
import functools

import jax
import numpy as np

from rl_post.data import batching
from rl_post.errors import ConfigError
from rl_post.eval import completion, stats
from rl_post.parallel import sharding
from rl_post.rewards.pool import RewardPool
from rl_post.sampling.sampler import SamplingConfig
from rl_post.tasks import answers, registry
from rl_post.tasks.base import Domain, Task

SCAN_STREAM = 0x5CA7  # the scan's task draws are their own rng stream
_PROMPT_BUCKETS = (64, 128, 192, 256, 384, 512, 768, 1024)  # few shapes, few compiles


@dataclasses.dataclass(frozen=True)
class ScanSettings:
  """Attributes:
    problems: tasks drawn per (domain, level).
    samples: sampled responses per task (n of pass@k).
    ks: the k of each pass@k, each <= samples.
    temperature: sampling temperature.
    max_new_tokens: response length cap.
    max_prompt_len: longer prompts are skipped (counted per row).
    batch_size: prompts per generate call.
    levels: "all" levels of each domain, or only its "easiest".
    answer_format: "config", "auto" or one of rl_post.tasks.answers.FORMATS.
    in_reach_gap: a level is in reach when pass@max(ks) - pass@1 >= this.
    seed: the draws' seed.
  """
  problems: int = 8
  samples: int = 16
  ks: tuple[int, ...] = (1, 4, 16)
  temperature: float = 1.0
  max_new_tokens: int = 96
  max_prompt_len: int = 256
  batch_size: int = 32
  levels: str = "all"
  answer_format: str = "auto"
  in_reach_gap: float = 0.2
  seed: int = 0

  def __post_init__(self):
    for name in ("problems", "samples", "max_new_tokens", "max_prompt_len", "batch_size"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"--{name}", value, "must be an integer >= 1")
    ks = tuple(sorted(set(self.ks)))
    if not ks or ks[0] < 1 or ks[-1] > self.samples:
      raise ConfigError("--ks", self.ks, f"must be integers in [1, --samples={self.samples}]")
    object.__setattr__(self, "ks", ks)
    if not self.temperature > 0:
      raise ConfigError("--temperature", self.temperature, "must be > 0")
    if self.levels not in ("all", "easiest"):
      raise ConfigError("--levels", self.levels, "must be 'all' or 'easiest'")
    if self.answer_format not in ("config", "auto") + answers.FORMATS:
      raise ConfigError("--answer_format", self.answer_format,
                        f"must be 'config', 'auto' or one of {list(answers.FORMATS)}")


def auto_format(domain: Domain, tasks: list[Task]) -> str:
  """The format a chat model most naturally answers `tasks` in, among the domain's.

  final_number where every reference answer is a plain number, code_block
  for programs, else last_line (else the domain's first format).
  """
  offered = domain.answer_formats
  references = [answers.tag_content(domain.demonstration(t)) or "" for t in tasks]
  if "final_number" in offered and all(
      answers.read(r, "final_number").answer == r for r in references):
    return "final_number"
  for fmt in ("code_block", "last_line"):
    if fmt in offered:
      return fmt
  return offered[0]


def _domain_tasks(name: str, options: dict, settings: ScanSettings):
  """(answer format, {level: tasks}) of one domain, drawn deterministically."""
  options = dict(options)
  fmt = options.get("answer_format", "tags")
  if settings.answer_format not in ("config", "auto"):
    fmt = settings.answer_format
  domain = registry.make_domain(name, options)
  levels = domain.difficulty_levels
  levels = levels[:1] if settings.levels == "easiest" else levels

  def draw(domain):
    out = {}
    for level in levels:
      rng = np.random.default_rng([settings.seed, SCAN_STREAM, level])
      out[level] = [domain.generate(rng, level) for _ in range(settings.problems)]
    return out

  if settings.answer_format == "auto":
    fmt = auto_format(domain, draw(domain)[levels[0]])
  if fmt not in domain.answer_formats:
    fmt = options.get("answer_format", "tags")  # this domain cannot answer in that format
  domain.set_answer_format(fmt)
  return fmt, draw(domain)


def _bucket(length: int, max_prompt_len: int) -> int:
  return min(next((b for b in _PROMPT_BUCKETS if b >= length), max_prompt_len), max_prompt_len)


def _batch(num_tasks: int, batch_size: int) -> int:
  """A power of two >= num_tasks, at most batch_size: few shapes, little padding."""
  return min(batch_size, 1 << max(0, num_tasks - 1).bit_length())


def _row(name, fmt, level, outcomes, skipped, settings) -> dict:
  """One table row from the outcome arrays of one (domain, level)'s scanned tasks."""
  n = len(outcomes["correct"])
  row = {"domain": name, "answer_format": fmt, "level": int(level), "problems": n,
         "skipped": skipped}
  if not n:
    return row | {"in_reach": False}
  correct = int(outcomes["correct"].sum())
  low, high = stats.wilson_interval(correct, n)
  num_correct = outcomes["num_correct"]
  k_max = settings.samples
  pass_at = {str(k): float(np.mean(stats.pass_at_k(k_max, num_correct, k))) for k in settings.ks}
  row.update(
      greedy=correct / n, greedy_ci=[low, high], greedy_strict=float(outcomes["strict"].mean()),
      pass_at_k=pass_at, pass1_strict=float(outcomes["num_strict"].sum() / (n * k_max)),
      mean_response_len=float(outcomes["response_len"].mean()))
  row["in_reach"] = pass_at[str(settings.ks[-1])] - pass_at["1"] >= settings.in_reach_gap
  return row


def scan(config, checkpoint: str, domain_names, settings: ScanSettings,
         on_rows=None) -> dict:
  """Scans `checkpoint` (anything `rl_post.evaluate.checkpoint_eval` loads) over domains.

  Uses `config` for the tokenizer (and its system prompt), the mesh, the
  reward pool and each domain's options (`tasks.domain_options`).
  `on_rows(result)`, if given, gets the rows finished so far after each
  prompt-length bucket (a long scan's partial table).

  Returns:
    {"settings", "rows": [{domain, answer_format, level, problems, skipped,
    greedy, greedy_ci, greedy_strict, pass_at_k {k}, pass1_strict,
    mean_response_len, in_reach}]}
  """
  from rl_post.evaluate import checkpoint_eval  # the loaders; heavy imports stay lazy
  if not domain_names:
    raise ConfigError("--domains", "", "names no domain")
  unknown = [d for d in domain_names if not registry.is_known(d)]
  if unknown:
    raise ConfigError("--domains", ",".join(unknown), "names unknown domains")
  tokenizer, mesh, rules, loaded = checkpoint_eval.load_for_eval(config, checkpoint)
  base_options = config.tasks.get("domain_options")
  base_options = base_options.to_dict() if hasattr(base_options, "to_dict") else dict(
      base_options or {})
  plan, options = [], {}
  for name in domain_names:
    fmt, by_level = _domain_tasks(name, base_options.get(name, {}), settings)
    options[name] = {**base_options.get(name, {}), "answer_format": fmt}
    plan += [(name, fmt, level, tasks) for level, tasks in by_level.items()]
  all_tasks = [t for *_, tasks in plan for t in tasks]
  lengths = [len(batching.prompt_ids(tokenizer, t.prompt)) for t in all_tasks]
  buckets = {}
  for i, length in enumerate(lengths):
    if length <= settings.max_prompt_len:
      buckets.setdefault(_bucket(length, settings.max_prompt_len), []).append(i)
  n = len(all_tasks)
  out = {"correct": np.zeros(n, bool), "strict": np.zeros(n, bool),
         "response_len": np.zeros(n), "num_correct": np.zeros(n, np.int64),
         "num_strict": np.zeros(n, np.int64),
         "scanned": np.array([length <= settings.max_prompt_len for length in lengths])}
  done = ~out["scanned"]  # a skipped task needs no generation
  rng = jax.random.fold_in(jax.random.key(settings.seed), SCAN_STREAM)
  shard = functools.partial(sharding.shard_batch, mesh=mesh, rules=rules)
  rewards = checkpoint_eval.reward_config(config)
  with RewardPool(rewards, options) as pool:
    for width, index in sorted(buckets.items()):
      run = functools.partial(completion.evaluate, loaded.model_config, loaded.params, tokenizer,
                              [all_tasks[i] for i in index], max_prompt_len=width,
                              batch_size=_batch(len(index), settings.batch_size), shard=shard,
                              reward_pool=pool)
      greedy = run(sampling=SamplingConfig(settings.max_new_tokens, greedy=True),
                   rng=jax.random.fold_in(rng, width))
      sampled = run(sampling=SamplingConfig(settings.max_new_tokens, settings.temperature),
                    rng=jax.random.fold_in(rng, width + 1), num_samples=settings.samples)
      out["correct"][index] = greedy["correct"]
      out["strict"][index] = greedy["strict_correct"]
      out["response_len"][index] = greedy["response_len"]
      out["num_correct"][index] = sampled["num_correct"]
      out["num_strict"][index] = sampled["num_strict_correct"]
      done[index] = True
      if on_rows is not None:
        on_rows(_result(plan, out, done, settings))
  return _result(plan, out, done, settings)


def _result(plan, out: dict, done_N: np.ndarray, settings: ScanSettings) -> dict:
  """The rows of the (domain, level)s whose scanned tasks are all done; skipped tasks
  (prompts too long) count as done."""
  rows, start = [], 0
  for name, fmt, level, tasks in plan:
    sel = np.arange(start, start + len(tasks))
    start += len(tasks)
    if not done_N[sel].all():
      continue
    kept = sel[out["scanned"][sel]]
    outcomes = {k: v[kept] for k, v in out.items() if k != "scanned"}
    rows.append(_row(name, fmt, level, outcomes, len(sel) - len(kept), settings))
  return {"settings": dataclasses.asdict(settings), "rows": rows}


def render_markdown(result: dict) -> str:
  """The scan's table: one line per (domain, level), the in-reach ones marked."""
  s = result["settings"]
  ks = [str(k) for k in s["ks"]]
  lines = [f"Greedy and T={s['temperature']} sampling (n={s['samples']}) on {s['problems']} "
           f"problems per level, {s['max_new_tokens']} new tokens. Completion is answer-only; "
           "'strict' also needs the answer format. In reach: "
           f"pass@{ks[-1]} - pass@1 >= {s['in_reach_gap']}.", "",
           "| domain | format | level | n | greedy [95% CI] | greedy strict | "
           + " | ".join(f"pass@{k}" for k in ks) + " | pass@1 strict | len | in reach |",
           "|---|---|---|---|---|---|" + "---|" * len(ks) + "---|---|---|"]
  pct = lambda x: f"{100 * x:.0f}%"
  for r in result["rows"]:
    if "greedy" not in r:
      lines.append(f"| {r['domain']} | {r['answer_format']} | {r['level']} | 0 | skipped "
                   f"({r['skipped']} prompts too long) |" + " |" * (len(ks) + 4))
      continue
    lo, hi = r["greedy_ci"]
    lines.append(
        f"| {r['domain']} | {r['answer_format']} | {r['level']} | {r['problems']} | "
        f"{pct(r['greedy'])} [{pct(lo)}, {pct(hi)}] | {pct(r['greedy_strict'])} | "
        + " | ".join(pct(r["pass_at_k"][k]) for k in ks)
        + f" | {pct(r['pass1_strict'])} | {r['mean_response_len']:.0f} | "
        f"{'yes' if r['in_reach'] else ''} |")
  return "\n".join(lines) + "\n"
