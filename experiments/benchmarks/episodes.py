r"""Multi-turn episodes: episodes per minute with the tiny model, and where the time goes.

The tiny model of configs/base.py (4 layers, 128 wide; random weights)
with the call-vocabulary tokenizer (`rl_post.envs.call_vocab`: whole tool
calls are tokens, so a random model calls tools) runs batches of episodes
over the three multi-step domains (repo_repair, data_questions,
fs_chores) through `rl_post.envs.episodes.run_episodes`. In the same run,
the baseline executes the same episodes' tool calls one at a time
(sequential `Sandbox.run`, no batching); a third row splits each batch
into two row groups run in threads (`rl_post.envs.overlap`), so one
group's tools overlap the other's generation; a tools-only row runs the
scripted oracle policy (no model) to show the cost of the tools alone.
Every model row runs the same episodes (same seeds); the JSON records
whether their transcripts are identical.

  python experiments/benchmarks/episodes.py
  python experiments/benchmarks/episodes.py --smoke   # tiny sizes, for the test
"""

import functools
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

from rl_post import models  # noqa: E402
from rl_post.envs import driver, policies  # noqa: E402
from rl_post.envs.call_vocab import CallVocabTokenizer  # noqa: E402
from rl_post.envs.domains import DOMAINS, make_env  # noqa: E402
from rl_post.envs.episodes import EpisodeConfig, run_episodes  # noqa: E402
from rl_post.envs.metrics import EpisodeMetrics  # noqa: E402
from rl_post.envs.overlap import run_overlapped  # noqa: E402
from rl_post.envs.tools import ToolLimits  # noqa: E402
from rl_post.sampling.sampler import SamplingConfig  # noqa: E402
from rl_post.sandbox import Sandbox, SandboxConfig  # noqa: E402

_BATCH = flags.DEFINE_integer("batch", 12, "Episodes per batch (one per row).")
_BATCHES = flags.DEFINE_integer("batches", 3, "Timed batches per row.")
_MAX_TURNS = flags.DEFINE_integer("max_turns", 4, "Model turns per episode.")
_TURN_TOKENS = flags.DEFINE_integer("turn_tokens", 48, "Sampling budget per turn.")
_MAX_NEW = flags.DEFINE_integer("max_new_tokens", 384, "Total response tokens per episode.")
_WORKERS = flags.DEFINE_integer("workers", 2, "Sandbox workers.")
_SMOKE = flags.DEFINE_bool("smoke", False, "Tiny sizes (used by the smoke test).")
_OUT = flags.DEFINE_string(
    "out", os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "episodes.json"),
    "JSON output path.")

LIMITS = ToolLimits(per_call_s=3.0, per_episode_s=15.0, max_output_chars=200)


class SequentialSandbox:
  """The baseline: the same sandbox, one run at a time (no run_many batching)."""

  def __init__(self, sandbox):
    self.sandbox, self.config = sandbox, sandbox.config

  def run_many(self, requests):
    return [self.sandbox.run_many([r])[0] for r in requests]


def make_batch(n, seed):
  rng = np.random.default_rng(seed)
  names = [sorted(DOMAINS)[i % len(DOMAINS)] for i in range(n)]
  tasks = [DOMAINS[name].generate(rng, 1 + i % 3) for i, name in enumerate(names)]
  return names, tasks


def model_row(label, params, model_config, tokenizer, sandbox, batches, batch, sizes,
              runner=run_episodes):
  metrics, transcripts = EpisodeMetrics(), []
  sampling = SamplingConfig(max_new_tokens=sizes["max_new_tokens"], stop_check_interval=8)
  config = EpisodeConfig(max_turns=sizes["max_turns"], turn_tokens=sizes["turn_tokens"])
  elapsed = 0.0
  for i in range(batches + 1):  # batch 0 warms the compiled code and is not timed
    names, tasks = make_batch(batch, seed=i)
    envs = [make_env(n, limits=LIMITS, max_turns=config.max_turns) for n in names]
    start = time.perf_counter()
    result = runner(params, envs, tasks, tokenizer=tokenizer, model_config=model_config,
                    sampling=sampling, sandbox=sandbox, seeds_B=np.arange(batch) + 1000 * i,
                    config=config)
    if i:
      elapsed += time.perf_counter() - start
      metrics.merge(result.metrics)
      transcripts += [e.transcript for e in envs]
  return summarize(label, metrics, elapsed), transcripts


