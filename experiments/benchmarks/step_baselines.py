"""Whole GRPO step, ours vs TRL vs Tunix, for grpo_step.py (`--whole_step=ours,trl,tunix`).

Each system runs as its own process pinned with taskset to the same core,
single-threaded: ours (whole_step.py, this interpreter), TRL (trl_step.py)
and Tunix (tunix_step.py) in the environments setup_baselines.sh creates.
Workloads (a) and (b) of the sampling benchmark; every side generates
exactly `response` tokens per row (no EOS) and scores them with the same
synthetic reward, with the same beta, group size and learning rate.
A baseline that fails to run is a row with its error (the exact message),
not a crash: that is the measurement.
"""

import json
import os
import statistics
import subprocess
import sys

from experiments.benchmarks.baselines import (BaselineEnvMissing, baseline_python,  # noqa: F401
                                              env_python, step_summary)
from experiments.benchmarks.synthetic import workload_spec
from rl_post import models
from rl_post.models import hf

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCRIPTS = {"ours": "whole_step.py", "trl": "trl_step.py", "tunix": "tunix_step.py"}
NAMES = {"ours": "rl_post (JAX)", "trl": "TRL GRPOTrainer", "tunix": "Tunix GRPOLearner"}
# The step's GEMMs alone (step_floor.py): with XLA in our interpreter, with torch in TRL's.
FLOORS = {"floor_xla": ("ours", "--backend=jax"), "floor_torch": ("trl", "--backend=torch")}
FLOOR_NAMES = {"floor_xla": "matmuls only, XLA (floor)", "floor_torch": "matmuls only, torch (floor)"}
ARCH = {  # sampling.py's workloads (a) and (b)
    "a": dict(num_layers=2, embed_dim=128, num_heads=4, num_kv_heads=2, head_dim=32,
              mlp_dim=512, vocab_size=512),
    "b": dict(num_layers=4, embed_dim=256, num_heads=8, num_kv_heads=4, head_dim=32,
              mlp_dim=1024, vocab_size=4096),
    "smoke": dict(num_layers=1, embed_dim=32, num_heads=2, num_kv_heads=1, head_dim=16,
                  mlp_dim=64, vocab_size=64),
}
WORK = {"a": dict(prompts=2, group=8), "b": dict(prompts=4, group=4),
        "smoke": dict(prompts=2, group=2)}
BETA = 0.04  # includes the reference forward on every side


def parse_systems(text: str) -> list[str]:
  systems = [s for s in text.split(",") if s]
  unknown = set(systems) - set(SCRIPTS)
  if unknown:
    raise ValueError(f"--whole_step: unknown systems {sorted(unknown)}; known: {sorted(SCRIPTS)}")
  return systems


def interpreters(systems: list[str], pythons: dict[str, str | None]) -> dict[str, str]:
  """The python of each system (ours: this one); a missing baseline env raises
  BaselineEnvMissing naming setup_baselines.sh, before any work is done."""
  return {s: sys.executable if s == "ours" else
          baseline_python(pythons.get(s) or env_python(s), s) for s in systems}


PRECISIONS = {"f32": "float32", "bf16": "bfloat16"}
# Mixed-precision rows (bf16 compute over f32 weights) are ours and TRL's (autocast):
# tunix_step.py has no such setting, and the floors are f32 GEMMs.
BF16_SYSTEMS = ("ours", "trl")


def parse_precisions(text: str) -> list[str]:
  names = [s for s in text.split(",") if s]
  unknown = set(names) - set(PRECISIONS)
  if unknown or not names:
    raise ValueError(f"--precisions: unknown {sorted(unknown)}; known: {sorted(PRECISIONS)}")
  return names


def specs(smoke: bool, steps: int, precisions=("f32",)) -> dict[str, dict]:
  """Workload specs by name: "a", "b" (f32) and "a-bf16", "b-bf16" (mixed precision)."""
  names = ("smoke",) if smoke else ("a", "b")
  out = {}
  for precision in precisions:
    for name in names:
      length = 8 if smoke else 32
      spec = workload_spec(name, ARCH[name], WORK[name]["prompts"], WORK[name]["group"],
                           prompt_len=length, response=8 if smoke else 64, beta=BETA,
                           steps=steps)
      spec["hf_config"] = hf.config_to_hf(models.ModelConfig(**ARCH[name]))
      spec["compute_dtype"] = PRECISIONS[precision]
      out[name if precision == "f32" else f"{name}-{precision}"] = spec
  return out


