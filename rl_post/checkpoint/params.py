"""Exporting and importing bare model params (no optimizer state).

SFT writes its final params here; RL starts its policy and its frozen
reference model from them. Params are restored straight into their
shardings, and a structure or shape mismatch names the offending key.
"""

import json
import os

import jax
import orbax.checkpoint as ocp

from rl_post.models import ModelConfig

_PARAMS_DIR, _CONFIG_FILE = "params", "model_config.json"


def save_params(directory: str, model_config: ModelConfig, params) -> str:
  """Writes params and their model config under `directory`; returns it."""
  directory = os.path.abspath(directory)
  os.makedirs(directory, exist_ok=True)
  with ocp.StandardCheckpointer() as checkpointer:
    checkpointer.save(os.path.join(directory, _PARAMS_DIR), params, force=True)
  with open(os.path.join(directory, _CONFIG_FILE), "w") as f:
    json.dump(model_config.to_dict(), f, indent=2)
  return directory


def load_model_config(directory: str) -> ModelConfig:
  path = os.path.join(directory, _CONFIG_FILE)
  if not os.path.exists(path):
    raise FileNotFoundError(f"no exported params in {directory!r} (missing {_CONFIG_FILE}); "
                            "point it at the `export/` folder of a finished SFT run")
  with open(path) as f:
    return ModelConfig.from_dict(json.load(f))


def load_params(directory: str, abstract_params):
  """Restores params into `abstract_params` (ShapeDtypeStructs with shardings)."""
  path = os.path.join(os.path.abspath(directory), _PARAMS_DIR)
  if not os.path.isdir(path):
    raise FileNotFoundError(f"no params checkpoint at {path!r}")
  with ocp.StandardCheckpointer() as checkpointer:
    stored = checkpointer.metadata(path)
    stored_tree = getattr(stored, "item_metadata", stored)
    stored_tree = getattr(stored_tree, "tree", stored_tree)
    _check_matches(stored_tree, abstract_params)
    return checkpointer.restore(path, abstract_params)


def _check_matches(stored_tree, abstract_params):
  stored = {jax.tree_util.keystr(p): tuple(getattr(v, "shape", ()) or ())
            for p, v in jax.tree_util.tree_leaves_with_path(stored_tree)}
  wanted = {jax.tree_util.keystr(p): tuple(v.shape)
            for p, v in jax.tree_util.tree_leaves_with_path(abstract_params)}
  missing = sorted(set(wanted) - set(stored))
  extra = sorted(set(stored) - set(wanted))
  if missing or extra:
    raise ValueError(f"params checkpoint does not match the model: missing {missing[:5]}, "
                     f"unexpected {extra[:5]}")
  for key, shape in wanted.items():
    if stored[key] != shape:
      raise ValueError(f"params checkpoint {key} has shape {stored[key]}, model expects {shape}")
