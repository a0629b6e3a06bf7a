"""What every entry point does before its loop: workdir, config, mesh.

  sections = run_sections(config)         # parsed once, at the trainer's entry point
  ctx = setup_run(config, workdir, sections=sections, tokenizer=...)

`RunSections` is the typed view of the run-wide sections (seed, mesh,
sharding rules, tokenizer, model, pretrained, distributed); `setup_run`
reads only it. `RunContext` gathers the pieces both trainers need so neither
duplicates them: the sections, the mesh and sharding rules, the model config,
the tokenizer, and the raw config, kept only to write the resolved config to
`workdir/config.json` (and to name what a resume changed, against the
stored one). The `compile` section is not among them: `rl_post.cli` applies
it before the entry point runs, so the cache is on before anything compiles.
"""

import dataclasses
import functools
import json
import os
from typing import Any, Mapping

import jax
import ml_collections
from absl import logging

from rl_post.data import batching, tokenizer_fingerprint
from rl_post.data.hf_tokenizer import load_tokenizer
from rl_post.data.tokenizer import Tokenizer
from rl_post import errors
from rl_post.errors import ConfigError, MissingInputError
from rl_post.models import ModelConfig, abstract_params
from rl_post.models import gguf_q4, pretrained, quant
from rl_post.output_paths import ensure_workdir
from rl_post.config_sections import from_section
from rl_post.parallel import distributed
from rl_post.parallel import mesh as mesh_lib
from rl_post.parallel import sharding


def config_to_json(config: ml_collections.ConfigDict) -> str:
  return json.dumps(config.to_dict(), indent=2, sort_keys=True, default=repr)


CONFIG_HISTORY = "config_history.jsonl"


