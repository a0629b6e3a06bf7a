"""LoRA adapters: the model with adapters, merge, PEFT layout, state, configs."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rl_post import models
from rl_post.config_sections import from_section
from rl_post.models import hf, peft
from rl_post.models import lora as lora_lib
from rl_post.models.logprobs import hidden_states, shared_prefix_hidden_states
from rl_post.models.safetensors_io import SafetensorsDir
from rl_post.parallel import sharding
from rl_post.rl import config as rl_config
from rl_post.training import state as state_lib

LORA = lora_lib.LoraConfig(rank=4, alpha=8.0)
_apply = jax.jit(models.apply, static_argnums=0)  # one program per test, not op by op


# jitted: one program each instead of one per eager op (compiles dominate on 2 cores)
_init_adapters = jax.jit(lora_lib.init_adapters, static_argnums=(0, 1))
_merge = jax.jit(lora_lib.merge, static_argnums=2)


def _moved(adapters, seed=3, size=0.1):
  """Adapters with B (and A) moved off their init, as training would."""
  rng = np.random.default_rng(seed)
  return jax.tree.map(lambda x: np.asarray(x) + size * rng.standard_normal(x.shape).astype(
      np.float32), adapters)


@pytest.fixture
def setup(tiny_model_config, make_random_params):
  params = make_random_params(tiny_model_config)
  adapters = _init_adapters(tiny_model_config, LORA, jax.random.key(1))
  tokens = np.random.default_rng(2).integers(0, tiny_model_config.vocab_size, (2, 9))
  return tiny_model_config, params, adapters, jnp.asarray(tokens, jnp.int32)


def _with(config, params, adapters, tokens, lora=LORA):
  return _apply(config, params, tokens, lora=lora_lib.for_model(adapters, lora,
                                                                config.num_layers))


def test_adapters_at_init_give_the_base_logits_exactly(setup):
  config, params, adapters, tokens = setup
  assert all(not np.any(np.asarray(t["B_RxN"])) for m in adapters.values() for t in m.values())
  np.testing.assert_array_equal(_with(config, params, adapters, tokens),
                                _apply(config, params, tokens))


def test_merged_params_forward_equals_adapter_forward(setup):
  config, params, adapters, tokens = setup
  moved = _moved(adapters)
  with_adapters = _with(config, params, moved, tokens)
  merged = _apply(config, _merge(params, moved, LORA), tokens)
  base = _apply(config, params, tokens)
  assert np.abs(with_adapters - base).max() > 0.05  # the adapters do change the model
  # f32: (x W + s x A B) vs x (W + s A B), float rounding only
  np.testing.assert_allclose(merged, with_adapters, atol=2e-5, rtol=2e-5)


def test_only_targeted_projections_change_and_merge_keeps_the_rest(setup):
  config, params, adapters, tokens = setup
  lora = lora_lib.LoraConfig(rank=2, alpha=2.0, targets=("v_proj", "down"))
  adapters = _moved(_init_adapters(config, lora, jax.random.key(1)))
  assert set(adapters) == {"attn", "mlp"} and set(adapters["attn"]) == {"v_proj"}
  merged = _merge(params, adapters, lora)
  for module, name in (("attn", "q_proj"), ("attn", "k_proj"), ("mlp", "gate")):
    np.testing.assert_array_equal(merged["blocks"][module][name],
                                  params["blocks"][module][name])
  assert not np.allclose(merged["blocks"]["attn"]["v_proj"], params["blocks"]["attn"]["v_proj"])
  np.testing.assert_allclose(_apply(config, merged, tokens),
                             _with(config, params, adapters, tokens, lora), atol=2e-5)


def test_hidden_states_with_adapters_match_merged_also_with_shared_prefix(setup):
  config, params, adapters, _ = setup
  moved, group = _moved(adapters), 2
  rng = np.random.default_rng(5)
  tokens = np.repeat(rng.integers(0, config.vocab_size, (2, 10)), group, axis=0)
  tokens[:, 6:] = rng.integers(0, config.vocab_size, (4, 4))  # each row its own suffix
  tokens = jnp.asarray(tokens, jnp.int32)
  stacked = lora_lib.for_model(moved, LORA, config.num_layers)
  merged = _merge(params, moved, LORA)
  hidden = jax.jit(hidden_states, static_argnums=0)
  shared = jax.jit(shared_prefix_hidden_states, static_argnums=(0, 3, 4))
  want = hidden(config, merged, tokens)
  np.testing.assert_allclose(hidden(config, params, tokens, lora=stacked), want, atol=2e-5)
  np.testing.assert_allclose(shared(config, params, tokens, 6, group, lora=stacked), want,
                             atol=2e-5)


def test_gradients_reach_adapters_only(setup):
  config, params, adapters, tokens = setup

  def loss(trained, frozen):
    p, a = lora_lib.model_inputs(trained, frozen, LORA, config.num_layers)
    return _apply(config, p, tokens, lora=a).sum()

  g_adapters, g_base = jax.jit(jax.grad(loss, argnums=(0, 1)))(_moved(adapters), params)
  assert all(float(jnp.abs(g).max()) > 0 for g in jax.tree.leaves(g_adapters))
  # the base enters behind a stop_gradient: its gradient is zero (and, when it is not an
  # argument of the differentiation, as in the train step, is never formed)
  assert all(not np.any(np.asarray(g)) for g in jax.tree.leaves(g_base))


def test_dropout_applies_in_training_only(setup):
  config, params, adapters, tokens = setup
  lora = lora_lib.LoraConfig(rank=4, alpha=8.0, dropout=0.5)
  moved = _moved(adapters)
  plain = _with(config, params, moved, tokens, lora)  # no rng: no dropout
  np.testing.assert_allclose(plain, _with(config, params, moved, tokens), atol=1e-6)
  dropped = _apply(config, params, tokens, lora=lora_lib.for_model(
      moved, lora, config.num_layers, jax.random.key(7)))
  assert np.abs(dropped - plain).max() > 1e-3


def test_state_trains_adapters_only_and_keeps_the_base(setup):
  config, params, _, _ = setup
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape(1, 1, 1, 1),
                           ("data", "fsdp", "tensor", "context"))
  optimizer = optax.adam(1e-2)
  state = state_lib.create_train_state(config, optimizer, mesh, sharding.DEFAULT_RULES,
                                       jax.random.key(0), params=params, lora=LORA)
  assert state.frozen is not None and set(state.params) == {"attn", "mlp"}
  jax.tree.map(np.testing.assert_array_equal, state.frozen, params)
  adapter_shapes = {x.shape for x in jax.tree.leaves(state.params)}
  opt_shapes = {x.shape for x in jax.tree.leaves(state.opt_state) if x.ndim}
  assert opt_shapes == adapter_shapes  # moments of the adapters only
  n_adapter = sum(x.size for x in jax.tree.leaves(state.params))
  n_opt = sum(x.size for x in jax.tree.leaves(state.opt_state))
  assert n_opt == 2 * n_adapter + 1  # mu, nu, count
  abstract = state_lib.abstract_state(config, optimizer, mesh, sharding.DEFAULT_RULES, LORA)
  assert jax.tree.structure(abstract) == jax.tree.structure(state)


@pytest.mark.parametrize("lora", [None, LORA], ids=["full", "lora"])
def test_donated_params_are_held_once(setup, lora):
  """With `donate`, the state takes over a loaded checkpoint's buffers: the live
  arrays are the state's bytes, not the state plus the checkpoint beside it."""
  config, params, _, _ = setup
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape(1, 1, 1, 1),
                           ("data", "fsdp", "tensor", "context"))
  expected = jax.tree.map(np.asarray, params)
  before = sum(a.nbytes for a in jax.live_arrays())
  loaded = jax.tree.map(jnp.array, expected)  # a fresh copy, as a load makes
  state = state_lib.create_train_state(config, optax.adam(1e-2), mesh, sharding.DEFAULT_RULES,
                                       jax.random.key(0), params=loaded, lora=lora,
                                       donate=True)
  assert all(x.is_deleted() for x in jax.tree.leaves(loaded))
  del loaded
  state_bytes = sum(x.nbytes for x in jax.tree.leaves(state))
  assert sum(a.nbytes for a in jax.live_arrays()) - before == state_bytes
  jax.tree.map(np.testing.assert_array_equal, state.params if lora is None else state.frozen,
               expected)