# --cold_warm: our side again with JAX's persistent compilation cache in a new directory
# (cold: it compiles and writes every program), then reading it (warm), each in a fresh
# process; the thresholds as rl_post's entry points set them (rl_post/training/compile_cache.py)
CACHE_MODES = ("cold", "warm")


def cache_env(cache_dir: str) -> dict:
  return dict(JAX_COMPILATION_CACHE_DIR=cache_dir, JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
              JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="-1")


def run_side(script: str, python: str, spec_path: str, out_path: str, core: int,
             extra: tuple[str, ...] = (), env_extra: dict | None = None) -> dict:
  env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
             **(env_extra or {}))
  proc = subprocess.run(["taskset", "-c", str(core), python, os.path.join(HERE, script),
                         f"--spec={spec_path}", f"--out={out_path}", *extra],
                        capture_output=True, text=True, check=False, env=env)
  if proc.returncode:
    lines = [x for x in proc.stderr.strip().splitlines() if x.strip()]
    return {"error": f"exit {proc.returncode}: " + " | ".join(lines[-3:])}
  with open(out_path) as f:
    return json.load(f)


def summary_row(workload: str, result: dict) -> dict:
  row = dict(workload=workload, system=result["system"],
             **step_summary(result["step_wall_s"], result["rollout_s"], result["rollout_tokens"]),
             reward_mean=result["reward_mean"] or None, versions=result["versions"])
  if result.get("step_cpu_s"):
    row["cpu_s_per_step"] = statistics.median(result["step_cpu_s"][1:] or result["step_cpu_s"])
  return row


def floor_row(workload: str, result: dict) -> dict:
  return dict(workload=workload, system=result["system"], floor_s=result["floor_s"],
              phase_s=result["phase_s"], phase_gflop=result["phase_gflop"],
              versions=result["versions"])


def cached_rows(name: str, python: str, spec_path: str, workdir: str, core: int) -> list[dict]:
  """Our side with a new, empty compilation cache, then with what that run wrote."""
  cache_dir = os.path.join(workdir, f"compile_cache_{name}")
  os.makedirs(cache_dir, exist_ok=False)
  rows = []
  for mode in CACHE_MODES:
    result = run_side(SCRIPTS["ours"], python, spec_path,
                      os.path.join(workdir, f"ours_{mode}_{name}.json"), core,
                      env_extra=cache_env(cache_dir))
    if "error" in result:
      raise RuntimeError(f"our whole step with a {mode} cache failed on {name}: "
                         f"{result['error']}")
    rows.append(dict(summary_row(name, result), system=f"{NAMES['ours'][:-1]}, {mode} cache)",
                     cache=mode, cache_hits=result["cache_hits"]))
  return rows


def whole_step_rows(systems: dict[str, str], smoke: bool, steps: int, core: int,
                    workdir: str, precisions=("f32",), cold_warm: bool = False) -> list[dict]:
  """One row per (workload, system); `x_ours` = its s/step over ours on that workload.
  With `cold_warm`, two more rows of ours: a cold and a warm compilation cache.

  With ours, also the step's matmul floor (step_floor.py) with XLA, and with
  torch when TRL's interpreter is there: rows with `floor_s` instead of s/step
  (f32 workloads only). Mixed-precision workloads run `BF16_SYSTEMS`.
  """
  os.makedirs(workdir, exist_ok=True)
  rows = []
  for name, spec in specs(smoke, steps, precisions).items():
    spec_path = os.path.join(workdir, f"spec_{name}.json")
    with open(spec_path, "w") as f:
      json.dump(spec, f)
    mixed = spec["compute_dtype"] != "float32"
    for system, python in systems.items():
      if mixed and system not in BF16_SYSTEMS:
        continue
      result = run_side(SCRIPTS[system], python, spec_path,
                        os.path.join(workdir, f"{system}_{name}.json"), core)
      if "error" in result:
        if system == "ours":
          raise RuntimeError(f"our whole step failed on {name}: {result['error']}")
        rows.append(dict(workload=name, system=NAMES[system], error=result["error"]))
        continue
      rows.append(summary_row(name, result))
      if system == "ours" and cold_warm:
        rows += cached_rows(name, python, spec_path, workdir, core)
    for floor, (owner, flag) in FLOORS.items():
      if mixed or "ours" not in systems or owner not in systems:
        continue
      result = run_side("step_floor.py", systems[owner], spec_path,
                        os.path.join(workdir, f"{floor}_{name}.json"), core, (flag,))
      rows.append(dict(workload=name, system=FLOOR_NAMES[floor], error=result["error"])
                  if "error" in result else floor_row(name, result))
    ours = next((r for r in rows if r["workload"] == name and r["system"] == NAMES["ours"]),
                None)
    for r in rows:
      if r["workload"] == name and ours and "s_per_step" in r:
        r["x_ours"] = r["s_per_step"] / ours["s_per_step"]
  return rows