def write_config(workdir: str, config: ml_collections.ConfigDict, step: int | None = None):
  """workdir/config.json: `config`. A run resumed at `step` with other settings than
  the config.json it replaces appends what changed to workdir/config_history.jsonl
  ({"step", "changes": {field: [old, new]}}) and logs it, so the settings its earlier
  steps ran with are not lost."""
  ensure_workdir(workdir)
  changes = setting_changes(stored_config(workdir), config) if step is not None else {}
  if changes:
    logging.warning("resuming at step %d with changed settings: %s", step,
                    "; ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in changes.items()))
    with open(os.path.join(workdir, CONFIG_HISTORY), "a") as f:
      f.write(json.dumps({"step": step, "changes": changes}) + "\n")
  with open(os.path.join(workdir, "config.json"), "w") as f:
    f.write(config_to_json(config))


def check_seed(config: ml_collections.ConfigDict):
  """`seed` seeds JAX keys and numpy generators: an int in [0, 2**32)."""
  seed = config.get("seed")
  if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2 ** 32:
    raise ConfigError("seed", seed, "must be an int in [0, 2**32)")


def check_run_layout(workdir: str):
  """Raises ConfigError when a trainer's own paths in `workdir` are taken by the wrong kind
  of entry (a file named checkpoints/ would stall the first save for minutes)."""
  for name, want_dir in (("checkpoints", True), ("config.json", False),
                         (CONFIG_HISTORY, False)):
    path = os.path.join(workdir, name)
    if os.path.exists(path) and os.path.isdir(path) != want_dir:
      kind = "a file" if want_dir else "a directory"
      raise ConfigError("--workdir", workdir, f"has {kind} named {name!r} where the run "
                        f"keeps its {'checkpoint directory' if want_dir else 'config file'}")


def stored_config(workdir: str) -> dict | None:
  """The config.json a previous run wrote in `workdir` (a dict), or None."""
  try:
    with open(os.path.join(workdir, "config.json")) as f:
      return json.load(f)
  except (OSError, ValueError):
    return None


def _flat(tree, prefix=""):
  if not isinstance(tree, dict):
    return {prefix[:-1]: tree}
  out = {}
  for k, v in tree.items():
    out.update(_flat(v, f"{prefix}{k}."))
  return out


def setting_changes(before: dict | None, after: ml_collections.ConfigDict,
                    sections: tuple[str, ...] = ("",)) -> dict[str, list]:
  """{field: [old, new]} for the fields under `sections` ("" is every field) that
  differ between a stored config.json (`before`) and `after`; "<unset>" for a field
  one of them lacks."""
  if not before:
    return {}
  old, new = _flat(before), _flat(json.loads(config_to_json(after)))
  keys = sorted(k for k in set(old) | set(new)
                if any(not s or k == s or k.startswith(s + ".") for s in sections))
  return {k: [old.get(k, "<unset>"), new.get(k, "<unset>")] for k in keys
          if old.get(k, "<unset>") != new.get(k, "<unset>")}


def config_changes(before: dict | None, after: ml_collections.ConfigDict,
                   sections=("model", "optimizer", "rl.algorithm", "pretrained")) -> list[str]:
  """'field: old -> new' for the fields under `sections` that differ (what shapes a state)."""
  return [f"{k}: {a!r} -> {b!r}" for k, (a, b) in setting_changes(before, after, sections).items()]


def check_not_past(resumed_at: int, num_steps: int, field: str, workdir: str):
  """Raises ConfigError on `field` when the workdir's run is already past `num_steps`."""
  if resumed_at > num_steps:
    raise ConfigError(field, num_steps, f"is below the step the run in --workdir={workdir!r} "
                      f"has reached ({resumed_at}): raise it to go on, or use a new --workdir")


def mismatched_checkpoints(workdir: str, config: ml_collections.ConfigDict, error: Exception,
                           saved_extra: dict | None = None, tokenizer=None) -> ConfigError:
  """The error for a workdir whose checkpoints do not fit `config`'s state (its model,
  optimizer or algorithm changed since they were saved), naming what changed.

  With the newest step's `saved_extra` and the run's `tokenizer`: another tokenizer
  (whose size gave the embedding another shape) is named as such, on tokenizer.path.
  """
  if saved_extra and tokenizer is not None:
    tokenizer_fingerprint.check(saved_extra.get("tokenizer"), tokenizer, "--workdir", workdir,
                                config.tokenizer.path)
  changes = config_changes(stored_config(workdir), config)
  what = (f"this config changes {'; '.join(changes[:6])}" if changes
          else f"({errors.one_line(error)[:300]})")
  return ConfigError("--workdir", workdir,
                     f"holds checkpoints of another model, optimizer or algorithm: {what}. "
                     "Resume with the config in its config.json, or use a new --workdir")


def pretrained_path(config: ml_collections.ConfigDict) -> str:
  """`config.pretrained.path` (a .gguf file or HF checkpoint dir), or ""."""
  section = config.get("pretrained")
  return (section.get("path") or "") if section else ""


def padded_vocab_size(vocab_size: int, config: ml_collections.ConfigDict) -> int:
  """`vocab_size` rounded up to a multiple of `mesh.tensor` (the vocab axis is split over it)."""
  return _padded(vocab_size, config.get("mesh", {}))


def _padded(vocab_size: int, mesh) -> int:
  multiple = max(int(mesh.get("tensor", 1) or 1), 1)
  return -(-vocab_size // multiple) * multiple


@dataclasses.dataclass(frozen=True)
class RunSections:
  """The run-wide config sections, parsed once at a trainer's entry point
  (`run_sections`) and read by `setup_run` and the run context.

  Attributes:
    seed: `seed`, an int in [0, 2**32): JAX keys and numpy generators.
    mesh: the `mesh` section's axis sizes ({axis: size}).
    sharding_rules: `sharding_rules` as ((logical axis, mesh axes), ...); the
      default table when the config has none.
    tokenizer: the `tokenizer` section's fields (path, system_prompt, ...).
    model: the `model` section's fields ({} when absent).
    pretrained_path: `pretrained.path` ("" when none).
    pretrained_dtype: `pretrained.dtype` (None: the checkpoint's own).
    distributed: the `distributed` section (`DistributedConfig`).
  """
  seed: int
  mesh: Mapping[str, Any]
  sharding_rules: tuple
  tokenizer: Mapping[str, Any]
  model: Mapping[str, Any]
  pretrained_path: str
  pretrained_dtype: str | None
  distributed: distributed.DistributedConfig

  @property
  def tokenizer_path(self) -> str:
    return self.tokenizer.get("path")


def _as_dict(section) -> dict:
  return dict(section.to_dict()) if hasattr(section, "to_dict") else dict(section or {})


def run_sections(config: ml_collections.ConfigDict) -> RunSections:
  """`config`'s run-wide sections, checked and parsed (`RunSections`).

  Raises:
    ValueError: a missing `seed`, `mesh` or `tokenizer` section, or a bad field
      of `distributed`; ConfigError: a seed out of range.
  """
  for name in ("seed", "mesh", "tokenizer"):
    if name not in config:
      raise ValueError(f"config is missing the {name!r} section")
  check_seed(config)
  pretrained_section = config.get("pretrained") or {}
  return RunSections(
      seed=int(config.seed), mesh=_as_dict(config.mesh),
      sharding_rules=tuple(tuple(r) for r in config.get("sharding_rules",
                                                         sharding.DEFAULT_RULES)),
      tokenizer=_as_dict(config.tokenizer),
      model=_as_dict(config.model) if "model" in config else {},
      pretrained_path=pretrained_path(config),
      pretrained_dtype=pretrained_section.get("dtype") or None,
      distributed=from_section(distributed.DistributedConfig, config.get("distributed"),
                               "distributed"))


def model_config_from(config: ml_collections.ConfigDict, tokenizer=None) -> ModelConfig:
  """The `model` section as a ModelConfig; vocab_size defaults to the tokenizer's.

  With `config.pretrained.path`, the checkpoint gives the architecture and
  the `model` section only overrides the fields it sets (e.g. attention_impl).
  """
  values = dict(config.model.to_dict()) if "model" in config else {}
  path = pretrained_path(config)
  dtype = (config.pretrained.get("dtype") or None) if path else None
  return _model_config(values, path, dtype, config.get("mesh", {}), tokenizer)


def _model_config(values: dict, path: str, dtype, mesh, tokenizer) -> ModelConfig:
  """The model section's `values` over the pretrained checkpoint's architecture at
  `path` (when set), with the tokenizer's padded vocabulary when it sets none."""
  values = dict(values)
  if path:
    with errors.reading("pretrained.path", path):
      base = pretrained.read_config(path, dtype=dtype)
    overrides = {k: v for k, v in values.items() if not (k == "vocab_size" and not v)}
    values = {**base.to_dict(), **overrides}
  if values.get("vocab_size") in (None, 0) and tokenizer is not None:
    values["vocab_size"] = _padded(tokenizer.vocab_size, mesh)
  try:
    return ModelConfig.from_dict(values)
  except TypeError as e:
    raise ValueError(f"model: {e}") from None


@dataclasses.dataclass
class RunContext:
  """A run's context. `config` is the raw config, kept only to write
  workdir/config.json and compare it with a stored one; every setting is read
  from `sections` (and the trainer's own parsed sections)."""
  config: ml_collections.ConfigDict
  sections: RunSections
  workdir: str
  mesh: jax.sharding.Mesh
  rules: Any
  tokenizer: Tokenizer
  model_config: ModelConfig
  root_key: jax.Array

  def write_config(self, step: int):
    """workdir/config.json: this run's resolved config (process 0 only); a resume at
    `step` > 0 records the settings it changes (`write_config`)."""
    if distributed.is_primary():
      write_config(self.workdir, self.config, step if step else None)

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


def run_tokenizer(config: ml_collections.ConfigDict, tokenizer=None) -> Tokenizer:
  """The run's tokenizer: `tokenizer` (e.g. the call-vocabulary one of
  `episodes.tokenizer="call_vocab"`) or the one at `tokenizer.path`, with the
  `tokenizer` section's prompt settings applied (`batching.configure_prompts`).

  Raises:
    MissingInputError: on `tokenizer.path`, when it does not exist.
  """
  return _tokenizer(config.tokenizer, tokenizer)


def _tokenizer(section, tokenizer=None) -> Tokenizer:
  """`run_tokenizer` for the `tokenizer` section alone."""
  path = section.get("path")
  if tokenizer is None:
    if not os.path.exists(path):
      raise MissingInputError("tokenizer.path", path,
                              "does not exist; build it with experiments/build_tokenizer.py "
                              "(same --config.tokenizer.path)")
    with errors.reading("tokenizer.path", path):
      tokenizer = load_tokenizer(path)
  return batching.configure_prompts(tokenizer, section)


def setup_run(config: ml_collections.ConfigDict, workdir: str, tokenizer=None, *,
              sections: RunSections | None = None, devices=None) -> RunContext:
  """Sets up the run from its parsed run-wide `sections` (`run_sections(config)` when
  None: an entry point that parsed them passes them); `config` itself is only kept
  for writing. The trainer writes workdir/config.json
  (`RunContext.write_config`) once its state is restored or created, so a run
  that cannot start leaves a previous run's config.json as it was.

  `tokenizer`: use this one instead of loading `tokenizer.path` (e.g. the
  call-vocabulary tokenizer of `episodes.tokenizer="call_vocab"`).
  `devices`: the devices the run's mesh spans (default: every device; an RL
  run with `rl.sampler_devices` keeps the last ones for its sampler's mesh).

  Starts multi-host JAX first when `config.distributed` asks for it; then
  the mesh spans every process's devices and only process 0 writes files.
  Puts the mesh and rules in context: call it inside a `scoped_run` entry point.
  """
  if not workdir:
    raise ConfigError("--workdir", workdir, "is required")
  run = run_sections(config) if sections is None else sections
  distributed.initialize(run.distributed)
  ensure_workdir(workdir)
  check_run_layout(workdir)
  rules = run.sharding_rules
  mesh = mesh_lib.make_mesh(dict(run.mesh), devices)
  sharding.validate_rules(rules, mesh.axis_names)
  jax.set_mesh(mesh)  # the run's mesh in context: model activations follow `rules` too
  sharding.set_activation_rules(rules)
  tokenizer = _tokenizer(run.tokenizer, tokenizer)
  model_config = _model_config(run.model, run.pretrained_path, run.pretrained_dtype, run.mesh,
                               tokenizer)
  if model_config.vocab_size < tokenizer.vocab_size:
    raise ConfigError("model.vocab_size", model_config.vocab_size, f"is smaller than the "
                      f"tokenizer's vocabulary ({tokenizer.vocab_size})")
  return RunContext(config=config, sections=run, workdir=workdir, mesh=mesh, rules=rules,
                    tokenizer=tokenizer, model_config=model_config,
                    root_key=jax.random.key(run.seed))


def pretrained_params(ctx: RunContext, lora=None, lora_field: str = "lora"):
  """Params of `pretrained.path` placed on the run's mesh, or None.

  With a `lora` (`LoraConfig`) that quantizes its base (`base_quant`), the
  frozen base itself, already quantized (`pretrained.load_base`): a GGUF
  file's own Q4_0/Q4_1 blocks when they are that base, else each projection
  quantized as it is read, so the projections are never all in float at once.
  `rl_post.training.state.create_train_state` keeps such a base as it is.

  Raises:
    ConfigError: on `pretrained.path` for a model that differs from
      config.model; on `<lora_field>.base_quant` or `.base_quant_block_size`
      (`lora_field`: the run's section, "rl.lora" or "sft.lora") when they
      name a GGUF block format that the file's 4-bit blocks are not.
    ValueError: a block size that does not divide a projection.
  """
  path = ctx.sections.pretrained_path
  if not path:
    return None
  quantized = lora is not None and lora.enabled and lora.base_quant
  if quantized and lora.base_quant != "int8":  # before any reading, as a plain config error
    quant.check_block_size(abstract_params(ctx.model_config), lora.base_quant_block_size)
  with errors.reading("pretrained.path", path):
    try:
      if quantized:
        stored, params = pretrained.load_base(path, lora.base_quant, lora.base_quant_block_size,
                                              mesh=ctx.mesh, rules=ctx.rules,
                                              dtype=ctx.model_config.param_dtype)
      else:
        stored, params = pretrained.load(path, mesh=ctx.mesh, rules=ctx.rules,
                                         dtype=ctx.model_config.param_dtype)
    except gguf_q4.BlockMismatch as e:
      raise ConfigError(f"{lora_field}.{e.key}", e.value,
                        f"pretrained.path={path!r}: {e.problem}") from None
  diff = shape_differences(stored, ctx.model_config)
  if diff:
    raise ConfigError("pretrained.path", path, f"holds a model that differs from config.model "
                      f"in {diff} (stored, configured)")
  return params


SHAPE_FIELDS = ("vocab_size", "num_layers", "embed_dim", "num_heads", "num_kv_heads",
                "head_dim", "mlp_dim", "tie_embeddings", "qkv_bias")


def shape_differences(stored: ModelConfig, configured: ModelConfig) -> dict:
  """{field: (stored, configured)} for the fields that shape the params (not e.g.
  attention_impl or dtypes, which a checkpoint does not fix)."""
  return {k: (getattr(stored, k), getattr(configured, k)) for k in SHAPE_FIELDS
          if getattr(stored, k) != getattr(configured, k)}
