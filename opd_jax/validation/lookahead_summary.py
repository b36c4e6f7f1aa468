"""The one-step lookahead's summary (`opd_jax/validation/lookahead.py`): sign agreement of alignment with the
lookahead's change of V, with Wilson intervals against chance, the rerun's interval, and summary.md's text."""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats as sp_stats

from opd_jax.estimators import success


CHANCE = 0.5                          # sign agreement of two unrelated signs


def wilson_row(agree: np.ndarray) -> dict[str, float]:
  """{"agree", "n", "lo", "hi", "p_chance"}: the fraction of True in `agree`, its 95% Wilson interval, and the
  two-sided binomial p-value (scipy.stats.binomtest) against the chance level CHANCE = 0.5 (NaN when n = 0)."""
  n, s = int(len(agree)), int(np.sum(agree))
  lo, hi = success.wilson_interval(s, n)
  p = sp_stats.binomtest(s, n, CHANCE).pvalue if n else np.nan
  return {"agree": s / n if n else np.nan, "n": n, "lo": float(lo), "hi": float(hi), "p_chance": float(p)}


def rerun_interval(p, p_new, rewards, rewards_new, level: float = 0.95) -> dict[str, float]:
  """The re-run's change of V with a t interval over replicates, paired by common random numbers.

  D_r = Σ_k p'_k r'_kr - Σ_k p_k r_kr over replicate r of every candidate (the same keys before and after);
  (ii) = mean_r D_r, interval mean ± t_{R-1} sd(D) / sqrt(R) (scipy.stats.t).

  Args:
    p, p_new: float [K'] p on C(u) before and after the step. rewards, rewards_new: per candidate, the R 0/1
      rewards of its replicates (the records' and the re-run's).
  Returns:
    {"rerun_mean", "rerun_lo", "rerun_hi", "rerun_halfwidth", "rerun_R"}; NaN interval when R < 2 or the
    candidates have different replicate counts (the re-run cannot say how precise it is). A zero-width
    interval (every D_r equal) is kept: D is then known exactly from these keys.
  """
  counts = {len(x) for x in rewards} | {len(x) for x in rewards_new}
  nan = {"rerun_mean": np.nan, "rerun_lo": np.nan, "rerun_hi": np.nan, "rerun_halfwidth": np.nan, "rerun_R": 0}
  if len(counts) != 1 or len(rewards) != len(rewards_new) or len(rewards) != len(p):
    return nan
  R = counts.pop()
  if R < 2:
    return {**nan, "rerun_R": R}
  d = (np.asarray(p_new, np.float64) @ np.asarray(rewards_new, np.float64)
       - np.asarray(p, np.float64) @ np.asarray(rewards, np.float64))             # [R]
  half = float(sp_stats.t.ppf(0.5 + level / 2, R - 1) * d.std(ddof=1) / np.sqrt(R))
  mean = float(d.mean())
  return {"rerun_mean": mean, "rerun_lo": mean - half, "rerun_hi": mean + half, "rerun_halfwidth": half,
          "rerun_R": R}


def _sign_agreement(a, b) -> dict[str, float]:
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  keep = np.isfinite(a) & np.isfinite(b) & (a != 0) & (b != 0)
  return wilson_row(np.sign(a[keep]) == np.sign(b[keep]))


def summarise(frame: pd.DataFrame) -> pd.DataFrame:
  """One row per configuration: sign agreements over the non-degenerate nodes where both values are non-zero,
  each with its 95% Wilson interval and binomial p-value against chance (0.5): gradient_check (predicted vs (i):
  a check of the gradient code, not of training), local_vs_rerun ((i) vs (ii)), alignment_vs_local,
  changed_local_vs_rerun ((i) vs (ii) over the re-runs whose rewards changed: elsewhere (ii) = (i) exactly) and
  pred_vs_rerun_resolved (predicted vs (ii) over the re-runs that test the prediction: rewards changed, and the
  interval narrower than |predicted|; where no reward changed (ii) = (i), the gradient check again); re-run counts
  (resolved, resolved with changed rewards, interval excluding 0); median |predicted| and re-run half-width; minutes
  (compiles included) and median seconds per node."""
  rows = []
  for cid, g in frame.groupby("config_id", sort=False):
    nd = g[~g["degenerate"]]
    re = nd[nd["rerun"].notna()] if "rerun" in nd else nd.iloc[:0]
    row = {"config_id": cid, "divergence": g["divergence"].iloc[0], "nodes": len(g),
           "degenerate": int(g["degenerate"].sum()), "zero_step": int((g["grad_norm"] == 0).sum()), "chance": CHANCE}
    changed = re[re["rewards_changed"] > 0]
    for name, (part, a, b) in {"gradient_check": (nd, "predicted", "local"), "local_vs_rerun": (nd, "local", "rerun"),
                               "alignment_vs_local": (nd, "alignment", "local"),
                               "changed_local_vs_rerun": (changed, "local", "rerun")}.items():
      row.update({f"{name}_{k}": v for k, v in _sign_agreement(part[a], part[b]).items()})
    half = re["rerun_halfwidth"] if "rerun_halfwidth" in re else pd.Series(np.nan, index=re.index)
    resolved = re[half < np.abs(re["predicted"])]
    tested = resolved[resolved["rewards_changed"] > 0]       # unchanged: (ii) = (i), the gradient check again
    row.update({f"pred_vs_rerun_resolved_{k}": v
                for k, v in _sign_agreement(tested["predicted"], tested["rerun"]).items()})
    row["reruns_resolved"], row["reruns_resolved_changed"] = len(resolved), len(tested)
    row["reruns_excluding_zero"] = int(((re["rerun_lo"] > 0) | (re["rerun_hi"] < 0)).sum()) if len(re) else 0
    row["median_abs_predicted"] = float(np.median(np.abs(nd["predicted"]))) if len(nd) else np.nan
    row["median_rerun_halfwidth"] = float(np.nanmedian(half)) if half.notna().any() else np.nan
    rel = np.abs(nd["local"] - nd["predicted"]) / np.maximum(np.abs(nd["predicted"]), 1e-30)
    row["median_rel_error"] = float(np.median(rel[nd["predicted"] != 0])) if (nd["predicted"] != 0).any() else np.nan
    row["reruns"] = len(re)
    row["reruns_unchanged"] = int((re["rewards_changed"] == 0).sum()) if len(re) else 0
    per_node = g["seconds"] + g["rerun_seconds"].fillna(0)
    row["minutes"] = float(per_node.sum() / 60)
    row["median_node_seconds"] = float(per_node.median())         # without the first node's compiles
    rows.append(row)
  return pd.DataFrame(rows)


