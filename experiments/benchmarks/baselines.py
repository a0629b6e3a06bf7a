"""What the baseline comparisons share (pure Python: no jax, torch or trl here).

The baselines (TRL, Tunix) run in their own virtual environments, made by
experiments/benchmarks/setup_baselines.sh; the benchmarks start them as
subprocesses pinned to the same core as ours and summarise both the same way.
"""

import os
import statistics

DEFAULT_ENVS = os.environ.get("RL_POST_BASELINE_ENVS", "/work/envs")
# our aggregation -> TRL's loss_type with the same normalisation (one process, one step)
LOSS_TYPES = {"token_mean": "dapo", "sequence_mean": "grpo", "sequence_sum_norm": "dr_grpo"}


class BaselineEnvMissing(RuntimeError):
  pass


def env_python(name: str, envs: str = DEFAULT_ENVS) -> str:
  return os.path.join(envs, name, "bin", "python")


def baseline_python(python: str, name: str) -> str:
  """The baseline env's interpreter, or a clear error saying how to create it."""
  if not (os.path.isfile(python) and os.access(python, os.X_OK)):
    raise BaselineEnvMissing(
        f"the {name} baseline environment is missing ({python} does not exist): create it "
        f"with `bash experiments/benchmarks/setup_baselines.sh {name}` or pass "
        f"--{name}_python=<its python>")
  return python


def step_summary(wall_s: list[float], rollout_s: list[float], rollout_tokens: list[float]) -> dict:
  """The first step (compile / warm-up) apart; the median step and the rollout
  tokens/s over the rest (over all steps when there is only one)."""
  if not wall_s or len(rollout_s) != len(rollout_tokens) or not rollout_s:
    raise ValueError(f"need >= 1 step and one rollout time per token count, got {len(wall_s)} "
                     f"steps, {len(rollout_s)} rollout times, {len(rollout_tokens)} counts")
  rest = slice(1, None) if len(wall_s) > 1 and len(rollout_s) > 1 else slice(None)
  return dict(first_step_s=wall_s[0], s_per_step=statistics.median(wall_s[rest]),
              steps=len(wall_s),
              rollout_tokens_per_s=sum(rollout_tokens[rest]) / sum(rollout_s[rest]))


def comparison_table(rows: list[dict], reference: str) -> str:
  """One line per system; `x ours` is its wall s/step over the reference system's
  (`cpu s/step`, where given, is the process's CPU seconds: on a shared machine
  the wall time also counts other jobs' time slices)."""
  ref = next(r for r in rows if r["system"] == reference)
  w = max(18, *(len(r["system"]) + 1 for r in rows))
  head = (f"{'system':<{w}}{'first step s':>13}{'s/step':>9}{'cpu s/step':>11}{'x ours':>8}"
          f"{'rollout tok/s':>15}{'held-out pass':>15}{'reward (last)':>15}")
  lines = [head, "-" * len(head)]
  for r in rows:
    passed = (f"{100 * r['heldout_pass_rate']:>14.1f}%" if "heldout_pass_rate" in r
              else f"{'-':>15}")
    cpu = f"{r['cpu_s_per_step']:>11.3f}" if "cpu_s_per_step" in r else f"{'-':>11}"
    lines.append(f"{r['system']:<{w}}{r['first_step_s']:>13.2f}{r['s_per_step']:>9.3f}{cpu}"
                 f"{r['s_per_step'] / ref['s_per_step']:>8.2f}{r['rollout_tokens_per_s']:>15.0f}"
                 f"{passed}{r['reward_mean'][-1]:>15.3f}")
  return "\n".join(lines)


def compile_steps(rows: list[dict]) -> list[dict]:
  """The steps after the first whose update compiled: the first with a new (shared
  prefix, width) pair, each a program of its own. The median s/step leaves them out,
  as it leaves out step 1; `total_s` counts them."""
  seen, out = set(), []
  for i, r in enumerate(rows):
    key = (r.get("rollout/shared_prefix_len", 0.0), r["rollout/update_width"])
    if key not in seen and i:
      out.append(dict(step=r["step"], s=r["time/step_s"], shared_prefix_len=key[0],
                      update_width=key[1]))
    seen.add(key)
  return out
