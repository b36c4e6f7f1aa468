"""What sets the hours of the design chosen by a variance split (issue 48's diagnosis; opd_jax/cost/design.py).

  python benchmarks/variance_split.py --estimand=projection \\
      --records='docs/data/validation_v2/study_records_[12].parquet' --out=docs/data/variance_split/v2_blocks12.json \\
      --explain=docs/data/variance_split/v2_blocks12 --boot=200

`design.choose` asks the design to reach the fixed design's variance on EVERY pair of configurations (minimax): the
pair that needs the most questions at the chosen nodes per rollout and r sets the hours. This writes, beside the
split's JSON:
  <prefix>_binding.csv: per pair (`design.pair_table`), its components, the target variance and standard error at
    the fixed design (in the split's units and the verdict's), the continuation share of that variance, the
    questions it needs at the every-pair design (binding: as many as the design has), Cochran's continuous r* and
    nodes_per_rollout*, its own cheapest design, whether its two configurations share a view (teacher and context:
    only the divergence differs), whether it is a comparison against the verdict's leader, whether its fixed-design
    standard error is above the floor;
  <prefix>_criteria.csv: the design and its hours (the cost model's, as the dry run prices them; "fraction" of
    the fixed design's) under the issue's criterion and, for information, under others: only the pairs whose
    fixed-design standard error is above the floor (`floor_fraction` x config.report.min_effect, in the verdict's
    units: the alignment ratio's is the projection's over the ratio's scale S), every pair to the looser of its
    target and the floor, the median pair (of the pairs' own cheapest hours), only the verdict's comparisons
    against its leader (as they are, and floored), and every pair but the k most demanding (by their own cheapest
    hours; k in PEEL and the least k whose design costs at most PEEL_TO of the fixed one by the linear cost).
    Per row also: the linear cost's design hours ("hours_linear", "fraction_linear"), the unit costs (c_question,
    c_node, c_node_continuation, hours), "binding" (the pairs that need all the design's questions at its nodes
    and r; "all N" when the design is the fixed one, which every pair's target is made of), "alone_within_1pct"
    (pairs whose own cheapest design costs >= 99% of the criterion's: one pair alone sets it). With boot > 0 also
    each criterion's linear fraction over `boot` resamples of the pilot's questions (with replacement; S and the
    leader held at the pilot's): its 5%, 50% and 95% quantiles and the share at most PEEL_TO, how much of the
    design is the pilot's noise.
These alternatives are read-outs, not the design the dry run prints (that stays every pair).
"""
from __future__ import annotations

import math
import os
import sys

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from opd_jax.cost import design  # pylint: disable=g-import-not-at-top,wrong-import-position

CRITERIA = ("every pair", "pairs above the floor", "every pair, floored", "median pair", "against the leader",
            "against the leader, floored")
PEEL = (1, 3, 10, 30)      # "every pair but the k most demanding" (`demanding`), and the least k reaching PEEL_TO
PEEL_TO = 0.1              # of the fixed design's hours


