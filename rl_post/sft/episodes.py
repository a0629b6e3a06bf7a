"""A cold start for RL on episodes: the oracles' solved episodes as multi-turn SFT examples.

  python experiments/build_episode_sft.py --config=configs/grpo_episodes_sft.py:tiny \
      --out=/tmp/cold/episodes.jsonl
  python experiments/train_sft.py --config=configs/grpo_episodes_sft.py:tiny \
      --config.sft.dataset=/tmp/cold/episodes.jsonl --workdir=/tmp/cold/sft

Data flow:

  cold_start section     -> draw_tasks: tasks_per_level tasks of each (domain, level), a
                            function of (seed, domain, level); none shares its content
                            (`task_key`) with another or with the RL run's held-out set
                            (`rl_post.envs.heldout`, `episodes.heldout_size`)
  oracle episodes        -> driver.run_text_episodes in the sandbox, the envs built as the
                            RL run builds them (the `episodes` section's tools, limits and
                            max_turns)
  keep                   -> the verifier alone scores 1 (no shaping), no verification
                            error, each turn decodes back to itself and every piece fits
                            the RL run's budgets (prompt, turn, episode); each drop counted
  write                  -> JSONL of {"messages": [user, assistant, tool, ..., assistant]}
                            that `sft.dataset` reads (`rl_post.sft.dataset`), + stats

At SFT time `renderer(section, tokenizer)` turns an episode into tokens and
a loss mask with the encoders the RL episodes use (`trainer_rounds.encoders`):
the user message is the prompt (`encode_prompt`: the chat template's user
turn with the generation prompt, or the plain text), each assistant turn is
`tokenizer.encode(turn)` (loss mask 1), each tool message is the response as
the episode appends it (`encode_observation`: the template's framing, which
closes the assistant turn and opens the next, around the response encoded
as text), loss mask 0. No EOS follows the last turn: in RL a turn ends at
its `</tool_call>` (a stop string), so the model sees exactly the sequence
an RL episode of the same calls would hold.
"""

import collections
import dataclasses
import json
import os
import zlib
from typing import Optional

import numpy as np

from rl_post.config_sections import check, from_section
from rl_post.envs import driver, heldout, trainer_rounds
from rl_post.envs.domains.base import draw_distinct, task_key
from rl_post.envs.metrics import EpisodeMetrics
from rl_post.errors import ConfigError
from rl_post.sandbox import Sandbox, SandboxConfig
from rl_post.sft.dataset import Episode
from rl_post.training.run import run_tokenizer

COLD_START_STREAM = 0xC01D  # the cold start's own task stream
MAX_REDRAWS = 1000
DROP_REASONS = ("unsolved", "verify_error", "untokenizable", "prompt_too_long",
                "turn_too_long", "episode_too_long")


@dataclasses.dataclass(frozen=True)
class ColdStartConfig:
  """The `cold_start` section: which oracle episodes become SFT examples.

  Attributes:
    domains: env domains to draw from, each one of `episodes.domains`
      (() = all of them).
    difficulties: levels drawn for each domain; RL measured on other levels
      (held-out) then sees levels the cold start never saw.
    tasks_per_level: oracle episodes run per (domain, level).
    max_prompt_len: the RL run's `rl.max_prompt_len` (0: no limit): a longer
      prompt is dropped.
    max_new_tokens: the RL run's `rl.max_new_tokens`, an episode's budget of
      model turns plus tool responses (0: no limit): a longer episode is
      dropped. A turn longer than `episodes.turn_tokens` is dropped too.
    batch_size: episodes run together (one `run_many` per turn).
  """
  domains: tuple = ()
  difficulties: tuple = (1,)
  tasks_per_level: int = 16
  max_prompt_len: int = 0
  max_new_tokens: int = 0
  batch_size: int = 32

  def __post_init__(self):
    check(all(isinstance(d, str) and d for d in self.domains), "domains",
          "must be names from episodes.domains", self.domains)
    check(bool(self.difficulties) and all(isinstance(k, int) and not isinstance(k, bool)
                                          and k >= 1 for k in self.difficulties),
          "difficulties", "must be non-empty ints >= 1", self.difficulties)
    for name in ("tasks_per_level", "batch_size"):
      value = getattr(self, name)
      check(isinstance(value, int) and value >= 1, name, "must be an int >= 1", value)
    for name in ("max_prompt_len", "max_new_tokens"):
      value = getattr(self, name)
      check(isinstance(value, int) and value >= 0, name, "must be an int >= 0 (0: no limit)",
            value)
    object.__setattr__(self, "domains", tuple(self.domains))
    object.__setattr__(self, "difficulties", tuple(self.difficulties))


