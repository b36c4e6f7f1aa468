"""The variance split of a study's per-node estimates: questions, nodes within a question, continuations within a
node (issue 48; a three-stage sample, Cochran 1977, "Sampling Techniques", ch. 10 and 10A).

A configuration's (or a paired difference's) mean over Q questions with m nodes each, every candidate run r times,
has variance

  Var = s2_question / Q + s2_node / (Q m) + s2_continuation / (Q m r)

for an estimand linear in P_succ (projection, teacher advantage, the alignment ratio's numerator): a node's value
at r continuations is its exact value plus noise of variance s2_continuation / r. `components` estimates the three
from a pilot's node values (the method of moments of the nested ANOVA, unbalanced: Searle, Casella & McCulloch
1992, ch. 3), the continuation part from each node's two halves of its continuations (`success.halves`): with
equal halves a, b of r / 2 each, E (v_a - v_b)^2 / 4 = s2_continuation / r.
"""
from __future__ import annotations

import dataclasses
import json
import pathlib

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[2]     # a relative pilot path is read from here if not from cwd


@dataclasses.dataclass(frozen=True, kw_only=True)
class Components:
  """Variance components of one per-node estimand (its units squared) and the pilot they came from."""
  question: float          # s2_question: between questions' true means
  node: float              # s2_node: between a question's nodes' true values
  continuation: float      # s2_continuation: a node's value at r continuations has noise s2_continuation / r
  questions: int           # the pilot's questions, nodes and continuations per candidate
  nodes: int
  r: float

  def variance(self, questions: float, nodes_per_question: float, r: float) -> float:
    """The mean's variance with Q questions, m nodes per question and r continuations per candidate."""
    return (self.question + (self.node + self.continuation / r) / nodes_per_question) / questions


def components(values, half_a, half_b, questions, r: float) -> Components:
  """Variance components from a pilot's node values.

  Args:
    values: float [N] each node's value with all its continuations (NaN: left out).
    half_a, half_b: float [N] the value from each half of its continuations (`success.halves`), or None to take
      the continuation part as 0.
    questions: [N] the node's question (any hashable).
    r: continuations per candidate behind `values` (the halves each hold about r / 2).
  Returns:
    `Components`, each clipped at 0 (a negative moment estimate is read as 0).
  Raises:
    ValueError: fewer than 2 questions, or no question with 2 nodes, among the defined values.
  """
  v = np.asarray(values, np.float64)
  q = np.asarray(questions)
  ok = np.isfinite(v)
  if half_a is not None:
    d = np.asarray(half_a, np.float64) - np.asarray(half_b, np.float64)
    ok &= np.isfinite(d)
    s2_c = float(r * np.mean(d[ok] ** 2) / 4) if ok.any() else 0.0
  else:
    s2_c = 0.0
  v, q = v[ok], q[ok]
  ids, inv, m = np.unique(q, return_inverse=True, return_counts=True)
  n, k = len(v), len(ids)
  if k < 2 or n - k < 1:
    raise ValueError(f"the variance split needs >= 2 questions and a question with >= 2 nodes; got {k} questions "
                     f"and {n} nodes with a defined value")
  means = np.bincount(inv, weights=v) / m
  within = float(np.sum((v - means[inv]) ** 2) / (n - k))          # E = s2_node + s2_continuation / r
  between = float(np.sum(m * (means - v.mean()) ** 2) / (k - 1))    # E = within + m0 s2_question
  m0 = (n - np.sum(m ** 2) / n) / (k - 1)
  return Components(question=max((between - within) / m0, 0.0), node=max(within - s2_c / r, 0.0),
                    continuation=s2_c, questions=k, nodes=n, r=float(r))


def pilot_path(path) -> pathlib.Path:
  """Where a variance split named by `path` is: as given (absolute, or relative to the working directory), else
  relative to the repository root (configs name committed pilots, docs/data/variance_split/, that way)."""
  p = pathlib.Path(path)
  return p if p.is_absolute() or p.exists() or not (REPO / p).exists() else REPO / p


def read_pilot(path, field: str = "--variance_split") -> dict:
  """The JSON object of a variance split (benchmarks/variance_split.py): "estimand", "target", "r", "source" and
  "pairs" {"a - b": {"question", "node", "continuation", "questions", "nodes", "r"}}, where "node" and
  "continuation" are null and "within" (= node + continuation / r) is given when the pilot had no rewards.

  Raises:
    ValueError: a missing or unreadable file, or one without pairs, naming `field`, the path and how to write one.
  """
  p = pilot_path(path)
  try:
    d = json.loads(p.read_text())
    pairs = d["pairs"]
    for v in pairs.values():
      if v.get("continuation") is None:
        float(v["question"]), float(v["within"])      # pylint: disable=expression-not-assigned
      else:
        float(v["question"]), float(v["node"]), float(v["continuation"])  # pylint: disable=expression-not-assigned
  except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
    raise ValueError(f"{field}={path}: not a variance split ({type(e).__name__}: {e}); write one with "
                     "python benchmarks/variance_split.py --workdir=<a study's workdir> --out=<file>") from None
  if not pairs:
    raise ValueError(f"{field}={path}: no pairs of configurations in it")
  return d