def select(name: str, split: dict, targets: dict, floor_var: float, leader: str, costs, node_rollouts: int,
           g: float) -> tuple[dict, dict]:
  """(pairs, targets) that criterion `name` (CRITERIA) asks a design to reach ({} when it asks nothing, e.g. no
  pair above the floor); floor_var: the floor's variance in the split's units.

  Raises:
    ValueError: an unknown criterion.
  """
  if name == "every pair":
    keep, tg = split, targets
  elif name == "pairs above the floor":
    keep = {k: split[k] for k in design.above_floor(targets, floor_var)}
    tg = targets
  elif name == "every pair, floored":
    keep, tg = split, design.lifted(targets, floor_var)
  elif name == "median pair":
    k = design.demanding(split, targets, costs, node_rollouts, g)[len(split) // 2][1]
    keep, tg = {k: split[k]}, targets
  elif name in ("against the leader", "against the leader, floored"):
    keep = {k: s for k, s in split.items() if leader in k.split(" - ")}
    tg = design.lifted(targets, floor_var) if name.endswith("floored") else targets
  else:
    raise ValueError(f"criterion must be one of {CRITERIA}, got {name!r}")
  return keep, {k: tg[k] for k in keep}


def names(pairs: list[str], most: int = 6) -> str:
  return "; ".join(pairs) if len(pairs) <= most else f"{len(pairs)} pairs"


def resampled(wide, configs, r: float, boot: int, seed: int):
  """`boot` splits ({pair: Components}) of `wide` (variance_split.differences) with its questions drawn with
  replacement (a question drawn twice counts as two)."""
  from benchmarks import variance_split  # pylint: disable=g-import-not-at-top
  questions = wide.index.get_level_values(0).to_numpy()
  ids = pd.unique(questions)
  at = {q: np.flatnonzero(questions == q) for q in ids}
  rng = np.random.default_rng(seed)
  for _ in range(boot):
    draw = rng.integers(0, len(ids), len(ids))
    idx = np.concatenate([at[ids[j]] for j in draw])
    labels = np.concatenate([np.full(at[ids[j]].size, i) for i, j in enumerate(draw)])
    w = wide.iloc[idx]
    w.index = pd.Index(labels)
    yield variance_split.pair_components(w, configs, r)


def explain(rows, wide, configs, r: float, scale: float, meta: dict, config, cost_model: str, prefix: str,
            floor_fraction: float = design.FLOOR_FRACTION, boot: int = 0,
            seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
  """Writes <prefix>_binding.csv and <prefix>_criteria.csv (the module's docstring) and returns them.

  Args:
    rows: the pilot's node rows (with rewards): the leader and the views are read from them.
    wide, configs, r, scale: `variance_split.differences` of them (the split: `variance_split.pair_components`).
    meta: the split's "estimand" and "target".
    config: the study config whose design is chosen (e.g. configs/teacher_sweep.py:paper).
    cost_model: the accelerator (`estimate.accelerator`), e.g. "h200".
  Raises:
    ValueError: a split estimand the verdict's units cannot be read from (naming it).
  """
  from benchmarks import variance_split  # pylint: disable=g-import-not-at-top
  from opd_jax.cost import estimate  # pylint: disable=g-import-not-at-top
  from opd_jax.report import decision  # pylint: disable=g-import-not-at-top
  verdict = config.report.get("estimand", "alignment")
  unit = design.verdict_unit(meta["estimand"], verdict, scale)
  if unit is None:
    raise ValueError(f"--explain: a split of {meta['estimand']!r} cannot be put in the verdict's units "
                     f"(config.report.estimand={verdict!r}); split --estimand=projection or alignment_ratio")
  split = variance_split.pair_components(wide, configs, r)
  chip, chips = estimate.accelerator(cost_model)
  work = estimate.planned_work(config)
  costs = design.unit_costs(config, work, chip, chips)
  price = design.pricer(config, work, chip, chips)
  m = config.budget.node_rollouts_per_question
  g = design.group_rollouts(config, meta["target"])
  ref = design.reference(config)
  fixed = price(*ref)
  fixed_linear = design.linear_cost(costs, *ref, m)
  floor = floor_fraction * float(config.report.min_effect)
  floor_var = (floor * unit) ** 2
  targets = design.fixed_targets(config, split, meta["target"])
  leader = decision.decide(rows, target=meta["target"], n_boot=20, estimand=verdict)["best"]
  view = rows.drop_duplicates("config_id").set_index("config_id")[["teacher", "context"]].astype(str)
  view = (view.teacher + ":" + view.context).to_dict()

  chosen = design.cheapest_priced(price, split, targets, costs, m, g)
  table = pd.DataFrame(design.pair_table(split, ref, costs, m, g, chosen,
                                         design.reference_group(config, meta["target"])))
  a, b = zip(*(k.split(" - ") for k in table.pair))
  table.insert(5, "se_fixed", np.sqrt(table.target))
  table.insert(6, "se_fixed_verdict", table.se_fixed / unit)
  table["same_view"] = [view[x] == view[y] for x, y in zip(a, b)]
  table["vs_leader"] = [leader in (x, y) for x, y in zip(a, b)]
  table["above_floor"] = table.pair.isin(design.above_floor(targets, floor_var))
  table["own_hours_linear_fraction"] = table.own_hours_linear / fixed_linear

  crit = []

  def add(name, pairs, tg):
    if not pairs:
      crit.append(dict(criterion=name, pairs=0))
      return
    d = design.cheapest_priced(price, pairs, tg, costs, m, g)
    lin = design.cheapest(pairs, tg, costs, m, g)
    tied = design.binding(pairs, tg, d, g)
    top = design.setters(pairs, tg, costs, m, g)
    crit.append(dict(criterion=name, pairs=len(pairs), questions=d.questions, nodes_per_rollout=d.nodes_per_rollout,
                     r=d.r, hours=d.hours, fraction=d.hours / fixed.hours, hours_linear=lin[3],
                     fraction_linear=lin[3] / fixed_linear,
                     binding=f"all {len(pairs)}" if len(tied) == len(pairs) > 1 else names(tied),
                     alone_within_1pct=names(top)))

  for name in CRITERIA:
    add(name, *select(name, split, targets, floor_var, leader, costs, m, g))
  order = [k for _, k in design.demanding(split, targets, costs, m, g)]
  reaches = lambda k: design.cheapest({p: split[p] for p in order[k:]}, targets, costs, m, g)[3] <= (
      PEEL_TO * fixed_linear)
  lo, hi = 0, len(order) - 1          # fewer pairs never cost more: bisect for the least k that reaches PEEL_TO
  peel = None
  if reaches(hi):
    while hi - lo > 1:
      mid = (lo + hi) // 2
      lo, hi = (lo, mid) if reaches(mid) else (mid, hi)
    peel = hi
  for k in sorted({*PEEL, *([peel] if peel else [])}):
    if k < len(order):
      add(f"every pair but the {k} most demanding" + (f" (the least k to {PEEL_TO:g} by the linear cost)"
                                                       if k == peel else ""),
          {p: split[p] for p in order[k:]}, targets)
  crit = pd.DataFrame(crit)
  if boot:
    got = {name: [] for name in CRITERIA}
    for split_b in resampled(wide, configs, r, boot, seed):
      targets_b = design.fixed_targets(config, split_b, meta["target"])
      for name in CRITERIA:
        pairs, tg = select(name, split_b, targets_b, floor_var, leader, costs, m, g)
        got[name].append(design.cheapest(pairs, tg, costs, m, g)[3] / fixed_linear if pairs else math.nan)
    for q, col in ((0.05, "boot_fraction_linear_p05"), (0.5, "boot_fraction_linear_median"),
                   (0.95, "boot_fraction_linear_p95")):
      crit[col] = crit.criterion.map({name: float(np.nanquantile(v, q)) if np.isfinite(v).any() else math.nan
                                      for name, v in got.items()})
    crit[f"boot_share_at_most_{PEEL_TO:g}"] = crit.criterion.map(     # a resample that asks nothing: not counted
        {name: float(np.mean(np.asarray(v) <= PEEL_TO)) for name, v in got.items()})
    crit["boot_asks_nothing"] = crit.criterion.map({name: int(np.isnan(v).sum()) for name, v in got.items()})
  crit.insert(1, "floor_verdict", floor)
  crit.insert(2, "leader", leader)
  crit.insert(3, "fixed_hours", fixed.hours)
  crit.insert(4, "boot", boot)
  for i, name in enumerate(("c_question", "c_node", "c_node_continuation")):
    crit.insert(5 + i, name, costs[i])
  table.to_csv(f"{prefix}_binding.csv", index=False, float_format="%.6g")
  crit.to_csv(f"{prefix}_criteria.csv", index=False, float_format="%.6g")
  return table, crit
