r"""The matmul floor of one whole GRPO step: its GEMMs alone, each timed in its best layout.

  python experiments/benchmarks/step_floor.py --spec=SPEC.json --out=OUT.json --backend=jax
  /work/envs/trl/bin/python experiments/benchmarks/step_floor.py --spec=... --backend=torch

A side script of grpo_step.py's whole-step rows (step_baselines.py), run
pinned to the same core as the systems it bounds, single-threaded. From the
spec's architecture and workload it lists every matrix multiply a GRPO step
must do in f32 (`step_gemms`):
  rollout    the prompt prefill (each prompt once, shared by its group), then
             `response - 1` decode steps of P*G rows, each with the head;
  reference  one forward: the prompt once per group (P rows), the response
             once per row (P*G rows), the head only at response positions;
  update     that forward again, and for every matmul y = x W of it the two
             of its backward, dx = dy W^T and dW = x^T dy.
(The least work of the step: the prompt computed once per group, as our
rollouts and, with rl.shared_prefix, our update and reference do.)
Each distinct (M, K, N) is timed alone as a plain [M, K] @ [K, N] with both
operands ready in memory (XLA: a jitted loop of them; torch: `torch.mm` with
`out=`), the fastest of `repeats`, and the step's floor is the sum over its
GEMMs. Attention over the sequence, norms, activations, softmax, sampling,
transposes and the optimizer are left out, and the decode steps' weights
sit in cache, so every implementation that computes the step in f32 on
this core with this library's matmuls takes at least this long.
Only the standard library is imported at the top (the torch env has no jax).
"""

import collections
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from experiments.benchmarks import side_io  # noqa: E402

PHASES = ("rollout", "reference", "update")


def _layer_gemms(m: int, arch: dict) -> list[tuple[int, int, int]]:
  """(M, K, N) of one layer's dense matmuls over m rows: q, k, v, o, gate, up, down."""
  e, f = arch["embed_dim"], arch["mlp_dim"]
  q, kv = arch["num_heads"] * arch["head_dim"], arch["num_kv_heads"] * arch["head_dim"]
  return [(m, e, q), (m, e, kv), (m, e, kv), (m, q, e), (m, e, f), (m, e, f), (m, f, e)]


def _forward_gemms(rows: int, head_rows: int, arch: dict) -> list[tuple[int, int, int]]:
  return (_layer_gemms(rows, arch) * arch["num_layers"]
          + [(head_rows, arch["embed_dim"], arch["vocab_size"])])


def step_gemms(spec: dict) -> dict[str, collections.Counter]:
  """Per phase, how many times the step multiplies an [M, K] by a [K, N] matrix."""
  arch, p, g = spec["arch"], spec["prompts"], spec["group"]
  n, plen, r = p * g, spec["prompt_len"], spec["response"]
  rollout = _forward_gemms(p * plen, p, arch) + _forward_gemms(n, n, arch) * (r - 1)
  forward = (_layer_gemms(p * plen, arch) * arch["num_layers"]
             + _forward_gemms(n * r, n * r, arch))
  backward = [s for m, k, nn in forward for s in ((m, nn, k), (k, m, nn))]
  return {"rollout": collections.Counter(rollout), "reference": collections.Counter(forward),
          "update": collections.Counter(forward + backward)}


def _timer_jax(repeats: int):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                             + " --xla_cpu_multi_thread_eigen=false")
  import jax  # noqa: PLC0415
  import jax.numpy as jnp  # noqa: PLC0415

  def seconds(m: int, k: int, n: int) -> float:
    loops = max(1, min(200, int(2e8 // (2 * m * k * n))))

    @jax.jit
    def run(a, b):  # `loops` products; a changes each time, so none is hoisted
      def body(i, acc):
        return acc + (a + i.astype(a.dtype)) @ b
      return jax.lax.fori_loop(0, loops, body, jnp.zeros((m, n), a.dtype))

    a, b = jnp.full((m, k), 1e-3, jnp.float32), jnp.full((k, n), 1e-3, jnp.float32)
    run(a, b).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
      start = time.perf_counter()
      run(a, b).block_until_ready()
      best = min(best, time.perf_counter() - start)
    return best / loops
  return seconds, {"jax": jax.__version__}


def _timer_torch(repeats: int):
  import torch  # noqa: PLC0415
  torch.set_num_threads(1)

  def seconds(m: int, k: int, n: int) -> float:
    loops = max(1, min(200, int(2e8 // (2 * m * k * n))))
    a, b, out = torch.full((m, k), 1e-3), torch.full((k, n), 1e-3), torch.empty(m, n)
    torch.mm(a, b, out=out)
    best = float("inf")
    with torch.inference_mode():
      for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(loops):
          torch.mm(a, b, out=out)
        best = min(best, time.perf_counter() - start)
    return best / loops
  return seconds, {"torch": torch.__version__}


def floor(spec: dict, backend: str, repeats: int = 5) -> dict:
  """Seconds of the step's GEMMs per phase on `backend` ("jax" | "torch")."""
  timers = {"jax": _timer_jax, "torch": _timer_torch}
  if backend not in timers:
    raise ValueError(f"--backend must be one of {sorted(timers)}, got {backend!r}")
  seconds, versions = timers[backend](repeats)
  gemms = step_gemms(spec)
  shapes = sorted({s for counts in gemms.values() for s in counts})
  per_shape = {s: seconds(*s) for s in shapes}
  phases = {ph: sum(c * per_shape[s] for s, c in gemms[ph].items()) for ph in PHASES}
  flops = {ph: sum(c * 2 * m * k * n for (m, k, n), c in gemms[ph].items()) for ph in PHASES}
  return dict(system=f"matmuls only, {'XLA' if backend == 'jax' else 'torch'} (floor)",
              floor_s=sum(phases.values()), phase_s=phases,
              phase_gflop={ph: f / 1e9 for ph, f in flops.items()},
              shapes=[dict(mkn=list(s), seconds=t) for s, t in per_shape.items()],
              versions=versions)


def main(argv=None):
  argv = list(sys.argv[1:] if argv is None else argv)
  backend = next((a.split("=", 1)[1] for a in argv if a.startswith("--backend=")), "jax")
  spec, out = side_io.read_spec(__doc__.splitlines()[0],
                                [a for a in argv if not a.startswith("--backend=")])
  side_io.write_result(out, floor(spec, backend))


if __name__ == "__main__":
  main()
