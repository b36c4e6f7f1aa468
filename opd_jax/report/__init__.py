"""The report of a study: what a researcher reads (issue 14).

  python -m opd_jax.report --workdir=runs/teacher_sweep     # rebuilds summary.md/.csv, verdict.json, report.html
  python -m opd_jax.report --workdir='runs/*' --out=runs/compare   # one comparison over several studies

Reads `<workdir>/records/nodes/part-*.parquet` (one part per question, from every host), the rollouts, and
`config.json` / `manifest.json` beside them when present. Modules, in data-flow order:
  common     groups, checks, the power rule (NaN reasons and predictors: opd_jax.records);
  ceiling    the direct noise ceiling E cos(g*_R, g*) per node;
  summary    summarize: configuration x group counts, means, cluster intervals, oracle filter;
  decision   decide: paired comparisons on shared nodes (CR2 t, Bonferroni over every comparable pair), the
             configurations that could be best, the detectable difference, the verdict (verdict.json);
  sequential the group-sequential design of decide (issue 33): looks, alpha spending, use / equivalent / continue;
  looks      a study's sequential design from its config: when it looks, the look its report is, looks not planned;
  where      alignment and teacher advantage by position, entropy, argmax, token kind;
  predictors Spearman / AUROC with intervals, predictor filter vs oracle filter;
  router     route: per-token choice of configuration from the predictors, cross-validated by question;
  figures, markdown, page, rollout: matplotlib figures, summary.md, report.html, the per-rollout view;
  token_pages html/: one page per node rollout (capped) and an index;
  build      write_summary: every file from the records;
  compare    several studies side by side (--workdir repeated or a glob, --out): comparison.html / .csv;
  console    what a run prints: the results table, and the warnings when nothing was measured or grades failed.
paper.md, "What the paper reports" and "Where opd_jax goes further".
"""
from opd_jax.records import NAN_REASONS
from opd_jax.records import PREDICTORS
from opd_jax.report.build import read_records
from opd_jax.report.build import write_summary
from opd_jax.report.common import GROUPS
from opd_jax.report.common import REQUIRED_COLUMNS
from opd_jax.report.console import diagnose
from opd_jax.report.console import grading_warning
from opd_jax.report.console import results_text
from opd_jax.report.decision import decide
from opd_jax.report.markdown import render_markdown
from opd_jax.report.rollout import rollout_html
from opd_jax.report.summary import summarize


def plot_alignment(summary, path: str) -> None:
  """Writes figures.alignment_by_config(summary) to `path` atomically (a PNG)."""
  from opd_jax import atomic  # pylint: disable=g-import-not-at-top
  from opd_jax.report import figures  # pylint: disable=g-import-not-at-top
  atomic.write_bytes(path, figures.alignment_by_config(summary))
