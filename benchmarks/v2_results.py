"""Validation v2's stage-3 results as text (issue 47, item 5): `stage3_results.md`, written by
`benchmarks/validate_v2.py --piece=stage3` beside the tables it reads (`v2_analysis.stage3_tables`' output).

Every number in it is a cell of those tables, placed against what docs/data/validation_v2/hypothesis.md committed
before training: the primary test and its decision at alpha 0.05, the predicted and the observed order of each
stratum, the four stated expectations and the seven secondary analyses. It interprets nothing beyond the
hypothesis's own rules; the discussion is written by hand (docs/results.md).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from benchmarks import v2_analysis

ALPHA = 0.05                    # hypothesis.md: the primary test's level (one-sided permutation p)
NOISE = 0.05                    # hypothesis.md, expectation 2: |gain| below this is "within noise"
DEFAULT_VERDICT = "alignment_incorrect"      # the default verdict's estimand (secondary 1)
TRAINED = (" (per question s_q x the mean over its correct-rollout nodes + (1 - s_q) x the mean over its incorrect "
           "ones, then the mean over questions; where a configuration has no node of one group for a question, the "
           "other group's mean, as in hypothesis.md's stage-2 values)")     # v2_analysis.trained_alignment


def _num(x: float, signed: bool = True) -> str:
  return "n/a" if x is None or not np.isfinite(x) else f"{x:+.3f}" if signed else f"{x:.3f}"


def _interval(row, lo: str = "lo", hi: str = "hi") -> str:
  return f"[{_num(row[lo])}, {_num(row[hi])}]"


def _p(p: float) -> str:
  return "n/a" if not np.isfinite(p) else f"{p:.3g}"


def _primary(tests: pd.DataFrame, primary: str, interim: bool, left_out: dict[str, str]) -> list[str]:
  row = tests.set_index("predictor").loc[primary]
  rhos = ", ".join(f"{c[4:]} {_num(row[c])}" for c in tests.columns if c.startswith("rho_"))
  shown = np.isfinite(row.p_value) and row.p_value < ALPHA
  return [
      "## The primary test (hypothesis.md)", "",
      "- Runs left out (hypothesis.md's rule: a run that failed twice for a cause of its own; excluded.csv): " + (
          "; ".join(f"{k} ({v})" for k, v in left_out.items()) if left_out else "none") + ".",
      f"- Predictor `{primary}`" + (TRAINED if primary == v2_analysis.PRIMARY else "") + "; statistic: the mean "
      "over strata of Spearman's rho with the gain within the stratum: "
      f"**{_num(row.statistic)}** {_interval(row)} (95% percentile bootstrap, {int(row.draws)} draws resampling "
      f"{row.resampled}); per stratum: {rhos}.",
      f"- One-sided permutation p (gains permuted within strata, {int(row.permutations)} permutations): "
      f"**{_p(row.p_value)}**, alpha {ALPHA:g}, {int(row.configurations)} configurations.",
      "- Decision, by hypothesis.md's rule: " + (
          "none: an interim result is not the test (hypothesis.md: computed once, at every planned run)." if interim
          else f"p < {ALPHA:g}: the study predicts training beyond the teacher's identity." if shown else
          f"p >= {ALPHA:g}: that the study predicts training beyond the teacher's identity is not shown."
          if np.isfinite(row.p_value) else "no test (no stratum has a defined rho)."), ""]


def _order(gains: pd.DataFrame, primary: str) -> list[str]:
  out = ["## Each stratum: predicted order against the gains", "",
         f"Predicted rank: by `{primary}` (1 = highest; ties averaged); observed rank: by the gain. Gain: held-out "
         "pass@1 after training minus before, the mean over the held-out questions (and over replicates); 95% "
         "interval resampling evaluation questions and replicates.", "",
         "| stratum | configuration | predicted rank | value | gain [95%] | observed rank | replicates | lowest after "
         "| gold log p change |", "|---|---|---|---|---|---|---|---|---|"]
  for s, g in gains.groupby("stratum", sort=False):
    pred, obs = g[primary].rank(ascending=False), g.gain.rank(ascending=False)
    for i in g.sort_values(primary, ascending=False).index:
      r = g.loc[i]
      out.append(f"| {s} | {r.configuration} | {pred[i]:g} | {_num(r[primary])} | {_num(r.gain)} {_interval(r)} | "
                 f"{obs[i]:g} | {int(r.replicates)} | {_num(r.lowest_after, False)}"
                 f"{' (collapsed)' if r.collapsed else ''} | {_num(r.gold_gain)} |")
  return out + [""]


def _expectations(gains: pd.DataFrame, tests: pd.DataFrame, pairs_summary: pd.DataFrame, primary: str) -> list[str]:
  row = tests.set_index("predictor").loc[primary]
  ext, slf = gains[gains.stratum == "external"], gains[gains.stratum == "self"]
  pooled = (gains[[primary, "gain"]].rank().corr().iloc[0, 1] if len(gains) > 2 else np.nan)
  agree = pairs_summary.set_index("predictor").loc[primary] if primary in set(pairs_summary.predictor) else None
  four = ("no divergence pair within a view has two nonzero differences" if agree is None or not agree.pairs else
          f"the signs agree in {int(agree.agree)} of {int(agree.pairs)} pairs ({agree.share:.2f}; two-sided "
          f"binomial p against 1/2: {_p(agree.p_binomial)}; the pairs share configurations, so a guide)")
  return [
      "## hypothesis.md's expectations, against the result", "",
      f"1. External stratum, every run gains: {int((ext.gain > 0).sum())} of {len(ext)} configurations' gains (their "
      f"replicates averaged) are above 0, "
      f"{int((ext.lo > 0).sum())} with an interval above 0; every run of {int((ext.lowest_run_gain > 0).sum())} of "
      f"them gains; rho_external {_num(row.get('rho_external', np.nan))}.",
      f"2. Self stratum, most gains within noise (|gain| < {NOISE:g}): {int((slf.gain.abs() < NOISE).sum())} of "
      f"{len(slf)}; {int(((slf.lo > 0) | (slf.hi < 0)).sum())} with an interval excluding 0; rho_self "
      f"{_num(row.get('rho_self', np.nan))}.",
      f"3. Across strata (not tested): Spearman of `{primary}` with the gain over all {len(gains)} configurations "
      f"pooled, {_num(pooled)}, against the within-strata mean {_num(row.statistic)}.",
      f"4. Divergence pairs within a view, `{primary}`'s difference against the gain's: {four}.", ""]


def _secondary(out: dict[str, pd.DataFrame], primary: str) -> list[str]:
  tests, regret, collapse, noise = out["tests"], out["regret"], out["collapse"], out["noise"]
  lines = ["## Secondary analyses (hypothesis.md, reported whatever they show)", "",
           "Every predictor with the primary's statistic, interval and p; minus primary: this predictor's statistic "
           "minus the primary's, paired by draw (hypothesis.md's secondary 2 words it the other way round, the "
           "primary minus each: here a positive difference means the predictor ranked the gains better than the "
           "primary); the same "
           "statistic against the change of the gold answer's log p (secondary 6).", "",
           "| predictor | statistic [95%] | p | minus primary [95%] | gold: statistic | gold: p |",
           "|---|---|---|---|---|---|"]
  for r in tests.itertuples():
    tag = (" (primary)" if r.predictor == primary else " (the default verdict's)" if r.predictor == DEFAULT_VERDICT
           else "")
    lines.append(f"| {r.predictor}{tag} | {_num(r.statistic)} "
                 f"[{_num(r.lo)}, {_num(r.hi)}] | {_p(r.p_value)} | {_num(r.minus_primary)} "
                 f"[{_num(r.minus_primary_lo)}, {_num(r.minus_primary_hi)}] | {_num(r.statistic_gold)} | "
                 f"{_p(r.p_value_gold)} |")
  lines += ["", "Regret (secondary 4): the best gain in the stratum minus the gain of the configuration a rule "
            "named before training.", "", "| stratum | rule | named | gain | best | best gain | regret |",
            "|---|---|---|---|---|---|---|"]
  lines += [f"| {r.stratum} | {r.rule} | {r.named} | {_num(r.gain)} | {r.best} | {_num(r.best_gain)} | "
            f"{_num(r.regret, False)} |" for r in regret.itertuples()]
  lines += ["", f"Collapse (secondary 5; held-out pass@1 after below {v2_analysis.COLLAPSED:g} in any of a "
            "configuration's runs): " + (
      "none." if collapse.empty else "; ".join(
          f"{r.configuration} ({r.stratum}, lowest after {_num(r.lowest_after, False)}): the primary ranks it "
          f"{r.rank:g} of {int(r.of)}{', last' if r.last else ', not last'}" for r in collapse.itertuples()) + ".")]
  lines += ["", "Training noise (secondary 7): the spread of the configurations' gains against one run's SD from "
            "the seed replicates.", "", "| stratum | configurations | SD between configurations | replicated | "
            "training SD | replicate gains |", "|---|---|---|---|---|---|"]
  lines += [f"| {r.stratum} | {int(r.configurations)} | {_num(r.between_sd, False)} | {int(r.replicated)} | "
            f"{_num(r.training_sd, False)} | {r.replicate_gains} |" for r in noise.itertuples()]
  return lines + [""]


def markdown(out: dict[str, pd.DataFrame], primary: str = v2_analysis.PRIMARY, interim: str = "",
             left_out: dict[str, str] | None = None) -> str:
  """stage3_results.md's text from `v2_analysis.stage3_tables`' output (`out`: gains, tests, pairs_summary, regret,
  collapse, noise); `interim`: "" for the test, else the line that says why these are interim numbers (put first);
  `left_out`: the runs hypothesis.md's rule left out, name -> reason (validate_v2.excluded)."""
  head = ["# Validation v2, stage 3: the results", "",
          "Written by `benchmarks/validate_v2.py --piece=stage3` from the data folder's CSVs "
          "(`v2_analysis.stage3_tables`; each number is a cell of the stage3*.csv beside this file), against "
          "hypothesis.md.", ""]
  if interim:
    head += [f"**INTERIM: {interim}**", ""]
  return "\n".join(head + _primary(out["tests"], primary, bool(interim), left_out or {})
                   + _order(out["gains"], primary)
                   + _expectations(out["gains"], out["tests"], out["pairs_summary"], primary)
                   + _secondary(out, primary))
