"""Exporting and importing bare model params (no optimizer state).

SFT writes its final params here; RL starts its policy and its frozen
reference model from them. Params are restored straight into their
shardings, and a structure or shape mismatch names the offending key.
"""

import json
import os

import jax
import orbax.checkpoint as ocp

from rl_post import errors
from rl_post.data import tokenizer_fingerprint
from rl_post.models import ModelConfig
from rl_post.models.config import read_config_file

_PARAMS_DIR, _CONFIG_FILE = "params", "model_config.json"


def save_params(directory: str, model_config: ModelConfig, params, tokenizer=None) -> str:
  """Writes params and their model config (and with `tokenizer`, its fingerprint:
  `rl_post.data.tokenizer_fingerprint`) under `directory`; returns it."""
  directory = os.path.abspath(directory)
  os.makedirs(directory, exist_ok=True)
  with ocp.StandardCheckpointer() as checkpointer:
    checkpointer.save(os.path.join(directory, _PARAMS_DIR), params, force=True)
  with open(os.path.join(directory, _CONFIG_FILE), "w") as f:
    json.dump(model_config.to_dict(), f, indent=2)
  if tokenizer is not None:
    tokenizer_fingerprint.write(directory, tokenizer)
  return directory


def load_model_config(directory: str) -> ModelConfig:
  """The ModelConfig an export was saved with.

  Raises:
    FileNotFoundError: `directory` has no model_config.json.
    ValueError: model_config.json is not JSON or not a model config.
  """
  path = os.path.join(directory, _CONFIG_FILE)
  if not os.path.exists(path):
    raise FileNotFoundError(f"no exported params in {directory!r} (missing {_CONFIG_FILE}); "
                            "point it at the `export/` folder of a finished SFT run")
  return ModelConfig.from_dict(read_config_file(path))


def load_params(directory: str, abstract_params):
  """Restores params into `abstract_params` (ShapeDtypeStructs with shardings).

  Raises:
    FileNotFoundError: the export has no params/ folder.
    ValueError: the stored params do not match `abstract_params`, or their
      files are truncated or corrupt.
  """
  path = os.path.join(os.path.abspath(directory), _PARAMS_DIR)
  if not os.path.isdir(path):
    raise FileNotFoundError(f"the export {directory!r} has no {_PARAMS_DIR}/ folder (only "
                            f"{_CONFIG_FILE}?): it is incomplete; export it again")
  with ocp.StandardCheckpointer() as checkpointer:
    _check_matches(_stored_tree(checkpointer, path), abstract_params)
    try:
      return checkpointer.restore(path, abstract_params)
    except Exception as e:  # orbax and tensorstore raise bare Exceptions on bad files
      raise ValueError(f"params checkpoint {path!r} is truncated or corrupt: "
                       f"{innermost_error(e)}") from e


def _stored_tree(checkpointer, path: str):
  """The stored params' metadata tree; ValueError if the checkpoint's files are unreadable."""
  try:
    stored = checkpointer.metadata(path)
  except Exception as e:  # as in load_params
    raise ValueError(f"params checkpoint {path!r} is unreadable: {innermost_error(e)}") from e
  stored_tree = getattr(stored, "item_metadata", stored)
  stored_tree = getattr(stored_tree, "tree", stored_tree)
  if not jax.tree_util.tree_leaves(stored_tree):
    raise ValueError(f"params checkpoint {path!r} is corrupt: its metadata lists no arrays")
  return stored_tree


def innermost_error(e: BaseException) -> str:
  """"<type>: <first line>" of the innermost exception `e` was raised from: tensorstore's
  own message (e.g. a byte range past the end of a file) under orbax's wrappers."""
  e = errors.root_cause(e)
  return f"{type(e).__name__}: " + (str(e).strip().splitlines() or ["no message"])[0][:300]


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
