"""colab/quickstart.ipynb runs top to bottom (tiny demo) in a fresh kernel.

The install cell is skipped (RL_POST_SKIP_INSTALL=1; this checkout is on
PYTHONPATH), everything else runs as a Colab user would run it.
"""

import os

import nbformat
from nbclient import NotebookClient

from child_process import xla_flags

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOTEBOOK = os.path.join(ROOT, "colab", "quickstart.ipynb")


def _code_cells(nb):
  return [c for c in nb.cells if c.cell_type == "code"]


def test_notebook_is_valid_and_has_no_logic_of_its_own():
  nb = nbformat.read(NOTEBOOK, as_version=4)
  nbformat.validate(nb)
  for cell in _code_cells(nb):
    assert not cell.outputs, "commit the notebook without outputs"
    for line in cell.source.splitlines():
      assert not line.lstrip().startswith(("def ", "class ", "lambda")), (
          f"the notebook only calls into rl_post; move this into the library: {line!r}")
  assert "VARIANT = \"tiny\"" in "".join(c.source for c in _code_cells(nb))


def test_notebook_runs_top_to_bottom(tmp_path, monkeypatch):
  workdir = tmp_path / "demo"
  # The kernel inherits this environment.
  monkeypatch.setenv("RL_POST_SKIP_INSTALL", "1")
  monkeypatch.setenv("RL_POST_COLAB_WORKDIR", str(workdir))
  monkeypatch.setenv("JAX_PLATFORMS", "cpu")
  monkeypatch.setenv("PYTHONPATH", ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  monkeypatch.setenv("XLA_FLAGS", xla_flags())
  nb = nbformat.read(NOTEBOOK, as_version=4)
  NotebookClient(nb, timeout=600, kernel_name="python3",
                 resources={"metadata": {"path": str(tmp_path)}}).execute()

  outputs = [o for c in _code_cells(nb) for o in c.outputs]
  assert not [o for o in outputs if o.output_type == "error"]
  text = "".join(o.get("text", "") for o in outputs)
  assert "skipping the install" in text
  markdown = "".join(o.get("data", {}).get("text/markdown", "") for o in outputs)
  assert "## Task completion" in markdown and "Before vs after" in markdown
  images = [o for o in outputs if "image/png" in o.get("data", {})]
  assert len(images) == 3  # pass rate per domain, curves, curriculum difficulty
  for name in ("summary.json", "pass_rate.png", "curves.png", "difficulty.png"):
    assert (workdir / "report" / name).stat().st_size > 0, name
