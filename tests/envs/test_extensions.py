"""A tool and an env domain from outside the package, loaded by "module:Class" from a config.

tests/envs/count_tool.py and tests/envs/word_hunt.py are the worked example
of docs/envs.md; nothing here registers them in code.
"""

import jax
import numpy as np
import pytest

from configs import grpo_episodes
from rl_post import models
from rl_post.envs import driver, protocol, tools, trainer_rounds
from rl_post.envs.domains import EnvDomain, make_domain, make_env, registry
from rl_post.envs.episodes import run_episodes
from rl_post.envs.metrics import EpisodeMetrics
from rl_post.envs.tools import Tool, ToolLimits
from rl_post.errors import ConfigError
from rl_post.sampling.sampler import SamplingConfig

TOOL = "tests.envs.count_tool:CountLines"
DOMAIN = "tests.envs.word_hunt:WordHunt"
LIMITS = ToolLimits(per_call_s=3.0, per_episode_s=10.0, max_output_chars=200)


def _config():
  """The tiny episodes config plus the two config lines of docs/envs.md."""
  c = grpo_episodes.get_config("tiny")
  c.episodes.domains = (DOMAIN, "fs_chores")
  c.episodes.tools = (TOOL,)
  return c


def test_tool_and_domain_load_by_module_path():
  tool = tools.make_tool(TOOL)
  assert tool.name == "count" and type(tool).__module__ == "tests.envs.count_tool"
  domain = make_domain(DOMAIN)
  assert domain.name == "word_hunt" and isinstance(domain, EnvDomain)
  env = make_env(DOMAIN, limits=LIMITS)
  assert list(env.toolset) == ["count", "submit"]
  # an extra tool the domain offers already is offered once; others are appended
  assert list(make_env(DOMAIN, extra_tools=(TOOL, "bash")).toolset) == ["count", "submit", "bash"]
  assert list(make_env("fs_chores", extra_tools=(TOOL,)).toolset) == ["bash", "submit", "count"]
  assert "tests.envs.word_hunt:WordHunt" not in registry.available()  # loaded, not registered


def test_outside_domain_and_tool_run_text_episodes(sandbox):
  domain = make_domain(DOMAIN)
  tasks = [domain.generate(np.random.default_rng(i), 1 + i % 3) for i in range(4)]
  envs = [domain.make_env(limits=LIMITS) for _ in tasks]
  prompt = envs[0].reset(tasks[0])
  assert f"- {tools.make_tool(TOOL).description}\n" in prompt
  metrics = EpisodeMetrics()
  assert driver.run_text_episodes(envs, tasks, domain.oracle_turn, sandbox, metrics) == [1.0] * 4
  assert metrics.calls["count"] == 4 and metrics.successes["count"] == 4
  assert "lines of log.txt contain" in envs[0].transcript
  for env, task in zip(envs, tasks):  # the untouched start state scores 0
    env.reset(task)
    env.step(protocol.format_call("submit", {"answer": "many"}), sandbox)
    assert env.final_reward(sandbox) == 0.0
  env = domain.make_env(limits=LIMITS)
  env.reset(tasks[0])
  observation, _, info = env.step(protocol.format_call(
      "count", {"word": "x", "path": "missing.txt"}), sandbox)
  assert info.error_kind == "tool_error" and "No such file" in observation
  _, _, info = env.step(protocol.format_call("count", {"word": "x"}), sandbox)
  assert info.error_kind == "bad_arguments"


def test_config_lines_run_model_episodes_with_the_outside_tool_and_domain(sandbox):
  c = _config()
  c.episodes.update(call_vocab_copies=16, max_turns=4)  # most turns end in a call
  section = trainer_rounds.load(c.episodes)
  tokenizer = trainer_rounds.tokenizer_for(section)
  count_call = protocol.format_call("count", {"word": "error", "path": "log.txt"})
  assert count_call in tokenizer.calls  # the random model can call the new tool
  rounds = trainer_rounds.EpisodeRounds(section, seed=0, tokenizer=tokenizer,
                                        sampling=SamplingConfig(max_new_tokens=256))
  tasks = trainer_rounds.draw_tasks(section, 0, 0, 0, 8, rounds.domains)
  assert {t.domain for t in tasks} == {"word_hunt", "fs_chores"}
  envs = rounds.make_envs(tasks)
  assert all("count" in env.toolset for env in envs)
  model = models.ModelConfig(vocab_size=tokenizer.vocab_size, num_layers=2, embed_dim=32,
                             num_heads=4, num_kv_heads=2, head_dim=8, mlp_dim=64)
  params = models.init_params(model, jax.random.key(0))
  result = run_episodes(params, envs, tasks, tokenizer=tokenizer, model_config=model,
                        sampling=rounds.sampling, sandbox=sandbox, seeds_B=np.arange(8) + 3,
                        config=section.episode)
  assert result.calls_B.sum() > 0 and set(result.rewards_B.tolist()) <= {0.0, 1.0}
  r = result.rollout
  for b, env in enumerate(envs):
    start = int(r.prompt_lens_B[b])
    assert tokenizer.decode(r.tokens_BxT[b, start:start + int(r.response_lens_B[b])]) == (
        env.transcript)
  assert result.metrics.calls["count"] > 0, result.metrics.calls


class _OtherBash(Tool):
  name = "bash"
  description = "bash: not the built-in one"

  def request(self, arguments, workspace, *, timeout_s, memory_mb):
    raise AssertionError("never planned")


class _NoRequest(Tool):
  name = "nothing"
  description = "nothing: forgets its request"


class _NoOracle(EnvDomain):
  name = "no_oracle"
  env_class = make_domain("fs_chores").env_class

  def generate(self, rng, difficulty):
    return make_domain("fs_chores").generate(rng, difficulty)


@pytest.mark.parametrize("bad, field, problem", [
    (dict(tools=("tests.envs.no_such_module:Tool",)), "episodes.tools", "cannot import tool"),
    (dict(tools=("tests.envs.count_tool:Missing",)), "episodes.tools", "cannot import tool"),
    (dict(tools=(DOMAIN,)), "episodes.tools", "is not a Tool subclass"),
    (dict(domains=(TOOL,)), "episodes.domains", "is not an EnvDomain subclass"),
    (dict(domains=("tests.envs.word_hunt:Nope",)), "episodes.domains", "cannot import env"),
])
def test_a_bad_module_path_is_a_config_error_naming_the_field(bad, field, problem):
  section = dict(grpo_episodes.episodes_section(), **bad)
  with pytest.raises(ConfigError, match=problem) as e:
    trainer_rounds.load(section)
  assert e.value.field == field


def test_bad_names_and_classes_are_refused():
  section = grpo_episodes.episodes_section(tools=("grep",))
  with pytest.raises(ValueError, match=r"episodes.tools must be names from \[.*'bash'"):
    trainer_rounds.load(section)
  with pytest.raises(ValueError, match="unknown tool 'grep'"):
    tools.make_tool("grep")
  with pytest.raises(ValueError, match="unknown env domain 'chess'"):
    make_env("chess")
  with pytest.raises(ValueError, match="two different tools are named 'bash'"):
    tools.toolset(["bash", _OtherBash()])
  with pytest.raises(ValueError, match=r"sandboxed=True and must define request\(\)"):
    tools.make_tool(_NoRequest())
  with pytest.raises(ValueError, match="does not define oracle_turn"):
    registry.check_domain_class(_NoOracle, "_NoOracle")
