"""A bad config value fails at start-up with a message naming the field."""

import os
import types

import jax
import numpy as np
import pytest

from configs import demo, grpo_arithmetic, sft_arithmetic
from experiments.demo import pipeline
from rl_post.data import batching, mixture
from rl_post.data.mixture import TaskConfig
from rl_post.errors import ConfigError, MissingInputError
from rl_post.parallel import sharding
from rl_post.rl.components import check_context_widths
from rl_post.tasks import arithmetic
from rl_post.rl import trainer as rl_trainer
from rl_post.sft import trainer as sft_trainer


@pytest.mark.parametrize("section,field,value,message", [
    ("rl", "num_generations", 1, "rl.num_generations must be >= 2"),
    ("rl.grpo", "aggregation", "mean", "rl.grpo.aggregation must be one of"),
    ("rl.grpo", "clip_low", 1.5, "rl.grpo.clip_low must be in [0, 1)"),
    ("rl.ppo", "gae_lambda", 1.5, "rl.ppo.gae_lambda must be in [0, 1]"),
    ("rl", "algorithm", "trpo", "rl.algorithm must be one of"),
    ("rl", "num_minibatches", 3, "rl.num_minibatches must divide"),
    ("rl", "prompt_buckets", (8,), "rl.prompt_buckets must be strictly increasing"),
    ("optimizer", "learning_rate", -1.0, "optimizer.learning_rate must be > 0"),
    ("tasks", "weights", (1.0, 2.0), "tasks.weights must have one entry per domain"),
    ("tasks", "domains", ("algebra",), "unknown domain 'algebra'"),
    ("rewards", "timeout_s", 0.0, "rewards.timeout_s must be > 0"),
    ("model", "num_kv_heads", 3, "model.num_heads (4) must be a multiple of model.num_kv_heads"),
])
def test_bad_rl_config_names_field(tokenizer_path, tmp_path, section, field, value, message):
  config = grpo_arithmetic.get_config("tiny")
  config.tokenizer.path = tokenizer_path
  target = config
  for name in section.split("."):
    target = target[name]
  target[field] = value
  with pytest.raises(ValueError) as info:
    rl_trainer.train(config, str(tmp_path))
  assert message in str(info.value)


def test_unknown_field_is_named(tokenizer_path, tmp_path):
  config = grpo_arithmetic.get_config("tiny")
  config.tokenizer.path = tokenizer_path
  config.rl.num_generation = 8  # typo
  with pytest.raises(ValueError, match=r"rl: unknown field\(s\) \['num_generation'\]"):
    rl_trainer.train(config, str(tmp_path))


def test_bad_sft_and_mesh_values(tokenizer_path, tmp_path):
  config = sft_arithmetic.get_config("tiny")
  config.tokenizer.path = tokenizer_path
  config.sft.max_len = 1
  with pytest.raises(ValueError, match="sft.max_len must be > 1"):
    sft_trainer.train(config, str(tmp_path))
  config = sft_arithmetic.get_config("tiny")
  config.tokenizer.path = tokenizer_path
  config.mesh = dict(data=3)
  with pytest.raises(ValueError, match=r"mesh=.* has 3 devices but 1 are available"):
    sft_trainer.train(config, str(tmp_path))
  config = sft_arithmetic.get_config("tiny")
  config.tokenizer.path = str(tmp_path / "nope.model")
  with pytest.raises(FileNotFoundError, match="build it with experiments/build_tokenizer.py"):
    sft_trainer.train(config, str(tmp_path))


def test_variant_name_is_checked():
  with pytest.raises(ValueError, match="unknown variant 'huge'"):
    grpo_arithmetic.get_config("huge")


