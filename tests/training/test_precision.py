"""bf16 compute over f32 master weights: dtypes kept, loss close to f32."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rl_post import models
from rl_post.rl import config as rl_config
from rl_post.models.logprobs import sequence_logprobs
from rl_post.rl.train_step import make_ref_logprobs, make_rl_train_step, rollout_batch
from rl_post.sampling.sampler import SamplingConfig, generate
from rl_post.training import precision
from rl_post.training.state import TrainState

MODEL = models.ModelConfig(vocab_size=61, num_layers=2, embed_dim=32, num_heads=4,
                           num_kv_heads=2, head_dim=8, mlp_dim=64)
B, G, P, R = 2, 4, 3, 6


def test_compute_config_sets_compute_dtype_only():
  bf16 = precision.compute_config(MODEL, "bfloat16")
  assert (bf16.dtype, bf16.param_dtype) == ("bfloat16", "float32")
  assert precision.compute_config(MODEL, "") is MODEL
  with pytest.raises(ValueError, match="f32 master weights"):
    precision.compute_config(models.ModelConfig(**{**MODEL.to_dict(), "param_dtype": "bfloat16"}),
                             "bfloat16")
  with pytest.raises(ValueError, match="compute_dtype"):
    precision.compute_config(MODEL, "float16")
  with pytest.raises(ValueError, match="rl.compute_dtype"):
    rl_config.load({"compute_dtype": "fp8"})


def _batch(rl, params):
  n, t = B * G, P + R
  k1, k2 = jax.random.split(jax.random.key(3))
  tokens = jax.random.randint(k1, (n, t), 0, MODEL.vocab_size)
  lens = jax.random.randint(k2, (n,), 1, R + 1)
  pos = jnp.arange(t)[None, :]
  mask = ((pos >= P) & (pos < P + lens[:, None])).astype(jnp.int32)
  logp, _ = sequence_logprobs(MODEL, params, tokens)
  rewards = np.array([1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0], np.float32)
  return rollout_batch(rl, np.asarray(tokens), np.asarray(mask), np.asarray(logp * mask),
                       rewards, ref_logp_NxT=np.asarray(logp * mask))


def _step(model_config, rl, params, batch):
  optimizer = optax.adam(1e-3)
  state = TrainState(step=jnp.int32(0), params=params, opt_state=optimizer.init(params),
                     rng=jax.random.key(1), critic=None, critic_opt_state=None)
  step = jax.jit(make_rl_train_step(model_config, rl, optimizer))
  return step(state, batch)


def test_bf16_compute_keeps_f32_state_and_f32_logprobs():
  rl = rl_config.load(dict(batch_size=B, num_generations=G, max_new_tokens=R, max_prompt_len=P,
                           logprob_chunk=4, compute_dtype="bfloat16", grpo=dict(kl_coef=0.05)))
  params = models.init_params(MODEL, jax.random.key(0))
  batch = _batch(rl, params)
  bf16 = precision.compute_config(MODEL, rl.compute_dtype)
  logp, entropy = jax.jit(lambda p, t: sequence_logprobs(bf16, p, t, chunk=4))(
      params, batch["tokens"])
  assert logp.dtype == entropy.dtype == jnp.float32
  new_32, m32 = _step(MODEL, rl, params, batch)
  new_16, m16 = _step(bf16, rl, params, batch)
  assert precision.floating_dtypes(new_16.params) == {"float32"}
  assert precision.floating_dtypes(new_16.opt_state) == {"float32"}
  assert float(m16["guard/skipped"]) == 0.0
  # same loss and update direction up to bf16 rounding, but not bit-identical (bf16 was used)
  np.testing.assert_allclose(float(m16["loss"]), float(m32["loss"]), rtol=0.05, atol=2e-3)
  np.testing.assert_allclose(float(m16["grad_norm"]), float(m32["grad_norm"]), rtol=0.05)
  assert float(m16["grad_norm"]) != float(m32["grad_norm"])
  d32 = jax.tree.map(lambda a, b: a - b, new_32.params, params)
  d16 = jax.tree.map(lambda a, b: a - b, new_16.params, params)
  flat32 = np.concatenate([np.ravel(x) for x in jax.tree.leaves(d32)])
  flat16 = np.concatenate([np.ravel(x) for x in jax.tree.leaves(d16)])
  cos = flat32 @ flat16 / (np.linalg.norm(flat32) * np.linalg.norm(flat16))
  assert cos > 0.95, cos


def _dot_results(text):
  """The result element types of every dot_general in a lowered program."""
  return [line.rsplit("->", 1)[-1].strip() for line in text.splitlines()
          if "stablehlo.dot_general" in line]


def test_bf16_update_and_reference_accumulate_every_matmul_in_f32():
  """No bf16 x bf16 -> bf16 product anywhere in the update or the reference
  forward: each accumulates in f32 (also XLA:CPU's ~2x faster bf16 path)."""
  rl = rl_config.load(dict(batch_size=B, num_generations=G, max_new_tokens=R, max_prompt_len=P,
                           logprob_chunk=4, compute_dtype="bfloat16", grpo=dict(kl_coef=0.05)))
  params = models.init_params(MODEL, jax.random.key(0))
  batch = _batch(rl, params)
  bf16 = precision.compute_config(MODEL, rl.compute_dtype)
  optimizer = optax.adam(1e-3)
  state = TrainState(step=jnp.int32(0), params=params, opt_state=optimizer.init(params),
                     rng=jax.random.key(1), critic=None, critic_opt_state=None)
  step_text = jax.jit(make_rl_train_step(bf16, rl, optimizer)).lower(state, batch).as_text()
  ref_text = jax.jit(make_ref_logprobs(bf16, rl)).lower(params, batch["tokens"]).as_text()
  for text in (step_text, ref_text):
    results = _dot_results(text)
    assert results and not [r for r in results if r.endswith("xbf16>")], results


def test_decode_weights_are_cast_to_the_compute_dtype_once():
  bf16 = precision.compute_config(MODEL, "bfloat16")
  params = models.init_params(MODEL, jax.random.key(0))
  weights = models.decode_weights(bf16, params)
  leaves = jax.tree.leaves_with_path(weights["layers"])
  assert weights["head_ExV"].dtype == jnp.bfloat16
  assert {x.dtype for _, x in leaves if x.ndim >= 2} == {jnp.dtype(jnp.bfloat16)}
  assert {x.dtype for _, x in leaves if x.ndim == 1} == {jnp.dtype(jnp.float32)}  # norm scales
  assert models.decode_weights(MODEL, params)["head_ExV"].dtype == jnp.float32


def test_bf16_sampler_logprobs_match_the_bf16_trainer():
  """The sampler's behaviour log-probs under bf16 compute agree with the
  trainer's bf16 recomputation (both read bf16-rounded weights)."""
  bf16 = precision.compute_config(MODEL, "bfloat16")
  params = models.init_params(MODEL, jax.random.key(0))
  prompts = jax.random.randint(jax.random.key(1), (4, 5), 4, MODEL.vocab_size)
  lens = jnp.array([5, 3, 1, 4], jnp.int32)
  out = generate(params, prompts, lens, jax.random.key(2), model_config=bf16,
                 config=SamplingConfig(max_new_tokens=8), eos_id=None, pad_id=0)
  logp, _ = sequence_logprobs(bf16, params, out.tokens_BxT)
  mask = np.asarray(out.loss_mask_BxT) > 0
  assert mask.sum() == 4 * 8
  np.testing.assert_allclose(np.asarray(out.logp_BxT)[mask], np.asarray(logp)[mask], atol=0.05)
