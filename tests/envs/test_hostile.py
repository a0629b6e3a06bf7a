"""Hostile and oversized tool calls are contained, counted and scored 0."""

import os
import secrets

import numpy as np

from rl_post.envs import driver, protocol
from rl_post.envs.domains import DOMAINS, make_env
from rl_post.envs.metrics import EpisodeMetrics
from rl_post.envs.tools import ToolLimits
from rl_post.sandbox import Sandbox, SandboxConfig

LIMITS = ToolLimits(per_call_s=2.0, per_episode_s=6.0, max_output_chars=500)


def _env(name="fs_chores", seed=0, limits=LIMITS):
  env = make_env(name, limits=limits, max_turns=10)
  env.reset(DOMAINS[name].generate(np.random.default_rng(seed), 1))
  return env


def _bash(command):
  return protocol.format_call("bash", {"command": command})


def test_work_dirs_are_per_episode(sandbox):
  token = secrets.token_hex(8)
  a, b = _env(seed=0), _env(seed=1)
  metrics = EpisodeMetrics()
  driver.step_many([a, b], [_bash(f"echo {token} > secret.txt"), _bash("echo b > mine.txt")],
                   sandbox, metrics)
  assert a.workspace.files["secret.txt"].strip().decode() == token
  snoop = _bash("cat secret.txt ../*/secret.txt /work/*/secret.txt 2>&1; "
                f"grep -rs {token} / --exclude-dir=proc --exclude-dir=sys; ls -R /tmp /dev/shm")
  (obs_b, _, _), (obs_a, _, _) = driver.step_many([b, a], [snoop, _bash("cat secret.txt")],
                                                  sandbox, metrics)
  assert token not in obs_b and token in obs_a
  assert "mine.txt" in b.workspace.files and "secret.txt" not in b.workspace.files


def test_escape_host_write_and_fork_bomb_are_contained(sandbox, tmp_path):
  target = tmp_path / "pwned"
  limits = ToolLimits(per_call_s=2.0, per_episode_s=10.0)
  env = _env("repo_repair", seed=2, limits=limits)
  hostile = [
      _bash(f"echo x > {target}; echo x > /tmp/rl_post_pwned; cat /etc/shadow; ls /home /root"),
      protocol.format_call("python", {"code": "import socket; socket.socket()"}),
      _bash(":(){ :|:& };:"),
      protocol.format_call("python", {"code": "import os\nwhile True: os.fork()"}),
      _bash("sleep 30"),
      _bash("echo still alive"),
  ]
  kinds = []
  for call in hostile:
    observation, done, info = env.step(call, sandbox)
    kinds.append(info.error_kind)
  assert not target.exists() and not os.path.exists("/tmp/rl_post_pwned")
  assert kinds[0] == "tool_error" and kinds[1] == "tool_error"
  # The bash bomb's parent may exit at once (the sandbox kills the rest) or
  # flood stderr with fork errors; either way it is contained.
  assert kinds[2] in (None, "timeout", "tool_error", "output_truncated")
  assert kinds[3] in ("timeout", "tool_error", "output_truncated")
  assert kinds[4] == "timeout" and kinds[5] is None and "still alive" in observation
  assert env.workspace.tool_seconds <= limits.per_episode_s + 1.0
  env.step(protocol.format_call("submit", {}), sandbox)
  assert env.final_reward(sandbox) == 0.0


def test_oversized_output_is_truncated_and_counted(sandbox):
  env = _env(seed=3)
  observation, _, info = env.step(_bash("head -c 100000 /dev/zero | tr '\\0' a"), sandbox)
  assert info.error_kind == "output_truncated" and len(observation) < 700
  assert "more chars" in observation
  observation, _, info = env.step(_bash("yes"), sandbox)  # past the sandbox's own cap
  assert info.error_kind == "output_truncated" and len(observation) < 700


def test_episode_budget_and_max_turns(sandbox):
  env = make_env("fs_chores", limits=ToolLimits(per_call_s=1.0, per_episode_s=1.5),
                 max_turns=3)
  env.reset(DOMAINS["fs_chores"].generate(np.random.default_rng(4), 1))
  _, done, info = env.step(_bash("sleep 5"), sandbox)
  assert info.error_kind == "timeout" and not done
  _, done, info = env.step(_bash("sleep 5"), sandbox)
  assert info.error_kind in ("timeout", "budget_exhausted")
  _, done, info = env.step(_bash("ls"), sandbox)
  assert done and info.turn == 3 and info.error_kind == "budget_exhausted"


def test_a_work_dir_over_the_input_cap_is_a_counted_error(sandbox):
  env = _env(seed=5)
  env.workspace.files["big.bin"] = b"0" * (sandbox.config.max_input_bytes + 1)
  metrics = EpisodeMetrics()
  (observation, done, info), = driver.step_many([env], [_bash("ls")], sandbox, metrics)
  assert info.error_kind == "sandbox_error" and "max_input_bytes" in observation
  assert metrics.errors[("bash", "sandbox_error")] == 1 and not done


def test_a_submission_over_the_input_cap_scores_0_with_a_counted_error():
  # A small input cap, so a file the bash tool keeps is too big to verify.
  config = SandboxConfig(num_workers=1, timeout_s=10.0, max_input_bytes=1 << 20)
  task = DOMAINS["repo_repair"].generate(np.random.default_rng(6), 1)
  module = task.metadata["module"]
  turns = [_bash(f"head -c {(1 << 20) + 1} /dev/zero | tr '\\0' '#' > {module}"),
           protocol.format_call("submit", {})]
  env = make_env("repo_repair", limits=LIMITS, max_turns=4)
  metrics = EpisodeMetrics()
  with Sandbox(config) as small:
    rewards = driver.run_text_episodes([env], [task], lambda t, obs: turns[len(obs) - 1], small,
                                       metrics)
    assert len(env.workspace.files[module]) == (1 << 20) + 1  # kept, then sent to the verifier
    assert rewards == [0.0] and env.verify_error == "sandbox_error"
    assert metrics.verify_errors == {"sandbox_error": 1}
    assert metrics.summary()["verify_errors/sandbox_error"] == 1.0
    env.verify_error = None
    assert env.final_reward(small) == 0.0 and env.verify_error == "sandbox_error"
    assert driver.final_rewards([env], small, metrics) == [0.0]
    assert metrics.summary()["verify_errors"] == 2.0
