"""LoRA in the trainers: only adapters train, the base and the KL reference stay
the base, exports, and exact resume (GRPO; SFT saves the same TrainState through
the same manager), on tiny models for a few steps each."""

import jax
import numpy as np
import optax
import pytest

from configs import grpo_arithmetic, sft_arithmetic
from rl_fixtures import DIGIT_DOMAIN
from rl_post.checkpoint.params import load_params
from rl_post.evaluate import checkpoint_eval
from rl_post.metrics.writers import read_metrics
from rl_post.models import lora as lora_lib
from rl_post.models import peft
from rl_post.rl import trainer as rl_trainer
from rl_post.sft import trainer as sft_trainer
from rl_post.training import state as state_lib

LORA = dict(rank=4, alpha=8.0)


def config_lora(**extra):
  return lora_lib.LoraConfig(**LORA, **extra)


def _rl_config(tokenizer_path, algorithm="grpo", **rl):
  c = grpo_arithmetic.get_config("tiny")
  c.tokenizer.path = tokenizer_path
  c.tasks.update(domains=(DIGIT_DOMAIN,), difficulties=(1,), domain_options={}, heldout_size=8)
  c.rl.update(algorithm=algorithm, max_prompt_len=24, max_new_tokens=6, batch_size=2,
              num_generations=4, num_steps=2, checkpoint_every=1, eval_every=0)
  c.rl.update(**rl)
  c.rl.lora.update(LORA)
  c.rewards.num_workers = 0
  c.optimizer.learning_rate = 3e-2  # big steps: adapters move visibly in two updates
  return c


def _fresh_base(result, lora):
  """The base params the run started from: its fresh init, drawn as the trainer draws it."""
  ctx = result["context"]
  return state_lib.create_train_state(ctx.model_config, optax.sgd(0.1), ctx.mesh, ctx.rules,
                                      ctx.key("init"), lora=lora).frozen


def _equal(a, b) -> bool:
  same = jax.tree.map(lambda x, y: np.array_equal(np.asarray(x), np.asarray(y)), a, b)
  return all(jax.tree.leaves(same))


def _assert_adapters_trained_base_frozen(result, lora=lora_lib.LoraConfig(**LORA)):
  state = result["state"]
  assert _equal(state.frozen, _fresh_base(result, lora))  # the base never changes
  b_leaves = [t["B_RxN"] for m in state.params.values() for t in m.values()]
  assert all(np.abs(np.asarray(b)).max() > 0 for b in b_leaves)  # every adapter moved off B=0
  adapter_shapes = {x.shape for x in jax.tree.leaves(state.params)}
  assert {x.shape for x in jax.tree.leaves(state.opt_state) if x.ndim} == adapter_shapes


def test_grpo_with_lora_trains_adapters_against_the_base_and_resumes_exactly(
    tokenizer_path, tmp_path):
  config = _rl_config(tokenizer_path)
  config.rl.grpo.kl_coef = 0.1
  straight = rl_trainer.train(config, str(tmp_path / "straight"))
  _assert_adapters_trained_base_frozen(straight)
  kl = [m["kl"] for m in read_metrics(str(tmp_path / "straight"))]
  # the reference is the base: the first update's policy (B = 0) is it, so KL = 0
  # up to float rounding; after one update the adapters have moved away from it
  assert abs(kl[0]) < 1e-6 and kl[1] > 1e-5, kl

  config.rl.num_steps = 1  # "crash" after step 1, then rerun the same command
  rl_trainer.train(config, str(tmp_path / "resumed"))
  config.rl.num_steps = 2
  resumed = rl_trainer.train(config, str(tmp_path / "resumed"))
  a, b = (read_metrics(str(tmp_path / d)) for d in ("straight", "resumed"))
  assert [m["step"] for m in b] == [1, 2]
  for key in ("reward/mean", "loss", "kl"):
    np.testing.assert_allclose([m[key] for m in b], [m[key] for m in a], rtol=1e-6, err_msg=key)
  for field in ("params", "opt_state", "frozen"):
    assert _equal(getattr(straight["state"], field), getattr(resumed["state"], field)), field
  # evaluating the workdir restores the LoRA state and evaluates the merged policy
  ctx = straight["context"]
  loaded = checkpoint_eval.load_checkpoint(str(tmp_path / "straight"), config, ctx.tokenizer,
                                           ctx.mesh, ctx.rules)
  assert loaded.step == 2
  assert _equal(loaded.params, state_lib.model_params(straight["state"], config_lora()))


def test_ppo_with_lora_trains_adapters_and_its_critic(tokenizer_path, tmp_path):
  config = _rl_config(tokenizer_path, algorithm="ppo", num_steps=1)
  result = rl_trainer.train(config, str(tmp_path))
  _assert_adapters_trained_base_frozen(result)
  assert np.abs(np.asarray(result["state"].critic["head"]["w"])).max() > 0


def test_sft_with_lora_trains_adapters_and_exports_merged_and_peft(tokenizer_path, tmp_path):
  c = sft_arithmetic.get_config("tiny")
  c.tokenizer.path = tokenizer_path
  c.sft.update(num_steps=2, batch_size=4, checkpoint_every=2,
               lora=dict(rank=4, alpha=8.0, dropout=0.1, targets=("q_proj", "v_proj", "down")))
  c.optimizer.update(learning_rate=3e-2, warmup_steps=0, total_steps=2)
  straight = sft_trainer.train(c, str(tmp_path))
  lora = lora_lib.LoraConfig(rank=4, alpha=8.0, dropout=0.1, targets=("q_proj", "v_proj", "down"))
  _assert_adapters_trained_base_frozen(straight, lora)
  state, ctx = straight["state"], straight["context"]
  assert set(state.params["attn"]) == {"q_proj", "v_proj"} and set(state.params["mlp"]) == {
      "down"}
  merged = lora_lib.merge(state.frozen, state.params, lora)
  exported = load_params(straight["export_dir"],
                         state_lib.abstract_sharded_params(ctx.model_config, ctx.mesh, ctx.rules))
  jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, atol=1e-7), exported, merged)
  adapters, loaded_lora = peft.load_adapter(f"{straight['export_dir']}/{peft.ADAPTER_DIR}",
                                            ctx.model_config)
  assert loaded_lora.targets == lora.targets and loaded_lora.scale == lora.scale
  jax.tree.map(np.testing.assert_array_equal, adapters, jax.tree.map(np.asarray, state.params))


def test_rl_with_lora_dropout_is_refused_before_the_run(tokenizer_path, tmp_path):
  config = _rl_config(tokenizer_path)
  config.rl.lora.dropout = 0.05
  with pytest.raises(ValueError, match="rl.lora.dropout must be 0 in RL"):
    rl_trainer.train(config, str(tmp_path))


def test_grpo_on_an_int8_base_trains_adapters_and_keeps_the_base_int8(tokenizer_path, tmp_path):
  config = _rl_config(tokenizer_path)
  config.rl.lora.base_quant = "int8"
  config.rl.grpo.kl_coef = 0.1
  result = rl_trainer.train(config, str(tmp_path))
  _assert_adapters_trained_base_frozen(result, lora_lib.LoraConfig(**LORA, base_quant="int8"))
  assert result["state"].frozen["params"]["blocks"]["mlp"]["up"].dtype == np.int8
  kl = [m["kl"] for m in read_metrics(str(tmp_path))]
  # the reference is the dequantized base, the first policy the int8 base with B = 0
  assert abs(kl[0]) < 1e-6 and kl[1] > 1e-5, kl
