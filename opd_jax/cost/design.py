"""A study design chosen by its variance split and its cost (issue 48, item 2): questions Q, nodes per rollout and
continuations per candidate r that reach a target precision at the least accelerator time.

The optimum of a three-stage sample (Cochran 1977, "Sampling Techniques", ch. 10.6 and 10.8): with per-question
cost c_q + m c_n + m r c_c (m nodes per question, r continuations per candidate) and the mean's variance
(s2_q + (s2_n + s2_c / r) / m) / Q (`estimators.variance.Components`), the continuous optimum is
r* = sqrt(s2_c c_n / (s2_n c_c)) and m* = sqrt((s2_n + s2_c / r*) c_q / (s2_q (c_n + r* c_c))); here it is
searched over the integer grid (r >= 2: the alignment ratio's cross-fit needs two halves), Q the least that reaches
the target for every pair of configurations. The unit costs come from the roofline cost model
(`estimate.calls` / `estimate.cost`) at three budgets; the cost model then prices the PRICED cheapest designs by
that linear cost (decode batches round up, so it is exact at its three budgets only) and the least of them is
chosen, its hours the cost model's own.

Which nodes count: the split is of the verdict's node group (its "target", e.g. incorrect), so a question's m
there is nodes_per_rollout x its node rollouts in that group, while every node rollout's nodes cost
(`group_rollouts`): half of budget.node_rollouts_per_question for correct or incorrect when they are balanced, all
of them with budget.node_group="target" (node rollouts drawn from the verdict's group only). The fixed design of
budget.precision_of is balanced, as every study was before budget.node_group.

The target precision is that of `budget.precision_of` (questions, nodes_per_rollout, R), the fixed design a
config's design replaces, or else the config's own design. A pilot without rewards (`variance.read_pilot`: its
continuation share of the within-question variance unknown) gives each pair at both ends of that share, all
between nodes or all continuation noise at the pilot's R; a design that reaches the target at both ends reaches it
at every share between (its variance and the target's are both linear in the share).

The floor: the every-pair criterion asks even pairs whose fixed-design standard error is far below anything the
verdict resolves (e.g. two divergences of one view, almost pure continuation noise) to keep it, and such a pair
alone can ask for the fixed design's whole continuation budget. `floored` prices every pair floored: each pair's
standard error, in the verdict's units (config.report.estimand: a projection split over the alignment ratio's scale
S, the split's "scale"), at most its fixed-design one or FLOOR_FRACTION x config.report.min_effect, whichever is
larger; `choose` picks that design where the floor applies, and names the pairs that set the every-pair hours
(`setters`) with their standard errors.
"""
from __future__ import annotations

import dataclasses
import math

from opd_jax.estimators import variance
from opd_jax.report import common

R_GRID = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
NODES_GRID = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
ENDS = ("no continuation noise", "all continuation noise")   # the two ends of an unknown continuation share
PRICED = 6               # the cheapest designs by the linear cost that the cost model prices (`choose`)
FLOOR_FRACTION = 0.25    # the floor on a pair's fixed-design standard error, of config.report.min_effect (`floored`)
SETS_WITHIN = 0.01       # a pair "sets" a design's hours when its own cheapest costs >= (1 - this) of it (`setters`)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Design:
  questions: int
  nodes_per_rollout: int
  r: int
  hours: float             # the cost model's accelerator hours at this design (all questions)


def read_split(path, field: str = "--variance_split") -> tuple[dict, dict[str, variance.Components]]:
  """(meta, {pair: Components}) of a variance-split JSON (benchmarks/variance_split.py); a pair whose continuation
  share is unknown appears twice, "<pair> [<end>]" for each of ENDS, and meta["ends"] is then True.

  Raises:
    ValueError: a missing file or one without pairs, naming `field`, the path and how to write one.
  """
  d = variance.read_pilot(path, field)
  pairs = {}
  for k, v in d["pairs"].items():
    size = dict(question=float(v["question"]), questions=int(v["questions"]), nodes=int(v["nodes"]), r=float(v["r"]))
    if v.get("continuation") is None:
      w = float(v["within"])
      pairs[f"{k} [{ENDS[0]}]"] = variance.Components(node=w, continuation=0.0, **size)
      pairs[f"{k} [{ENDS[1]}]"] = variance.Components(node=0.0, continuation=w * size["r"], **size)
    else:
      pairs[k] = variance.Components(node=float(v["node"]), continuation=float(v["continuation"]), **size)
  meta = {k: v for k, v in d.items() if k != "pairs"}
  meta["ends"] = any(v.get("continuation") is None for v in d["pairs"].values())
  meta["pairs"] = len(d["pairs"])
  return meta, pairs


