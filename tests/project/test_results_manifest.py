"""The measurement record's files: every committed result has a manifest row,
and every result file the docs name exists.

experiments/results/MANIFEST.md lists each benchmark JSON of
experiments/benchmarks/results/ by name and each training-run folder of
experiments/results/ by path; docs/*.md, README.md and the result folders'
READMEs name result files by path (`experiments/benchmarks/results/x.json`,
`results/x.json` for short, `experiments/results/<folder>/...`).
"""

import glob
import os
import re
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MANIFEST = os.path.join(ROOT, "experiments", "results", "MANIFEST.md")
BENCH = "experiments/benchmarks/results/"
RUNS = "experiments/results/"


def _committed(prefix):
  try:
    out = subprocess.run(["git", "ls-files", prefix], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
  except (OSError, subprocess.CalledProcessError):
    pytest.skip("not a git checkout")
  return out.split()


def _manifest():
  """The manifest's rows, without its table of former names."""
  with open(MANIFEST) as f:
    return f.read().split("## Former names")[0]


def test_every_benchmark_result_has_a_manifest_row():
  rows = set(re.findall(r"^\| `([^`]+\.json)` \|", _manifest(), re.M))
  files = {os.path.basename(p) for p in _committed(BENCH)}
  assert files, "no committed benchmark results"
  assert not files - rows, f"benchmark results without a manifest row: {sorted(files - rows)}"
  assert not rows - files, f"manifest rows without a file: {sorted(rows - files)}"


def test_every_result_folder_has_a_manifest_row():
  rows = set(re.findall(r"^\| \[`([^`]+/)`\]", _manifest(), re.M))
  folders = {p[len(RUNS):].split("/")[0] + "/" for p in _committed(RUNS) if p.count("/") > 2}
  assert not folders - rows, f"result folders without a manifest row: {sorted(folders - rows)}"
  missing = [r for r in rows if not os.path.isdir(os.path.join(ROOT, RUNS, r))]
  assert not missing, f"manifest rows without a folder: {missing}"


def _docs():
  paths = [os.path.join(ROOT, "README.md"), MANIFEST]
  paths += glob.glob(os.path.join(ROOT, "docs", "*.md"))
  paths += glob.glob(os.path.join(ROOT, RUNS, "*", "README.md"))
  return sorted(paths)


def test_result_files_named_in_docs_exist():
  missing = []
  for path in _docs():
    with open(path) as f:
      text = f.read()
    names = re.findall(r"(?<![\w/.-])(?:experiments/benchmarks/)?results/([\w.+-]+\.json)\b", text)
    for name in names:
      if not os.path.exists(os.path.join(ROOT, BENCH, name)):
        missing.append(f"{os.path.relpath(path, ROOT)}: results/{name}")
    for rel in re.findall(r"(?<![\w/.-])experiments/results/([\w./{}<>-]*[\w/}>])", text):
      if "{" in rel or "<" in rel:
        continue
      if not os.path.exists(os.path.join(ROOT, RUNS, rel)):
        missing.append(f"{os.path.relpath(path, ROOT)}: experiments/results/{rel}")
  assert not missing, "result files named in docs but not committed:\n" + "\n".join(missing)
