"""What the training validation showed, in the verdict's own lines: for every verdict, what it ranks on and what
validation v2 showed of that ranking (`basis_line`, issue 47 item 6); and when the verdict's best (or a
configuration that could be best) is a self-distillation context, the student as its own teacher (issue 50, item 8),
three more (`lines`).

A verdict that names a self context says, beside it:
  - v1 (docs/data/validation/runs.csv): the self-teacher runs' held-out pass@1 before and after training, which
    fell to 0.000 in every one, and the external teacher's gains; v1's self-teacher was the moving student
    (README.md, "Does the study predict training?"), where the study diagnoses the initial one;
  - v2 (docs/data/validation_v2/runs.csv), the self-teacher frozen (the trainer's default since): its self-teacher
    runs by stage; "under way" until its test's table (stage3.csv) is in;
  - v1's predictors (docs/data/validation/predictors.csv): the Spearman of the gains with the verdict's estimand
    on its target group, and with the teacher's identity alone (external or self), which v1 could not separate
    (v2's within-teacher test is `basis_line`).
Every number is read from those committed files (the repository's docs/, beside this package); where they cannot
be read (an install without docs/), the lines name the files and state no number.
"""
from __future__ import annotations

import pathlib

import numpy as np
import pandas as pd

from opd_jax.report import common
from opd_jax.report import proxies

ROOT = pathlib.Path(__file__).resolve().parents[2]        # the repository (docs/ beside opd_jax/)
V1 = "docs/data/validation"
V2 = "docs/data/validation_v2"
README = 'README.md, "Does the study predict training?"'
SELF = "self"                                             # the teacher name of a self-distillation context


def self_configs(nodes: pd.DataFrame) -> list[str]:
  """The configurations of node records whose teacher is the student itself (teacher "self"), sorted."""
  return sorted(set(nodes.loc[nodes["teacher"].astype(str) == SELF, "config_id"].astype(str)))


def _read(root: pathlib.Path, path: str) -> pd.DataFrame | None:
  try:
    return pd.read_csv(root / path)
  except (OSError, ValueError):
    return None


def _teacher(spec: str) -> str:
  return str(spec).split(":", 1)[0]


def _v1_line(root: pathlib.Path) -> str:
  """v1's self-teacher runs and the external teacher's, from runs.csv."""
  runs = _read(root, f"{V1}/runs.csv")
  if runs is None or not {"spec", "before", "after", "diff", "steps"} <= set(runs.columns):
    return (f"Validation v1 ({V1}/runs.csv, {README}): every self context trained against a moving self-teacher "
            "collapsed in training")
  own = runs[runs["spec"].map(_teacher) == SELF]
  ext = runs[runs["spec"].map(_teacher) != SELF]
  fell = own[own["after"] == 0.0]
  before = sorted(set(own["before"].round(3)))
  own_text = ((f"all {len(own)}" if len(fell) == len(own) else f"{len(fell)} of {len(own)}")
              + " self-teacher runs fell" + (f" from {before[0]:.3f}" if len(before) == 1 else "")
              + " to 0.000 held-out pass@1, with a moving self-teacher (the student being trained, a trainer fault "
              "since mended: the teacher is frozen by default, as in v2: README.md)")
  ext_text = ""
  if len(ext):
    lo, hi = float(ext["diff"].min()), float(ext["diff"].max())
    ext_text = f"; its {len(ext)} external-teacher runs: {lo:+.2f} to {hi:+.2f}"
  return f"Validation v1 ({V1}/runs.csv): " + own_text + ext_text


LISTED = 4          # a stage with more frozen self-teacher runs than this is summed up, not listed


def _runs_text(runs: pd.DataFrame) -> str:
  """Each run's spec and held-out pass@1 change [95%], or, past LISTED runs, their range and how many intervals
  exclude 0 each way."""
  if len(runs) <= LISTED:
    return ", ".join(f"{r.spec} {r.diff:+.3f} [{r.lo:+.3f}, {r.hi:+.3f}]" for r in runs.itertuples())
  up, down = int((runs["lo"] > 0).sum()), int((runs["hi"] < 0).sum())
  return (f"{len(runs)} runs from {runs['diff'].min():+.3f} to {runs['diff'].max():+.3f}, {up} above 0 and {down} "
          "below 0 by their 95% intervals")


def _v2_done(root: pathlib.Path) -> bool:
  """Whether validation v2's test is in: its table, stage3.csv, is readable (what `basis_line` reports)."""
  return _read(root, f"{V2}/stage3.csv") is not None