def group_rollouts(config, target: str, node_group: str | None = None) -> float:
  """Node rollouts per question whose nodes are in the node group `target` (the split's): all of
  budget.node_rollouts_per_question for target "all" or "trained" (both groups' nodes) or with `node_group`
  (default config.budget.node_group) "target" (node rollouts drawn from the verdict's group only:
  `questions.choose_node_rollouts`; a question with fewer rollouts in the group has fewer), else half of them
  (balanced)."""
  m = config.budget.node_rollouts_per_question
  node_group = config.budget.get("node_group", "balanced") if node_group is None else node_group
  return float(m) if target in common.BOTH_GROUPS or node_group == "target" else m / 2


def reference(config) -> tuple[int, int, int]:
  """(questions, nodes_per_rollout, R) of the fixed design whose precision the design is to reach:
  budget.precision_of, or the config's own."""
  ref = tuple(config.budget.get("precision_of", ()) or ())
  b = config.budget
  return tuple(int(x) for x in ref) if ref else (b.questions, b.nodes_per_rollout, b.continuations_per_candidate)


def fixed_targets(config, split: dict[str, variance.Components], target: str) -> dict[str, float]:
  """Each pair's variance at `reference(config)`, the target a design is to reach: with the node rollouts of
  budget.precision_of's fixed design balanced, as every study before budget.node_group (`group_rollouts`), or the
  config's own with its own design."""
  q0, n0, r0 = reference(config)
  g0 = reference_group(config, target)
  return {k: s.variance(q0, n0 * g0, r0) for k, s in split.items()}


def reference_group(config, target: str) -> float:
  """`group_rollouts` of `reference(config)`: balanced for budget.precision_of's fixed design, else the config's."""
  return group_rollouts(config, target, "balanced" if config.budget.get("precision_of") else None)


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


def questions_needed(s: variance.Components, target: float, group_nodes: float, r: int) -> int:
  """The least questions whose variance, at `group_nodes` nodes per question in the split's group and r
  continuations per candidate, is at most `target`."""
  return math.ceil(s.variance(1, group_nodes, r) / target - 1e-9)


def linear_cost(costs, questions: int, nodes_per_rollout: int, r: int, node_rollouts: int) -> float:
  """The linear cost (hours) of a design: questions x (c_q + m c_n + m r c_c), m = nodes_per_rollout x
  node_rollouts (every node rollout's nodes cost)."""
  c_q, c_n, c_c = costs
  m = nodes_per_rollout * node_rollouts
  return questions * (c_q + m * c_n + m * r * c_c)


def designs(split: dict[str, variance.Components], targets: dict[str, float], costs, node_rollouts: int,
            group_rollouts: float | None = None, r_grid=R_GRID, nodes_grid=NODES_GRID) -> list[tuple]:
  """Every (linear cost, questions, nodes_per_rollout, r) of the grid, cheapest first, with the least questions
  whose every pair's variance is at most its target (`targets`: pair -> variance), costed by the linear
  per-question cost of `costs` (c_q, c_n, c_c): every node rollout's nodes cost, `group_rollouts` of them (default
  all) hold the split's nodes."""
  g = node_rollouts if group_rollouts is None else group_rollouts
  out = []
  for n in nodes_grid:
    for r in r_grid:
      q = max(questions_needed(s, targets[k], n * g, r) for k, s in split.items())
      out.append((linear_cost(costs, q, n, r, node_rollouts), q, n, r))
  return sorted(out)


