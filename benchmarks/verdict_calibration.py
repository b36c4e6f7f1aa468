"""Calibration of the verdict (issue 25, item 9): its error rates on simulated node tables with a known truth.

  PYTHONPATH=$PWD python benchmarks/verdict_calibration.py [--sims=1000] [--seed=0] [--cells=null,effect,sparse,missing]
      [--questions=10,15,30,80] [--configs=2,3,6] [--check=2]               # ~4 min on the 2-core CPU at 1000 sims

Model (the issue's audit): alignment[c, g, i] = mu_c + u_g + v_cg + w_gi + e_cgi with u_g ~ N(0, 0.3) (question),
v_cg ~ N(0, s), s ~ U(0.3, 0.5) per simulation (configuration x question), w_gi ~ N(0, 0.5) (node, shared by the
configurations), e_cgi ~ N(0, 0.4) (configuration noise: the paired node sd is 0.57); nodes per question uniform
1-15 ("unif15") or geometric(0.1) capped at 40 ("geom40"). Ours: decision.compare_arrays, the numbers behind
decision.decide (the first --check simulations of every cell also run decide() on the node table and must agree).
Reference: the same paired difference with statsmodels OLS, cov_type="cluster" (CR1, t with G - 1 df), Holm over
the K - 1 comparisons with the same best (the issue's audit reference; today's decide used bootstrap percentiles).

One JSON line per cell:
  null (K equal configurations): coverage (K = 2: the paired interval covers 0; K > 2: every "vs best" interval
    covers 0), false_use (verdict "use"), fwer_flags (any comparison with the best flagged distinguishable),
    fwer_pairs (any pair of the family), cr1_* the reference's;
  effect (mu = 0.3, 0 or 0.3, 0.15, 0): power (verdict "use" of the true best), wrong_use, coverage of the true
    difference by the best-vs-runner-up interval, best_set_coverage (the true best could be best), median
    detectable difference, cr1_power;
  sparse (A = B + 0.3 plus C equal to A but defined on 1 or 2 questions): C flagged, verdict underpowered, power
    with and without C;
  missing (B identical to A but missing on the 20% hardest questions): use, B chosen best, both could be best.
The last line: the targets (coverage >= 0.93 at 10 questions and >= 0.94 from 15, false use <= 0.05 with 2
configurations, FWER of the flags <= 0.05 with 3 and 6) with the worst cell of each, and the Monte Carlo standard
error of a rate of 0.05 at --sims (a test exactly at its level reads above 0.05 in half the cells).

Issue 33 (--cells=sequential,planted; not in the default cells):
  PYTHONPATH=$PWD python benchmarks/verdict_calibration.py --cells=sequential,planted --sims=500 \
      [--looks=10,20,40,80] [--margin=0.3] [--futility=0.1] [--seq_cells=0,1,2,3,4,5,6]
  sequential: a study of --looks[-1] questions looked at after each block (the first looks[k] questions) with
    sequential.Design(looks, margin) and stopped when decided (decision.compare_arrays with design and look);
    configurations equal (0, 0) and (0, 0, 0) (truly equivalent), at the margin (margin, 0) (truly not
    equivalent), truly different (0.5, 0) and (0.5, 0.25, 0), and, not in the default cells, half the margin
    (margin / 2, 0: equivalent, slowly) and six close configurations (0.1, 0.05, 0, 0, 0, 0: mostly undecidable at
    the cap); --futility sets the design's futility threshold (a futile stop counts as not decided). Per cell:
    fwer_flags (a pair flagged distinguishable whose true difference is 0 or of the other sign, at any look before
    stopping), false_use (decided "use" of a configuration not strictly the best), false_equivalent (decided "equivalent" naming two
    configurations whose true difference is >= margin), coverage (every comparable pair's interval at the stopping
    look holds its true difference), right (decided and correct), mean_questions at stopping, fixed_questions (the
    questions a one-look design needs for the same rate of right decisions, interpolated on a grid of fixed
    designs run on the same tables) and their ratio. The margin is on this model's scale (a paired difference of
    sd ~0.6 per question; the study's default MARGIN = 0.05 is on the one-hour study's).
  With --estimand=alignment_ratio (issue 48) the sequential cells' tables are the alignment ratio's, simulated from
    0/1 rewards at a design (benchmarks/ratio_tables.py: --design_nodes nodes per question, --r continuations per
    candidate; S cross-fitted and recomputed at each look), and the cells' true values are in the ratio's units:
    (0, 0), (0, 0, 0), (margin, 0), (2 margin, 0), (2 margin, margin, 0), (margin / 2, 0) and
    (2 margin, margin, 0, 0, 0, 0); no fixed grid (--fixed_grid=0):
    PYTHONPATH=$PWD python benchmarks/verdict_calibration.py --cells=sequential --estimand=alignment_ratio \
        --looks=150,300,450,601 --design_nodes=4 --r=16 --margin=0.05 --futility=0.1 --fixed_grid=0 --sims=300
  planted: the detectable difference reported by one study of G questions (two equal configurations), planted
    as the true difference of an independent study of G questions, is detected ("use" of the right one) at this
    rate: se_known (sample_size.detectable_difference as issue 25 reported it) and se_estimated (with se_df = df,
    issue 33 item 3); the target is 0.8 +- 0.05.
"""
import argparse
import dataclasses
import json
import math
import time

