"""`synthetic:parity`: a task that tiny random models solve about half the time (smoke runs and tests only).

Each problem asks for a response whose characters with an even code point number even ("even") or odd
("odd") times; the extracted answer of a response is the parity of that count. Random byte-level models
succeed about half the time, and every forced token shifts the odds, so the smoke study has informative
questions and non-degenerate nodes without a real model. Problems carry a reference solution (an example
response with the right parity) so every self-distillation context can be exercised.
"""
import numpy as np

from opd_jax.tasks import base

TEMPLATE = "{question}"
NAMES = ("parity",)


def _parity(text: str) -> str:
  return "even" if sum(1 for c in text if ord(c) % 2 == 0) % 2 == 0 else "odd"


def load(name: str, *, num_problems: int | None, seed: int, template: str = TEMPLATE) -> base.Task:
  """`num_problems` (default 16) problems drawn with numpy seed `seed`."""
  if name not in NAMES:
    raise ValueError(f"unknown synthetic task {name!r}; known: {', '.join('synthetic:' + n for n in NAMES)}")
  rng = np.random.default_rng(seed)
  problems = []
  for i in range(16 if num_problems is None else num_problems):
    gold = "even" if rng.integers(2) == 0 else "odd"
    example = "".join(chr(int(c)) for c in rng.integers(97, 123, size=int(rng.integers(3, 9))))
    if _parity(example) != gold:
      example += "b"                                                     # one more even code point
    problems.append(base.Problem(id=f"parity-seed{seed}-{i:05d}",
                                 question=f"Write a few letters; #{i}: the count of even letters is {gold}.",
                                 answer=gold, solution=example))
  return base.Task(name=f"synthetic:{name}", problems=problems, template=template, extractor=_parity,
                   grader=lambda problem, answer: answer == problem.answer)
