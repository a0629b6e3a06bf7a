"""Function-writing problem families for the code domain.

Each family has a reference implementation (trusted, ours: it computes the
expected values on the host and, as source, is the demonstration), a
one-line specification and an input generator. Level = difficulty.
Inputs and outputs are plain JSON-like values (no tuples) so tasks stay
JSON-serialisable.
"""

import dataclasses
import inspect
import string
import textwrap
from typing import Callable

import numpy as np


def sum_of_digits(n):
  return sum(int(c) for c in str(n))


def count_vowels(s):
  return sum(1 for c in s if c in "aeiou")


def sum_divisible(xs, k):
  return sum(x for x in xs if x % k == 0)


def running_max(xs):
  out = []
  for x in xs:
    out.append(x if not out or x > out[-1] else out[-1])
  return out


def reverse_words(s):
  return " ".join(reversed(s.split()))


def second_largest(xs):
  distinct = sorted(set(xs))
  return distinct[-2] if len(distinct) >= 2 else None


def run_length(s):
  out = []
  for c in s:
    if out and out[-1][0] == c:
      out[-1][1] += 1
    else:
      out.append([c, 1])
  return out


def rotate(xs, k):
  if not xs:
    return []
  k %= len(xs)
  return xs[len(xs) - k:] + xs[:len(xs) - k]


def is_balanced(s):
  pairs = {")": "(", "]": "[", "}": "{"}
  stack = []
  for c in s:
    if c in "([{":
      stack.append(c)
    elif c in pairs:
      if not stack or stack.pop() != pairs[c]:
        return False
  return not stack


def merge_intervals(intervals):
  merged = []
  for start, end in sorted(intervals):
    if merged and start <= merged[-1][1]:
      merged[-1][1] = max(merged[-1][1], end)
    else:
      merged.append([start, end])
  return merged


def longest_increasing_run(xs):
  best = run = 0
  for i, x in enumerate(xs):
    run = run + 1 if i and x > xs[i - 1] else 1
    best = max(best, run)
  return best


def word_frequencies(s):
  counts = {}
  for word in s.lower().split():
    counts[word] = counts.get(word, 0) + 1
  return counts


def lis_length(xs):
  import bisect
  tails = []
  for x in xs:
    i = bisect.bisect_left(tails, x)
    tails[i:i + 1] = [x]
  return len(tails)


def num_islands(grid):
  seen = set()
  count = 0
  for r, row in enumerate(grid):
    for c, cell in enumerate(row):
      if cell != 1 or (r, c) in seen:
        continue
      count += 1
      stack = [(r, c)]
      seen.add((r, c))
      while stack:
        y, x = stack.pop()
        for ny, nx in ((y + 1, x), (y - 1, x), (y, x + 1), (y, x - 1)):
          if (0 <= ny < len(grid) and 0 <= nx < len(grid[ny]) and grid[ny][nx] == 1
              and (ny, nx) not in seen):
            seen.add((ny, nx))
            stack.append((ny, nx))
  return count


def edit_distance(a, b):
  prev = list(range(len(b) + 1))
  for i, ca in enumerate(a, 1):
    cur = [i]
    for j, cb in enumerate(b, 1):
      cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
    prev = cur
  return prev[-1]


# -- input generators: rng -> args list ---------------------------------------
def _ints(rng, n, low=-20, high=20):
  return [int(v) for v in rng.integers(low, high + 1, size=n)]


def _word(rng, letters="abcdeiou", low=1, high=6):
  return "".join(rng.choice(list(letters), size=int(rng.integers(low, high + 1))))


def _words(rng, n, letters=string.ascii_lowercase[:8]):
  return " ".join(_word(rng, letters) for _ in range(n))


def _size(rng, high):
  return int(rng.integers(0, high + 1))


@dataclasses.dataclass(frozen=True)
class Family:
  """A problem family; `spec` completes "Write a Python function `sig` that ..."."""
  reference: Callable
  level: int
  signature: str
  spec: str
  inputs: Callable[[np.random.Generator], list]
  edge_cases: tuple = ()

  @property
  def name(self) -> str:
    return self.reference.__name__

  def source(self) -> str:
    return textwrap.dedent(inspect.getsource(self.reference))