def test_adapter_shardings_follow_the_rules_table(tiny_model_config):
  axes = lora_lib.adapter_logical_axes(tiny_model_config, LORA)
  mesh_axes = ("data", "fsdp", "tensor", "context")
  spec = lambda leaf, rules=sharding.DEFAULT_RULES: sharding.logical_to_spec(leaf, rules,
                                                                             mesh_axes)
  P = jax.sharding.PartitionSpec
  # each adapter dim is split like the weight dim it pairs with; the rank is replicated
  assert spec(axes["attn"]["q_proj"]["A_KxR"]) == P(None, "fsdp", None)
  assert spec(axes["attn"]["q_proj"]["B_RxN"]) == P(None, None, "tensor", None)
  assert spec(axes["attn"]["o_proj"]["A_KxR"]) == P(None, "tensor", None, None)
  assert spec(axes["mlp"]["down"]["A_KxR"]) == P(None, "tensor", None)
  assert spec(axes["mlp"]["down"]["B_RxN"]) == P(None, None, "fsdp")
  sharded_rank = [r for r in sharding.DEFAULT_RULES if r[0] != "lora_rank"] + [
      ("lora_rank", "tensor")]
  assert spec(axes["mlp"]["up"]["A_KxR"], sharded_rank) == P(None, "fsdp", "tensor")
  rules = [r for r in sharding.DEFAULT_RULES if r[0] != "lora_rank"]
  with pytest.raises(ValueError, match="'lora_rank' has no sharding rule"):
    spec(axes["attn"]["q_proj"]["A_KxR"], rules)


