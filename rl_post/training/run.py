"""What every entry point does before its loop: workdir, config, mesh.

`RunContext` gathers the pieces both trainers need so neither duplicates
them: the resolved config written to `workdir/config.json`, the mesh and
sharding rules, the model config and the tokenizer.
"""

import dataclasses
import functools
import json
import os
import tempfile
from typing import Any

import jax
import ml_collections

from rl_post.data.hf_tokenizer import load_tokenizer
from rl_post.data.tokenizer import Tokenizer
from rl_post.errors import ConfigError, MissingInputError
from rl_post.models import ModelConfig
from rl_post.models import pretrained
from rl_post.parallel import distributed
from rl_post.parallel import mesh as mesh_lib
from rl_post.parallel import sharding


def config_to_json(config: ml_collections.ConfigDict) -> str:
  return json.dumps(config.to_dict(), indent=2, sort_keys=True, default=repr)


def ensure_workdir(workdir: str, flag: str = "--workdir") -> str:
  """Creates `workdir` if needed and checks that files can be written in it.

  Raises:
    ConfigError: naming `flag`, when the path is a file, cannot be created or
      is not writable (checked by writing, so read-only mounts count too).
  """
  if os.path.exists(workdir) and not os.path.isdir(workdir):
    raise ConfigError(flag, workdir, "is a file, not a directory")
  try:
    os.makedirs(workdir, exist_ok=True)
  except OSError as e:
    raise ConfigError(flag, workdir, f"cannot be created ({e.strerror})") from None
  try:
    with tempfile.TemporaryFile(dir=workdir):
      pass
  except OSError as e:
    raise ConfigError(flag, workdir, f"is not writable ({e.strerror})") from None
  return workdir


def write_config(workdir: str, config: ml_collections.ConfigDict):
  ensure_workdir(workdir)
  with open(os.path.join(workdir, "config.json"), "w") as f:
    f.write(config_to_json(config))


def pretrained_path(config: ml_collections.ConfigDict) -> str:
  """`config.pretrained.path` (a .gguf file or HF checkpoint dir), or ""."""
  section = config.get("pretrained")
  return (section.get("path") or "") if section else ""