def oracle_row(sandbox, batches, batch):
  metrics = EpisodeMetrics()
  start = time.perf_counter()
  for i in range(batches):
    names, tasks = make_batch(batch, seed=100 + i)
    envs = [make_env(n, limits=LIMITS, max_turns=8) for n in names]
    driver.run_text_episodes(envs, tasks, policies.oracle, sandbox, metrics)
  return summarize("oracle policy (tools only)", metrics, time.perf_counter() - start)


def summarize(label, metrics, elapsed):
  s = metrics.summary()
  row = {"system": label, "episodes": int(s["episodes"]), "seconds": elapsed,
         "episodes_per_min": 60.0 * s["episodes"] / elapsed if elapsed else 0.0,
         "generation_s": s["generation_seconds"], "tools_s": s["tool_seconds"],
         "verify_s": s["verify_seconds"], "calls_per_episode": s["calls_per_episode"],
         "turns_per_episode": s["turns_per_episode"],
         "tool_call_success_rate": s["tool_call_success_rate"], "reward_mean": s["reward_mean"],
         "errors": {k[len("errors/"):]: v for k, v in s.items() if k.startswith("errors/")}}
  return row


def main(argv):
  del argv
  batch, batches = (3, 1) if _SMOKE.value else (_BATCH.value, _BATCHES.value)
  sizes = ({"max_new_tokens": 160, "turn_tokens": 24, "max_turns": 3} if _SMOKE.value else
           {"max_new_tokens": _MAX_NEW.value, "turn_tokens": _TURN_TOKENS.value,
            "max_turns": _MAX_TURNS.value})
  tokenizer = CallVocabTokenizer(copies=4)
  model_config = models.ModelConfig(vocab_size=tokenizer.vocab_size, num_layers=4,
                                    embed_dim=128, num_heads=4, num_kv_heads=2, head_dim=32,
                                    mlp_dim=384)
  params = models.init_params(model_config, jax.random.key(0))
  rows = []
  with Sandbox(SandboxConfig(num_workers=_WORKERS.value)) as sandbox:
    args = (params, model_config, tokenizer)
    batched, reference = model_row("model, batched tools (run_many)", *args, sandbox, batches,
                                   batch, sizes)
    sequential, seq_transcripts = model_row("model, sequential tools (baseline)", *args,
                                            SequentialSandbox(sandbox), batches, batch, sizes)
    overlapped, ovl_transcripts = model_row(
        "model, 2 row groups in threads (tools overlap generation)", *args, sandbox, batches,
        batch, sizes, runner=functools.partial(run_overlapped, num_groups=2))
    sequential["same_episodes_as_batched"] = seq_transcripts == reference
    overlapped["same_episodes_as_batched"] = ovl_transcripts == reference
    rows += [batched, sequential, overlapped, oracle_row(sandbox, batches, batch)]
  header = ("system", "episodes/min", "gen s", "tools s", "verify s", "calls/ep", "turns/ep",
            "call ok", "reward")
  print(" | ".join(header))
  for r in rows:
    print(f"{r['system']} | {r['episodes_per_min']:.1f} | {r['generation_s']:.2f} | "
          f"{r['tools_s']:.2f} | {r['verify_s']:.2f} | {r['calls_per_episode']:.2f} | "
          f"{r['turns_per_episode']:.2f} | {r['tool_call_success_rate']:.2f} | "
          f"{r['reward_mean']:.2f}")
  base, ours = rows[1]["tools_s"], rows[0]["tools_s"]
  print(f"tool time, batched vs sequential: {ours:.2f} s vs {base:.2f} s; same episodes: "
        f"sequential {rows[1]['same_episodes_as_batched']}, "
        f"overlapped {rows[2]['same_episodes_as_batched']}")
  result = {"batch": batch, "batches": batches, **sizes, "workers": _WORKERS.value, "cpus": len(os.sched_getaffinity(0)),
            "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "rows": rows}
  os.makedirs(os.path.dirname(os.path.abspath(_OUT.value)), exist_ok=True)
  with open(_OUT.value, "w") as f:
    json.dump(result, f, indent=1)


if __name__ == "__main__":
  app.run(main)
