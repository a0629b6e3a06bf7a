r"""Ahead-of-time memory check: compile the train step for a target without its devices.

  python experiments/aot_check.py --model=llama-8b --target=8xh100 \
      --mesh=data=1,fsdp=8 --rows=64 --seq_len=1024
  python experiments/aot_check.py --config=configs/grpo_arithmetic.py --target=v5e-8
  python experiments/aot_check.py --table --json_out=/tmp/aot.json   # docs/scale.md's table

--config takes the model, mesh and rollout sizes (rows = rl.batch_size x
rl.num_generations, seq_len = rl.max_prompt_len + rl.max_new_tokens) from an
experiment config; --model/--mesh/--rows/--seq_len set them directly and
override the config's (--config=...:tiny --model=llama-8b: the 8B preset with
that experiment's mesh and rollout sizes).
Prints bytes per device (params, optimizer state, activations, KV cache) and
whether they fit the target's HBM; exits 1 when something does not fit, 2 (one
`error: ...` line, `rl_post.cli`) on a bad flag or config.
"""

import dataclasses
import json
import os
import sys

import _bootstrap  # noqa: F401
from absl import flags
from ml_collections import config_flags

from rl_post import cli
from rl_post.errors import ConfigError, UserError
from rl_post.output_paths import ensure_output_file

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config (optional).")
_MODEL = flags.DEFINE_string("model", None, "Model preset: smollm2-135m | llama-1b | llama-8b.")
_TARGET = flags.DEFINE_string("target", "8xh100", "v5e-8 | v5p-64 | 8xh100 | 16xh100.")
_MESH = flags.DEFINE_string("mesh", None, "Mesh axes, e.g. 'data=1,fsdp=8' (default: "
                            "the config's mesh, else fsdp over all devices).")
_ROWS = flags.DEFINE_integer("rows", None, "Rollouts per train step (B x G).")
_SEQ_LEN = flags.DEFINE_integer("seq_len", None, "Tokens per rollout (prompt + response).")
_DTYPE = flags.DEFINE_string("dtype", "bfloat16", "Compute dtype for presets (params stay f32).")
_TABLE = flags.DEFINE_bool("table", False, "Run the docs/scale.md grid.")
_JSON_OUT = flags.DEFINE_string("json_out", None, "Also write the reports as JSON here.")
_CONSTRAIN = flags.DEFINE_bool("activation_constraints", True,
                               "Compile with the model's batch constraints on activations "
                               "(--noactivation_constraints: what the partitioner picks alone).")

# (model, target, mesh, rows, seq_len): the grid in docs/scale.md.
TABLE = (
    ("smollm2-135m", "v5e-8", "data=8", 64, 1024),
    ("smollm2-135m", "v5p-64", "data=32", 256, 1024),
    ("smollm2-135m", "8xh100", "data=8", 64, 1024),
    ("llama-1b", "v5e-8", "data=2,fsdp=4", 64, 1024),
    ("llama-1b", "v5p-64", "data=4,fsdp=8", 256, 1024),
    ("llama-1b", "8xh100", "fsdp=8", 64, 1024),
    ("llama-8b", "v5e-8", "fsdp=4,tensor=2", 64, 1024),
    ("llama-8b", "v5p-64", "data=2,fsdp=8,tensor=2", 64, 1024),
    ("llama-8b", "8xh100", "fsdp=8", 64, 1024),
)
DOES_NOT_FIT_EXIT = 1  # distinct from cli.EXIT_USER_ERROR (2)
_FIELDS = ("params_bytes", "opt_state_bytes", "activation_bytes", "kv_cache_bytes",
           "total_bytes", "hbm_bytes")


def parse_mesh(text: str, field: str = "--mesh") -> dict:
  """'data=2,fsdp=-1' -> {"data": 2, "fsdp": -1}; ConfigError naming `field` otherwise."""
  mesh = {}
  for part in filter(None, text.split(",")):
    name, sep, value = part.partition("=")
    if not sep:
      raise ConfigError(field, text, f"entries look like axis=size, got {part!r}")
    try:
      mesh[name.strip()] = int(value)
    except ValueError:
      raise ConfigError(field, text, f"{name}: size must be an int, got {value!r}") from None
  return mesh


def check_mesh(mesh: dict, num_devices: int, field: str, text) -> None:
  """Raises ConfigError naming `field` unless `mesh` lays out `num_devices` devices."""
  from rl_post.parallel import mesh as mesh_lib
  try:
    mesh_lib.resolve_mesh_shape(mesh, num_devices)
  except ValueError as e:
    detail = e.problem if isinstance(e, UserError) else str(e)
    raise ConfigError(field, text, f"does not lay out the target's {num_devices} devices "
                      f"({detail})") from None


def check_flags(targets: list[str]) -> None:
  """Checks the flags that need no config or JAX: target, dtype, sizes, --json_out."""
  from rl_post.models.config import DTYPES
  from rl_post.rl import aot
  for target in targets:
    if target not in aot.TARGETS:
      raise ConfigError("--target", target, f"is unknown; one of {sorted(aot.TARGETS)}")
  if _DTYPE.value not in DTYPES:
    raise ConfigError("--dtype", _DTYPE.value, f"must be one of {DTYPES}")
  for flag in (_ROWS, _SEQ_LEN):
    if flag.value is not None and flag.value < 1:
      raise ConfigError(f"--{flag.name}", flag.value, "must be >= 1")
  if _MODEL.value is not None and _MODEL.value not in aot.MODELS:
    raise ConfigError("--model", _MODEL.value, "is not a preset; give --config or --model "
                      f"(one of {sorted(aot.MODELS)})")
  if _CONFIG.value is None and _MODEL.value is None and not _TABLE.value:
    raise ConfigError("--model", None, f"give --config or --model (one of {sorted(aot.MODELS)})")
  if _JSON_OUT.value:
    ensure_output_file(_JSON_OUT.value, "--json_out")


