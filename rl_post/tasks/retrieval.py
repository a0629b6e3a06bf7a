"""Long-context retrieval: needle and multi-hop lookups in generated filler text.

A task hides a chain of facts ("Ada Hale's key is in locker 417.", "Locker
417 is in room Vega.", ...) at random places in filler prose, together with
the chains of other people (distractors), and asks where the key ends up
after `hops` links. One hop is a plain needle lookup. Each level is a
(context length in tokens, hops) pair; the default levels go from 512
tokens with one hop to 32k tokens with three hops. Lengths are measured as
characters / 4, the usual estimate for English text with BPE tokenizers
(our SentencePiece tokenizer spends a little more on the filler; see
docs/domains_text.md).
"""

import re

import numpy as np

from rl_post.tasks.base import MAX_ANSWER_CHARS, Domain, Task, Verdict

CHARS_PER_TOKEN = 4
DEFAULT_LEVELS = ((512, 1), (2048, 1), (4096, 2), (8192, 2), (16384, 3), (32768, 3))
_KINDS = ("locker", "room", "building", "district")
_ROOMS = ("Vega Rigel Deneb Altair Sirius Mira Castor Pollux Spica Antares Lyra Orion Hydra "
          "Draco Cygnus Atlas").split()
_BUILDINGS = ("Oak Birch Cedar Maple Pine Willow Elm Ash Alder Rowan Hazel Larch").split()
_DISTRICTS = ("North East South West Harbor Hill Market River Garden Castle").split()
_FIRST = ("Ada Alan Bea Carl Dana Eli Fay Gus Hana Ivan Jon Kai Lea Max Nia Omar Pia Rosa Sam "
          "Tara").split()
_LAST = "Abbot Brook Chen Diaz Evans Frost Gray Hale Ito Jones Klein Lopez Moss Novak".split()
_SUBJECTS = ("The farmer", "A small dog", "The committee", "Our neighbour", "The old clock",
             "A traveller", "The river", "The teacher", "A quiet cat", "The market")
_VERBS = ("watched", "carried", "painted", "ignored", "followed", "counted", "visited",
          "described", "repaired", "remembered")
_OBJECTS = ("the wooden fence", "a basket of apples", "the long road", "the morning train",
            "an empty room", "the distant hills", "a blue umbrella", "the evening news",
            "a stack of letters", "the garden gate")
_ENDINGS = ("slowly", "before noon", "without a word", "in the rain", "with great care",
            "for an hour", "once again", "at dawn", "as usual", "near the bridge")
# a filler sentence's mean length, its joining space included
_MEAN_SENTENCE_CHARS = sum(np.mean([len(w) for w in words])
                           for words in (_SUBJECTS, _VERBS, _OBJECTS, _ENDINGS)) + 5


def _labels(rng: np.random.Generator, kind: str, count: int) -> list[str]:
  if kind == "locker":
    return [str(x) for x in rng.choice(np.arange(100, 1000), count, replace=False)]
  pool = {"room": _ROOMS, "building": _BUILDINGS, "district": _DISTRICTS}[kind]
  return [str(x) for x in rng.choice(pool, count, replace=False)]


def _filler(rng: np.random.Generator, n_chars: int) -> list[str]:
  """Sentences of random filler prose totalling about n_chars characters."""
  n = max(1, round(n_chars / _MEAN_SENTENCE_CHARS))
  picks = [rng.integers(len(words), size=n) for words in (_SUBJECTS, _VERBS, _OBJECTS, _ENDINGS)]
  return [f"{_SUBJECTS[a]} {_VERBS[b]} {_OBJECTS[c]} {_ENDINGS[d]}."
          for a, b, c, d in zip(*picks)]


def _chains(rng: np.random.Generator, hops: int, n_people: int):
  """n_people chains of `hops` links; labels distinct per kind across chains."""
  names = [f"{_FIRST[i]} {_LAST[j]}" for i, j in zip(
      rng.choice(len(_FIRST), n_people, replace=False),
      rng.choice(len(_LAST), n_people, replace=False))]
  labels = [_labels(rng, kind, n_people) for kind in _KINDS[:hops]]
  chains = []
  for p, name in enumerate(names):
    items = [f"{name}'s key"] + [f"{kind} {labels[h][p]}" for h, kind in enumerate(_KINDS[:hops])]
    facts = [f"{items[h][0].upper()}{items[h][1:]} is in {items[h + 1]}." for h in range(hops)]
    chains.append((name, facts, labels[-1][p]))
  return chains


