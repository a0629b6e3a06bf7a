r"""Tunix's GRPOLearner whole step on grpo_step.py's synthetic workload (the Tunix env only).

  /work/envs/tunix/bin/python experiments/benchmarks/tunix_step.py --spec=SPEC.json --out=OUT.json

Tunix's Llama3 (tunix.models.llama3) with our architecture (random init,
tied embeddings), the vanilla rollout engine, actor, reference and rollout
on one CPU device, XLA single-threaded. Prompts are the spec's token ids
through a word-level tokenizer ("t<id>"); the reward is the fraction of
even ids, as on our side. Tunix has no per-step hook, so a step's seconds
are the time (wall and process CPU) between the learner's requests for
consecutive batches (the last: until train() returns); generation is timed by wrapping
`rl_cluster.generate`.
"""

import os
import sys
import time

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_cpu_multi_thread_eigen=false")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402
from tunix.models.llama3 import model as llama3  # noqa: E402
from tunix.rl import rl_cluster as rl_cluster_lib  # noqa: E402
from tunix.rl.grpo.grpo_learner import GRPOConfig, GRPOLearner  # noqa: E402
from tunix.rl.rollout import base_rollout  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import side_io  # noqa: E402


class IdTokenizer:
  """Token i is the word "t<i>"; ids 0-3 are pad/unk/bos/eos (as in our tokenizers)."""

  def encode(self, text: str, **kwargs) -> list[int]:
    return [int(w[1:]) for w in text.split()]

  def decode(self, ids, **kwargs) -> str:
    return " ".join(f"t{int(i)}" for i in ids if int(i) > 3)

  def bos_id(self) -> int:
    return 2

  def eos_id(self) -> int:
    return 3

  def pad_id(self) -> int:
    return 0


REWARD_MEANS = []


def even_fraction(prompts, completions, **kwargs):
  out = []
  for text in completions:
    ids = [int(w[1:]) for w in text.split()]
    out.append(sum(i % 2 == 0 for i in ids) / max(len(ids), 1))
  REWARD_MEANS.append(sum(out) / max(len(out), 1))
  return out


def build_model(arch: dict, seed: int):
  config = llama3.ModelConfig(
      num_layers=arch["num_layers"], vocab_size=arch["vocab_size"], embed_dim=arch["embed_dim"],
      hidden_dim=arch["mlp_dim"], num_heads=arch["num_heads"], head_dim=arch["head_dim"],
      num_kv_heads=arch["num_kv_heads"], rope_theta=int(arch.get("rope_theta", 10000)),
      norm_eps=arch.get("norm_eps", 1e-6), weight_tying=True)
  return llama3.Llama3(config, rngs=nnx.Rngs(seed))


def main(argv=None):
  spec, out = side_io.read_spec(__doc__.splitlines()[0], argv)
  g, r, plen, steps = spec["group"], spec["response"], spec["prompt_len"], spec["steps"]
  mesh = jax.make_mesh((1, 1), ("fsdp", "tp"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
  with jax.set_mesh(mesh):
    actor, reference = build_model(spec["arch"], spec["seed"]), build_model(spec["arch"],
                                                                             spec["seed"])
  optimizer = optax.chain(optax.clip_by_global_norm(1.0),
                          optax.adamw(spec["learning_rate"], weight_decay=0.0))
  training = rl_cluster_lib.RLTrainingConfig(
      actor_optimizer=optimizer, eval_every_n_steps=10 ** 9, max_steps=steps,
      mini_batch_size=spec["prompts"], train_micro_batch_size=spec["prompts"])
  rollout = base_rollout.RolloutConfig(
      max_tokens_to_generate=r, max_prompt_length=plen, kv_cache_size=max(256, 2 * (plen + r)),
      temperature=1.0, top_p=1.0, top_k=None, eos_tokens=[spec["arch"]["vocab_size"] + 1])
  roles = rl_cluster_lib.Role
  cluster = rl_cluster_lib.RLCluster(
      actor=actor, reference=reference, tokenizer=IdTokenizer(),
      cluster_config=rl_cluster_lib.ClusterConfig(
          role_to_mesh={roles.ACTOR: mesh, roles.REFERENCE: mesh, roles.ROLLOUT: mesh},
          rollout_engine="vanilla", offload_to_cpu=False, training_config=training,
          rollout_config=rollout))
  learner = GRPOLearner(rl_cluster=cluster, reward_fns=[even_fraction],
                        algo_config=GRPOConfig(num_generations=g, num_iterations=1,
                                               beta=spec["beta"], epsilon=0.2,
                                               loss_agg_mode="token-mean"))
  rollouts, fetched = [], []
  inner = cluster.generate

  def timed_generate(*a, **kw):
    start = time.perf_counter()
    out = inner(*a, **kw)
    rollouts.append((time.perf_counter() - start, sum(len(t) for t in out.tokens)))
    return out

  cluster.generate = timed_generate
  prompts = [" ".join(f"t{i}" for i in row) for row in spec["prompt_ids"]]

  def batches():
    for _ in range(steps):
      fetched.append((time.perf_counter(), time.process_time()))
      yield {"prompts": np.array(prompts)}  # an array: a list is a pytree of leaves to Tunix

  learner.train(batches())
  marks = fetched + [(time.perf_counter(), time.process_time())]
  wall = [b[0] - a[0] for a, b in zip(marks, marks[1:])]
  cpu = [b[1] - a[1] for a, b in zip(marks, marks[1:])]
  result = dict(system="Tunix GRPOLearner", step_wall_s=wall, step_cpu_s=cpu, rollout_s=[s for s, _ in rollouts],
                rollout_tokens=[n for _, n in rollouts], reward_mean=REWARD_MEANS,
                versions={"jax": jax.__version__})
  side_io.write_result(out, result)


if __name__ == "__main__":
  main()