def _from_config(config, with_model: bool = True):
  """(model or None, mesh, rows, seq_len) of an experiment config."""
  from rl_post.training import run
  rl = config.get("rl", {})
  rows = int(rl.get("batch_size", 8)) * int(rl.get("num_generations", 8))
  seq_len = int(rl.get("max_prompt_len", 64)) + int(rl.get("max_new_tokens", 64))
  mesh = dict(config.mesh)
  if not with_model:
    return None, mesh, rows, seq_len
  vocab = run.padded_vocab_size(int(config.tokenizer.get("vocab_size", 0) or 0), config)
  pretrained = run.pretrained_path(config)
  if pretrained and not os.path.exists(pretrained):
    raise ConfigError("pretrained.path", pretrained,
                      "is not installed; use --model=<preset> for its architecture")
  model = run.model_config_from(config) if pretrained else None
  if model is None:
    from rl_post.models import ModelConfig
    values = dict(config.model.to_dict())
    values["vocab_size"] = values.get("vocab_size") or vocab
    model = ModelConfig.from_dict(values)
  return model, mesh, rows, seq_len


def _row(label, r):
  gib = lambda b: f"{b / 2 ** 30:8.2f}"
  cells = " ".join(gib(r[f]) for f in _FIELDS)
  return f"{label:<44} {cells}  {'yes' if r['fits'] else 'NO':>4}"


def _runs() -> list[tuple]:
  """[(label, model, target, mesh, rows, seq_len, rows_field)], the flags checked."""
  from rl_post.rl import aot
  if _TABLE.value:
    return [(f"{name} {target} {mesh}", _with_dtype(aot.MODELS[name]), target,
             parse_mesh(mesh), rows, seq_len, "--rows")
            for name, target, mesh, rows, seq_len in TABLE]
  model, mesh, rows, seq_len = None, dict(fsdp=-1), 64, 1024
  name, mesh_field, rows_field = _MODEL.value, "--mesh", "--rows"
  if _CONFIG.value is not None:
    model, mesh, rows, seq_len = _from_config(_CONFIG.value, with_model=_MODEL.value is None)
    name = name or os.path.basename(sys.argv[0])
    mesh_field, rows_field = "mesh", "rl.batch_size x rl.num_generations"
  if _MODEL.value is not None:
    model = _with_dtype(aot.MODELS[_MODEL.value])
  if _MESH.value is not None:
    mesh, mesh_field = parse_mesh(_MESH.value), "--mesh"
  check_mesh(mesh, aot.TARGETS[_TARGET.value].num_devices, mesh_field,
             _MESH.value if mesh_field == "--mesh" else mesh)
  if _ROWS.value is not None:
    rows, rows_field = _ROWS.value, "--rows"
  seq_len = _SEQ_LEN.value if _SEQ_LEN.value is not None else seq_len
  return [(f"{name} {_TARGET.value}", model, _TARGET.value, mesh, rows, seq_len, rows_field)]


def _with_dtype(model):
  return dataclasses.replace(model, dtype=_DTYPE.value)


def _check(model, target, mesh, rows, seq_len, rows_field) -> dict:
  """`aot.check`, with rows that the mesh's batch axes do not divide as a ConfigError."""
  from rl_post.rl import aot
  try:
    return aot.check(model, aot.TARGETS[target], mesh, rows, seq_len,
                     constrain_activations=_CONSTRAIN.value)
  except ValueError as e:
    if not str(e).startswith(f"rows ({rows})"):
      raise
    raise ConfigError(rows_field, rows, str(e)) from None


def main(argv):
  del argv
  import jax
  from rl_post.rl import aot
  targets = [t for _, t, *_ in TABLE] if _TABLE.value else [_TARGET.value]
  check_flags(targets)
  jax.config.update("jax_num_cpu_devices", max(aot.TARGETS[t].num_devices for t in targets))
  runs = _runs()
  print(f"{'model / target / mesh':<44} " + " ".join(f"{f[:-6][:8]:>8}" for f in _FIELDS)
        + "  fits   (GiB per device)")
  reports, all_fit = [], True
  for label, model, target, mesh, rows, seq_len, rows_field in runs:
    report = _check(model, target, mesh, rows, seq_len, rows_field)
    report.update(label=label, rows=rows, seq_len=seq_len)
    reports.append(report)
    all_fit &= report["fits"]
    print(_row(label, report), flush=True)
  for how in sorted({r["devices"] for r in reports}):
    print(f"devices: {how}")
  print("rows x seq_len per step:", sorted({(r['rows'], r['seq_len']) for r in reports}))
  if _JSON_OUT.value:
    with open(_JSON_OUT.value, "w") as f:
      json.dump(reports, f, indent=2)
  if not all_fit:
    print("some configurations do NOT fit: shard more (fsdp/tensor), fewer rows, "
          "shorter sequences or bf16 params")
    sys.exit(DOES_NOT_FIT_EXIT)


if __name__ == "__main__":
  cli.run(main)
