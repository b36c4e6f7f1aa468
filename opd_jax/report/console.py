"""What a study says on the console: the warning when it measured nothing (`diagnose`) or when grades timed out or
failed (`grading_warning`), both also appended to summary.md by `pipeline.finish`, and the results a finished run
prints on stdout (`results_text`)."""
import json
import pathlib

import pandas as pd

from opd_jax.estimators import gradients
from opd_jax.report import common


def diagnose(nodes: pd.DataFrame) -> str | None:
  """A loud one-paragraph warning when the study measured nothing (no node, or no defined alignment), with the
  likely cause; None when some alignment is defined."""
  if len(nodes) and nodes["alignment"].notna().any():
    return None
  if not len(nodes):
    return ("WARNING: the study recorded no node, so the alignment table and plot are empty; likely cause: no "
            "node rollout had a response (raise config.sampling.max_new_tokens)")
  degenerate = nodes["degenerate"].astype(bool)
  if degenerate.all():
    return (f"WARNING: all {len(nodes)} node rows are degenerate (P_succ equal on every candidate), so no alignment "
            "is defined and the alignment table and plot are empty; likely cause: no informative question (every "
            "continuation succeeds or every one fails: check the task's accuracy and its gold answers), or "
            "R = config.budget.continuations_per_candidate too small to tell candidates apart: raise it")
  reasons = nodes.loc[~degenerate, "alignment_nan_reason"].fillna("").value_counts().to_dict()
  if set(reasons) == {gradients.ZERO_DISTILLATION_GRADIENT}:
    return (f"WARNING: every alignment is NaN ({int(degenerate.sum())} of {len(nodes)} node rows degenerate; the "
            f"other {int((~degenerate).sum())} have a zero distillation gradient: the teacher's q equals the "
            "student's p on every candidate set, or the clip binds), so the alignment table and plot are empty; "
            "likely cause: a view that gives the teacher nothing the student lacks (e.g. self:plain): pick "
            "another context or teacher")
  return (f"WARNING: every alignment is NaN ({int(degenerate.sum())} of {len(nodes)} node rows degenerate; the "
          f"others: {reasons}), so the alignment table and plot are empty; likely cause: too few nodes "
          "(config.budget) or contexts unavailable for the scored rollouts")


def grading_warning(work: dict, where: str = "manifest.json work") -> str | None:
  """The warning when some grades of a run timed out or raised (its counts grades_timed_out, grades_errored in
  `where`; opd_jax/tasks/grading.py): they scored 0 without a verdict. None when none did (or the run predates
  the counts)."""
  timed_out, errored = int(work.get("grades_timed_out", 0)), int(work.get("grades_errored", 0))
  if not timed_out and not errored:
    return None
  return (f"WARNING: {timed_out} grade(s) timed out and {errored} failed; each scored 0 without a verdict ({where}: "
          "grades_timed_out, grades_errored; each answer is named in a warning of the log); likely cause: answers "
          "math-verify cannot parse or compare in time (a power tower, a huge expression)")


TABLE_COLUMNS = ("config_id", "group", "n_nodes", "n_defined", "n_defined_questions", "mean_alignment",
                 "alignment_ci_lo", "alignment_ci_hi", "mean_noise_ceiling", "underpowered")


def next_line(verdict: dict, larger: str = "") -> str:
  """The verdict's next step (`verdict_text.next_step`: the questions that would decide, or detect
  config.report.min_effect), followed by `larger` (the advice to run the config's larger variant with the dry
  run's estimate of its time, `study.planning.larger_advice`, which the caller passes: a report does not plan)
  when it says what would decide; "" if nothing would."""
  from opd_jax.report import verdict_text
  text = verdict_text.next_step(verdict)
  if text.startswith("to decide") and larger:
    text += f"; {larger}"
  return text


def _verdict(workdir: pathlib.Path) -> dict:
  path = workdir / "verdict.json"
  return json.loads(path.read_text()) if path.is_file() else {}


def verdict_means(verdict: dict, table: pd.DataFrame) -> str:
  """One line with each configuration's mean alignment on the verdict's node group and its 95% cluster-bootstrap
  interval over questions (verdict["ranking"], best first), when that group is not one of the table's rows
  (summary.csv's groups correct / incorrect / all: the "trained" group weighs each question's two groups by its
  success rate, so its means are none of those rows); "" otherwise."""
  target = verdict.get("target")
  if not verdict.get("ranking") or target is None or target in set(table.get("group", ())):
    return ""
  def mean(r: dict) -> str:             # JSON null / NaN (no defined alignment): n/a, no interval
    interval = common.ci(r.get("ci_lo"), r.get("ci_hi"), 3)
    return f"{r['config_id']} {common.fmt(r.get('mean_alignment'), 3)}" + ("" if interval == "n/a" else f" {interval}")
  means = ", ".join(mean(r) for r in verdict["ranking"])
  return (f"the verdict's means {common.on_nodes(target)} ({100 * verdict.get('level', 0.95):g}% cluster bootstrap "
          f"over questions): {means}; the table below: unweighted means by node group")


def results_text(workdir, larger: str = "", records_dir=None) -> str:
  """What a finished run prints on stdout: the verdict (verdict.json's line; its details and what the training
  validation showed, indented) and what would decide it (`next_line`: a new study's questions, also those for
  config.report.min_effect, then `larger`), the verdict's means where its group is not a row of the table
  (`verdict_means`), the alignment table (`TABLE_COLUMNS` of summary.csv that exist), then one line saying where
  the records, report and figures are."""
  workdir = pathlib.Path(workdir)
  lines, verdict = [], _verdict(workdir)
  if verdict:
    lines += [verdict["line"], *(f"  {line}" for line in verdict.get("details", ())),
              *(f"  {line}" for line in verdict.get("validation", ())), *filter(None, [next_line(verdict, larger)]),
              ""]
  csv = workdir / "summary.csv"
  if csv.is_file():
    table = pd.read_csv(csv)
    means = verdict_means(verdict, table)
    lines += [means, ""] if means else []
    cols = [c for c in TABLE_COLUMNS if c in table.columns]
    fmt = lambda v: f"{v:.3f}" if isinstance(v, float) and not isinstance(v, bool) else str(v)
    body = [[fmt(v) for v in row] for row in table[cols].itertuples(index=False)]
    widths = [max(len(c), *(len(r[i]) for r in body)) if body else len(c) for i, c in enumerate(cols)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(cols, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in body]
  figures = [p.name for p in sorted(workdir.glob("*.png"))]
  records = workdir / "records" if records_dir is None else pathlib.Path(records_dir)   # a report written elsewhere
  lines.append(f"records: {records}  report: {workdir / 'report.html'}  summary: "
               f"{workdir / 'summary.md'} (table: summary.csv)"
               + (f"  figures: {', '.join(figures)}" if figures else ""))
  return "\n".join(lines)
