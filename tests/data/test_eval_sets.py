"""Eval sets: tfds array_record builds are byte-identical, read back without TensorFlow."""

import os
import pathlib
import subprocess
import sys

import pytest

from mixture_fixtures import A, B
from rl_post.config_sections import from_section
from rl_post.data import eval_sets
from rl_post.data.eval_sets import EvalSetSpec
from rl_post.data.mixture import TaskConfig
from rl_post.errors import MissingInputError
from rl_post.tasks.base import Task

ROOT = pathlib.Path(__file__).resolve().parents[2]
SPEC = EvalSetSpec(A, size=40, seed=3, difficulty_ratios=(1, 3))


def _files(root: pathlib.Path) -> dict[str, bytes]:
  return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
          if p.is_file()}


def test_build_twice_gives_identical_bytes_and_records(tmp_path):
  first = eval_sets.build(SPEC, str(tmp_path / "one"))
  eval_sets.build(SPEC, str(tmp_path / "two"))
  one, two = _files(tmp_path / "one"), _files(tmp_path / "two")
  assert any(name.endswith(".array_record-00000-of-00001") for name in one), sorted(one)
  assert one == two
  assert os.path.isdir(first) and first.endswith(f"{SPEC.config_name}/{eval_sets.VERSION}")
  tasks = eval_sets.load(SPEC, str(tmp_path / "one"))
  assert tasks == eval_sets.draw_tasks(SPEC)  # every field, in build order
  assert {t.difficulty for t in tasks} <= {1, 2, 3, 4, 5}
  assert isinstance(tasks[0].metadata["pair"], tuple)  # tuples survive the JSON encoding
  records = eval_sets.source(SPEC, str(tmp_path / "two"))
  assert eval_sets.record_digest([records[i] for i in range(len(records))]) == \
      eval_sets.record_digest([eval_sets.encode_task(t) for t in tasks])


def test_read_in_a_fresh_process_without_tensorflow_or_our_builder(tmp_path):
  eval_sets.build(SPEC, str(tmp_path))
  code = (f"import sys, tensorflow_datasets as tfds\n"
          f"ds = tfds.data_source({SPEC.dataset_name!r}, data_dir={str(tmp_path)!r}, "
          f"split='test', download=False)\n"
          f"print(len(ds), ds[0]['task_id'].decode(), 'tensorflow' in sys.modules)\n")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
  first = eval_sets.draw_tasks(SPEC)[0].task_id
  assert out.stdout.split() == ["40", first, "False"]


@pytest.mark.parametrize("damage", ["flipped bytes", "truncated", "deleted"])
def test_a_damaged_set_is_an_error_naming_the_folder_to_delete(tmp_path, damage):
  folder = pathlib.Path(eval_sets.build(SPEC, str(tmp_path)))
  data = next(folder.glob("*.array_record-*"))
  raw = bytearray(data.read_bytes())
  if damage == "flipped bytes":
    raw[len(raw) // 2] ^= 0xFF
    data.write_bytes(bytes(raw))
  elif damage == "truncated":
    data.write_bytes(bytes(raw[:len(raw) // 3]))
  else:
    data.unlink()
  for read in (eval_sets.load, eval_sets.read_records):
    with pytest.raises(MissingInputError) as e:
      read(SPEC, str(tmp_path))
    assert e.value.field == "tasks.eval_data_dir"
    assert f"delete {folder.parent} and rebuild it" in e.value.problem


def test_spec_changes_give_a_new_set():
  names = {s.config_name for s in (SPEC, EvalSetSpec(A, 40, 4, difficulty_ratios=(1, 3)),
                                   EvalSetSpec(A, 41, 3, difficulty_ratios=(1, 3)),
                                   EvalSetSpec(A, 40, 3), EvalSetSpec(B, 40, 3))}
  assert len(names) == 5
  assert all(n.replace("-", "").replace("_", "").isalnum() for n in names)


def test_heldout_from_eval_sets_is_excluded_from_training(tmp_path):
  tasks = from_section(TaskConfig, dict(domains=(A, B), weights=(1, 1), heldout_size=30,
                                        eval_sets=(B,), eval_data_dir=str(tmp_path)), "tasks")
  with pytest.raises(FileNotFoundError, match="build_eval_sets.py"):
    eval_sets.load_heldout(tasks, seed=0)
  eval_sets.build_all(tasks, seed=0)
  heldout = eval_sets.load_heldout(tasks, seed=0)
  assert len(heldout) == 30 and {t.domain for t in heldout} == {B}
  mixture = eval_sets.make_mixture(tasks, seed=0)
  assert mixture.heldout == heldout
  assert not {t.task_id for t in heldout} & {t.task_id for s in range(20)
                                             for t in mixture.sample(s, 32)}


def test_unstorable_tasks_fail_at_build_time():
  bad = Task("x/1", A, "p", 1, target=float("nan"))
  with pytest.raises(ValueError, match="x/1"):
    eval_sets.encode_task(bad)
  with pytest.raises(ValueError, match="cannot store a object"):
    eval_sets.encode_task(Task("x/2", A, "p", 1, target=object()))
  odd = Task("x/3", A, "p", 2, target={1: frozenset({"a", "b"}), "__k": (1, [2.5, None])},
             metadata={"s": {3, 1}})
  assert eval_sets.decode_record(eval_sets.encode_task(odd)) == odd


def test_build_script_smoke(tmp_path):
  out = subprocess.run(
      [sys.executable, str(ROOT / "experiments/build_eval_sets.py"),
       f"--config={ROOT / 'configs/grpo_arithmetic.py'}", "--config.tasks.heldout_size=20",
       "--config.tasks.eval_sets=('arithmetic',)", f"--config.tasks.eval_data_dir={tmp_path}"],
      capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
  assert out.returncode == 0, out.stderr[-3000:]
  assert "arithmetic: 20 tasks in" in out.stderr
  assert list((tmp_path / eval_sets.BUILDER_NAME).iterdir())
