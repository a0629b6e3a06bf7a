"""The reward pool under faulty verifiers: crashes, hangs, bad verdicts, eval."""

import glob
import os
import time

import jax
import numpy as np
import pytest

from rl_fixtures import BATCH_DOMAIN, FAULTY_DOMAIN
from rl_post import models
from rl_post.eval.completion import eval_metrics, evaluate
from rl_post.rewards.pool import RewardPool
from rl_post.rewards.scoring import RewardConfig
from rl_post.sampling.sampler import SamplingConfig
from rl_post.tasks.base import Task


def _tasks(n, domain=FAULTY_DOMAIN, targets=None):
  return [Task(str(i), domain, "p", 1, None if targets is None else targets[i])
          for i in range(n)]


@pytest.fixture(scope="module")
def pool():
  with RewardPool(RewardConfig(num_workers=2, timeout_s=2.0)) as p:
    yield p


def test_dead_workers_are_replaced_and_only_their_items_fail(pool):
  texts = ["1", "exit", "2", "segfault", "x", "sigkill", "3", "raise"]
  replaced = pool.replaced
  batch = pool.score(_tasks(len(texts)), texts)
  assert batch.error_kinds == [None, "crash", None, "crash", None, "crash", None,
                               "verifier_error"]
  np.testing.assert_allclose(batch.rewards_N, [1.1, 0, 1.1, 0, 0.1, 0, 1.1, 0], rtol=1e-6)
  assert pool.replaced - replaced == 3
  again = pool.score(_tasks(4), ["1", "2", "y", "3"])  # replacements work
  assert again.errors == 0 and again.correct_N.tolist() == [True, True, False, True]


def test_a_hung_verifier_fails_alone_within_its_budget(pool):
  start = time.monotonic()
  batch = pool.score(_tasks(4), ["hang", "1", "2", "3"])
  assert time.monotonic() - start < 30  # the verifier sleeps 600 s
  assert batch.error_kinds == ["timeout", None, None, None]
  assert batch.correct_N.tolist() == [False, True, True, True]


@pytest.mark.parametrize("num_workers", [0, 1])
def test_invalid_verdicts_are_counted_and_never_values(num_workers):
  bad = ["nan", "huge", "floatbool", "badspan", "notverdict", "invalid"]
  with RewardPool(RewardConfig(num_workers=num_workers)) as p:
    batch = p.score(_tasks(len(bad) + 1), bad + ["5"])
    assert batch.error_kinds == ["invalid_verdict"] * len(bad) + [None]
    assert np.all(np.isfinite(batch.rewards_N))
    np.testing.assert_allclose(batch.rewards_N, [0] * len(bad) + [1.1], rtol=1e-6)
    for values in batch.components.values():
      assert np.all((values >= 0) & (values <= 1))
    assert p.error_counts["invalid_verdict"] == len(bad)


def test_domains_are_built_once_per_worker(pool):
  answers = [v.answer for _ in range(2) for v in pool.score(_tasks(6), ["1"] * 6).verdicts]
  pids = {a.split(":")[0] for a in answers}
  assert len(pids) == 2 and {a.split(":")[1] for a in answers} == {"1"}


def test_batch_domain_gets_the_shared_sandbox_and_weights():
  config = RewardConfig(num_workers=1, sandbox={"isolation": "process", "num_workers": 1, "timeout_s": 1.0},
                        weights={"default": {"outcome": 1.0, "format": 0.1},
                                 BATCH_DOMAIN: {"efficiency": 0.2, "process": 0.5}})
  with RewardPool(config) as p:
    batch = p.score(_tasks(3, BATCH_DOMAIN), ["print(1)", "print(2)", "while True: pass"])
    assert glob.glob(os.path.join(p.tmp_root, "worker_*", "rl_post_sandbox_host_*"))
  assert not os.path.exists(p.tmp_root)  # the sandbox was closed, its files removed
  assert batch.errors == 0 and batch.correct_N.tolist() == [True, False, False]
  # outcome + 0.1 format + 0.2 x 0.5 efficiency + 0.5 x 1.0 process
  np.testing.assert_allclose(batch.rewards_N, [1.7, 0.7, 0.7], rtol=1e-6)


class _CharTokenizer:
  pad_id, bos_id, eos_id = 0, 1, 2

  def encode(self, text):
    return [3 + ord(c) % 58 for c in text]

  def decode(self, ids):
    return "".join(chr(97 + i % 26) for i in ids if i > 2)


