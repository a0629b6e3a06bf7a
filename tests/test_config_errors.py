"""A bad config value fails at start-up with a message naming the field."""

import jax
import pytest

from configs import grpo_arithmetic, sft_arithmetic
from rl_post.parallel import sharding
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
  with pytest.raises(ValueError, match=r"mesh .* has 3 devices but 1 are available"):
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
