"""Isolated execution of untrusted programs for verifiable rewards.

See docs/sandbox.md for the isolation model. Public API (DESIGN.md):
Sandbox, SandboxConfig, ExecResult, RunRequest, plus grading helpers.
"""

from rl_post.sandbox.config import SandboxConfig
from rl_post.sandbox.launcher import SandboxUnavailableError
from rl_post.sandbox.pool import Sandbox
from rl_post.sandbox.request import LANGUAGES
from rl_post.sandbox.request import RunRequest
from rl_post.sandbox.result import ExecResult
from rl_post.sandbox.result import STATUSES

__all__ = ["Sandbox", "SandboxConfig", "ExecResult", "RunRequest",
           "SandboxUnavailableError", "LANGUAGES", "STATUSES"]