def test_evaluation_scores_through_the_pool(pool):
  config = models.ModelConfig(vocab_size=61, num_layers=1, embed_dim=16, num_heads=2,
                              num_kv_heads=1, head_dim=8, mlp_dim=32)
  params = models.init_params(config, jax.random.key(0))
  tasks = _tasks(4, targets=["hang", "exit", None, "nan"])
  start = time.monotonic()
  result = evaluate(config, params, _CharTokenizer(), tasks,
                    sampling=SamplingConfig(max_new_tokens=4, greedy=True), max_prompt_len=8,
                    batch_size=4, rng=jax.random.key(1), reward_pool=pool)
  assert time.monotonic() - start < 60
  assert result["errors"] == {"timeout": 1, "crash": 1, "verifier_error": 0,
                              "invalid_verdict": 1}
  assert not result["correct"][[0, 1, 3]].any()
  assert eval_metrics(result)["eval/errors/crash"] == 1.0


def test_workers_that_cannot_start_fail_loudly(monkeypatch):
  monkeypatch.setattr("sys.executable", "/bin/false")
  with pytest.raises(RuntimeError, match="reward workers fail to start"):
    RewardPool(RewardConfig(num_workers=2))



def test_a_job_the_worker_cannot_read_is_counted_not_retried(pool, tmp_path, monkeypatch):
  (tmp_path / "only_in_the_trainer.py").write_text("class Meta:\n  pass\n")
  monkeypatch.syspath_prepend(str(tmp_path))  # after the workers started: not on their path
  import only_in_the_trainer
  tasks = [Task("0", FAULTY_DOMAIN, "p", 1, None, {"x": only_in_the_trainer.Meta()})]
  batch = pool.score(tasks + _tasks(2), ["1", "2", "3"])
  assert batch.error_kinds == ["verifier_error", None, None] and batch.correct_N[1:].all()
  assert "ModuleNotFoundError" in batch.verdicts[0].error


def test_faulty_domain_generates_its_fault_schedule(pool):
  from rl_post.tasks import registry
  domain = registry.make_domain(FAULTY_DOMAIN, {"faults": ["raise", None]})
  rng = np.random.default_rng(0)
  tasks = [domain.generate(rng, 1) for _ in range(8)]
  assert {t.target for t in tasks} == {"raise", None}
  batch = pool.score(tasks, ["1"] * 8)
  assert batch.error_kinds == ["verifier_error" if t.target else None for t in tasks]


def test_training_and_its_eval_survive_a_faulty_verifier_mix(tokenizer_path, tmp_path):
  from configs import grpo_arithmetic
  from rl_fixtures import DIGIT_DOMAIN
  from rl_post.checkpoint import CheckpointManager
  from rl_post.metrics.writers import read_metrics
  from rl_post.rl import trainer
  c = grpo_arithmetic.get_config("tiny")
  c.tokenizer.path = tokenizer_path
  faults = ("exit", "segfault", "sigkill", "hang", "raise", "nan", "huge", "floatbool", None)
  c.tasks.update(domains=(DIGIT_DOMAIN, FAULTY_DOMAIN), weights=(0.5, 0.5), difficulties=(1,),
                 domain_options={FAULTY_DOMAIN: {"faults": faults}}, heldout_size=6)
  c.rl.update(max_prompt_len=24, max_new_tokens=6, batch_size=4, num_generations=4,
              checkpoint_every=2, eval_every=0, num_steps=2)
  c.rewards.update(num_workers=2, timeout_s=1.0)
  trainer.train(c, str(tmp_path))
  rows = read_metrics(str(tmp_path))
  assert [r["step"] for r in rows] == [1, 2]
  kinds = ("timeout", "crash", "verifier_error", "invalid_verdict")
  train_errors = sum(r[f"reward/errors/{k}"] for r in rows for k in kinds)
  eval_errors = sum(rows[-1][f"{p}/errors/{k}"] for p in ("eval", "eval_sampled") for k in kinds)
  assert train_errors > 0 and eval_errors > 0
  assert all(np.isfinite(r["reward/mean"]) and np.isfinite(r["loss"]) for r in rows)
  with CheckpointManager(str(tmp_path / "checkpoints")) as checkpoints:
    assert checkpoints.latest_step() == 2


def test_sandboxed_domains_grade_through_the_workers_shared_sandbox():
  from rl_post.tasks import registry
  tasks, texts = [], []
  for name in ("code", "sql", "shell", "countdown", "math"):
    domain = registry.make_domain(name)
    task = domain.generate(np.random.default_rng(0), domain.difficulty_levels[0])
    tasks += [task, task]
    texts += [domain.demonstration(task), "<think>x</think><answer>nope</answer>"]
  # default budget: math starts its math-verify process (imports sympy) on first use
  with RewardPool(RewardConfig(num_workers=2)) as p:
    batch = p.score(tasks, texts)  # the default sandbox: strict isolation
  assert batch.errors == 0 and batch.correct_N.tolist() == [True, False] * 5
  assert batch.components["tests_passed"][0] == 1.0  # a domain's own component, logged
