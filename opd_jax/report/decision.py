"""The decision: which configuration to train with on a target group of nodes, how sure, and what it would take.

Every configuration of a study is scored on the same nodes with the same P_succ estimates, so configurations
are compared by paired differences on their shared nodes (issue 14, item 1). All statistics share one set of
cluster-bootstrap draws over the study's questions (stats.ClusterBootstrap), so the replicates of different
configurations and of their differences are coherent.
"""
import math

import numpy as np
import pandas as pd

from opd_jax import stats
from opd_jax.report import common


def decide(nodes: pd.DataFrame, *, target: str = "incorrect", n_boot: int = 2000, seed: int = 0,
           level: float = 0.95, min_nodes: int = common.MIN_NODES,
           min_questions: int = common.MIN_QUESTIONS) -> dict:
  """Ranks the configurations on the target group and decides whether the best one is distinguishable.

  Protocol (the contract; tests recompute it with numpy):
    - nodes: the target group's rows (common.group_mask) with a defined alignment;
    - ranking: configurations by mean alignment (ties: order of first appearance); mean teacher advantage
      beside it; each with a percentile interval from the shared bootstrap (`stats.ClusterBootstrap` over every
      question of `nodes`, n_boot, seed);
    - best: the top of the ranking, unless another configuration beats it on their shared nodes: then the one
      beating it by most, repeated until none does (or one repeats);
    - comparisons: for every other configuration c, d = mean over the nodes (question_id, rollout_id, position)
      where both c and the best b have a defined alignment of (a_c - a_b); replicates of the same ratio of
      weighted per-question sums; two-sided bootstrap p-value (stats.bootstrap_pvalue); Holm-adjusted over the
      K - 1 comparisons (stats.holm); each interval at Holm's step level for its rank (the comparison with the
      i-th smallest p of m uses level 1 - (1 - level) / (m - i + 1));
    - p_best: share of replicates in which each configuration has the highest mean (NaN means never win);
    - power: for the top two, questions needed for the 95% interval of their difference to exclude 0 if the
      true difference is the observed d: G (z_{0.975} se / d)^2, se = the replicates' standard deviation and G
      the questions shared; and for 80% power: G ((z_{0.975} + z_{0.8}) se / d)^2;
    - verdict: "underpowered" when any configuration's target group or the top two's shared nodes fall under
      the power rule (common.underpowered); "use" when every comparison is rejected at Holm-adjusted p <=
      1 - level (the best's intervals all exclude 0); else "indistinguishable".

  Args:
    nodes: node records (common.check_nodes).
    target: "incorrect" (default: where OPD is meant to help), "correct" or "all".
    n_boot, seed, level: the bootstrap.
    min_nodes, min_questions: the power rule.
  Returns:
    A JSON-ready dict: target, level, n_boot, seed, min_nodes, min_questions, n_questions, ranking (list of
    dicts: config_id, n_defined, n_questions, mean_alignment, ci_lo, ci_hi, mean_teacher_advantage,
    advantage_ci_lo, advantage_ci_hi, p_best, underpowered), comparisons (config_id vs best: n_shared,
    n_shared_questions, diff, ci_lo, ci_hi, ci_level, p_value, p_holm, distinguishable), power (diff, se,
    questions, questions_needed_95, questions_needed_80_power, more_questions), verdict ("use",
    "indistinguishable", "underpowered" or "no_data"), best, runner_up, line (the sentence).
  Raises:
    ValueError: bad nodes (common.check_nodes) or an unknown target.
  """
  common.check_nodes(nodes)
  in_target = common.group_mask(nodes, target)
  rows = nodes[in_target & nodes["alignment"].notna().to_numpy()]
  configs = list(pd.unique(nodes["config_id"]))
  questions = nodes["question_id"].astype(str).to_numpy()
  boot = stats.ClusterBootstrap(questions, n_boot=n_boot, seed=seed)
  out = {"target": target, "level": level, "n_boot": n_boot, "seed": seed, "min_nodes": min_nodes,
         "min_questions": min_questions, "n_questions": int(boot.labels.size), "ranking": [], "comparisons": [],
         "power": None}
  reps = {}
  target_rows = nodes[in_target]
  for c in configs:
    sub = rows[rows["config_id"] == c]
    q = sub["question_id"].astype(str).to_numpy()
    a = sub["alignment"].to_numpy(np.float64)
    reps[c] = boot.mean_replicates(a, q)
    adv_rows = target_rows[target_rows["config_id"] == c]
    adv = boot.mean_ci(adv_rows["teacher_advantage"].to_numpy(np.float64),
                       adv_rows["question_id"].astype(str).to_numpy(), level=level)
    n_q = int(pd.unique(q).size)
    out["ranking"].append({
        "config_id": c, "n_defined": int(a.size), "n_questions": n_q,
        "mean_alignment": float(a.mean()) if a.size else math.nan,
        **dict(zip(("ci_lo", "ci_hi"), stats.percentile_interval(reps[c], level))),
        "mean_teacher_advantage": adv[0], "advantage_ci_lo": adv[1], "advantage_ci_hi": adv[2],
        "underpowered": common.underpowered(int(a.size), n_q, min_nodes=min_nodes, min_questions=min_questions)})
  order = sorted(range(len(configs)), key=lambda i: (-np.nan_to_num(out["ranking"][i]["mean_alignment"],
                                                                     nan=-np.inf), i))
  out["ranking"] = [out["ranking"][i] for i in order]
  matrix = np.stack([reps[r["config_id"]] for r in out["ranking"]], axis=1)       # [n_boot, K]
  finite = np.where(np.isnan(matrix), -np.inf, matrix)
  drawn = np.isfinite(finite).any(axis=1)                   # replicates that drew any defined node
  wins = np.bincount(np.argmax(finite[drawn], axis=1), minlength=len(configs))
  for r, w in zip(out["ranking"], wins):
    r["p_best"] = float(w / max(drawn.sum(), 1))
  ranked = [r for r in out["ranking"] if r["n_defined"]]
  if not ranked:
    out.update(verdict="no_data", best=None, runner_up=None,
               line=f"no configuration has a defined alignment on {target} nodes: nothing to decide")
    return out
  key = list(common.NODE_KEY)
  by_config = {r["config_id"]: rows[rows["config_id"] == r["config_id"]].set_index(key)["alignment"]
               for r in ranked}

  def paired(best):
    out_ = []
    for r in ranked:
      if r["config_id"] == best:
        continue
      other, base = by_config[r["config_id"]], by_config[best]
      shared = other.index.intersection(base.index)
      d = (other.loc[shared] - base.loc[shared]).to_numpy(np.float64)
      q = shared.get_level_values("question_id").astype(str).to_numpy()
      out_.append((r["config_id"], d, q, boot.mean_replicates(d, q)))
    # Closest to the best first: the runner-up is the one with the largest (least negative) difference.
    return sorted(out_, key=lambda t: -np.nan_to_num(t[1].mean() if t[1].size else np.nan, nan=-np.inf))

  # The best: start from the top of the ranking; while another configuration beats it on their shared nodes,
  # move to the one that beats it by most (means over different node sets can disagree with paired ones).
  best, seen = ranked[0]["config_id"], set()
  diffs = paired(best)
  while diffs and diffs[0][1].size and diffs[0][1].mean() > 0 and diffs[0][0] not in seen:
    seen.add(best)
    best = diffs[0][0]
    diffs = paired(best)
  p_values = np.array([stats.bootstrap_pvalue(rep) for *_, rep in diffs])
  p_holm = stats.holm(p_values)
  alpha = 1.0 - level
  rank_of = np.empty(len(diffs), int)
  rank_of[np.argsort(np.nan_to_num(p_values, nan=np.inf), kind="stable")] = np.arange(len(diffs))
  for i, (c, d, q, rep) in enumerate(diffs):
    step_level = 1.0 - alpha / (len(diffs) - rank_of[i])
    lo, hi = stats.percentile_interval(rep, step_level)
    n_sq = int(pd.unique(q).size)
    out["comparisons"].append({
        "config_id": c, "vs": best, "n_shared": int(d.size), "n_shared_questions": n_sq,
        "diff": float(d.mean()) if d.size else math.nan, "ci_lo": lo, "ci_hi": hi, "ci_level": step_level,
        "p_value": float(p_values[i]), "p_holm": float(p_holm[i]),
        "distinguishable": bool(p_holm[i] <= alpha),
        "underpowered": common.underpowered(int(d.size), n_sq, min_nodes=min_nodes, min_questions=min_questions)})
  out["best"] = best
  out["runner_up"] = diffs[0][0] if diffs else None           # the largest paired difference
  if diffs:
    _, d, q, rep = diffs[0]
    diff, se, g = float(-d.mean()), float(np.nanstd(rep, ddof=1)), int(pd.unique(q).size)
    z, z80 = stats.normal_quantile(0.975), stats.normal_quantile(0.8)
    need95 = g * (z * se / diff) ** 2 if diff else math.inf
    need80 = g * ((z + z80) * se / diff) ** 2 if diff else math.inf
    out["power"] = {"diff": diff, "se": se, "questions": g, "questions_needed_95": need95,
                    "questions_needed_80_power": need80,
                    "more_questions": max(0, math.ceil(need95 - g)) if math.isfinite(need95) else None}
  weak = [r["config_id"] for r in ranked if r["underpowered"]] + [
      f"{c['config_id']} vs {best} (shared)" for c in out["comparisons"][:1] if c["underpowered"]]
  out["line"] = _line(out, best, weak, target)
  return out