def cheapest(split: dict[str, variance.Components], targets: dict[str, float], costs, node_rollouts: int,
             group_rollouts: float | None = None, r_grid=R_GRID, nodes_grid=NODES_GRID) -> tuple[int, int, int, float]:
  """(questions, nodes_per_rollout, r, linear cost) of the cheapest of `designs` by the linear cost."""
  cost, q, n, r = designs(split, targets, costs, node_rollouts, group_rollouts, r_grid, nodes_grid)[0]
  return q, n, r, cost


@dataclasses.dataclass(frozen=True, kw_only=True)
class Choice:
  """The design a split chooses for a config, the fixed design it matches, and how they were priced. `chosen` is
  the floored design (`floored`) where the floor applies (report.min_effect > 0 and a split in the verdict's units),
  else `every` (every pair at its fixed-design variance)."""
  chosen: Design
  every: Design                            # the cheapest design for every pair at its fixed-design variance
  fixed: Design
  costs: tuple[float, float, float]        # (c_q, c_n, c_c) hours
  meta: dict                               # the split's estimand, target, r, source, ends
  pairs: int                               # pairs of configurations in the split
  ends: dict[str, Design]                  # with an unknown continuation share: the cheapest at each end alone
  worst: float                             # the config's own design: its largest variance / target over the pairs
  floor: dict = dataclasses.field(default_factory=dict)   # `floored`'s read-out ({} when not asked)


def pricer(config, work, chip, chips: int):
  """(questions, nodes_per_rollout, r) -> `Design` priced by the cost model (`hours` x questions), each (nodes, r)
  computed once."""
  per_question = {}

  def price(q: int, n: int, r: int) -> Design:
    if (n, r) not in per_question:
      per_question[n, r] = hours(config, work, chip, chips, nodes_per_rollout=n, r=r)
    return Design(questions=q, nodes_per_rollout=n, r=r, hours=per_question[n, r] * q)
  return price


def cheapest_priced(price, split: dict[str, variance.Components], targets: dict[str, float], costs,
                    node_rollouts: int, group_rollouts: float | None = None) -> Design:
  """The least of the cost model's prices (`price`, from `pricer`) of the PRICED cheapest `designs` by the linear
  cost: the linear fit is exact at its three budgets only (decode batches round up)."""
  return min((price(q, n, r) for _, q, n, r in designs(split, targets, costs, node_rollouts,
                                                       group_rollouts)[:PRICED]), key=lambda d: d.hours)


def choose(config, work, chip, chips: int, path, field: str = "--variance_split") -> Choice:
  """The cheapest design (`cheapest_priced`) for the precision of `reference(config)` under the split at `path`,
  priced by the cost model (`hours`) on `chips` x `chip`: on every pair floored (`floored`) where the floor
  applies, else on every pair at its fixed-design variance."""
  meta, split = read_split(path, field)
  b = config.budget
  q0, n0, r0 = reference(config)
  g = group_rollouts(config, meta.get("target", "incorrect"))
  targets = fixed_targets(config, split, meta.get("target", "incorrect"))
  costs = unit_costs(config, work, chip, chips)
  price = pricer(config, work, chip, chips)
  ends = {}
  if meta["ends"]:
    for end in ENDS:
      part = {k: s for k, s in split.items() if k.endswith(f"[{end}]")}
      ends[end] = price(*cheapest(part, targets, costs, b.node_rollouts_per_question, g)[:3])
  report = config.get("report", {})
  floor = floored(price, split, targets, costs, b.node_rollouts_per_question, g, meta,
                  verdict=report.get("estimand", "alignment"), min_effect=float(report.get("min_effect", 0.0)))
  every = cheapest_priced(price, split, targets, costs, b.node_rollouts_per_question, g)
  wanted = targets
  if floor.get("unit"):
    wanted = lifted(targets, (floor["floor"] * floor["unit"]) ** 2)
  worst = max(s.variance(b.questions, b.nodes_per_rollout * g, b.continuations_per_candidate) / wanted[k]
              for k, s in split.items())
  return Choice(chosen=floor["design"] if floor.get("unit") else every, every=every, fixed=price(q0, n0, r0),
                costs=costs, meta=meta, pairs=meta["pairs"], ends=ends, worst=worst, floor=floor)