def test_peft_layout_names_shapes_and_merge_formula(setup, tmp_path):
  config, params, adapters, tokens = setup
  moved = _moved(adapters)
  directory = peft.save_adapter(str(tmp_path / "adapter"), config, moved, LORA)
  cfg = json.load(open(os.path.join(directory, peft.CONFIG_FILE)))
  assert (cfg["peft_type"], cfg["r"], cfg["lora_alpha"]) == ("LORA", 4, 8.0)
  assert cfg["target_modules"] == sorted(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                          "up_proj", "down_proj"])
  stored = SafetensorsDir(directory)
  e, h, k, d, f = 32, 4, 2, 8, 64
  want = {"self_attn.q_proj": (e, h * d), "self_attn.k_proj": (e, k * d),
          "self_attn.v_proj": (e, k * d), "self_attn.o_proj": (h * d, e),
          "mlp.gate_proj": (e, f), "mlp.up_proj": (e, f), "mlp.down_proj": (f, e)}
  names = set()
  for i in range(config.num_layers):
    for module, (fan_in, fan_out) in want.items():
      prefix = f"base_model.model.model.layers.{i}.{module}"
      assert stored.shape(f"{prefix}.lora_A.weight") == (4, fan_in)
      assert stored.shape(f"{prefix}.lora_B.weight") == (fan_out, 4)
      names |= {f"{prefix}.lora_A.weight", f"{prefix}.lora_B.weight"}
  assert set(stored.names()) == names
  # PEFT's merge, W_hf + (alpha / r) B_hf @ A_hf on the HF tensors, is our merged export
  base_dir = hf.save(str(tmp_path / "base"), config, params)
  merged_dir = hf.save(str(tmp_path / "merged"), config, _merge(params, moved, LORA))
  base_t, merged_t = SafetensorsDir(base_dir), SafetensorsDir(merged_dir)
  for i in range(config.num_layers):
    for module in want:
      prefix = f"model.layers.{i}.{module}"
      lora_a = stored.get(f"base_model.model.{prefix}.lora_A.weight")
      lora_b = stored.get(f"base_model.model.{prefix}.lora_B.weight")
      np.testing.assert_allclose(base_t.get(f"{prefix}.weight") + 2.0 * lora_b @ lora_a,
                                 merged_t.get(f"{prefix}.weight"), atol=1e-6, err_msg=prefix)
  # and the merged export, loaded back, is the adapter forward
  _, loaded = hf.load(merged_dir)
  np.testing.assert_allclose(_apply(config, loaded, tokens),
                             _with(config, params, moved, tokens), atol=2e-5)


def test_peft_adapter_round_trips_exactly(setup, tmp_path):
  config, _, adapters, _ = setup
  lora = lora_lib.LoraConfig(rank=4, alpha=8.0, targets=("q_proj", "o_proj", "up"))
  moved = _moved(_init_adapters(config, lora, jax.random.key(1)))
  directory = peft.save_adapter(str(tmp_path), config, moved, lora)
  loaded, loaded_lora = peft.load_adapter(directory, config)
  assert (loaded_lora.rank, loaded_lora.alpha, loaded_lora.targets) == (4, 8.0, lora.targets)
  jax.tree.map(np.testing.assert_array_equal, loaded, jax.tree.map(np.asarray, moved))
  bigger = config.__class__(**dict(config.to_dict(), embed_dim=48))
  with pytest.raises(ValueError, match=r"o_proj.lora_B.weight has shape \(32, 4\), "
                                       r"expected \(48, 4\)"):
    peft.load_adapter(directory, bigger)


@pytest.mark.parametrize("section,message", [
    (dict(rank=-1), "rl.lora.rank must be an int >= 0"),
    (dict(rank=2.5), "rl.lora.rank must be an int >= 0"),
    (dict(rank=4, alpha=0.0), "rl.lora.alpha must be > 0"),
    (dict(rank=4, targets=("q_proj", "attn_out")), r"rl.lora.targets names unknown module\(s\) "
                                                   r"\['attn_out'\]"),
    (dict(rank=4, targets=()), "rl.lora.targets must name at least one module"),
    (dict(rank=4, dropout=1.0), r"rl.lora.dropout must be in \[0, 1\)"),
    (dict(rank=4, dropout=0.1), "rl.lora.dropout must be 0 in RL"),
    (dict(rank=4, ranks=4), r"rl.lora: unknown field\(s\) \['ranks'\]"),
])
def test_bad_lora_sections_name_the_field(section, message):
  rl = rl_config.section_defaults()
  rl["lora"] = dict(rl["lora"], **section)
  with pytest.raises(ValueError, match=message):
    rl_config.load(rl)


def test_lora_section_defaults_are_off_and_sft_parses_its_own():
  rl = rl_config.load(rl_config.section_defaults())
  assert not rl.lora.enabled and rl.lora == lora_lib.LoraConfig()
  from rl_post.sft.trainer import SFTConfig
  sft = from_section(SFTConfig, dict(lora=dict(rank=8, dropout=0.1)), "sft")
  assert (sft.lora.rank, sft.lora.dropout, sft.lora.scale) == (8, 0.1, 2.0)
  with pytest.raises(ValueError, match="sft.lora.rank must be an int >= 0"):
    from_section(SFTConfig, dict(lora=dict(rank=-2)), "sft")