def padded_vocab_size(vocab_size: int, config: ml_collections.ConfigDict) -> int:
  """`vocab_size` rounded up to a multiple of `mesh.tensor` (the vocab axis is split over it)."""
  tensor = int(config.get("mesh", {}).get("tensor", 1) or 1)
  multiple = max(tensor, 1)
  return -(-vocab_size // multiple) * multiple


def model_config_from(config: ml_collections.ConfigDict, tokenizer=None) -> ModelConfig:
  """The `model` section as a ModelConfig; vocab_size defaults to the tokenizer's.

  With `config.pretrained.path`, the checkpoint gives the architecture and
  the `model` section only overrides the fields it sets (e.g. attention_impl).
  """
  values = dict(config.model.to_dict()) if "model" in config else {}
  if pretrained_path(config):
    base = pretrained.read_config(pretrained_path(config),
                                  dtype=config.pretrained.get("dtype") or None)
    overrides = {k: v for k, v in values.items() if not (k == "vocab_size" and not v)}
    values = {**base.to_dict(), **overrides}
  if values.get("vocab_size") in (None, 0) and tokenizer is not None:
    values["vocab_size"] = padded_vocab_size(tokenizer.vocab_size, config)
  try:
    return ModelConfig.from_dict(values)
  except TypeError as e:
    raise ValueError(f"model: {e}") from None


@dataclasses.dataclass
class RunContext:
  config: ml_collections.ConfigDict
  workdir: str
  mesh: jax.sharding.Mesh
  rules: Any
  tokenizer: Tokenizer
  model_config: ModelConfig
  root_key: jax.Array

  def key(self, stream: str) -> jax.Array:
    """A named PRNG stream derived from the root key (stable across runs)."""
    return jax.random.fold_in(self.root_key, _stable_hash(stream))

  def batch_divisor(self) -> int:
    """Batch sizes must be multiples of the mesh's batch axes."""
    spec = sharding.batch_sharding(self.mesh, self.rules, 1).spec[0]
    axes = (spec,) if isinstance(spec, str) else (spec or ())
    size = 1
    for axis in axes:
      size *= self.mesh.shape[axis]
    return size


def _stable_hash(name: str) -> int:
  return sum((i + 1) * ord(c) for i, c in enumerate(name)) % (2 ** 31)


def scoped_run(train_fn):
  """Decorates a trainer entry point that calls `setup_run`.

  `setup_run` puts the run's mesh (`jax.set_mesh`) and activation rules in
  context for everything the run traces; this undoes both when the entry
  point returns or raises, so a later run or jitted function in the same
  process starts from what its caller had.
  """
  @functools.wraps(train_fn)
  def wrapped(*args, **kwargs):
    previous_rules = sharding.set_activation_rules(sharding.DEFAULT_RULES)
    try:
      with jax.set_mesh(None):  # exit restores the caller's mesh
        return train_fn(*args, **kwargs)
    finally:
      sharding.set_activation_rules(previous_rules)
  return wrapped


def setup_run(config: ml_collections.ConfigDict, workdir: str, tokenizer=None) -> RunContext:
  """Validates the shared sections and writes workdir/config.json.

  `tokenizer`: use this one instead of loading `tokenizer.path` (e.g. the
  call-vocabulary tokenizer of `episodes.tokenizer="call_vocab"`).

  Starts multi-host JAX first when `config.distributed` asks for it; then
  the mesh spans every process's devices and only process 0 writes files.
  Puts the mesh and rules in context: call it inside a `scoped_run` entry point.
  """
  if not workdir:
    raise ConfigError("--workdir", workdir, "is required")
  for name in ("seed", "mesh", "tokenizer"):
    if name not in config:
      raise ValueError(f"config is missing the {name!r} section")
  distributed.initialize(config.get("distributed"))
  if distributed.is_primary():
    write_config(workdir, config)
  else:
    ensure_workdir(workdir)
  rules = tuple(tuple(r) for r in config.get("sharding_rules", sharding.DEFAULT_RULES))
  mesh = mesh_lib.make_mesh(dict(config.mesh))
  sharding.validate_rules(rules, mesh.axis_names)
  jax.set_mesh(mesh)  # the run's mesh in context: model activations follow `rules` too
  sharding.set_activation_rules(rules)
  if tokenizer is None:
    if not os.path.exists(config.tokenizer.path):
      raise MissingInputError("tokenizer.path", config.tokenizer.path,
                              "does not exist; build it with experiments/build_tokenizer.py "
                              "(same --config.tokenizer.path)")
    tokenizer = load_tokenizer(config.tokenizer.path)
  model_config = model_config_from(config, tokenizer)
  if model_config.vocab_size < tokenizer.vocab_size:
    raise ValueError(f"model.vocab_size ({model_config.vocab_size}) is smaller than the "
                     f"tokenizer's vocabulary ({tokenizer.vocab_size})")
  return RunContext(config=config, workdir=workdir, mesh=mesh, rules=rules,
                    tokenizer=tokenizer, model_config=model_config,
                    root_key=jax.random.key(int(config.seed)))


def pretrained_params(ctx: RunContext):
  """Params of `config.pretrained.path` placed on the run's mesh, or None."""
  path = pretrained_path(ctx.config)
  if not path:
    return None
  stored, params = pretrained.load(path, mesh=ctx.mesh, rules=ctx.rules,
                                   dtype=ctx.model_config.param_dtype)
  shape_fields = ("vocab_size", "num_layers", "embed_dim", "num_heads", "num_kv_heads",
                  "head_dim", "mlp_dim", "tie_embeddings", "qkv_bias")
  diff = {k: (getattr(stored, k), getattr(ctx.model_config, k)) for k in shape_fields
          if getattr(stored, k) != getattr(ctx.model_config, k)}
  if diff:
    raise ValueError(f"pretrained.path={path!r} holds a model that differs from config.model "
                     f"in {diff} (stored, configured)")
  return params
