"""Fixed evaluation sets as tensorflow-datasets builders (array_record, no TensorFlow).

An eval set is the held-out set of one domain, drawn once by a single-domain
`TaskMixture` (same generator, seed, levels and difficulty ratios) and
written with a `tfds` GeneratorBasedBuilder as array_record, with shuffling
disabled in its DatasetInfo (records stay in build order). It is read back
with `tfds.data_source` (random access), which needs neither TensorFlow nor
our builder class (tfds reads the files' own metadata), so
slow generators run once, not per step, and every machine reads the same
records. Layout: <data_dir>/rl_post_eval_set/<config>/<VERSION>/, where the
config name is the domain plus a digest of everything that shapes the set;
bump VERSION when the record encoding changes.

Targets and metadata are stored as JSON with tags for tuples, sets and
non-string dict keys; a task that does not survive the round trip exactly
is an error at build time, never a silently different task at eval time.
"""

import dataclasses
import hashlib
import json
import os
import re
from typing import Any, Mapping, Sequence

import numpy as np
import tensorflow_datasets as tfds

from rl_post import errors
from rl_post.data.mixture import TaskConfig, TaskMixture
from rl_post.errors import ConfigError, MissingInputError
from rl_post.tasks.base import Task

VERSION = "1.0.0"
BUILDER_NAME = "rl_post_eval_set"
SPLIT = "test"
_FIELDS = ("task_id", "domain", "prompt", "target", "metadata")


@dataclasses.dataclass(frozen=True)
class EvalSetSpec:
  """Everything that determines one eval set's records."""
  domain: str
  size: int
  seed: int
  difficulties: tuple[int, ...] = ()
  difficulty_ratios: tuple[float, ...] = ()
  domain_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)

  def __post_init__(self):
    if self.size < 1:
      raise ValueError(f"eval set {self.domain!r}: size must be >= 1, got {self.size}")

  @property
  def config_name(self) -> str:
    fields = dataclasses.asdict(self)
    digest = hashlib.sha256(json.dumps(_to_json(fields), sort_keys=True).encode()).hexdigest()
    slug = re.sub(r"[^a-z0-9_]+", "_", self.domain.lower()).strip("_")[:60]
    return f"{slug}-n{self.size}-{digest[:12]}"

  @property
  def dataset_name(self) -> str:
    return f"{BUILDER_NAME}/{self.config_name}:{VERSION}"


def specs_for(tasks: TaskConfig, seed: int) -> list[EvalSetSpec]:
  """The eval sets a tasks section asks for (`heldout_size` tasks each)."""
  return [EvalSetSpec(d, tasks.heldout_size, seed, tuple(tasks.difficulties),
                      tuple(tasks.difficulty_ratios), dict(tasks.domain_options.get(d, {})))
          for d in tasks.eval_sets]


def _to_json(x):
  """A JSON value that `_from_json` maps back to x exactly."""
  if isinstance(x, (bool, type(None), str)):
    return x
  if isinstance(x, (int, float, np.integer, np.floating)):
    return x.item() if isinstance(x, np.generic) else x
  if isinstance(x, tuple):
    return {"__tuple__": [_to_json(v) for v in x]}
  if isinstance(x, (set, frozenset)):
    items = [_to_json(v) for v in x]
    return {"__set__": sorted(items, key=lambda v: json.dumps(v, sort_keys=True)),
            "frozen": isinstance(x, frozenset)}
  if isinstance(x, list):
    return [_to_json(v) for v in x]
  if isinstance(x, Mapping):
    if all(isinstance(k, str) and not k.startswith("__") for k in x):
      return {k: _to_json(v) for k, v in x.items()}
    return {"__items__": [[_to_json(k), _to_json(v)] for k, v in x.items()]}
  raise ValueError(f"cannot store a {type(x).__name__} in an eval set")


def _from_json(x):
  if isinstance(x, list):
    return [_from_json(v) for v in x]
  if not isinstance(x, dict):
    return x
  if "__tuple__" in x:
    return tuple(_from_json(v) for v in x["__tuple__"])
  if "__set__" in x:
    return (frozenset if x["frozen"] else set)(_from_json(v) for v in x["__set__"])
  if "__items__" in x:
    return {_from_json(k): _from_json(v) for k, v in x["__items__"]}
  return {k: _from_json(v) for k, v in x.items()}


def _dumps(x) -> str:
  return json.dumps(_to_json(x), sort_keys=True, separators=(",", ":"), allow_nan=False)


def encode_task(task: Task) -> dict:
  """One record; raises ValueError if the task would not read back identically."""
  try:
    record = {"task_id": task.task_id, "domain": task.domain, "prompt": task.prompt,
              "difficulty": int(task.difficulty), "target": _dumps(task.target),
              "metadata": _dumps(dict(task.metadata))}
  except ValueError as e:
    raise ValueError(f"eval set task {task.task_id!r} of domain {task.domain!r}: {e}") from None
  if decode_record(record) != task:
    raise ValueError(f"eval set task {task.task_id!r} of domain {task.domain!r} does not "
                     "survive the JSON round trip (e.g. a float NaN or a custom class)")
  return record


def decode_record(record: Mapping) -> Task:
  text = {k: v.decode() if isinstance(v, bytes) else v for k, v in record.items()
          if k in _FIELDS}
  return Task(task_id=text["task_id"], domain=text["domain"], prompt=text["prompt"],
              difficulty=int(record["difficulty"]), target=_from_json(json.loads(text["target"])),
              metadata=_from_json(json.loads(text["metadata"])))


