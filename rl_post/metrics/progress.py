"""A progress line with ETA, and model FLOPs / MFU per RL step.

FLOP counts follow the PaLM convention (Chowdhery et al. 2022, app. B):
a forward pass costs 2 FLOPs per matmul weight per token plus 4 x L x T x
H x D for attention scores and values (no causal halving); a training pass
costs 3x a forward. Rematerialisation is not counted (model FLOPs, not
hardware FLOPs). MFU = model FLOPs of the step / (step seconds x peak
FLOP/s); without a configured peak (`rl.peak_flops`, 0 on CPU where no
meaningful peak exists) MFU is omitted and only `perf/model_tflop` is logged.
"""

import time
from typing import Callable


def matmul_params(model_config) -> int:
  """Weights that take part in a matmul per token (embedding lookup excluded)."""
  m = model_config
  q, kv = m.num_heads * m.head_dim, m.num_kv_heads * m.head_dim
  per_layer = m.embed_dim * (q + 2 * kv) + q * m.embed_dim + 3 * m.embed_dim * m.mlp_dim
  return m.num_layers * per_layer + m.embed_dim * m.vocab_size


def forward_flops_per_token(model_config, context_len: int) -> float:
  """Forward FLOPs for one token attending over `context_len` positions."""
  m = model_config
  attention = 4 * m.num_layers * context_len * m.num_heads * m.head_dim
  return 2.0 * matmul_params(model_config) + attention


def rl_step_flops(model_config, *, num_sequences: int, seq_len: int, generated_tokens: int,
                  num_epochs: int, with_reference: bool) -> dict:
  """Model FLOPs of one RL iteration, by phase.

  Args:
    num_sequences: N rollouts in the batch.
    seq_len: T, prompt + response positions the update and reference see.
    generated_tokens: response tokens actually sampled (prefill of the
      prompts is counted as N x (T - max response) tokens by the caller's T).
    num_epochs: passes of the update over the batch.
    with_reference: a reference forward runs (KL).
  """
  per_token = forward_flops_per_token(model_config, seq_len)
  tokens = num_sequences * seq_len
  out = {"rollout": per_token * generated_tokens,
         "reference": per_token * tokens if with_reference else 0.0,
         "update": 3.0 * per_token * tokens * num_epochs}
  out["total"] = sum(out.values())
  return out


def mfu_metrics(flops: dict, step_s: float, peak_flops: float) -> dict:
  """`perf/model_tflop` and, with a peak, `perf/mfu` (fraction of peak)."""
  metrics = {"perf/model_tflop": flops["total"] / 1e12}
  if peak_flops > 0 and step_s > 0:
    metrics["perf/mfu"] = flops["total"] / (step_s * peak_flops)
  return metrics


def format_duration(seconds: float) -> str:
  seconds = int(round(max(seconds, 0.0)))
  h, rest = divmod(seconds, 3600)
  m, s = divmod(rest, 60)
  return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s" if m else f"{s}s"


class Progress:
  """Steps done, seconds per step and ETA of a run that may have resumed.

  The rate is the mean over the steps run in this process after the first
  (which includes compilation), or that first step while it is the only one.
  Its metrics are wall-clock ones, under `time/` like StepTimer's.
  """

  def __init__(self, total_steps: int, start_step: int = 0,
               clock: Callable[[], float] = time.monotonic):
    if total_steps < 0 or not 0 <= start_step <= max(total_steps, 0):
      raise ValueError(f"bad progress bounds: start {start_step}, total {total_steps}")
    self.total, self.start, self._clock = total_steps, start_step, clock
    self._t0 = clock()
    self._first_done: tuple[int, float] | None = None  # (step, time) after the first step

  def seconds_per_step(self, step: int, now: float) -> float:
    if self._first_done is None or step <= self._first_done[0]:
      return (now - self._t0) / max(step - self.start, 1)
    first_step, first_t = self._first_done
    return (now - first_t) / (step - first_step)

  def update(self, step: int, now: float | None = None) -> dict:
    """Call after step `step` (1-based) is done; returns progress metrics.

    Args:
      now: when the step ended, on this object's clock (default: now), for a
        loop that reports a step after it has started the next one.
    """
    now = self._clock() if now is None else now
    if self._first_done is None:
      self._first_done = (step, now)
    rate = self.seconds_per_step(step, now)
    return {"time/mean_step_s": rate,
            "time/eta_s": rate * max(self.total - step, 0)}

  def line(self, step: int, metrics: dict) -> str:
    """'step 12/100 (12%) 1.30 s/step ETA 1m54s | reward 0.41 | mfu 31.2%'.

    With the trainer's timers, also the rollout's speed (its compile time
    excluded), the update's seconds, and the seconds spent building programs
    and how many when a step built any: 'rollout 180 tok/s | update 41.2s |
    compile 13.0s (3 programs)'.
    """
    pct = 100.0 * step / self.total if self.total else 100.0
    parts = [f"step {step}/{self.total} ({pct:.0f}%) "
             f"{metrics['time/mean_step_s']:.2f} s/step "
             f"ETA {format_duration(metrics['time/eta_s'])}"]
    for key, label, fmt in (("reward/mean", "reward", "{:.3f}"), ("kl", "kl", "{:.4f}"),
                            ("response_len/mean", "len", "{:.1f}"),
                            ("async/staleness", "stale", "{:.0f}"),
                            ("perf/mfu", "mfu", "{:.1%}"),
                            ("throughput/rollout_tokens_per_s", "rollout", "{:.0f} tok/s"),
                            ("time/train_s", "update", "{:.1f}s"),
                            ("time/compile_s", "compile", "{:.1f}s"),
                            ("time/eval_s", "eval", "{:.1f}s")):
      if key in metrics and not (key == "time/compile_s" and metrics[key] < 0.05):
        parts.append(f"{label} {fmt.format(metrics[key])}")
        if key == "time/compile_s" and metrics.get("compile/programs"):
          programs = int(metrics["compile/programs"])
          parts[-1] += f" ({programs} program{'s' if programs != 1 else ''})"
    return " | ".join(parts)