FAMILIES = (
    Family(sum_of_digits, 1, "sum_of_digits(n)",
           "returns the sum of the decimal digits of the non-negative integer n",
           lambda rng: [int(rng.integers(0, 10 ** int(rng.integers(1, 10))))], ([0],)),
    Family(count_vowels, 1, "count_vowels(s)",
           "returns how many characters of the string s are lowercase vowels (a, e, i, o, u)",
           lambda rng: [_words(rng, _size(rng, 5), "abcdeiouxyz")], ([""],)),
    Family(sum_divisible, 1, "sum_divisible(xs, k)",
           "returns the sum of the integers in the list xs that are divisible by the "
           "positive integer k",
           lambda rng: [_ints(rng, _size(rng, 10)), int(rng.integers(1, 6))], ([[], 3],)),
    Family(running_max, 2, "running_max(xs)",
           "returns a list whose i-th element is the maximum of xs[0..i] (inclusive)",
           lambda rng: [_ints(rng, _size(rng, 10))], ([[]],)),
    Family(reverse_words, 2, "reverse_words(s)",
           "returns the whitespace-separated words of s in reverse order, joined by "
           "single spaces",
           lambda rng: ["  ".join(_words(rng, _size(rng, 6)).split(" "))], ([""], ["  a  "])),
    Family(second_largest, 2, "second_largest(xs)",
           "returns the second largest distinct value in the list of integers xs, or "
           "None if xs has fewer than two distinct values",
           lambda rng: [_ints(rng, _size(rng, 8), -5, 5)], ([[]], [[3, 3]])),
    Family(run_length, 3, "run_length(s)",
           "returns the run-length encoding of s as a list of [character, count] lists, "
           "one per maximal run of equal characters, in order",
           lambda rng: [_word(rng, "aab", 0, 12)], ([""],)),
    Family(rotate, 3, "rotate(xs, k)",
           "returns a new list with the elements of xs rotated right by k >= 0 "
           "positions (k may exceed the length; an empty list stays empty)",
           lambda rng: [_ints(rng, _size(rng, 8)), int(rng.integers(0, 20))], ([[], 3],)),
    Family(is_balanced, 3, "is_balanced(s)",
           "returns True if the brackets (), [] and {} in s are balanced and properly "
           "nested (other characters are ignored), else False",
           lambda rng: [_word(rng, "()[]{}()x", 0, 10)], ([""], ["(]"], ["([]{x})"])),
    Family(merge_intervals, 4, "merge_intervals(intervals)",
           "takes a list of [start, end] integer lists (start <= end) and returns the "
           "merged intervals as a list of [start, end] lists sorted by start; intervals "
           "that overlap or touch (next start <= current end) are merged",
           lambda rng: [[sorted(_ints(rng, 2, 0, 30)) for _ in range(_size(rng, 6))]],
           ([[]], [[[1, 3], [3, 5]]])),
    Family(longest_increasing_run, 4, "longest_increasing_run(xs)",
           "returns the length of the longest contiguous strictly increasing run in the "
           "list xs (0 for an empty list)",
           lambda rng: [_ints(rng, _size(rng, 12), 0, 9)], ([[]], [[2, 2, 2]])),
    Family(word_frequencies, 4, "word_frequencies(s)",
           "returns a dict mapping each lowercased whitespace-separated word of s to the "
           "number of times it occurs",
           lambda rng: [" ".join(w.upper() if rng.random() < 0.3 else w
                                 for w in _words(rng, _size(rng, 8), "abc").split())],
           ([""],)),
    Family(lis_length, 5, "lis_length(xs)",
           "returns the length of the longest strictly increasing subsequence (not "
           "necessarily contiguous) of the list xs",
           lambda rng: [_ints(rng, _size(rng, 14), 0, 20)], ([[]], [[5, 4, 3]])),
    Family(num_islands, 5, "num_islands(grid)",
           "takes a rectangular grid (a list of lists of 0 and 1) and returns the number "
           "of groups of 1-cells connected horizontally or vertically",
           lambda rng: [rng.integers(0, 2, size=(int(rng.integers(1, 6)),
                                                 int(rng.integers(1, 6)))).tolist()],
           ([[]], [[[1, 0], [0, 1]]])),
    Family(edit_distance, 5, "edit_distance(a, b)",
           "returns the minimum number of single-character insertions, deletions and "
           "substitutions that turn the string a into the string b",
           lambda rng: [_word(rng, "abc", 0, 8), _word(rng, "abc", 0, 8)], (["", "abc"],)),
)

LEVELS = tuple(sorted({f.level for f in FAMILIES}))