def draw_tasks(spec: EvalSetSpec) -> list[Task]:
  """The held-out tasks of a single-domain mixture with the spec's settings."""
  config = TaskConfig(domains=(spec.domain,), weights=(1.0,), difficulties=spec.difficulties,
                      difficulty_ratios=spec.difficulty_ratios,
                      domain_options={spec.domain: dict(spec.domain_options)},
                      heldout_size=spec.size)
  return TaskMixture(config, spec.seed).heldout


class RlPostEvalSet(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """Builder of one eval set; reading needs only the files it writes."""

  VERSION = tfds.core.Version(VERSION)
  RELEASE_NOTES = {"1.0.0": "Tasks with JSON-encoded target and metadata."}

  def __init__(self, spec: EvalSetSpec, **kwargs):
    self.spec = spec
    super().__init__(config=tfds.core.BuilderConfig(
        name=spec.config_name, description=_dumps(dataclasses.asdict(spec))), **kwargs)

  def _info(self) -> tfds.core.DatasetInfo:
    text = tfds.features.Text()
    return tfds.core.DatasetInfo(
        builder=self, description=f"rl_post held-out tasks of domain {self.spec.domain}",
        features=tfds.features.FeaturesDict({
            "task_id": text, "domain": text, "prompt": text, "difficulty": np.int32,
            "target": text, "metadata": text}),
        disable_shuffling=True)

  def _split_generators(self, dl_manager):
    del dl_manager
    return {SPLIT: self._generate_examples()}

  def _generate_examples(self):
    for i, task in enumerate(draw_tasks(self.spec)):
      yield i, encode_task(task)


def build(spec: EvalSetSpec, data_dir: str) -> str:
  """Writes the eval set (a no-op when it exists); returns its directory."""
  builder = RlPostEvalSet(spec, data_dir=data_dir, file_format="array_record")
  builder.download_and_prepare()
  return os.fspath(builder.data_dir)


def source(spec: EvalSetSpec, data_dir: str):
  """The set's records in build order (random access, `len`)."""
  path = os.path.join(data_dir, BUILDER_NAME, spec.config_name, VERSION, "dataset_info.json")
  if not os.path.exists(path):
    raise MissingInputError(
        "tasks.eval_data_dir", data_dir,
        f"eval set of domain {spec.domain!r} ({spec.dataset_name}) is not built in {data_dir}; "
        "run: python experiments/build_eval_sets.py --config=<your config>")
  return tfds.data_source(spec.dataset_name, data_dir=data_dir, split=SPLIT, download=False)


def _rebuild(spec: EvalSetSpec, data_dir: str) -> str:
  return (f"delete {os.path.join(data_dir, BUILDER_NAME, spec.config_name)} and rebuild it "
          "with experiments/build_eval_sets.py (same --config)")


def _reading(spec: EvalSetSpec, data_dir: str) -> errors.reading:
  """A set that cannot be read back (a corrupted or truncated file, a garbled record)
  is a user error naming the folder to delete: building skips a set whose folder exists."""
  return errors.reading("tasks.eval_data_dir", data_dir, f"holds an unreadable eval set "
                        f"{spec.dataset_name}; {_rebuild(spec, data_dir)}")


def read_records(spec: EvalSetSpec, data_dir: str) -> list[Mapping]:
  """Every record of the set, in build order."""
  with _reading(spec, data_dir):
    records = source(spec, data_dir)
    return [records[i] for i in range(len(records))]


def load(spec: EvalSetSpec, data_dir: str) -> list[Task]:
  """The set's tasks; a set that holds other tasks than `spec` is a ConfigError."""
  with _reading(spec, data_dir):
    tasks = [decode_record(r) for r in read_records(spec, data_dir)]
  if len(tasks) != spec.size or any(t.domain != spec.domain for t in tasks):
    raise ConfigError("tasks.eval_data_dir", data_dir,
                      f"holds eval set {spec.dataset_name} with {len(tasks)} tasks, expected "
                      f"{spec.size} of domain {spec.domain!r}; {_rebuild(spec, data_dir)}")
  return tasks


def load_heldout(tasks: TaskConfig, seed: int) -> list[Task]:
  """All eval sets of a tasks section, in `eval_sets` order."""
  return [t for spec in specs_for(tasks, seed) for t in load(spec, tasks.eval_data_dir)]


def make_mixture(tasks: TaskConfig, seed: int) -> TaskMixture:
  """The run's mixture; its held-out set comes from the eval sets when configured."""
  return TaskMixture(tasks, seed, heldout=load_heldout(tasks, seed) if tasks.eval_sets else None)


def build_all(tasks: TaskConfig, seed: int) -> list[tuple[EvalSetSpec, str]]:
  return [(spec, build(spec, tasks.eval_data_dir)) for spec in specs_for(tasks, seed)]


def record_digest(records: Sequence[Mapping]) -> str:
  """sha256 over the records' canonical JSON (identical sets, identical digest)."""
  h = hashlib.sha256()
  for r in records:
    h.update(json.dumps({k: v.decode() if isinstance(v, bytes) else int(v) if k == "difficulty"
                         else v for k, v in r.items()}, sort_keys=True).encode())
  return h.hexdigest()