def verdict_unit(estimand: str, verdict: str, scale: float | None) -> float | None:
  """Split units per verdict unit (a split's standard error over this is in the verdict's units): 1 for the same
  estimand, the alignment ratio's scale S for a projection split read by a verdict on the alignment ratio (the ratio
  is the projection over S); None when the units cannot be converted (another pair, or no finite S > 0)."""
  if estimand == verdict:
    return 1.0
  if (estimand, verdict) == ("projection", "alignment_ratio") and scale is not None and math.isfinite(
      float(scale)) and float(scale) > 0:
    return float(scale)
  return None


def above_floor(targets: dict[str, float], floor_var: float) -> list[str]:
  """The pairs whose target (fixed-design variance, the split's units) is above `floor_var` (the floor squared,
  in the split's units)."""
  return [k for k, t in targets.items() if t > floor_var]


def lifted(targets: dict[str, float], floor_var: float) -> dict[str, float]:
  """Every pair floored: each target (fixed-design variance, the split's units) raised to `floor_var` (the floor
  squared, in the split's units) where it is below it; the targets of `floored` and `choose`."""
  return {k: max(t, floor_var) for k, t in targets.items()}


def demanding(split: dict[str, variance.Components], targets: dict[str, float], costs, node_rollouts: int,
              group_rollouts: float | None = None) -> list[tuple[float, str]]:
  """(own linear cost, pair) of every pair, most demanding first: the cost of the cheapest design for that pair
  alone (`cheapest`), a lower bound of the cost of any criterion that includes it."""
  return sorted(((cheapest({k: s}, {k: targets[k]}, costs, node_rollouts, group_rollouts)[3], k)
                 for k, s in split.items()), reverse=True)


def setters(split: dict[str, variance.Components], targets: dict[str, float], costs, node_rollouts: int,
            group_rollouts: float | None = None, within: float = SETS_WITHIN) -> list[str]:
  """The pairs that set the cost of the cheapest design for all of `split` (`cheapest`): those whose own cheapest
  design (`demanding`) costs at least (1 - within) of it, most demanding first."""
  cost = cheapest(split, targets, costs, node_rollouts, group_rollouts)[3]
  return [k for c, k in demanding(split, targets, costs, node_rollouts, group_rollouts) if c >= cost * (1 - within)]


def binding(split: dict[str, variance.Components], targets: dict[str, float], d: Design,
            group_rollouts: float) -> list[str]:
  """The pairs of `split` that need all of design `d`'s questions at its nodes_per_rollout and r (every pair when
  `d` is the reference design itself)."""
  need = {k: questions_needed(s, targets[k], d.nodes_per_rollout * group_rollouts, d.r) for k, s in split.items()}
  return [k for k, q in need.items() if q >= max(need.values())]


def floored(price, split: dict[str, variance.Components], targets: dict[str, float], costs, node_rollouts: int,
            group_rollouts: float, meta: dict, *, verdict: str, min_effect: float,
            fraction: float = FLOOR_FRACTION) -> dict:
  """The design for every pair, floored: each pair's standard error at most its fixed-design one or the floor
  `fraction` x `min_effect` (verdict units), whichever is larger; and what sets the every-pair design's hours.
  {} when min_effect <= 0; {"floor", "unit": None} when the split's units cannot be put in the verdict's
  (`verdict_unit`); else {"floor", "unit", "above" (pairs whose fixed-design SE is above the floor: they keep it;
  with an unknown continuation share a pair counts when either end is), "design" (`cheapest_priced` on the floored
  targets), "setters" (`setters` of every pair at its own target), "setters_se" (their largest fixed-design
  standard error, verdict units), "top" (the most demanding pair) and "top_se"}."""
  if not min_effect > 0:
    return {}
  floor = fraction * min_effect
  unit = verdict_unit(meta.get("estimand", "?"), verdict, meta.get("scale"))
  if unit is None:
    return {"floor": floor, "unit": None}
  floor_var = (floor * unit) ** 2
  base = lambda k: k.rsplit(" [", 1)[0] if meta.get("ends") else k
  se = lambda k: math.sqrt(targets[k]) / unit
  top = setters(split, targets, costs, node_rollouts, group_rollouts)
  return {"floor": floor, "unit": unit, "above": len({base(k) for k in above_floor(targets, floor_var)}),
          "design": cheapest_priced(price, split, lifted(targets, floor_var), costs, node_rollouts, group_rollouts),
          "setters": top,
          "setters_se": max(se(k) for k in top), "top": top[0], "top_se": se(top[0])}