class Retrieval(Domain):
  """`Where is X's key?` answered from a long generated document."""

  name = "retrieval"

  def __init__(self, levels=DEFAULT_LEVELS, distractors: int = 3):
    """Args:
      levels: one (context_tokens, hops) pair per difficulty level, in order;
        context_tokens in [128, 131072], hops in [1, 4].
      distractors: other people's chains hidden in the same document.
    """
    levels = tuple((int(t), int(h)) for t, h in levels)
    if not levels:
      raise ValueError("retrieval: levels must not be empty")
    for tokens, hops in levels:
      if not (128 <= tokens <= 131072 and 1 <= hops <= len(_KINDS)):
        raise ValueError(f"retrieval: level ({tokens}, {hops}) needs 128 <= context_tokens "
                         f"<= 131072 and 1 <= hops <= {len(_KINDS)}")
    if not 0 <= distractors <= 9:
      raise ValueError(f"retrieval: distractors must be in [0, 9], got {distractors}")
    self.levels = levels
    self.distractors = distractors
    self.difficulty_levels = tuple(range(1, len(levels) + 1))

  def generate(self, rng: np.random.Generator, difficulty: int) -> Task:
    self.check_difficulty(difficulty)
    tokens, hops = self.levels[difficulty - 1]
    chains = _chains(rng, hops, self.distractors + 1)
    name, facts, answer = chains[0]
    kind = _KINDS[hops - 1]
    question = self.ask(f"In which {kind} is {name}'s key? Follow the facts in the document.",
                        f"the {kind}'s name or number",
                        f"Think in <think> </think> tags, then give only the {kind}'s name or "
                        "number in <answer> </answer> tags.")
    budget = tokens * CHARS_PER_TOKEN - len(question) - 40
    needles = [fact for _, chain_facts, _ in chains for fact in chain_facts]
    sentences = _filler(rng, budget - sum(len(f) + 1 for f in needles))
    positions = np.sort(rng.choice(len(sentences) + len(needles), len(needles), replace=False))
    order = rng.permutation(len(needles))
    document, k, f = [], 0, 0
    for i in range(len(sentences) + len(needles)):
      if f < len(positions) and positions[f] == i:
        document.append(needles[order[f]])
        f += 1
      else:
        document.append(sentences[k])
        k += 1
    prompt = "Document:\n" + " ".join(document) + "\n\n" + question
    return Task(task_id=f"retrieval/{difficulty}/{name}/{answer}/{int(rng.integers(1 << 30))}",
                domain=self.name, prompt=prompt, difficulty=difficulty, target=answer,
                metadata={"facts": facts, "kind": kind, "context_tokens": tokens, "hops": hops})

  def demonstration(self, task: Task) -> str:
    return self.respond(" ".join(task.metadata["facts"]), task.target)

  def verify(self, task: Task, completion: str, *, sandbox=None) -> Verdict:
    del sandbox  # parses text only
    reading = self.read(completion)
    format_ok, answer = reading.format_ok, reading.answer
    if answer is None:
      return Verdict(0.0, format_ok, None, self.no_answer)
    if len(answer) > MAX_ANSWER_CHARS:
      return Verdict(0.0, format_ok, answer[:MAX_ANSWER_CHARS], "answer too long")
    return Verdict(float(normalize(answer, task.metadata["kind"]) == task.target.casefold()),
                   format_ok, answer)


def normalize(answer: str, kind: str) -> str:
  """'The Room Vega.' -> 'vega': case, punctuation, 'the' and the kind word dropped."""
  words = re.sub(r"[^\w\s]", " ", answer).casefold().split()
  while words and words[0] in ("the", "in", kind):
    words = words[1:]
  return " ".join(words)