def _v2_line(root: pathlib.Path, done: bool) -> str:
  """v2's frozen self-teacher runs (runs.csv), by stage where runs.csv has one (stage 1 on v1's protocol, stage 3
  the test: hypothesis.md), each with its held-out questions x samples; "under way" and "so far" until stage3.csv
  is in (`done`: `_v2_done`)."""
  text = "Validation v2 (the self-teacher frozen, the trainer's default now)" + (
      f", its test done ({V2}/stage3.csv)" if done else f" is under way ({V2}/PLAN.md)")
  runs = _read(root, f"{V2}/runs.csv")
  if runs is None or not {"spec", "teacher_weights", "diff", "lo", "hi"} <= set(runs.columns):
    return text
  own = runs[(runs["spec"].map(_teacher) == SELF) & (runs["teacher_weights"] == "initial")]
  if not len(own):
    return text
  head = f"; its self-teacher runs{'' if done else ' so far'} ({V2}/runs.csv), held-out pass@1 change: "
  if "stage" not in own.columns:
    return text + head + _runs_text(own)
  parts = []
  for stage, group in own.groupby("stage", sort=True):
    size = ""
    if {"n_questions", "samples"} <= set(group.columns) and group[["n_questions", "samples"]].nunique().max() == 1:
      size = f", {int(group['n_questions'].iloc[0])} questions x {int(group['samples'].iloc[0])} samples"
    parts.append(f"stage {stage}{size}: " + _runs_text(group))
  return text + head + "; ".join(parts)


def _predictor_line(root: pathlib.Path, estimand: str, target: str, done: bool) -> str:
  """v1's Spearman of the gains with the verdict's estimand on its target group, against the teacher's identity;
  once v2's test is in (`done`: `_v2_done`), said as v1's alone, v2's result being the verdict's first validation
  line."""
  claim, v2 = (("Validation v1 could not show the ranking predicts training gains beyond the teacher's identity",
                "; v2 tested it within one teacher (the first validation line above)") if done else
               ("The study's ranking was not shown to predict training gains beyond the teacher's identity", ""))
  table = _read(root, f"{V1}/predictors.csv")
  if table is None or not {"predictor", "spearman", "n_configurations"} <= set(table.columns):
    return f"{claim} ({README}){v2}"
  rows = table.set_index("predictor")
  name, ref = f"{estimand}_{target}", "reference_external_teacher"
  if name not in rows.index or ref not in rows.index:
    return f"{claim} ({README}){v2}"
  mine, teacher = float(rows.at[name, "spearman"]), float(rows.at[ref, "spearman"])
  numbers = (f"Spearman with v1's {int(rows.at[name, 'n_configurations'])} gains {mine:+.2f} (mean {estimand}, "
             f"{target} nodes), {teacher:+.2f} (teacher external or self) ({V1}/predictors.csv)")
  return f"{claim}: {numbers}{v2}" if mine <= teacher or done else "Validation v1's " + numbers


PRIMARY = "alignment_trained"        # v2's primary predictor (docs/data/validation_v2/hypothesis.md)
PROXIES = tuple(proxies.PROXIES)     # v2's cheap per-token proxies of a view (report/proxies.py, v2's names)


def v2_predictor(estimand: str, target: str) -> str:
  """The name of v2's predictor (docs/data/validation_v2/stage3.csv) that a verdict's estimand on its target group
  is: `<estimand>_<target>` (alignment_incorrect, projection_all, ...); the alignment on the "trained" group is
  PRIMARY."""
  return PRIMARY if (estimand, target) == ("alignment", common.TRAINED) else f"{estimand}_{target}"


