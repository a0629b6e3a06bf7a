"""A GRPO run mixing seven domains (code and sql verified in the sandbox) on CPU.

Runs configs/grpo_multidomain.py:tiny the way a user does, one entry point
per stage in a subprocess: tokenizer -> SFT on the mixture's demonstrations
-> GRPO. Then checks that every configured domain has per-domain metrics,
that no verdict was a verifier failure, and that the sandboxed verdicts are
real: code completions were graded by running them (their `tests_passed`
component exists only for a graded run).
"""

import json
import os
import subprocess
import sys

import pytest

from child_process import xla_flags
from configs import grpo_multidomain
from rl_post.data.tokenizer import SentencePieceTokenizer
from rl_post.rewards.scoring import ERROR_KINDS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOMAINS = grpo_multidomain.DOMAINS
NUM_STEPS = grpo_multidomain.get_config("tiny").rl.num_steps


def _run(*argv: str) -> None:
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
  env["XLA_FLAGS"] = xla_flags()
  proc = subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True,
                        text=True, timeout=600)
  assert proc.returncode == 0, f"{argv[0]} failed:\n{proc.stderr[-4000:]}"


def _metrics(path: str) -> list[dict]:
  with open(path) as f:
    return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  work = tmp_path_factory.mktemp("multidomain")
  tok = f"--config.tokenizer.path={work}/tokenizer/multidomain.model"
  _run("experiments/build_tokenizer.py", "--config=configs/grpo_multidomain.py:tiny", tok)
  _run("experiments/train_sft.py", "--config=configs/sft_multidomain.py:tiny", tok,
       f"--workdir={work}/sft")
  _run("experiments/train_rl.py", "--config=configs/grpo_multidomain.py:tiny", tok,
       f"--workdir={work}/rl", f"--config.rl.init_from={work}/sft/export")
  return work


def test_config_mixes_four_or_more_domains_with_sandboxed_ones():
  config = grpo_multidomain.get_config("")
  assert len(config.tasks.domains) >= 4
  assert set(grpo_multidomain.SANDBOXED) <= set(config.tasks.domains)
  assert config.tasks.curriculum.enabled and config.filtering.enabled
  assert set(config.rewards.weights) - {"default"} <= set(config.tasks.domains)
  with pytest.raises(ValueError, match="unknown variant"):
    grpo_multidomain.get_config("huge")


def test_tokenizer_is_trained_on_every_domain(run):
  tokenizer = SentencePieceTokenizer(str(run / "tokenizer" / "multidomain.model"))
  assert tokenizer.vocab_size == 1024
  # Learned pieces, not byte fallback: SQL and code text take well under a token per character.
  for text in ("SELECT name FROM employees WHERE city = 'Oslo'",
               "def sum_divisible(xs, k):\n  return sum(x for x in xs if x % k == 0)",
               "Extract the customer's record as one JSON object"):
    assert len(tokenizer.encode(text)) < len(text) / 2, text
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_sft_learns_the_demonstrations(run):
  rows = _metrics(run / "sft" / "metrics.jsonl")
  assert rows[-1]["loss"] < rows[0]["loss"] - 1.0
  assert os.path.isfile(run / "sft" / "export" / "model_config.json")


def test_grpo_logs_every_domain_and_no_verifier_failures(run):
  rows = _metrics(run / "rl" / "metrics.jsonl")
  assert [r["step"] for r in rows] == list(range(1, NUM_STEPS + 1))
  seen = set().union(*rows)
  for d in DOMAINS:
    assert sum(r.get(f"domain/{d}/count", 0) for r in rows) > 0, d
    for key in (f"domain/{d}/pass_rate", f"domain/{d}/reward", f"reward/{d}/outcome",
                f"reward/{d}/format", f"reward/{d}/mean", f"reward/{d}/errors",
                f"pass_rate/{d}", f"curriculum/{d}/difficulty"):
      assert key in seen, key
    assert sum(r.get(f"reward/{d}/errors", 0) for r in rows) == 0, d
  for r in rows:  # every completion got a real verdict: nothing timed out, crashed or raised
    assert {r[f"reward/errors/{kind}"] for kind in ERROR_KINDS} == {0}, r["step"]
    assert r["filtering/rounds"] >= 1
  # Code answers ran in the sandbox: `tests_passed` is reported only by a graded run.
  assert any("reward/code/tests_passed" in r for r in rows)
  assert all(0 <= r[f"domain/{d}/pass_rate"] <= 1 for r in rows for d in DOMAINS
             if f"domain/{d}/pass_rate" in r)