def episodes_section(section, dataset: str = ""):
  """`section`, the run's parsed `episodes` section (`trainer_rounds.load`), checked to
  be there (an enabled `EpisodesConfig`).

  Raises:
    ConfigError: there is none; the episodes to build or to train on are the
      RL run's, rendered with its tokenizer and chat template. Named on
      `sft.dataset` when `dataset` (a file of episodes to train on) is given.
  """
  if section is None and dataset:
    raise ConfigError("sft.dataset", dataset, "holds multi-turn episodes: the config needs "
                      "the enabled episodes section of the RL run they are for (its tokenizer "
                      "and chat template render them)")
  if section is None:
    raise ConfigError("episodes.enabled", False, "the cold start imitates the RL run's "
                      "episodes: the config needs its enabled episodes section")
  return section


def sections(config) -> tuple:
  """(EpisodesConfig, ColdStartConfig) of `config`, checked against each other.

  Raises:
    ConfigError: no enabled `episodes` section (`episodes_section`), or a
      cold-start domain that is not one of its domains.
  """
  section = episodes_section(trainer_rounds.load(config.get("episodes")))
  cold = from_section(ColdStartConfig, config.get("cold_start"), "cold_start")
  unknown = [d for d in cold.domains if d not in section.domains]
  if unknown:
    raise ConfigError("cold_start.domains", cold.domains, f"has {unknown}, which are not "
                      f"among episodes.domains {section.domains}")
  return section, cold


def draw_tasks(section, cold: ColdStartConfig, seed: int,
               exclude: frozenset = frozenset()) -> list:
  """`tasks_per_level` tasks of each (domain, level) of the cold start, distinct in content
  and none in `exclude` (task keys, e.g. the held-out set's); a function of (seed, domain,
  level) alone.

  Raises:
    ConfigError: a level the domain does not have, or one with too few distinct tasks.
  """
  domains = section.env_domains()
  tasks, seen = [], set(exclude)
  for spec in cold.domains or section.domains:
    for level in cold.difficulties:
      rng = np.random.default_rng([seed, COLD_START_STREAM, zlib.crc32(spec.encode()), level])
      for _ in range(cold.tasks_per_level):
        try:
          task = draw_distinct(domains[spec], rng, level, seen, MAX_REDRAWS)
        except ValueError as e:
          raise ConfigError("cold_start.difficulties", cold.difficulties,
                            f"domain {spec!r}: {e}") from None
        if task is None:
          raise ConfigError("cold_start.tasks_per_level", cold.tasks_per_level,
                            f"domain {spec!r} level {level} has no new task outside the "
                            f"ones drawn and excluded in {MAX_REDRAWS} draws: lower it")
        tasks.append(task)
  return tasks


def run_oracle(section, tasks: list, sandbox, batch_size: int = 32):
  """The oracle's episodes of `tasks` in envs built as the RL run builds them.

  Returns:
    [(messages, reward, verify_error)] per task: messages are (role, text)
    pairs, user then assistant and tool alternating, ending with the last
    turn (a finished episode's last response is never shown).
  """
  by_name = {d.name: d for d in section.env_domains().values()}
  extra = section.extra_tools()
  out = []
  for start in range(0, len(tasks), batch_size):
    chunk = tasks[start:start + batch_size]
    envs = [by_name[t.domain].make_env(limits=section.tool_limits, max_turns=section.max_turns,
                                       extra_tools=extra) for t in chunk]
    seen = {}  # id(task) -> (observations list, turns), filled as the driver calls the policy

    def policy(task, observations):
      turn = by_name[task.domain].oracle_turn(task, observations)
      seen.setdefault(id(task), (observations, []))[1].append(turn)
      return turn

    rewards = driver.run_text_episodes(envs, chunk, policy, sandbox, EpisodeMetrics())
    for task, env, reward in zip(chunk, envs, rewards):
      observations, turns = seen[id(task)]
      messages = [("user", observations[0])]
      for k, turn in enumerate(turns):
        if k:
          messages.append(("tool", observations[k]))
        messages.append(("assistant", turn))
      out.append((tuple(messages), float(reward), env.verify_error))
  return out