def basis_line(verdict: dict, root: pathlib.Path | None = None) -> str:
  """The line that says what the verdict ranks on and what validation v2 showed of it (issue 47, item 6): the
  estimand on the target group (the verdict ranks configurations by their paired differences in it), and, once
  v2's primary test is in (stage3.csv), that predictor's mean within-teacher Spearman with the training gains, its
  interval and one-sided permutation p, beside the primary's, and the best of the cheap proxies (PROXIES: no
  targeted rollouts; the best of those whose paired difference from the primary has its interval above 0 where
  any has: PLAN.md's item 6, rule 1) with its difference from the primary (paired draws); before that, that v2
  tests it. Numbers
  are read from the committed files (`lines`' module docstring); none where they cannot be.

  Args:
    verdict: decision.decide's dict (estimand, target).
    root: the folder holding docs/ (default: the repository beside this package).
  """
  root = ROOT if root is None else pathlib.Path(root)
  estimand, target = verdict.get("estimand", "alignment"), verdict.get("target", "incorrect")
  name = v2_predictor(estimand, target)
  what = f"Ranked on the {estimand} {common.on_nodes(target)} (v2's predictor {name})"
  table = _read(root, f"{V2}/stage3.csv")
  need = {"predictor", "statistic", "lo", "hi", "p_value", "configurations"}
  if table is None or not need <= set(table.columns):
    return (f"{what}: whether a study ranking predicts training gains within one teacher is validation v2's test, "
            f"under way (primary: {PRIMARY}; {V2}/hypothesis.md)")
  rows = table.set_index("predictor")

  def result(k: str) -> str:
    r = rows.loc[k]
    return (f"{r.statistic:+.2f} [{r.lo:+.2f}, {r.hi:+.2f}], one-sided permutation p {r.p_value:.2g}")

  head = (f"{what}. Validation v2 ({V2}/stage3.csv; {int(rows['configurations'].iloc[0])} trained configurations in "
          "two strata, each with one teacher): mean within-teacher Spearman with the training gain (95% interval "
          "resampling configurations, questions and the replicated configurations' seeds)")
  if name not in rows.index:
    text = f"{head}: no row for {name}; the primary, {PRIMARY}, " + (result(PRIMARY) if PRIMARY in rows.index
                                                                     else "n/a")
  else:
    text = f"{head} " + result(name) + ("" if name == PRIMARY or PRIMARY not in rows.index
                                        else f" (the primary, {PRIMARY}: {result(PRIMARY)})")
  paired = ["statistic", "minus_primary", "minus_primary_lo", "minus_primary_hi"]
  if PRIMARY not in rows.index or not set(paired) <= set(rows.columns):
    return text
  proxies = [k for k in PROXIES if k in rows.index and np.isfinite(rows.loc[k, paired].to_numpy(float)).all()]
  if not proxies:
    return text
  above = [k for k in proxies if rows.at[k, "minus_primary_lo"] > 0]     # item 6, rule 1: any proxy above the primary
  best = max(above or proxies, key=lambda k: rows.at[k, "statistic"])
  r = rows.loc[best]
  than = ("above it" if r.minus_primary_lo > 0 else "below it" if r.minus_primary_hi < 0
          else "not distinguishable from it")
  which = "of those above the primary, the best" if above and len(above) < len(proxies) else "the best"
  return (f"{text}; {which} of {len(proxies)} cheap proxies (no targeted rollouts), {best}, {result(best)}; it "
          f"minus the primary {r.minus_primary:+.2f} [{r.minus_primary_lo:+.2f}, {r.minus_primary_hi:+.2f}] (paired "
          f"draws, not adjusted for picking the best): {than}")


def lines(verdict: dict, selfs: list[str], root: pathlib.Path | None = None) -> list[str]:
  """The validation's lines for a verdict (decision.decide's dict), or [] when neither its best nor any
  configuration that could be best is a self context (`selfs`: self_configs of its nodes).

  Args:
    verdict: with verdict, best, best_set, target and estimand (best None: no data, no lines); its best is called
      "the best" only where the verdict is "use" (a decision), else "the highest mean, not a decision".
    selfs: the self-distillation configurations of the study.
    root: the folder holding docs/ (default: the repository beside this package).
  Returns:
    [] or three lines: which configurations are self contexts, and v1's runs; v2; v1's predictors.
  """
  root = ROOT if root is None else pathlib.Path(root)
  named = [c for c in dict.fromkeys([verdict.get("best"), *verdict.get("best_set", ())]) if c in set(selfs)]
  if not named:
    return []
  best = [c for c in named if c == verdict.get("best")]
  others = [c for c in named if c != verdict.get("best")]
  lead = "the best" if verdict.get("verdict") == "use" else "the highest mean, not a decision"
  who = ", ".join([*(f"{c} ({lead})" for c in best), *([f"{', '.join(others)} (could be best)"] if others else [])])
  done = _v2_done(root)
  return [f"{who}: self-distillation. " + _v1_line(root), _v2_line(root, done),
          _predictor_line(root, verdict.get("estimand", "alignment"), verdict.get("target", "incorrect"), done)]
