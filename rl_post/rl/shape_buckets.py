"""The shapes an RL run's jitted functions can see, and so how many programs it builds.

A jitted function compiles once per new input shape. Between RL steps three
lengths move:
  rollout width   the prompt bucket of the batch's longest prompt
                  (`rl.prompt_buckets`, else the sampler's powers of two) +
                  `rl.max_new_tokens`: generation, the estimator and the
                  reference forward compile once per width;
  update width    where the batch's last row ends, rounded up to a multiple
                  of `rl.width_multiple` (`train_step.used_width`);
  shared prefix   with `rl.shared_prefix`, the leading tokens every group
                  shares, rounded down to a rung of `rl.prefix_buckets`
                  (`train_step.shared_prefix_len`).
Each is rounded to a fixed set, so an update compiles once per reachable
(shared prefix, update width) pair, and the reference forward once per
(shared prefix, rollout width) pair; `ShapePlan` lists them and bounds the
run's update and reference programs, which the trainer logs at start.
Rounding is exact: a shorter shared prefix still runs every token (once per
row instead of once per group) and the positions cut from the width are
padding in every row.
"""

import dataclasses

DEFAULT_PREFIX_START = 8  # rungs below this share too little to pay for a program


def default_prefix_buckets(max_len: int) -> tuple[int, ...]:
  """8, 16, 24, 32, 48, 64, 96, 128, ... up to `max_len`: from 16 on each rung is
  at most 1.5x the one below, so a batch runs at least two thirds of its shared
  prefix once per group, and a run compiles O(log max_len) prefix lengths."""
  rungs, low = [DEFAULT_PREFIX_START], 2 * DEFAULT_PREFIX_START
  while low <= max_len:
    rungs += [low, low * 3 // 2]
    low *= 2
  return tuple(r for r in rungs if r <= max_len)


def prefix_buckets(rl, max_len: int) -> tuple[int, ...]:
  """The shared-prefix lengths the update compiles for, up to `max_len`
  (`rl.prefix_buckets`, or the default ladder)."""
  buckets = rl.prefix_buckets or default_prefix_buckets(max_len)
  return tuple(b for b in buckets if b <= max_len)


def round_prefix(length: int, buckets) -> int:
  """The largest bucket <= `length`; 0 (no sharing) below the smallest."""
  return max((b for b in buckets if b <= length), default=0)


def rollout_widths(rl, length_buckets) -> tuple[int, ...]:
  """Every rollout width: each prompt bucket a prompt of at most
  `rl.max_prompt_len` tokens can land in, plus `rl.max_new_tokens`."""
  prompts = [b for b in length_buckets if b < rl.max_prompt_len]
  prompts.append(next((b for b in length_buckets if b >= rl.max_prompt_len), rl.max_prompt_len))
  return tuple(b + rl.max_new_tokens for b in prompts)


def update_widths(rl, width: int, lowest_end: int = 1) -> tuple[int, ...]:
  """The widths `train_step.used_width` can give for a rollout `width` wide
  whose rows end at `lowest_end` or later."""
  if not rl.width_multiple:
    return (width,)
  m = rl.width_multiple
  return tuple(sorted({min(width, k * m) for k in range(-(-lowest_end // m), -(-width // m) + 1)}))


@dataclasses.dataclass(frozen=True)
class ShapePlan:
  """The shapes a run can reach (see the module docstring)."""
  rollout_widths: tuple[int, ...]
  prefixes: tuple[int, ...]            # 0 (no sharing) first
  update_keys: tuple[tuple[int, int], ...]     # (shared prefix, update width)
  reference_keys: tuple[tuple[int, int], ...]  # (shared prefix, rollout width)

  @property
  def update_programs(self) -> int:
    return len(self.update_keys)

  @property
  def reference_programs(self) -> int:
    return len(self.reference_keys)

  def describe(self) -> str:
    widths = sorted({w for _, w in self.update_keys})
    return (f"at most {self.update_programs} update programs (shared prefixes "
            f"{list(self.prefixes)} x update widths {widths}), {self.reference_programs} "
            f"reference programs, {len(self.rollout_widths)} rollout widths "
            f"{list(self.rollout_widths)}")


def _prefixes_below(width: int, rungs) -> list[int]:
  """Shared lengths a batch `width` wide can get: at least one position per row
  stays its own (`train_step.shared_prefix_len`)."""
  return [0] + [p for p in rungs if p <= width - 1]


def plan(rl, length_buckets, trims_width: bool = True,
         needs_reference: bool | None = None) -> ShapePlan:
  """The run's reachable shapes.

  Args:
    rl: the RLConfig.
    length_buckets: the sampler's prompt buckets (`SamplingConfig.length_buckets`).
    trims_width: whether the update is cut to `train_step.used_width`
      (`RLComponents.trims_width`); else it runs the rollout's width.
    needs_reference: whether reference log-probs are computed (default:
      `rl.needs_reference`).
  """
  widths = rollout_widths(rl, length_buckets)
  rungs = prefix_buckets(rl, max(widths) - 1) if rl.shared_prefix else ()
  update, reference = set(), set()
  previous = 0
  for width in widths:
    # the bucket was picked for the longest prompt: it is longer than the bucket below
    ends = update_widths(rl, width, previous + 1) if trims_width else (width,)
    previous = width - rl.max_new_tokens
    update.update((p, w) for w in ends for p in _prefixes_below(w, rungs))
    if rl.needs_reference if needs_reference is None else needs_reference:
      reference.update((p, width) for p in _prefixes_below(width, rungs))
  return ShapePlan(rollout_widths=widths, prefixes=(0,) + tuple(rungs),
                   update_keys=tuple(sorted(update)), reference_keys=tuple(sorted(reference)))
