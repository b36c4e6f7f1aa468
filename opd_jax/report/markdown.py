"""summary.md: the verdict first, then tables of a `summarize` result, the predictors, the oracle filter, and last
the run's facts and config."""
import math

import pandas as pd

from opd_jax import records
from opd_jax.report import proxies as proxy_lib
from opd_jax.report import router as rt
from opd_jax.report import verdict_text
from opd_jax.report.common import ci
from opd_jax.report.common import fmt
from opd_jax.report.common import table
from opd_jax.report.common import underpowered_reason


def divergence_label(row: pd.Series) -> str:
  """`name(param=value)` of a configuration's divergence, its parameter named by the registry (records before
  `divergence_param`: their beta / clip columns)."""
  param, value = records.divergence_param(row)
  return f"{row['divergence']}({param}={value:g})" if not math.isnan(value) else str(row["divergence"])


def meta_lines(meta: dict) -> list[str]:
  lines = []
  for key, value in meta.items():
    if isinstance(value, dict):
      lines += ["", f"<details><summary>{key}</summary>", ""]
      lines += [f"- `{k}`: {v}" for k, v in value.items()]
      lines += ["", "</details>", ""]
    else:
      lines.append(f"- **{key}**: {value}")
  return lines


def verdict_lines(verdict: dict) -> list[str]:
  """The decision section: the verdict's first line, its details, what the training validation showed
  (verdict["validation"]), what would decide it, the table of configurations against the best, power."""
  step = verdict_text.next_step(verdict)             # what would decide it: the console's line after the verdict
  details = [f"- {line}" for line in verdict.get("details", ())]
  checked = [f"- {line}" for line in verdict.get("validation", ())]
  lines = ["## Verdict", "", f"**{verdict['line']}**", "", *([*details, ""] if details else []),
           *(["What the training validation showed:", "", *checked, ""] if checked else []),
           *([step, ""] if step else []), verdict_text.table_note(verdict), ""]
  lines += table(verdict_text.TABLE_HEADER, verdict_text.table_rows(verdict))
  power = verdict_text.power_text(verdict.get("power"))
  return lines + (["", power] if power else []) + [""]


