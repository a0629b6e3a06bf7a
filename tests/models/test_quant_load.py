"""A checkpoint read straight into a quantized base equals quantizing its float load."""

import functools

import jax
import numpy as np
import pytest

from rl_post import models
from rl_post.models import gguf_q4, hf, pretrained, quant, quant_load, safetensors_io

_quantize_base = jax.jit(quant.quantize_base, static_argnums=(1, 2))


@pytest.fixture
def checkpoint(tmp_path, make_random_params):
  config = models.ModelConfig(vocab_size=50, num_layers=2, embed_dim=64, num_heads=4,
                              num_kv_heads=2, head_dim=16, mlp_dim=96, qkv_bias=True)
  return hf.save(str(tmp_path / "ckpt"), config, make_random_params(config, seed=5))


@pytest.mark.parametrize("base_quant, dtype", [("int8", "float32"), ("nf4", "float32"),
                                               ("q4_1", "float32"), ("int4", "bfloat16")])
def test_place_quantized_equals_quantize_base_of_the_float_load(checkpoint, base_quant, dtype):
  config, params = hf.load(checkpoint, dtype=dtype)
  expected = _quantize_base(params, base_quant, 16)
  _, frozen = pretrained.load_base(checkpoint, base_quant, 16, dtype=dtype)
  assert jax.tree.structure(frozen) == jax.tree.structure(expected)
  for path, a, b in zip(jax.tree_util.tree_flatten_with_path(frozen)[0],
                        jax.tree.leaves(frozen), jax.tree.leaves(expected)):
    assert (np.asarray(a).dtype, np.shape(a)) == (b.dtype, b.shape), path[0]
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=str(path[0]))


def test_each_projection_is_read_once_and_never_placed_in_float(checkpoint, monkeypatch):
  config = hf.read_config(checkpoint)
  source = safetensors_io.SafetensorsDir(checkpoint)
  reads = []
  get = source.get
  monkeypatch.setattr(source, "get", lambda name: reads.append(name) or get(name))
  place = hf.place_params

  @functools.wraps(place)
  def placed(config, source, **kwargs):
    params = place(config, source, **kwargs)
    floats = {(m, t) for m, targets in params["blocks"].items() for t in targets}
    assert not floats & {(m, t) for _, m, t in quant.PROJECTION_PATHS}, floats
    return params

  monkeypatch.setattr(hf, "place_params", placed)
  frozen = quant_load.place_quantized(config, source, "nf4", 16)
  assert frozen["params"]["blocks"]["attn"]["q_proj"].dtype == np.uint8
  projections = [n for n in reads if n in set(gguf_q4.projection_names(config))]
  assert len(projections) == len(set(projections)) == 7 * config.num_layers


def test_a_block_size_that_does_not_divide_is_named(checkpoint):
  config = hf.read_config(checkpoint)
  with pytest.raises(ValueError, match=r"lora.base_quant_block_size=64 does not divide the "
                     r"last input dim of attn.o_proj \(16\)"):
    quant_load.place_quantized(config, safetensors_io.SafetensorsDir(checkpoint), "nf4", 64)