def cochran_optimum(s: variance.Components, costs, node_rollouts: int,
                    group_rollouts: float | None = None) -> tuple[float, float]:
  """(r*, nodes_per_rollout*): the continuous optimum of one pair's three-stage sample (Cochran 1977, ch. 10.8).

  With per-question cost c_q + n M (c_n + r c_c) (n nodes per rollout, M = `node_rollouts` costed) and variance
  (s2_q + (s2_n + s2_c / r) / (n g)) / Q (g = `group_rollouts` of them in the split's node group):
  r* = sqrt(s2_c c_n / (s2_n c_c)) and n* g = sqrt((s2_n + s2_c / r*) c_q / (s2_q (M / g) (c_n + r* c_c))).
  Edge cases: s2_n = 0 < s2_c gives r* = inf and n* = 0 (only n r matters: as few nodes as possible, each run
  long); s2_c = s2_n = 0 gives r* = nan; s2_q = 0 gives n* = inf (as few questions as possible).
  """
  c_q, c_n, c_c = costs
  g = node_rollouts if group_rollouts is None else group_rollouts
  if s.node > 0:
    r = math.sqrt(s.continuation * c_n / (s.node * c_c))
  else:
    r = math.inf if s.continuation > 0 else math.nan
  if s.question <= 0:
    return r, math.inf
  if math.isinf(r):
    return r, 0.0
  within = s.node + (s.continuation / r if s.continuation > 0 else 0.0)
  per_node = node_rollouts / g * (c_n + (0.0 if math.isnan(r) else r) * c_c)
  return r, math.sqrt(within * c_q / (s.question * per_node)) / g


def pair_table(split: dict[str, variance.Components], reference: tuple[int, int, int], costs, node_rollouts: int,
               group_rollouts: float, chosen: Design, reference_rollouts: float | None = None) -> list[dict]:
  """Per pair, what sets a design's questions (issue 48's diagnosis), in `split`'s order: its components; the
  target, its variance at `reference` (questions, nodes_per_rollout, R: the fixed design), and the continuation
  share of that; the questions it alone needs at `chosen`'s nodes_per_rollout and r ("needs"; "binding" where
  that is `chosen.questions`); Cochran's continuous optimum (`cochran_optimum`); its own cheapest grid design by the
  linear cost (own_questions, own_nodes_per_rollout, own_r, own_hours_linear)."""
  q0, n0, r0 = reference
  g, out = group_rollouts, []
  g0 = g if reference_rollouts is None else reference_rollouts
  for k, s in split.items():
    target = s.variance(q0, n0 * g0, r0)
    q, n, r, cost = cheapest({k: s}, {k: target}, costs, node_rollouts, g)
    need = questions_needed(s, target, chosen.nodes_per_rollout * g, chosen.r)
    r_star, n_star = cochran_optimum(s, costs, node_rollouts, g)
    out.append(dict(pair=k, question=s.question, node=s.node, continuation=s.continuation, target=target,
                    continuation_share=s.continuation / (q0 * n0 * g0 * r0) / target if target > 0 else math.nan,
                    needs=need, binding=need >= chosen.questions, r_star=r_star, nodes_per_rollout_star=n_star,
                    own_questions=q, own_nodes_per_rollout=n, own_r=r, own_hours_linear=cost))
  return out


def _design(d: Design) -> str:
  return f"{d.questions} questions, nodes_per_rollout {d.nodes_per_rollout}, r = {d.r}: {d.hours:.3g} h"


