"""One strict sandbox per test module (fails, never skips, without bwrap)."""

import pytest

from rl_post.sandbox import Sandbox, SandboxConfig


@pytest.fixture(scope="module")
def sandbox():
  with Sandbox(SandboxConfig(num_workers=2, timeout_s=10.0)) as sb:
    yield sb
