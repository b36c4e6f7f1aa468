"""A study design chosen by its variance split and its cost (issue 48, item 2): questions Q, nodes per rollout and
continuations per candidate r that reach a target precision at the least accelerator time.

The optimum of a three-stage sample (Cochran 1977, "Sampling Techniques", ch. 10.6 and 10.8): with per-question
cost c_q + m c_n + m r c_c (m nodes per question, r continuations per candidate) and the mean's variance
(s2_q + (s2_n + s2_c / r) / m) / Q (`estimators.variance.Components`), the continuous optimum is
r* = sqrt(s2_c c_n / (s2_n c_c)) and m* = sqrt((s2_n + s2_c / r*) c_q / (s2_q (c_n + r* c_c))); here it is
searched over the integer grid (r >= 2: the alignment ratio's cross-fit needs two halves), Q the least that reaches
the target for every pair of configurations. The unit costs come from the roofline cost model
(`estimate.calls` / `estimate.cost`) at three budgets, and the chosen design's hours are the cost model's own at
that design, not the linear fit's.
"""
from __future__ import annotations

import dataclasses
import json
import math
import pathlib

from opd_jax.estimators import variance

R_GRID = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
NODES_GRID = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Design:
  questions: int
  nodes_per_rollout: int
  r: int
  hours: float             # the cost model's accelerator hours at this design (all questions)


def read_split(path) -> tuple[dict, dict[str, variance.Components]]:
  """(meta, {pair: Components}) of a variance-split JSON (benchmarks/variance_split.py).

  Raises:
    ValueError: a missing file or one without pairs, naming the path and how to write one.
  """
  p = pathlib.Path(path)
  try:
    d = json.loads(p.read_text())
    pairs = {k: variance.Components(**v) for k, v in d["pairs"].items()}
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise ValueError(f"--variance_split={path}: not a variance split ({type(e).__name__}: {e}); write one with "
                     "python benchmarks/variance_split.py --workdir=<a study's workdir> --out=<file>") from None
  if not pairs:
    raise ValueError(f"--variance_split={path}: no pairs of configurations in it")
  return {k: v for k, v in d.items() if k != "pairs"}, pairs


def hours(config, work, chip, chips: int, *, nodes_per_rollout: int, r: int) -> float:
  """Accelerator hours per question of `config` with uniform r continuations and `nodes_per_rollout` (the cost
  model's roofline at its planned bounds; no looks)."""
  from opd_jax.cost import estimate  # pylint: disable=g-import-not-at-top
  from opd_jax.study import planning  # pylint: disable=g-import-not-at-top
  c = config.copy_and_resolve_references()
  c.budget.update(nodes_per_rollout=nodes_per_rollout, continuations_per_candidate=r, allocation="uniform",
                  adaptive=False, looks=(), futility=0.0)
  return estimate.cost(estimate.calls(c, work=work), chip, chips).acc_s / 3600 / planning.plan(c).questions


def unit_costs(config, work, chip, chips: int) -> tuple[float, float, float]:
  """(c_q, c_n, c_c) hours: per question, per node and per node-continuation (a node's r continuations of every
  candidate cost r c_c), fitted exactly to the cost model at three budgets of `config`'s node rollouts."""
  m = config.budget.node_rollouts_per_question
  h = lambda n, r: hours(config, work, chip, chips, nodes_per_rollout=n, r=r)
  a, b, c = h(8, 16), h(8, 4), h(2, 4)
  c_c = (a - b) / (8 * m * 12)
  c_n = (b - c) / (6 * m) - 4 * c_c
  return max(c - 2 * m * (c_n + 4 * c_c), 0.0), c_n, c_c


def cheapest(split: dict[str, variance.Components], targets: dict[str, float], costs, node_rollouts: int,
             r_grid=R_GRID, nodes_grid=NODES_GRID) -> tuple[int, int, int, float]:
  """(questions, nodes_per_rollout, r, linear cost) of the cheapest design whose every pair's variance is at most
  its target (`targets`: pair -> variance), by the linear per-question cost of `costs` (c_q, c_n, c_c)."""
  c_q, c_n, c_c = costs
  best = None
  for n in nodes_grid:
    m = n * node_rollouts
    for r in r_grid:
      q = max(math.ceil(s.variance(1, m, r) / targets[k] - 1e-9) for k, s in split.items())
      cost = q * (c_q + m * c_n + m * r * c_c)
      if best is None or cost < best[3]:
        best = (q, n, r, cost)
  return best


def describe(config, work, chip, chips: int, path, questions: int) -> list[str]:
  """The dry run's lines for a variance split: the design that reaches, for every pair, the precision of the fixed
  design (config's nodes per rollout, its R, `questions` questions) at the least cost, and its hours."""
  meta, split = read_split(path)
  b = config.budget
  m = b.node_rollouts_per_question * b.nodes_per_rollout
  targets = {k: s.variance(questions, m, b.continuations_per_candidate) for k, s in split.items()}
  costs = unit_costs(config, work, chip, chips)
  q, n, r, _ = cheapest(split, targets, costs, b.node_rollouts_per_question)
  got = hours(config, work, chip, chips, nodes_per_rollout=n, r=r) * q
  fixed = hours(config, work, chip, chips, nodes_per_rollout=b.nodes_per_rollout,
                r=b.continuations_per_candidate) * questions
  return [f"  variance split ({meta.get('estimand', '?')} on {meta.get('target', '?')} nodes, {len(split)} pairs, "
          f"from {meta.get('source', path)}): unit costs {costs[0]:.3g} h per question, {costs[1]:.3g} per node, "
          f"{costs[2]:.3g} per node-continuation",
          f"  the cheapest design for the fixed design's precision at {questions} questions: {q} questions, "
          f"nodes_per_rollout {n}, r = {r} (the fixed: nodes_per_rollout {b.nodes_per_rollout}, R = "
          f"{b.continuations_per_candidate}, {fixed:.3g} h)",
          f"  hours for R={b.continuations_per_candidate}'s precision: {got:.3g}"]
