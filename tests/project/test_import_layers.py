"""rl_post's packages import downward only, no import cycle joins two of them, and
the library imports nothing from experiments/ or configs/.

The import graph is read from the source with `ast` (nothing is imported):
every `import rl_post.x`, `from rl_post.x import y`, `from rl_post import x`,
relative import and `importlib.import_module("rl_post.x")` with a literal
name, wherever it sits (module level, inside a function, under
`if TYPE_CHECKING:`). A module belongs to its package (`rl_post/rl/trainer.py`
to `rl`); a top-level module (`rl_post/cli.py`) is its own node. An import
of node B from node A is allowed when B comes before A in `LAYERS`.
docs/architecture.md explains the order.
"""

import ast
import collections
import dataclasses
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = "rl_post"

# Lowest first: a node may import itself and any node listed before it.
LAYERS = (
    "errors", "config_sections", "output_paths",  # plain Python, no jax
    "metrics",
    "kernels", "parallel", "models",              # arrays: attention, meshes, the transformer
    "sandbox", "tasks", "rewards",                # verifiable rewards
    "data", "checkpoint", "sampling", "envs",     # what a run reads, stores and generates
    "training",                                   # run setup, train state, optimizer, step
    "eval",                                       # completion rate, pass@k, reports
    "rl",                                         # the RL trainer
    "evaluate",                                   # checkpoint evaluation: restores RL workdirs
    "sft",                                        # SFT, rejection sampling from any checkpoint
    "cli",                                        # the entry points' error handling
)
# Outside the library: the demo's orchestration (experiments/demo/) and the configs import
# rl_post, never the other way round.
OUTSIDE = ("experiments", "configs")

# (importing file, imported node): why the upward import stays for now. Each entry
# must still be needed (test_allowed_upward_imports_are_still_needed).
ALLOWED_UPWARD: dict[tuple[str, str], str] = {}


@dataclasses.dataclass(frozen=True)
class Edge:
  """`source` (a file under the package) imports `module`, which lies in node `target`."""
  source: str
  line: int
  module: str
  importer: str
  target: str

  def __str__(self):
    return f"{self.source}:{self.line} imports {self.module} ({self.importer} -> {self.target})"


def module_name(path: pathlib.Path, root: pathlib.Path) -> str:
  parts = path.relative_to(root).with_suffix("").parts
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def node_of(module: str) -> str | None:
  """The package (or top-level module) `module` belongs to; None for the root package."""
  parts = module.split(".")
  return parts[1] if parts[0] == PACKAGE and len(parts) > 1 else None


