"""Shared fixtures: a small trained tokenizer and tiny model configs; one XLA
compilation cache for the whole run.

pytest.ini puts the repository root on `sys.path` (tests import `configs`,
`experiments.benchmarks.<name>` and `launch.supervise` as packages) and tests/support,
the helpers shared by several test folders (`child_process`, `rl_fixtures`, ...)."""

import os
import shutil
import tempfile
import uuid


def _run_compilation_cache() -> str | None:
  """A persistent XLA compilation cache shared by this run's test processes.

  The suite compiles the same programs many times over: the tiny demo, the
  README's commands and the trainer tests each start fresh processes that
  build the same models. With one on-disk cache each program compiles once
  per run; a hit loads the executable XLA would have compiled, so no
  number changes. Set in the environment before JAX is imported, by the
  process pytest starts (the xdist controller), so both workers and every
  process they start inherit the same directory. A cache dir the caller
  set is used as is; the one made here is removed when the run ends
  (`pytest_sessionfinish`). Returns it.
  """
  if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
    return None
  path = os.path.join(tempfile.gettempdir(),
                      f"rl_post_test_xla_cache_{os.getpid()}_{uuid.uuid4().hex[:8]}")
  os.environ.update(JAX_COMPILATION_CACHE_DIR=path,
                    JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                    JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
  return path


def _add_test_xla_flags() -> None:
  """Appends the suite's XLA flags (tests/support/child_process.py) to the caller's."""
  from child_process import TEST_XLA_FLAGS
  flags = os.environ.get("XLA_FLAGS", "")
  if TEST_XLA_FLAGS not in flags:
    os.environ["XLA_FLAGS"] = f"{flags} {TEST_XLA_FLAGS}".strip()


_OWN_CACHE = _run_compilation_cache()
_add_test_xla_flags()

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture(autouse=True)
def _run_wide_mesh_restored():
  """Each test starts with the mesh and activation rules the one before it found.

  An in-process run (`training.run.setup_run`) sets its mesh and rules for the
  whole process, as an entry point should; in a test worker that would leak
  into whichever test the worker runs next (a jitted function of arrays on
  another mesh then fails against the leftover context mesh)."""
  from rl_post.parallel import sharding  # noqa: PLC0415 (after the XLA flags above)
  mesh = jax.sharding.get_mesh()
  rules = sharding.set_activation_rules(())  # read the table: set, then put it back
  sharding.set_activation_rules(rules)
  yield
  jax.set_mesh(mesh if isinstance(mesh, jax.sharding.Mesh) and not mesh.empty else None)
  sharding.set_activation_rules(rules)


def pytest_sessionfinish(session):
  """The process that made the run's compilation cache removes it (workers inherit
  the directory, so `_OWN_CACHE` is None there)."""
  if _OWN_CACHE:
    shutil.rmtree(_OWN_CACHE, ignore_errors=True)


@pytest.fixture(scope="session")
def tokenizer_path(tmp_path_factory):
  from configs import base
  from rl_post.data import build_tokenizer
  config = base.get_base()
  config.tokenizer.path = str(tmp_path_factory.mktemp("tok") / "arith.model")
  config.tokenizer.corpus_examples = 2000
  return build_tokenizer.build(config).model_path


@pytest.fixture(scope="session")
def tokenizer(tokenizer_path):
  from rl_post.data.tokenizer import SentencePieceTokenizer
  return SentencePieceTokenizer(tokenizer_path)


@pytest.fixture
def tiny_model_config():
  from rl_post.models import ModelConfig
  return ModelConfig(vocab_size=97, num_layers=2, embed_dim=32, num_heads=4, num_kv_heads=2,
                     head_dim=8, mlp_dim=64)