import numpy as np
import pandas as pd
import statsmodels.api as sm

from opd_jax.estimators import stats

from opd_jax.estimators import sample_size
from opd_jax.report import decision
from opd_jax.report import sequential


def simulate(rng, mu, questions: int, nodes: str, *, sparse: dict | None = None, missing: bool = False):
  """One node table: ([N, K] alignment, NaN where undefined; [N] question codes)."""
  if nodes == "unif15":
    n = rng.integers(1, 16, questions)
  elif nodes == "geom40":
    n = np.minimum(rng.geometric(0.1, questions), 40)
  else:
    raise ValueError(f"--nodes must be unif15 or geom40, got {nodes}")
  k = len(mu)
  q = np.repeat(np.arange(questions), n)
  u = rng.normal(0, 0.3, questions)
  v = rng.normal(0, rng.uniform(0.3, 0.5), (questions, k))
  align = np.asarray(mu)[None] + u[q, None] + v[q] + rng.normal(0, 0.5, q.size)[:, None] + rng.normal(0, 0.4,
                                                                                                       (q.size, k))
  for c, kept in (sparse or {}).items():                                  # configuration c: the first `kept` questions
    align[q >= kept, c] = np.nan
  if missing:                                                             # B = A, undefined on the hardest 20%
    hardest = np.argsort(u + v[:, 0])[:max(1, questions // 5)]
    align[:, 1] = np.where(np.isin(q, hardest), np.nan, align[:, 0])
  return align, q


def cr1_reference(align, q, best, level=0.95):
  """statsmodels CR1-t on each comparison (c - best) on shared nodes, Holm over the K - 1: (lo, hi, flags, use)."""
  out = []
  for c in range(align.shape[1]):
    if c == best:
      continue
    d = align[:, c] - align[:, best]
    ok = ~np.isnan(d)
    if np.unique(q[ok]).size < 2:
      out.append((np.nan, np.nan, np.nan))
      continue
    fit = sm.OLS(d[ok], np.ones((ok.sum(), 1))).fit(cov_type="cluster", cov_kwds={"groups": q[ok]}, use_t=True)
    lo, hi = fit.conf_int(1 - level)[0]
    out.append((lo, hi, float(fit.pvalues[0])))
  lo, hi, p = (np.array(x) for x in zip(*out))
  flags = np.zeros(p.shape, bool)
  ok = ~np.isnan(p)
  flags[ok] = stats.holm(p[ok]) <= 1 - level              # statsmodels' Holm calls gc.collect(): 0.1 s a call
  return lo, hi, flags, bool(flags.all() and np.all(hi < 0))


def as_nodes(align, q) -> pd.DataFrame:
  """The node records decide() reads (incorrect rollouts, one per question)."""
  n, k = align.shape
  pos = np.concatenate([np.arange(c) for c in np.bincount(q)])
  return pd.DataFrame({
      "config_id": np.repeat([f"c{c}" for c in range(k)], n), "question_id": np.tile([f"q{x:03d}" for x in q], k),
      "rollout_id": 0, "position": np.tile(pos, k), "teacher": "t", "context": "plain", "divergence": "reverse_kl",
      "correct": False, "alignment": align.T.reshape(-1), "alignment_nan_reason": "", "degenerate": False,
      "teacher_advantage": 0.0})


def check(align, q, res):
  """decide() on the node table agrees with compare_arrays (verdict, best, flags)."""
  v = decision.decide(as_nodes(align, q), n_boot=20)
  want = {f"c{c}": bool(res["distinguishable"][c, res["best"]]) for c in range(align.shape[1]) if c != res["best"]}
  got = {c["config_id"]: c["distinguishable"] for c in v["comparisons"]}
  if (v["verdict"], v["best"], got) != (res["verdict"], f"c{res['best']}", want):
    raise AssertionError(f"decide() disagrees with compare_arrays: {v['verdict']} {v['best']} {got} vs "
                         f"{res['verdict']} c{res['best']} {want}")


def run_cell(kind, mu, questions, nodes, sims, rng, n_check, **sim_kw) -> dict:
  start, rows = time.time(), []
  k = len(mu)
  for s in range(sims):
    align, q = simulate(rng, mu, questions, nodes, **sim_kw)
    res = decision.compare_arrays(align, q)
    b, ru = res["best"], res["runner_up"]
    others = [c for c in range(k) if c != b]
    truth = np.asarray(mu, float)
    true_best = int(np.argmax(truth))
    covered = [res["ci_lo"][c, b] <= truth[c] - truth[b] <= res["ci_hi"][c, b]
               for c in others if res["comparable"][c, b]]
    lo, hi, flags, cr1_use = cr1_reference(align, q, b)
    row = {"use": res["verdict"] == "use", "best": b, "underpowered": res["verdict"] == "underpowered",
           "coverage": all(covered), "coverage_each": np.mean(covered) if covered else np.nan,
           "fwer_flags": bool(res["distinguishable"][b].any()), "fwer_pairs": bool(res["distinguishable"].any()),
           "best_set": bool(res["could_be_best"][true_best]),
           "cr1_coverage": all(lo[i] <= truth[c] - truth[b] <= hi[i] for i, c in enumerate(others)),
           "cr1_fwer_flags": bool(flags.any()), "cr1_use": cr1_use, "mde": np.nan}
    if ru >= 0:
      row["ru_covered"] = res["ci_lo"][b, ru] <= truth[b] - truth[ru] <= res["ci_hi"][b, ru]
      if kind == "effect":
        row["mde"] = sample_size.detectable_difference(res["se"][b, ru], res["df"][b, ru], alpha=1 - res["ci_level"])
    if kind == "sparse":
      row["sparse_flagged"] = bool(res["distinguishable"][2].any())
      row["sparse_comparable"] = bool(res["comparable"][2].any())
      alone = decision.compare_arrays(align[:, :2], q)
      row["use_without"] = alone["verdict"] == "use" and alone["best"] == true_best
    if kind == "missing":
      row["both_best_set"] = bool(res["could_be_best"][:2].all())
    if s < n_check:
      check(align, q, res)
    rows.append(row)
  r = pd.DataFrame(rows)
  out = {"cell": kind, "configs": k, "questions": questions, "nodes": nodes, "sims": sims}
  if kind == "null":
    out.update(coverage=r.coverage.mean(), false_use=r.use.mean(), fwer_flags=r.fwer_flags.mean(),
               fwer_pairs=r.fwer_pairs.mean(), coverage_each=r.coverage_each.mean(),
               cr1_coverage=r.cr1_coverage.mean(), cr1_false_use=r.cr1_use.mean(),
               cr1_fwer_flags=r.cr1_fwer_flags.mean())
  elif kind == "effect":
    right = r.best == int(np.argmax(mu))
    out.update(mu=list(mu), power=(r.use & right).mean(), wrong_use=(r.use & ~right).mean(),
               coverage=r.ru_covered.mean(), best_set_coverage=r.best_set.mean(),
               median_detectable=float(np.nanmedian(r.mde)), cr1_power=(r.cr1_use & right).mean())
  elif kind == "sparse":
    out.update(sparse_questions=sim_kw["sparse"][2], sparse_flagged=r.sparse_flagged.mean(),
               sparse_comparable=r.sparse_comparable.mean(), underpowered=r.underpowered.mean(),
               power=(r.use & (r.best == 0)).mean(), power_without=r.use_without.mean())
  else:
    out.update(false_use=r.use.mean(), b_chosen_best=(r.best == 1).mean(), both_best_set=r.both_best_set.mean())
  out["seconds"] = round(time.time() - start, 1)
  return {key: round(v, 4) if isinstance(v, float) else v for key, v in out.items()}


def wrong_flags(res, truth) -> bool:
  """A pair flagged distinguishable whose true difference is 0 or of the other sign."""
  true = np.sign(truth[:, None] - truth[None, :])
  return bool(np.any(res["distinguishable"] & (np.sign(np.nan_to_num(res["diff"])) != true)))


def judge(res, truth, margin) -> tuple[bool, bool, bool]:
  """(right, false use, false equivalent) of a look's decision."""
  best = res["best"]
  others = np.delete(truth, best) if best >= 0 else truth
  false_use = res["decision"] == "use" and bool(np.any(others >= truth[best]))
  named = truth[res["could_be_best"]]
  false_equivalent = res["decision"] == "equivalent" and bool(named.max() - named.min() >= margin)
  return res["decided"] and not (false_use or false_equivalent), false_use, false_equivalent


def _gaussian(mu, nodes, cap):
  """The table maker of the alignment model: at(n) -> (align, q) of the first n of `cap` questions."""
  def make(rng):
    align, q = simulate(rng, mu, cap, nodes)
    return lambda n: (align[q < n], q[q < n])
  return make


def run_sequential(mu, nodes, sims, rng, design, fixed_grid: bool = True, tables=None) -> dict:
  """One sequential cell (module docstring); fixed_grid=False skips the fixed designs (no ratio). `tables`: a
  maker rng -> at (at(n) -> ([N, K] values, [N] questions) of the first n questions), default the alignment
  model's (`simulate`); `mu` holds the true means (their differences are what is judged)."""
  start, rows, truth, cap = time.time(), [], np.asarray(mu, float), design.looks[-1]
  grid = sorted({*design.looks, *range(design.looks[0], cap + 1, max(1, design.looks[0]))}) if fixed_grid else []
  fixed = np.zeros(len(grid))
  make = tables or _gaussian(mu, nodes, cap)
  for _ in range(sims):
    at = make(rng)
    flagged = False
    for look, n in enumerate(design.looks, 1):
      res = decision.compare_arrays(*at(n), design=design, look=look)
      flagged |= wrong_flags(res, truth)
      if res["stop"]:
        break
    right, false_use, false_equivalent = judge(res, truth, design.margin)
    cap_decided = math.nan                   # a futile stop: would the cap have decided? (the calibration of p)
    if res["decision"] == "futile":
      on = dataclasses.replace(design, futility=0.0)
      cap_decided = float(decision.compare_arrays(*at(cap), design=on, look=design.n_looks)["decided"])
    cmp = res["comparable"]
    true_diff = truth[:, None] - truth[None, :]
    covered = bool(np.all((res["ci_lo"][cmp] <= true_diff[cmp]) & (true_diff[cmp] <= res["ci_hi"][cmp])))
    rows.append(dict(flagged=flagged, false_use=false_use, false_equivalent=false_equivalent, right=right,
                     covered=covered, questions=n, decision=res["decision"], p_decided=res.get("p_decided"),
                     cap_decided=cap_decided))
    for i, g in enumerate(grid):
      one = sequential.Design(looks=(g,), alpha=design.alpha, margin=design.margin)
      fixed[i] += judge(decision.compare_arrays(*at(g), design=one, look=1), truth, design.margin)[0]
  r = pd.DataFrame(rows)
  fixed /= sims
  right = r.right.mean()
  # The fixed design's questions for the same rate of right decisions: linear between grid points (first crossing).
  above = np.flatnonzero(fixed >= right)
  if not above.size:
    fixed_questions = float("nan")
  elif above[0] == 0:
    fixed_questions = float(grid[0])
  else:
    i = above[0]
    fixed_questions = float(np.interp(right, fixed[i - 1:i + 1], grid[i - 1:i + 1]))
  out = {"cell": "sequential", "mu": list(mu), "nodes": nodes, "looks": list(design.looks),
         "margin": design.margin, "futility": design.futility, "sims": sims, "fwer_flags": r.flagged.mean(),
         "false_use": r.false_use.mean(),
         "false_equivalent": r.false_equivalent.mean(), "coverage": r.covered.mean(), "right": right,
         "decisions": r.decision.value_counts(normalize=True).round(4).to_dict(),
         "futile_mean_p": float(r.p_decided[r.decision == "futile"].mean()) if (r.decision == "futile").any()
         else None,
         "futile_decided_at_cap": float(r.cap_decided[r.decision == "futile"].mean()) if (r.decision == "futile").any()
         else None,
         "false_use_at": {str(k): int(v) for k, v in r.questions[r.false_use].value_counts().sort_index().items()},
         "mean_questions": r.questions.mean(), "fixed_questions": fixed_questions,
         "ratio": r.questions.mean() / fixed_questions if fixed_questions > 0 else float("nan"),
         "fixed_right": dict(zip(map(str, grid), np.round(fixed, 4).tolist())),
         "seconds": round(time.time() - start, 1)}
  return {key: (None if math.isnan(v) else round(v, 4)) if isinstance(v, float) else v for key, v in out.items()}


def run_planted(questions, nodes, sims, rng) -> dict:
  """One planted cell (module docstring)."""
  start = time.time()
  hits = {"se_known": 0, "se_estimated": 0}
  n = 0
  for _ in range(sims):
    align, q = simulate(rng, [0.0, 0.0], questions, nodes)
    pilot = decision.compare_arrays(align, q)
    se, df = pilot["se"][0, 1], pilot["df"][0, 1]
    if not (se > 0 and df >= 1):
      continue
    n += 1
    for name, se_df in (("se_known", None), ("se_estimated", df)):
      d = sample_size.detectable_difference(se, df, alpha=0.05, se_df=se_df)
      res = decision.compare_arrays(*simulate(rng, [d, 0.0], questions, nodes))
      hits[name] += res["verdict"] == "use" and res["best"] == 0
  return {"cell": "planted", "questions": questions, "nodes": nodes, "sims": n,
          **{k: round(v / n, 4) for k, v in hits.items()}, "seconds": round(time.time() - start, 1)}


def targets(lines: list[dict]) -> dict:
  null = [x for x in lines if x["cell"] == "null"]
  two = [x for x in null if x["configs"] == 2]
  worst = lambda xs, key, f=min: f((x[key] for x in xs), default=None)  # noqa: E731
  out = {"cell": "targets",
         "coverage_10": worst([x for x in two if x["questions"] <= 10], "coverage"),
         "coverage_15_plus": worst([x for x in two if x["questions"] >= 15], "coverage"),
         "false_use_2": worst(two, "false_use", max),
         "fwer_flags_3_6": worst([x for x in null if x["configs"] > 2], "fwer_flags", max)}
  ok = {"coverage_10": lambda v: v >= 0.93, "coverage_15_plus": lambda v: v >= 0.94,
        "false_use_2": lambda v: v <= 0.05, "fwer_flags_3_6": lambda v: v <= 0.05}
  out["met"] = {k: (None if out[k] is None else bool(f(out[k]))) for k, f in ok.items()}
  return out


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--sims", type=int, default=1000, help="simulations per cell")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--cells", default="null,effect,sparse,missing")
  parser.add_argument("--questions", default="10,15,30,80")
  parser.add_argument("--configs", default="2,3,6", help="numbers of equal configurations of the null cells")
  parser.add_argument("--check", type=int, default=2, help="simulations per cell also run through decide()")
  parser.add_argument("--looks", default="10,20,40,80", help="looks of the sequential cells (questions)")
  parser.add_argument("--margin", type=float, default=0.3, help="equivalence margin of the sequential cells")
  parser.add_argument("--seq_cells", default="0,1,2,3,4", help="which sequential cells: 0 (0, 0), 1 (0, 0, 0), "
                      "2 (margin, 0), 3 (0.5, 0), 4 (0.5, 0.25, 0), 5 (margin / 2, 0), 6 (0.1, 0.05, 0, 0, 0, 0)")
  parser.add_argument("--futility", type=float, default=0.0, help="the sequential cells' futility threshold "
                      "(sequential.Design.futility; 0: none)")
  parser.add_argument("--fixed_grid", type=int, default=1, help="0: skip the fixed designs (no questions ratio)")
  parser.add_argument("--estimand", default="alignment", choices=("alignment", "alignment_ratio"),
                      help="the sequential cells' tables: the alignment model (default) or the alignment ratio "
                      "from simulated rewards (benchmarks/ratio_tables.py)")
  parser.add_argument("--design_nodes", type=int, default=4, help="alignment_ratio: nodes per question")
  parser.add_argument("--r", type=int, default=16, help="alignment_ratio: continuations per candidate (>= 2)")
  parser.add_argument("--futility_rule", default="predictive", choices=("predictive", "current_trend"),
                      help="the futility stop's probability (sequential.p_resolved): predictive (averaged over the "
                      "estimate's uncertainty, the default) or the current trend (the estimate taken as the truth)")
  args = parser.parse_args()
  sequential.PREDICTIVE = args.futility_rule == "predictive"
  kinds = args.cells.split(",")
  qs = [int(x) for x in args.questions.split(",")]
  lines = []

  def emit(cell_seed, *a, **kw):
    line = run_cell(*a, args.sims, np.random.default_rng([args.seed, *cell_seed]), args.check, **kw)
    print(json.dumps(line), flush=True)
    lines.append(line)

  for nodes_i, nodes in enumerate(("unif15", "geom40")):
    for g in qs:
      if "null" in kinds:
        for k in (int(x) for x in args.configs.split(",")):
          emit((0, nodes_i, g, k), "null", [0.0] * k, g, nodes)
      if "effect" in kinds:
        for mu in ((0.3, 0.0), (0.3, 0.15, 0.0)):
          emit((1, nodes_i, g, len(mu)), "effect", list(mu), g, nodes)
  if "sparse" in kinds:
    for kept in (1, 2):
      emit((2, kept), "sparse", [0.3, 0.0, 0.3], 15, "geom40", sparse={2: kept})
  if "missing" in kinds:
    for g in (15, 30):
      emit((3, g), "missing", [0.0, 0.0], g, "geom40", missing=True)
  if "sequential" in kinds:
    design = sequential.Design(looks=tuple(int(x) for x in args.looks.split(",")), margin=args.margin,
                               futility=args.futility)
    m = args.margin
    cells = ((0.0, 0.0), (0.0, 0.0, 0.0), (m, 0.0), (0.5, 0.0), (0.5, 0.25, 0.0), (m / 2, 0.0),
             (0.1, 0.05, 0.0, 0.0, 0.0, 0.0))
    node_models = ("unif15", "geom40")
    model = None
    if args.estimand == "alignment_ratio":
      from benchmarks import ratio_tables  # pylint: disable=g-import-not-at-top
      if args.r < 2:
        parser.error(f"--r={args.r}: the alignment ratio's cross-fit needs >= 2 continuations per candidate")
      cells = ((0.0, 0.0), (0.0, 0.0, 0.0), (m, 0.0), (2 * m, 0.0), (2 * m, m, 0.0), (m / 2, 0.0),
               (2 * m, m, 0.0, 0.0, 0.0, 0.0))
      node_models, model = (f"ratio_m{args.design_nodes}_r{args.r}",), ratio_tables.RatioModel()
    for nodes_i, nodes in enumerate(node_models):
      for cell_i, mu in enumerate(cells):
        if str(cell_i) not in args.seq_cells.split(","):
          continue
        tables = model and model.tables(mu, design.looks[-1], args.design_nodes, args.r)
        line = run_sequential(mu, nodes, args.sims, np.random.default_rng([args.seed, 4, nodes_i, cell_i]), design,
                              bool(args.fixed_grid), tables)
        print(json.dumps(line), flush=True)
        lines.append(line)
  if "planted" in kinds:
    for nodes_i, nodes in enumerate(("unif15", "geom40")):
      for g in (10, 20, 40):
        line = run_planted(g, nodes, args.sims, np.random.default_rng([args.seed, 5, nodes_i, g]))
        print(json.dumps(line), flush=True)
        lines.append(line)
  seq = [x for x in lines if x["cell"] == "sequential"]
  planted = [x for x in lines if x["cell"] == "planted"]
  if seq or planted:
    worst = lambda xs, key, f=max: f((x[key] for x in xs), default=None)  # noqa: E731
    out = {"cell": "sequential_targets", "fwer_flags": worst(seq, "fwer_flags"), "false_use": worst(seq, "false_use"),
           "false_equivalent": worst(seq, "false_equivalent"), "coverage": worst(seq, "coverage", min),
           "planted_se_estimated": [worst(planted, "se_estimated", min), worst(planted, "se_estimated")]}
    ok = {"fwer_flags": lambda v: v <= 0.05, "false_use": lambda v: v <= 0.05, "false_equivalent": lambda v: v <= 0.05,
          "coverage": lambda v: v >= 0.93, "planted_se_estimated": lambda v: 0.75 <= v[0] and v[1] <= 0.85}
    missing = lambda v: v is None or (isinstance(v, list) and None in v)  # noqa: E731
    out["met"] = {k: (None if missing(out[k]) else bool(f(out[k]))) for k, f in ok.items()}
    print(json.dumps({**out, "mc_se_at_0.05": round(float(np.sqrt(0.05 * 0.95 / args.sims)), 4)}), flush=True)
  if len(lines) > len(seq) + len(planted):
    print(json.dumps({**targets(lines), "mc_se_at_0.05": round(float(np.sqrt(0.05 * 0.95 / args.sims)), 4)}),
          flush=True)


if __name__ == "__main__":
  main()