def describe(config, work, chip, chips: int, path, field: str = "--variance_split") -> list[str]:
  """The dry run's lines for a variance split: the fixed design (`reference`), the cheapest design for its
  precision on every pair and, where the floor applies, on every pair floored (`floored`), the chosen one and its
  hours, and whether the config runs it."""
  c = choose(config, work, chip, chips, path, field)
  b, m = config.budget, c.meta
  out = [f"  variance split ({m.get('estimand', '?')} on {m.get('target', '?')} nodes, {c.pairs} pairs, from "
         f"{m.get('source', path)}; {field.removeprefix('--').removeprefix('config.')}={path}): unit costs "
         f"{c.costs[0]:.3g} h per question, {c.costs[1]:.3g} per node, {c.costs[2]:.3g} per node-continuation"]
  own_group = common.sampled_group(b.get("node_group", "balanced"), m.get("target", "incorrect")) != "all"
  if own_group:                                    # node rollouts from the split's group only
    out.append(f"  node rollouts: {b.node_rollouts_per_question} per question, all from the {m.get('target')} "
               "group (budget.node_group='target'; the fixed design's are balanced, half in it)")
  if c.ends:
    a, z = (c.ends[e] for e in ENDS)
    out.append(f"  its continuation share is not measured (the pilot's rows have no rewards), so the design holds at "
               f"both ends: the within-question variance all between nodes ({_design(a)}) or all continuation "
               f"noise at the pilot's R = {m.get('r', 0):g} ({_design(z)})")
  f, d = c.fixed, c.chosen
  out.append(f"  the fixed design: {f.questions} questions, nodes_per_rollout {f.nodes_per_rollout}, R = {f.r}, "
             f"no looks: {f.hours:.3g} h")
  own = (b.questions, b.nodes_per_rollout, b.continuations_per_candidate)
  runs = ("this config's design" if own == (d.questions, d.nodes_per_rollout, d.r) else
          f"this config runs {own[0]} questions, nodes_per_rollout {own[1]}, R = {own[2]}: its variance is "
          f"{c.worst:.3g}x the target on its worst pair")
  floor = c.floor.get("unit") is not None
  out.append(f"  the cheapest design for its precision on every pair: {_design(c.every)}"
             + ("" if floor else f" ({runs})"))
  if c.floor:
    out.append(_floor_line(c, config.report.get("estimand", "alignment"), runs))
  why = ""
  if c.ends:
    low = c.ends[ENDS[0]]
    why = (f"; it must hold at both ends of the unmeasured continuation share: at the end without continuation noise "
           f"{low.hours:.3g} h ({low.hours / f.hours:.3g}) would do, and a pilot with rewards measures the share: "
           "benchmarks/variance_split.py --workdir=<its records>")
  how = (f"every pair floored at {c.floor['floor']:.3g}" if floor else "every pair") + (
      ", node rollouts from the verdict's group only" if own_group else "")
  out.append(f"  hours for R={f.r}'s precision: {d.hours:.3g} ({d.hours / f.hours:.3g} of the fixed design's "
             f"{f.hours:.3g} h; {how}{why})")
  return out


def _floor_line(c: Choice, verdict: str, runs: str) -> str:
  """The dry run's line for `floored`: the design for every pair floored and why the every-pair hours are what
  they are."""
  fl = c.floor
  head = (f"  the cheapest design for its precision on every pair floored (each pair's SE at most the fixed "
          f"design's or {fl['floor']:.3g}, report.min_effect x {FLOOR_FRACTION:g} in {verdict} units, whichever is "
          "larger)")
  if fl["unit"] is None:
    return (f"{head}: not priced: this split of {c.meta.get('estimand', '?')} has no scale to put it in {verdict} "
            "units (a split of records with rewards has one: benchmarks/variance_split.py --records or --workdir)")
  d, n = fl["design"], len(fl["setters"])
  who = (f"{fl['top']}, whose own cheapest design costs" if n == 1 else
         f"{n} pairs, the most demanding {fl['top']} at {fl['top_se']:.2g}, whose own cheapest designs cost")
  who += f" >= {1 - SETS_WITHIN:g} of them"
  why = (f"the pairs that set the every-pair hours ({who}) have fixed-design SE <= {fl['setters_se']:.2g}, below "
         "the floor" if fl["setters_se"] <= fl["floor"] else
         f"the pairs that set the every-pair hours ({who}) reach SE {fl['setters_se']:.2g}, above the floor")
  return (f"{head}: {_design(d)} ({fl['above']} of {c.pairs} pairs above the floor keep their fixed-design SE; "
          f"{why}; {runs})")
