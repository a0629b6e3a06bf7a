"""Rotary position embeddings (half-split layout, as in Llama/Qwen2 HF)."""

import math

import jax.numpy as jnp
import numpy as np

from rl_post.models.config import RopeScaling


def inverse_frequencies(head_dim: int, theta: float,
                        scaling: RopeScaling | None = None) -> np.ndarray:
  """The D/2 rotation frequencies, with optional Llama-3 scaling."""
  inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
  if scaling is None:
    return inv_freq.astype(np.float32)
  low_wavelen = scaling.original_max_position / scaling.low_freq_factor
  high_wavelen = scaling.original_max_position / scaling.high_freq_factor
  wavelen = 2 * math.pi / inv_freq
  smooth = ((scaling.original_max_position / wavelen - scaling.low_freq_factor)
            / (scaling.high_freq_factor - scaling.low_freq_factor))
  scaled = np.where(wavelen > low_wavelen, inv_freq / scaling.factor, inv_freq)
  mid = (wavelen <= low_wavelen) & (wavelen >= high_wavelen)
  blended = (1 - smooth) * inv_freq / scaling.factor + smooth * inv_freq
  return np.where(mid, blended, scaled).astype(np.float32)


def apply_rope(x_BxTxHxD, positions_BxT, inv_freq):
  """Rotates pairs (x[..., i], x[..., i + D/2]) by position * inv_freq[i]."""
  angles_BxTxF = positions_BxT[..., None].astype(jnp.float32) * inv_freq[None, None, :]
  sin = jnp.sin(angles_BxTxF)[:, :, None, :]
  cos = jnp.cos(angles_BxTxF)[:, :, None, :]
  x = x_BxTxHxD.astype(jnp.float32)
  x1, x2 = jnp.split(x, 2, axis=-1)
  rotated = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
  return rotated.astype(x_BxTxHxD.dtype)