def _line(out: dict, best: str, weak: list[str], target: str) -> str:
  """The verdict sentence (sets out["verdict"])."""
  comps = out["comparisons"]
  pct = f"{100 * out['level']:g}%"
  if not comps:
    out["verdict"] = "underpowered" if weak else "indistinguishable"
    return f"only {best} has defined alignments on {target} nodes: nothing to compare"
  top = comps[0]
  diff = f"{-top['diff']:+.4f} [{-top['ci_hi']:+.4f}, {-top['ci_lo']:+.4f}]"
  if weak:
    out["verdict"] = "underpowered"
    return (f"UNDERPOWERED on {target} nodes ({', '.join(weak)}): no decision; indicative only: {best} leads "
            f"{top['config_id']} by {diff}")
  if all(c["distinguishable"] for c in comps):
    out["verdict"] = "use"
    return (f"use {best}: better than {top['config_id']} by {diff} mean alignment on {target} nodes "
            f"({pct} cluster-bootstrap interval, Holm-adjusted p {_p(top['p_holm'], out['n_boot'])})")
  out["verdict"] = "indistinguishable"
  tied = [c["config_id"] for c in comps if not c["distinguishable"]]
  more = out["power"]["more_questions"]
  need = f"; about {more} more questions would separate {best} from {top['config_id']}" if more else ""
  return (f"no configuration is distinguishable from {best} at this budget on {target} nodes "
          f"({', '.join(tied)} within {pct}, Holm-adjusted; {best} - {top['config_id']} = {diff}){need}")


def _p(p: float, n_boot: int) -> str:
  return f"< {1 / n_boot:.2g}" if p == 0 else f"= {p:.3g}"