def render_markdown(summary: pd.DataFrame, *, title: str, meta: dict, verdict: dict | None = None,
                    predictors: pd.DataFrame | None = None, router: dict | None = None,
                    unsampled: tuple[str, ...] = (), proxies: pd.DataFrame | None = None) -> str:
  """Markdown of the report.

  Sections: the verdict (`verdict`, decision.decide), mean alignment and teacher advantage per configuration x
  group with intervals and node counts, one line "UNDERPOWERED: <config> / <group>: <reason>" per underpowered
  group (its interval is indicative), the noise ceilings, Spearman and AUROC of each predictor with intervals
  (`predictors`, predictors.predictor_table), the router (`router`, router.route), the oracle filter, and last
  the run (`meta`: key -> value; a dict value, such as the config, becomes a collapsed key/value list). Groups in
  `unsampled` (budget.node_group="target": no node rollouts there by design) get one line saying so instead of
  their UNDERPOWERED lines. `proxies` (proxies.proxy_table): each configuration's cheap proxies, after the
  predictors.

  Returns:
    The markdown text, ending with a newline.
  """
  level = float(summary["ci_level"].iloc[0]) if len(summary) else 0.95
  pct = f"{100 * level:g}% CI"
  lines = [f"# {title}", ""]
  if verdict is not None:
    lines += verdict_lines(verdict)
  lines += ["## Alignment and teacher advantage by configuration x correctness", "",
            "align = cos(g*, g_c) per node (> 0: the distillation update raises the student's success "
            f"probability); means over nodes with a defined alignment, {pct} by cluster bootstrap over questions; "
            "questions (defined): questions with a defined alignment (the power rule's count). "
            "Teacher advantage = sum_k q_k P_succ(k) - V.", ""]
  configs = summary.drop_duplicates("config_id")
  lines += table(["config", "teacher", "context", "divergence"],
                 [[str(r["config_id"]), str(r["teacher"]), str(r["context"]), divergence_label(r)]
                  for _, r in configs.iterrows()]) + [""]
  body = []
  for _, r in summary.iterrows():
    interval = ci(r["alignment_ci_lo"], r["alignment_ci_hi"]) + (" (indicative)" if r["underpowered"] else "")
    body.append([str(r["config_id"]), r["group"], str(r["n_nodes"]), str(r["n_defined"]), str(r["n_degenerate"]),
                 str(r["n_zero_distillation_gradient"]), str(r["n_context_unavailable"]), str(r["n_nan_other"]),
                 str(r["n_defined_questions"]), fmt(r["mean_alignment"]), interval, fmt(r["alignment_std"]),
                 fmt(r["mean_teacher_advantage"]), ci(r["teacher_advantage_ci_lo"], r["teacher_advantage_ci_hi"])])
  lines += table(["config", "group", "nodes", "defined", "degenerate", "zero grad", "no context", "other NaN",
                  "questions (defined)", "mean align", pct, "std align", "teacher adv", pct], body)
  empty = summary["group"].isin(unsampled) & (summary["n_nodes"] == 0)
  underpowered = summary[summary["underpowered"] & ~empty]
  if empty.any():
    lines += ["", f"- not sampled: the {' and '.join(unsampled)} group (budget.node_group=target draws node rollouts "
              "from the verdict's group only)"]
  if len(underpowered):
    lines.append("")
    for _, r in underpowered.iterrows():
      reason = underpowered_reason(r["n_defined"], r["n_defined_questions"], min_nodes=r["min_nodes"],
                                   min_questions=r["min_questions"])
      lines.append(f"- UNDERPOWERED: {r['config_id']} / {r['group']}: {reason}")
  if "mean_ceiling" in summary.columns or "mean_split_half_ceiling" in summary.columns:
    lines += ["", "## Noise ceiling of g*", "",
              "ceiling = direct estimate of E cos(g*_R, g*) (parametric bootstrap from each node's counts with "
              "Jeffreys-shrunk P_succ; within 0.05 of the truth on the exact toy at R = 4, 8, 16): the mean "
              "alignment a perfect distillation direction would reach. split-half = mean cos of g* from two "
              "halves of the replicates: the reliability of an R/2 estimate (lower in expectation; on few nodes or few "
              "replicates it can come out above the ceiling: not the ceiling).", ""]
    body = [[str(r["config_id"]), r["group"], fmt(r.get("mean_ceiling"), 3),
             fmt(r.get("mean_split_half_ceiling"), 3)] for _, r in summary.iterrows()]
    lines += table(["config", "group", "ceiling", "split-half (R/2)"], body)
  if predictors is not None and len(predictors):
    lines += ["", "## Divergence predictors (group all)", "",
              "Spearman(predictor, align) and AUROC(predictor, align > 0) over nodes with a defined alignment, "
              f"{pct} by cluster bootstrap (AUROC 0.5: no signal; < 0.5: the predictor points the wrong way). "
              "filter capture: share of the oracle filter's gain in mean alignment recovered by keeping the "
              "same share of tokens ranked by the predictor.", ""]
    body = [[str(r["config_id"]), r["predictor"], str(r["n"]), fmt(r["spearman"], 3),
             ci(r["spearman_lo"], r["spearman_hi"], 3), fmt(r["auroc"], 3), ci(r["auroc_lo"], r["auroc_hi"], 3),
             fmt(r.get("filter_mean"), 3), fmt(r.get("filter_capture"), 3)] for _, r in predictors.iterrows()]
    lines += table(["config", "predictor", "nodes", "Spearman", pct, "AUROC", pct, "filter mean align",
                    "filter capture"], body)
  if proxies is not None and len(proxies):
    lines += ["", "## Cheap proxies per configuration (no targeted rollouts)", "", proxy_lib.NOTE + f" {pct} by "
              "cluster bootstrap over questions.", ""]
    lines += table(*proxy_lib.wide(proxies))
  if router is not None and router.get("rows"):
    lines += ["", "## Router (cross-validated by question; exploratory, not the verdict)", "", router["line"], "",
              rt.note(router), ""]
    lines += table(rt.ROUTER_HEADER, rt.table_rows(router))
  elif router is not None:
    lines += ["", "## Router", "", router["line"]]
  lines += ["", "## Oracle filter: keep only tokens with align > 0", "",
            "kept share = mean(a > 0); kept mean = mean(a | a > 0); gain = kept mean - mean(a); net share = "
            "sum(a) / sum(|a|) (how much of the alignment mass survives cancellation; with its CI); positive-sum "
            "share = sum(a > 0) / sum(|a|). The paper's \"10-15x more effective signal\" is mean(a | a > 0) / "
            "|mean(a)| = positive-sum share / (kept share |net share|): it divides by a mean near 0, so it is "
            "not shown.", ""]
  body = [[str(r["config_id"]), r["group"], str(r["n_defined"]), fmt(r["oracle_kept_share"], 3),
           fmt(r["oracle_kept_mean"], 3), fmt(r["oracle_gain"], 3), fmt(r["oracle_net_share"], 3),
           ci(r["oracle_net_share_ci_lo"], r["oracle_net_share_ci_hi"], 3), fmt(r["oracle_positive_sum_share"], 3)]
          for _, r in summary.iterrows()]
  lines += table(["config", "group", "nodes", "kept share", "kept mean", "gain", "net share", pct,
                  "positive-sum share"], body)
  lines += ["", "## Run", ""] + meta_lines(meta)          # the run's facts, its config and manifest (collapsed)
  return "\n".join(lines) + "\n"
