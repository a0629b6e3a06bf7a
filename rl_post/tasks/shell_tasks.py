"""Directory trees and file-manipulation instructions for the shell domain.

A tree is {relative path: text content}. Base names are unique across the
tree, keywords are upper-case tokens that never occur inside other words,
and every line ends with a newline, so each instruction has one correct
result, computed here by `apply` (our own code, on the host).
"""

import numpy as np

LEVELS = (1, 2, 3, 4)
ANSWER = "answer.txt"
_DIRS = ("src", "docs", "logs", "data", "src/util", "docs/old", "data/raw/2024")
_EXTS = ("txt", "log", "md", "csv", "py")
_WORDS = ("alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "theta", "zeta")
_KEYWORDS = ("TODO", "ERROR", "FIXME", "WARN")
_STEMS = ("notes", "main", "report", "config", "index", "readme", "draft", "summary", "old",
          "new", "input", "output", "table", "plan", "list", "items", "cache", "queue", "task",
          "event", "trace", "usage", "stats", "sheet")


def make_tree(rng: np.random.Generator, difficulty: int) -> dict[str, str]:
  dirs = _DIRS[:2 + int(difficulty * 1.25)]
  num_files = 4 + 3 * difficulty
  stems = rng.choice(_STEMS, size=num_files, replace=False)
  tree = {}
  for i, stem in enumerate(stems):
    ext = _EXTS[int(rng.integers(len(_EXTS)))] if i >= len(_EXTS) else _EXTS[i]
    lines = []
    for _ in range(int(rng.integers(0, 5))):
      words = list(rng.choice(_WORDS, size=int(rng.integers(1, 5))))
      if rng.random() < 0.3:
        words.insert(int(rng.integers(len(words) + 1)), _KEYWORDS[int(rng.integers(2))])
      lines.append(" ".join(words) + "\n")
    path = f"{dirs[int(rng.integers(len(dirs)))]}/{stem}.{ext}"
    tree[path] = "".join(lines)
  return tree


def _ext_of(tree, rng):
  exts = sorted({p.rsplit(".", 1)[1] for p in tree})
  return exts[int(rng.integers(len(exts)))]


def _base(path):
  return path.rsplit("/", 1)[-1]


def make_instruction(rng: np.random.Generator, difficulty: int, tree: dict):
  """(family, params, instruction text, bash demonstration) for `tree`."""
  ext = _ext_of(tree, rng)
  word = _KEYWORDS[int(rng.integers(2))]
  new_ext = [e for e in _EXTS if e != ext][int(rng.integers(len(_EXTS) - 1))]
  found = f"-type f -name '*.{ext}'"
  families = {
      1: [("count_ext", f"Write the number of files whose name ends in .{ext} (anywhere under "
                        f"the current directory) to {ANSWER}.",
           f"n=$(find . {found} | wc -l)\necho \"$n\" > {ANSWER}")],
      2: [("find_word", f"Write the paths of all files that contain {word}, relative to the "
                        "current directory (like docs/a.md, no leading ./), one per line, "
                        f"sorted in byte order (LC_ALL=C sort), to {ANSWER}.",
           f"grep -rl {word} . | sed 's|^\\./||' | LC_ALL=C sort > /tmp/a\nmv /tmp/a {ANSWER}"),
          ("count_lines", f"Write the total number of lines in all .{ext} files (anywhere "
                          f"under the current directory) to {ANSWER}.",
           f"n=$(find . {found} -exec cat {{}} + | wc -l)\necho \"$n\" > {ANSWER}")],
      3: [("rename_ext", f"Rename every file whose name ends in .{ext} to end in .{new_ext} "
                         "instead, in the same directory.",
           f"find . {found} | while read -r f; do mv \"$f\" \"${{f%.{ext}}}.{new_ext}\"; done"),
          ("replace_word", f"In every .{ext} file, replace each occurrence of {word} with "
                           "DONE; leave all other files unchanged.",
           f"find . {found} -exec sed -i 's/{word}/DONE/g' {{}} +")],
      4: [("move_ext", f"Move every .{ext} file into a new top-level directory archive/ "
                       "(keep the file names; they are unique).",
           f"mkdir -p archive\nfind . {found} -not -path './archive/*' -exec mv {{}} archive/ \\;"),
          ("delete_word", f"Delete every file that contains {word}; keep all other files.",
           f"grep -rl {word} . | while read -r f; do rm -- \"$f\"; done")],
  }
  choices = families[difficulty]
  family, text, demo = choices[int(rng.integers(len(choices)))]
  return family, {"ext": ext, "new_ext": new_ext, "word": word}, text, demo


def apply(tree: dict[str, str], family: str, params: dict) -> dict[str, str]:
  """The tree after a correct execution of the instruction."""
  ext, new_ext, word = params["ext"], params["new_ext"], params["word"]
  has_ext = lambda p: p.endswith("." + ext)  # pylint: disable=unnecessary-lambda-assignment
  out = dict(tree)
  if family == "count_ext":
    out[ANSWER] = f"{sum(map(has_ext, tree))}\n"
  elif family == "count_lines":
    out[ANSWER] = f"{sum(c.count(chr(10)) for p, c in tree.items() if has_ext(p))}\n"
  elif family == "find_word":
    out[ANSWER] = "".join(p + "\n" for p in sorted(p for p, c in tree.items() if word in c))
  elif family == "rename_ext":
    out = {(p[:-len(ext)] + new_ext if has_ext(p) else p): c for p, c in tree.items()}
  elif family == "replace_word":
    out = {p: (c.replace(word, "DONE") if has_ext(p) else c) for p, c in tree.items()}
  elif family == "move_ext":
    out = {("archive/" + _base(p) if has_ext(p) else p): c for p, c in tree.items()}
  elif family == "delete_word":
    out = {p: c for p, c in tree.items() if word not in c}
  else:
    raise ValueError(f"unknown shell task family {family!r}")
  return out