def goals(rows: list[dict]) -> list[dict]:
  """Per (workload, baseline): is ours <= half its s/step, and is half above the floors?

  Half a baseline's step below the XLA floor is out of reach for any XLA
  program on this core; below the torch floor too, for any f32 one.
  """
  out = []
  for name in dict.fromkeys(r["workload"] for r in rows):
    by = {r["system"]: r for r in rows if r["workload"] == name and "error" not in r}
    ours = by.get(NAMES["ours"])
    xla, torch = (by.get(FLOOR_NAMES[f], {}).get("floor_s") for f in ("floor_xla", "floor_torch"))
    for system in ("trl", "tunix"):
      base = by.get(NAMES[system])
      if not ours or not base:
        continue
      half = base["s_per_step"] / 2
      out.append(dict(workload=name, baseline=NAMES[system], half_baseline_s=half,
                      ours_s=ours["s_per_step"], met=ours["s_per_step"] <= half,
                      xla_floor_s=xla, torch_floor_s=torch,
                      ours_over_xla_floor=ours["s_per_step"] / xla if xla else None,
                      reachable_with_xla=None if xla is None else half >= xla,
                      reachable_in_f32=(None if xla is None and torch is None else
                                        half >= min(x for x in (xla, torch) if x is not None))))
  return out


def table(rows: list[dict]) -> str:
  head = (f"{'wl':<8}{'system':<28}{'first s':>9}{'s/step':>9}{'cpu s/step':>11}{'x ours':>8}"
          f"{'rollout tok/s':>14}")
  lines = [head, "-" * len(head)]
  for r in rows:
    if "error" in r:
      lines.append(f"{r['workload']:<8}{r['system']:<28} failed: {r['error'][:300]}")
      continue
    if "floor_s" in r:
      lines.append(f"{r['workload']:<8}{r['system']:<28}{'-':>9}{r['floor_s']:>9.3f}{'-':>11}"
                   f"{'-':>8}{'-':>14}   (" + ", ".join(f"{k} {v:.3f}"
                                                   for k, v in r["phase_s"].items()) + ")")
      continue
    cpu = f"{r['cpu_s_per_step']:>11.3f}" if "cpu_s_per_step" in r else f"{'-':>11}"
    x = f"{r['x_ours']:>8.2f}" if "x_ours" in r else f"{'-':>8}"
    lines.append(f"{r['workload']:<8}{r['system']:<28}{r['first_step_s']:>9.2f}"
                 f"{r['s_per_step']:>9.3f}{cpu}{x}{r['rollout_tokens_per_s']:>14.0f}")
  return "\n".join(lines)


def goals_table(rows: list[dict]) -> str:
  lines = [f"{'wl':<8}{'baseline':<20}{'half of it s':>13}{'ours s':>8}{'met':>5}"
           f"{'XLA floor':>10}{'torch floor':>12}{'ours/XLA floor':>15}  half vs floors"]
  fmt = lambda x: f"{x:.3f}" if x is not None else "-"
  for g in rows:
    verdict = ("-" if g["xla_floor_s"] is None and g["torch_floor_s"] is None else
               "above both" if g["reachable_in_f32"] and g["reachable_with_xla"] else
               "below the XLA floor" if g["reachable_with_xla"] is False and g["reachable_in_f32"]
               else "below both" if g["reachable_in_f32"] is False else "above the XLA floor")
    ratio = fmt(g["ours_over_xla_floor"]) if g["ours_over_xla_floor"] else "-"
    lines.append(f"{g['workload']:<8}{g['baseline']:<20}{g['half_baseline_s']:>13.3f}"
                 f"{g['ours_s']:>8.3f}{'yes' if g['met'] else 'no':>5}{fmt(g['xla_floor_s']):>10}"
                 f"{fmt(g['torch_floor_s']):>12}{ratio:>15}  {verdict}")
  return "\n".join(lines)