def imported_modules(tree: ast.AST, module: str, is_package: bool):
  """(line, dotted name) of everything `tree` imports, at any depth."""
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      for alias in node.names:
        yield node.lineno, alias.name
    elif isinstance(node, ast.ImportFrom):
      if node.level:
        base = module.split(".")[:len(module.split(".")) - node.level + is_package]
        name = ".".join(base + ([node.module] if node.module else []))
      else:
        name = node.module or ""
      if name == PACKAGE:  # `from rl_post import x`: x is the node
        for alias in node.names:
          yield node.lineno, f"{PACKAGE}.{alias.name}"
      else:
        yield node.lineno, name
    elif (isinstance(node, ast.Call) and node.args
          and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
          and ((isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
               or (isinstance(node.func, ast.Name)
                   and node.func.id in ("import_module", "__import__")))):
      yield node.lineno, node.args[0].value


def import_edges(root: pathlib.Path) -> list[Edge]:
  """Every import of one node by another in the package at `root`/rl_post."""
  edges = []
  for path in sorted((root / PACKAGE).rglob("*.py")):
    module = module_name(path, root)
    importer = node_of(module) or "__init__"
    tree = ast.parse(path.read_text(), filename=str(path))
    for line, name in imported_modules(tree, module, path.name == "__init__.py"):
      target = node_of(name)
      if name.split(".")[0] == PACKAGE and target is not None and target != importer:
        edges.append(Edge(str(path.relative_to(root)), line, name, importer, target))
  return edges


def upward_edges(edges, layers, allowed=()) -> list[Edge]:
  """Edges whose target is not below their importer in `layers` (less the `allowed` ones)."""
  rank = {name: i for i, name in enumerate(layers)}
  return [e for e in edges if (e.source, e.target) not in allowed
          and not (e.importer in rank and e.target in rank and rank[e.target] < rank[e.importer])]


def package_cycles(edges) -> list[list[str]]:
  """The node sets that import each other in a ring (strongly connected, > 1 node)."""
  graph = collections.defaultdict(set)
  for e in edges:
    graph[e.importer].add(e.target)
  index, low, stack, on_stack, cycles = {}, {}, [], set(), []

  def visit(v):  # Tarjan's strongly connected components
    index[v] = low[v] = len(index)
    stack.append(v)
    on_stack.add(v)
    for w in sorted(graph[v]):
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on_stack:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      component = []
      while True:
        w = stack.pop()
        on_stack.discard(w)
        component.append(w)
        if w == v:
          break
      if len(component) > 1:
        cycles.append(sorted(component))

  for v in sorted(set(graph) | {t for ts in graph.values() for t in ts}):
    if v not in index:
      visit(v)
  return cycles


def _nodes(root: pathlib.Path) -> set[str]:
  pkg = root / PACKAGE
  return ({p.name for p in pkg.iterdir() if (p / "__init__.py").exists()}
          | {p.stem for p in pkg.glob("*.py") if p.name != "__init__.py"})


@pytest.fixture(scope="module")
def edges():
  return import_edges(ROOT)


def test_every_package_has_a_layer():
  nodes = _nodes(ROOT)
  assert nodes - set(LAYERS) == set(), "place the new package or module in LAYERS"
  assert set(LAYERS) - nodes == set(), "LAYERS names what rl_post no longer has"
  assert len(set(LAYERS)) == len(LAYERS)


def test_imports_point_down(edges):
  bad = upward_edges(edges, LAYERS, ALLOWED_UPWARD)
  assert not bad, "imports that do not point down LAYERS:\n" + "\n".join(map(str, bad))


def test_the_root_package_imports_nothing(edges):
  assert [str(e) for e in edges if e.importer == "__init__"] == []


def test_the_library_imports_nothing_from_outside_it():
  found = []
  for path in sorted((ROOT / PACKAGE).rglob("*.py")):
    tree = ast.parse(path.read_text(), filename=str(path))
    module = module_name(path, ROOT)
    found += [f"{path.relative_to(ROOT)}:{line} imports {name}"
              for line, name in imported_modules(tree, module, path.name == "__init__.py")
              if name.split(".")[0] in OUTSIDE]
  assert found == []


def test_no_cycle_between_packages(edges):
  kept = [e for e in edges if (e.source, e.target) not in ALLOWED_UPWARD]
  assert package_cycles(kept) == []


def test_allowed_upward_imports_are_still_needed(edges):
  found = {(e.source, e.target) for e in upward_edges(edges, LAYERS)}
  assert set(ALLOWED_UPWARD) - found == set(), "remove the fixed exceptions from ALLOWED_UPWARD"


def _tree(tmp_path, files: dict[str, str]) -> pathlib.Path:
  for name, text in files.items():
    path = tmp_path / PACKAGE / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
  return tmp_path


def test_an_upward_import_is_reported_with_its_file_and_line(tmp_path):
  root = _tree(tmp_path, {
      "__init__.py": "",
      "models/__init__.py": "from rl_post.models import layers\n",
      "models/layers.py": "import jax\n\ndef f():\n  from rl_post.rl import trainer\n",
      "rl/__init__.py": "",
      "rl/trainer.py": "from rl_post import models\nfrom ..models import layers\n",
  })
  edges = import_edges(root)
  assert sorted(map(str, edges)) == [
      "rl_post/models/layers.py:4 imports rl_post.rl (models -> rl)",
      "rl_post/rl/trainer.py:1 imports rl_post.models (rl -> models)",
      "rl_post/rl/trainer.py:2 imports rl_post.models (rl -> models)"]
  bad = upward_edges(edges, ("models", "rl"))
  assert [str(e) for e in bad] == ["rl_post/models/layers.py:4 imports rl_post.rl (models -> rl)"]
  assert upward_edges(edges, ("models", "rl"), {("rl_post/models/layers.py", "rl")}) == []
  assert package_cycles(edges) == [["models", "rl"]]


def test_string_imports_and_unlisted_packages_are_reported(tmp_path):
  root = _tree(tmp_path, {
      "tasks/__init__.py": "import importlib\nM = importlib.import_module('rl_post.rl.x')\n",
      "rl/__init__.py": "import rl_post.newpkg.sub as s\n",
      "newpkg/__init__.py": "",
  })
  bad = upward_edges(import_edges(root), ("tasks", "rl"))
  assert sorted(map(str, bad)) == [
      "rl_post/rl/__init__.py:1 imports rl_post.newpkg.sub (rl -> newpkg)",
      "rl_post/tasks/__init__.py:2 imports rl_post.rl.x (tasks -> rl)"]
  assert package_cycles(import_edges(root)) == []
