"""report.html: one self-contained page (figures inline as base64 PNG, no scripts, no external resources)
with the verdict first, then the rankings, where figures, predictors, oracle, and the run's metadata."""
import base64
import html

import pandas as pd

from opd_jax.report import decision
from opd_jax.report import router as rt
from opd_jax.report.common import ci
from opd_jax.report.common import fmt

CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:1em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0;font-size:13px}td,th{border:1px solid #ccc;padding:2px 6px;
text-align:right}th{background:#f3f3f3}td:first-child{text-align:left}.verdict{font-size:18px;padding:.6em;
border-left:6px solid #2a7;background:#eef9f1}.verdict.weak{border-color:#d90;background:#fff7e6}
.note{color:#555;font-size:13px}img{max-width:100%}details{margin:.5em 0}"""


def table_html(header: list[str], rows: list[list[str]]) -> str:
  """An HTML table; every cell escaped."""
  head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
  body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
  return f"<table><tr>{head}</tr>{body}</table>"


_table = table_html


def document(title: str, parts: list[str]) -> str:
  """A standalone page (CSS inline, no scripts) of the HTML fragments `parts`."""
  return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" + html.escape(title)
          + "</title><style>" + CSS + "</style></head>\n<body>\n" + "\n".join(parts) + "\n</body></html>\n")


def _img(png: bytes, alt: str) -> str:
  return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def render_html(*, title: str, verdict: dict, summary: pd.DataFrame, figures: dict[str, bytes],
                where: pd.DataFrame | None, predictors: pd.DataFrame | None, meta: dict, notes: list[str],
                router: dict | None = None, pages: list[tuple[str, str]] | None = None) -> str:
  """The page as a string. `figures`: name -> PNG bytes ("alignment", "where_<split>", "predictors");
  `router`: router.route's result (a section after the predictors); `pages`: (relative link, label) of the
  per-token pages (tokens_pages.write_pages; the first is the index)."""
  parts = [f"<h1>{html.escape(title)}</h1>"]
  weak = "" if verdict.get("verdict") == "use" else " weak"
  parts.append(f'<h2>Verdict</h2><p class="verdict{weak}">{html.escape(verdict["line"])}</p>')
  note = html.escape(decision.table_note(verdict))
  parts.append(f'<h2>Ranking: configurations against the best</h2><p class="note">{note}</p>'
               + _table(decision.TABLE_HEADER, decision.table_rows(verdict)))
  power = decision.power_text(verdict.get("power"))
  if power:
    parts.append(f'<p class="note">{html.escape(power)}</p>')
  if "alignment" in figures:
    parts.append("<h2>Alignment by configuration and group</h2>" + _img(figures["alignment"], "alignment"))
  rows = []
  for _, r in summary.iterrows():
    rows.append([r["config_id"], r["group"], r["n_nodes"], r["n_defined"], r["n_defined_questions"],
                 fmt(r["mean_alignment"]), ci(r["alignment_ci_lo"], r["alignment_ci_hi"])
                 + (" indicative" if r["underpowered"] else ""), fmt(r["mean_teacher_advantage"]),
                 fmt(r.get("mean_ceiling"), 3), fmt(r.get("mean_split_half_ceiling"), 3)])
  parts.append(_table(["config", "group", "nodes", "defined", "questions (defined)", "mean alignment", "CI",
                       "teacher advantage", "ceiling", "split-half"], rows))
  parts.append("<h2>Where it helps and hurts</h2>")
  for name, png in figures.items():
    if name.startswith("where_"):
      parts.append(f"<h3>{html.escape(name[len('where_'):])}</h3>" + _img(png, name))
  parts += [f'<p class="note">{html.escape(n)}</p>' for n in notes]
  if predictors is not None and len(predictors):
    parts.append("<h2>Predictors (why)</h2>")
    if "predictors" in figures:
      parts.append(_img(figures["predictors"], "predictor AUROC"))
    parts.append(_table(["config", "predictor", "nodes", "Spearman", "CI", "AUROC", "CI", "filter mean",
                         "filter capture"],
                        [[r["config_id"], r["predictor"], r["n"], fmt(r["spearman"], 3),
                          ci(r["spearman_lo"], r["spearman_hi"], 3), fmt(r["auroc"], 3),
                          ci(r["auroc_lo"], r["auroc_hi"], 3), fmt(r.get("filter_mean"), 3),
                          fmt(r.get("filter_capture"), 3)] for _, r in predictors.iterrows()]))
  if router is not None:
    parts.append("<h2>Router (cross-validated by question)</h2>")
    weak = "" if router.get("rows") and not router.get("underpowered") else " weak"
    parts.append(f'<p class="verdict{weak}">{html.escape(router["line"])}</p>')
    if router.get("rows"):
      parts.append(f'<p class="note">{html.escape(rt.note(router))}</p>'
                   + _table(rt.ROUTER_HEADER, rt.table_rows(router)))
  if pages:
    links = "".join(f'<li><a href="{html.escape(href)}">{html.escape(label)}</a></li>' for href, label in pages)
    parts.append(f"<h2>Per-token pages</h2><ul>{links}</ul>")
  parts.append("<h2>Oracle filter</h2>" + _table(
      ["config", "group", "kept share", "kept mean", "gain", "net share", "CI", "positive-sum share"],
      [[r["config_id"], r["group"], fmt(r["oracle_kept_share"], 3), fmt(r["oracle_kept_mean"], 3),
        fmt(r["oracle_gain"], 3), fmt(r["oracle_net_share"], 3),
        ci(r["oracle_net_share_ci_lo"], r["oracle_net_share_ci_hi"], 3), fmt(r["oracle_positive_sum_share"], 3)]
       for _, r in summary.iterrows()]))
  parts.append('<p class="note">The paper\'s "10-15x more effective signal" is mean(a | a &gt; 0) / |mean(a)| = '
               "positive-sum share / (kept share x |net share|); it divides by a mean near 0, so the page shows the "
               "net share with its interval instead.</p>")
  meta_rows = []
  for key, value in meta.items():
    if isinstance(value, dict):
      meta_rows += [[f"{key}: {k}", v] for k, v in value.items()]
    else:
      meta_rows.append([key, value])
  parts.append("<h2>Run</h2><details><summary>metadata</summary>" + _table(["key", "value"], meta_rows)
               + "</details>")
  return document(title, parts)