def summary_text(config, summary: pd.DataFrame, frame: pd.DataFrame) -> str:
  la = config.lookahead
  f = lambda r, k: (f"{r[k + '_agree']:.2f} [{r[k + '_lo']:.2f}, {r[k + '_hi']:.2f}] (n={r[k + '_n']}, "
                    f"p={r[k + '_p_chance']:.2g})" if r[k + "_n"] else "n=0")
  lines = [f"# One-step lookahead on {la.study_workdir}: a gradient check, and re-runs", "",
           f"step: SGD, {'parameter norm' if la.normalize else 'learning rate'} eta={la.eta:g}, "
           f"{'LoRA rank %d alpha %g' % (la.lora.rank, la.lora.alpha) if la.lora.rank else 'every parameter'}; "
           "loss on C(u) with the recorded q; P_succ from the records, held fixed.",
           "Sign agreement over non-degenerate nodes where both values are non-zero: fraction, 95% Wilson interval, "
           f"n, and the two-sided binomial p-value against chance ({CHANCE:g}).",
           "- gradient check: the first-order term <grad V, step> against (i), the change of V with the new p and "
           "the same P_succ. It confirms the gradient code (they must agree at a small eta); it does not test "
           "whether the step raises the node's value.",
           "- (ii) re-run: the continuations re-run from the updated student under the study's keys, with a 95% t "
           "interval over the R replicates (paired). Where it changed no reward, (ii) = (i) exactly and agreement "
           "repeats the gradient check. A re-run tests the prediction only where it changed a reward and its "
           "interval is narrower than |predicted| (resolved and changed); the others cannot tell the sign.", "",
           "| configuration | nodes | gradient check: sign(pred) = sign((i)) | (i) vs (ii) re-run "
           "| (i) vs (ii), changed re-runs | pred vs (ii), resolved and changed | alignment vs (i) "
           "| median rel. err | re-runs (unchanged, resolved, resolved and changed, excluding 0) "
           "| median abs pred / re-run half-width "
           "| minutes (s / node) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
  for _, r in summary.iterrows():
    lines.append(f"| {r['config_id']} ({r['divergence']}) | {r['nodes']} ({r['degenerate']} degenerate, "
                 f"{r['zero_step']} zero steps) | {f(r, 'gradient_check')} | {f(r, 'local_vs_rerun')} | "
                 f"{f(r, 'changed_local_vs_rerun')} | {f(r, 'pred_vs_rerun_resolved')} | {f(r, 'alignment_vs_local')} "
                 f"| {r['median_rel_error']:.2g} | {r['reruns']} ({r['reruns_unchanged']}, {r['reruns_resolved']}, "
                 f"{r['reruns_resolved_changed']}, "
                 f"{r['reruns_excluding_zero']}) | {r['median_abs_predicted']:.2g} / {r['median_rerun_halfwidth']:.2g} "
                 f"| {r['minutes']:.2f} ({r['median_node_seconds']:.1f}) |")
  if summary["reruns"].sum():
    lines += ["", f"{int(summary['reruns_resolved_changed'].sum())} of {int(summary['reruns'].sum())} re-runs test "
              f"the predicted change ({int((summary['reruns'] - summary['reruns_resolved']).sum())} have an interval "
              f"wider than |predicted|, {int(summary['reruns_unchanged'].sum())} changed no reward); a test needs "
              "more continuations per candidate (the study's R) or a larger eta."]
  return "\n".join(lines) + "\n"