def test_a_failed_run_leaves_no_mesh_or_rules_behind(tokenizer_path, tmp_path):
  # The optimizer error is raised after setup_run put the run's mesh in context.
  config = grpo_arithmetic.get_config("tiny")
  config.tokenizer.path = tokenizer_path
  config.optimizer.learning_rate = -1.0
  config.sharding_rules = (("batch", ("fsdp",)),) + tuple(sharding.DEFAULT_RULES)
  with pytest.raises(ValueError, match="optimizer.learning_rate"):
    rl_trainer.train(config, str(tmp_path))
  assert jax.sharding.get_abstract_mesh().empty
  assert sharding.batch_axes(("data", "fsdp")) == ("data", "fsdp")
  # A key split outside any run traces with no mesh (it failed when one leaked).
  explicit = jax.make_mesh((1,), ("data",), axis_types=(jax.sharding.AxisType.Explicit,))
  with jax.set_mesh(explicit):
    key = jax.device_put(jax.random.key(0), jax.NamedSharding(explicit, jax.P()))
  jax.jit(jax.random.split)(key)


def _error(fn, *args):
  with pytest.raises(ConfigError) as info:
    fn(*args)
  return info.value


def test_values_checked_outside_the_sections_name_their_field(tokenizer, tmp_path):
  config = demo.get_config("tiny")
  config.seed = -1
  assert _error(pipeline.check_stages, config).field == "seed"
  config = demo.get_config("tiny")
  config.eval.batch_size = -3  # an empty range of batches scored every arm 0%
  assert _error(pipeline.check_stages, config).field == "eval.batch_size"
  config = demo.get_config("tiny")
  config.control.num_steps = 0
  assert _error(pipeline.check_stages, config).field == "control.num_steps"
  config = demo.get_config("tiny")
  config.rl.num_generations = 1  # the RL stage's sections, before SFT has run
  with pytest.raises(ValueError, match="rl.num_generations must be >= 2"):
    pipeline.check_stages(config)

  tasks = [arithmetic.Arithmetic().generate(np.random.default_rng(0), 2)]
  e = _error(batching.encode_prompts, tokenizer, tasks, 2)
  assert (e.field, e.value) == ("rl.max_prompt_len", 2)
  e = _error(mixture.TaskMixture, TaskConfig(domains=("arithmetic",), domain_options={
      "arithmetic": {"max_difficulty": 0}}), 0)
  assert e.field == "tasks.domain_options.arithmetic" and "max_difficulty" in e.problem
  sft = sft_trainer.SFTConfig(batch_size=4, max_len=8)
  assert _error(sft_trainer._check_dropped, 4, 1, sft).field == "sft.max_len"
  sft_trainer._check_dropped(3, 1, sft)  # a warning, not an error
  two_way = types.SimpleNamespace(shape={"tensor": 2})  # a mesh that does not fit 3 heads
  e = _error(sharding._check_divisible, "['attn']['k_proj']", (4, 3), (None, "tensor"), two_way)
  assert (e.field, e.value) == ("mesh.tensor", 2)


def test_eval_sets_that_were_never_built_name_their_folder(tokenizer_path, tmp_path):
  config = grpo_arithmetic.get_config("tiny")
  config.tokenizer.path = tokenizer_path
  config.tasks.update(eval_sets=("arithmetic",), eval_data_dir=str(tmp_path / "none"))
  with pytest.raises(MissingInputError) as info:
    rl_trainer.train(config, str(tmp_path / "run"))
  assert info.value.field == "tasks.eval_data_dir"
  assert "build_eval_sets.py" in info.value.problem
  assert not os.listdir(tmp_path / "run")  # no config.json for a run that did not start


def test_rollout_widths_must_split_over_the_context_axis():
  # a rollout is a prompt bucket plus max_new_tokens wide; ring attention splits that
  # width into 2 blocks per context shard (zigzag): 16 + 15 = 31 failed the first update
  rl = types.SimpleNamespace(max_prompt_len=24, max_new_tokens=15)
  with pytest.raises(ConfigError, match=r"widths \[31, 47\] .* multiple of 8") as info:
    check_context_widths(rl, (16, 32, 64), "zigzag", 4)
  assert info.value.field == "rl.max_new_tokens"
  check_context_widths(types.SimpleNamespace(max_prompt_len=24, max_new_tokens=16),
                       (16, 32, 64), "zigzag", 4)
  check_context_widths(rl, (17, 33), "striped", 4)  # 32 and 48 split into 4 stripes