def renderer(section, tokenizer):
  """episode -> (ids, loss mask) with the RL episodes' encoders (module docstring)."""
  encode_prompt, encode_observation = trainer_rounds.encoders(section, tokenizer)
  encode = {"user": encode_prompt, "assistant": tokenizer.encode, "tool": encode_observation}

  def render(episode: Episode) -> tuple[list[int], list[int]]:
    ids, mask = [], []
    for role, text in episode.messages:
      piece = encode[role](text)
      ids += piece
      mask += [int(role == "assistant")] * len(piece)
    return ids, mask

  return render


def drop_reason(messages, section, cold: ColdStartConfig, tokenizer, encoders) -> Optional[str]:
  """Why a solved episode cannot be a faithful example (None: keep it)."""
  encode_prompt, encode_observation = encoders
  prompt = len(encode_prompt(messages[0][1]))
  if cold.max_prompt_len and prompt > cold.max_prompt_len:
    return "prompt_too_long"
  response = 0
  for role, text in messages[1:]:
    if role == "tool":
      response += len(encode_observation(text))
      continue
    ids = tokenizer.encode(text)
    if tokenizer.decode(ids) != text:  # the env would not read back this turn
      return "untokenizable"
    if len(ids) > section.turn_tokens:
      return "turn_too_long"
    response += len(ids)
  if cold.max_new_tokens and response > cold.max_new_tokens:
    return "episode_too_long"
  return None


def collect(config, out_path: str, *, exclude: frozenset = frozenset(), sandbox=None) -> dict:
  """Runs the cold start's oracle episodes, writes the kept ones to `out_path` (JSONL).

  Args:
    config: a config with an enabled `episodes` section, a `cold_start`
      section, `seed` and `tokenizer` (the run's tokenizer measures budgets).
    out_path: the JSONL written: {"messages", "task_id", "domain",
      "difficulty", "turns"} per line.
    exclude: task keys no drawn task may have, besides those of the RL run's
      held-out set (`episodes.heldout_size`, drawn with `seed`), always excluded.
    sandbox: a Sandbox to run in (default: one from `episodes.sandbox`).

  Returns:
    {"drawn", "kept", "dropped": {reason: n}, "heldout_excluded" (held-out
     tasks kept out), "per_level": {"domain/level": {"drawn", "kept", reason:
     n}}, "domains", "difficulties", "path"}.
  """
  section, cold = sections(config)  # parsed once, here
  tokenizer = run_tokenizer(config, trainer_rounds.tokenizer_for(section))
  encoders = trainer_rounds.encoders(section, tokenizer)
  held_out = heldout.heldout_tasks(section, int(config.seed))  # the RL run's, same seed
  tasks = draw_tasks(section, cold, int(config.seed),
                     frozenset(exclude) | {task_key(t) for t in held_out})
  if sandbox is None:
    with Sandbox(from_section(SandboxConfig, section.sandbox, "episodes.sandbox")) as sb:
      episodes = run_oracle(section, tasks, sb, cold.batch_size)
  else:
    episodes = run_oracle(section, tasks, sandbox, cold.batch_size)
  per_level = collections.defaultdict(collections.Counter)
  kept = []
  for task, (messages, reward, verify_error) in zip(tasks, episodes):
    cell = per_level[f"{task.domain}/{task.difficulty}"]
    cell["drawn"] += 1
    reason = ("verify_error" if verify_error else "unsolved" if reward < 1.0
              else drop_reason(messages, section, cold, tokenizer, encoders))
    if reason:
      cell[reason] += 1
      continue
    cell["kept"] += 1
    kept.append({"messages": [{"role": r, "content": c} for r, c in messages],
                 "task_id": task.task_id, "domain": task.domain,
                 "difficulty": task.difficulty,
                 "turns": sum(role == "assistant" for role, _ in messages)})
  os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
  with open(out_path, "w", encoding="utf-8") as f:
    for record in kept:
      f.write(json.dumps(record) + "\n")
  dropped = {r: sum(c[r] for c in per_level.values()) for r in DROP_REASONS}
  return {"drawn": len(tasks), "kept": len(kept), "dropped": dropped,
          "heldout_excluded": len(held_out),
          "per_level": {k: dict(v) for k, v in sorted(per_level.items())},
          "domains": list(cold.domains or section.domains),
          "difficulties": list(cold.difficulties), "path": os.path.abspath(out_path)}
