"""report.html: one self-contained page (figures inline as base64 PNG, no scripts, no external resources)
with the verdict first, then the rankings, where figures, predictors, oracle, and the run's metadata."""
import base64
import html

import pandas as pd

from opd_jax.estimators import predictors
from opd_jax.report import proxies as proxy_lib
from opd_jax.report import router as rt
from opd_jax.report import verdict_text
from opd_jax.report.common import ci
from opd_jax.report.common import fmt

CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:1em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0;font-size:13px}td,th{border:1px solid #ccc;padding:2px 6px;
text-align:right}th{background:#f3f3f3}td:first-child{text-align:left}.verdict{font-size:18px;padding:.6em;
border-left:6px solid #2a7;background:#eef9f1}.verdict.weak{border-color:#d90;background:#fff7e6}
.note{color:#555;font-size:13px}img{max-width:100%}details{margin:.5em 0}th[title]{cursor:help}
dl.glossary{display:grid;grid-template-columns:max-content auto;gap:.15em 1em;font-size:13px}dl.glossary dt{
font-weight:bold}dl.glossary dd{margin:0}table.verdicts td{text-align:left;vertical-align:top}
table.verdicts td:nth-child(3){min-width:12em;max-width:18em;overflow-wrap:anywhere}
table.verdicts th{text-align:left}table.verdicts td:nth-child(4){white-space:nowrap}
table.verdicts td:nth-child(5){min-width:28em}ul.details{font-size:14px}
ul.validation{font-size:14px;border-left:6px solid #d90;padding:.3em .3em .3em 2em;background:#fff7e6}"""


# One line per column / metric name of report.html (th tooltips and the visible glossary); per-table meanings
# that differ are passed as `titles` overrides (TABLE_TITLES). The predictors' lines come from their registry
# (`glossary`), so a fork's predictor has one with no edit here.
_COLUMNS = {
    "config": "a configuration: (teacher, context, divergence), named in config.configurations",
    "group": "nodes of rollouts graded correct (reward 1), incorrect, or all of them",
    "nodes": "nodes: response positions whose candidate continuations were sampled (here: with a defined alignment)",
    "questions": "questions with at least one defined alignment",
    "alignment": "cos(g*, g_c): +1 = the configuration's update points where P(success) rises fastest, 0 = "
                 "unrelated, -1 = the opposite; g* = ideal gradient, g_c = the configuration's distillation gradient",
    "mean align": "mean alignment cos(g*, g_c) over the nodes with a defined alignment",
    "mean alignment": "mean alignment cos(g*, g_c) over the nodes with a defined alignment",
    "teacher adv": "teacher advantage, sum_k q_k P_succ(k) - V: how much more often the continuation succeeds when "
                   "the next token is drawn from the teacher instead of the student (V = sum_k p_k P_succ(k))",
    "teacher advantage": "sum_k q_k P_succ(k) - V: how much more often the continuation succeeds when the next token "
                         "is drawn from the teacher instead of the student (V = sum_k p_k P_succ(k))",
    "shared nodes": "nodes where both this configuration and the best have a defined alignment (the paired sample)",
    "shared questions": "questions holding the shared nodes",
    "diff vs best": "mean of (this configuration's alignment - the best's) over the shared nodes",
    "CI": "the interval of the number to its left (see the note above the table for its level and method)",
    "p (adjusted)": "p-value of diff vs best = 0, Bonferroni-adjusted over the comparable pairs",
    "vs best": "distinguishable (interval excludes 0), not distinguishable, or not comparable (too few shared "
               "questions: not tested)",
    "could be best": "yes when no comparable configuration is distinguishably better (a confidence set for the best)",
    "power rule": "indicative: fewer defined alignments or questions than the power rule asks; intervals are rough",
    "defined": "nodes with a defined alignment (undefined: P_succ constant over the candidates, a zero "
               "distillation gradient, or no context for this rollout)",
    "questions (defined)": "questions with at least one defined alignment",
    "ceiling": "mean direct noise ceiling E cos(g*_R, g*): about the highest mean alignment even a perfect "
               "configuration could show with this many continuations",
    "split-half": "mean split-half cosine cos(g*_A, g*_B) of two halves of the continuations: the reliability of "
                  "an estimate from half of them",
    "view": "the teacher and context a configuration's q reads (teacher:context); its divergence is not part of it",
    "tokens": "scored tokens of the view with a defined value (the proxies' sample)",
    "minus_kl_qp": "-KL(q||p) per token, the view's mean over the scored rollouts [95% interval over questions]",
    "minus_kl_pq": "-KL(p||q) per token, the view's mean over the scored rollouts [95% interval over questions]",
    "minus_js": "-JS(p, q) (beta 0.5) per token, the view's mean over the scored rollouts [95% interval over "
                "questions]",
    "predictor": "a per-token divergence between student p and teacher q (kl_pq = KL(p||q), entropy_p = H(p), "
                 "logq_minus_logp = log q(y) - log p(y), ...), cheap to compute without continuations",
    "Spearman": "rank correlation of the predictor with alignment over the nodes",
    "AUROC": "chance that a node with alignment > 0 has a larger predictor value than one with alignment <= 0 "
             "(0.5 = no signal, 1 or 0 = perfect)",
    "filter mean": "mean alignment of the nodes this predictor ranks highest, keeping as many nodes as the oracle "
                   "filter keeps (the share with alignment > 0)",
    "filter capture": "(filter mean - mean of all nodes) / (oracle's kept mean - mean of all nodes): the share of "
                      "the oracle filter's gain the predictor recovers; 1 = as good as the oracle, 0 = no better "
                      "than keeping every node",
    "policy": "how each node's configuration is chosen: the best single one, the router, or the oracle "
              "(per-node best, an upper bound)",
    "share routed": "share of the nodes the router sends to this configuration",
    "kept share": "oracle filter: share of the nodes with alignment > 0 (the ones it keeps)",
    "kept mean": "oracle filter: mean alignment of the kept nodes, mean(a | a > 0)",
    "gain": "kept mean - mean alignment of all nodes: what dropping the hurting nodes adds",
    "net share": "sum(a) / sum(|a|): the share of the alignment that survives cancellation between helping and "
                 "hurting nodes (1 = all help, 0 = they cancel, -1 = all hurt)",
    "positive-sum share": "sum(a | a > 0) / sum(|a|): the helping nodes' share of the alignment magnitude",
}
_RUN = {"key": "a setting or count of the run (config.json, manifest.json, the records)", "value": "its value"}


def glossary() -> dict[str, str]:
  """Every column / metric name of report.html -> its one line: the hand-kept column names, one line per
  registered predictor (`predictors.REGISTRY`, "predictor: " + its `about`, in registry order), the run table's."""
  return {**_COLUMNS, **{name: f"predictor: {p.about}" for name, p in predictors.REGISTRY.items()}, **_RUN}


GLOSSARY = glossary()
TABLE_TITLES = {
    "summary": {"nodes": "all nodes of the configuration and group (defined or not)",
                "CI": "95% cluster-bootstrap interval of the mean alignment over questions"},
    "ranking": {"CI": "simultaneous interval of diff vs best (CR2 by question, Bonferroni over the pairs)"},
    "predictors": {"nodes": "nodes with a defined alignment (all groups)",
                   "CI": "cluster-bootstrap interval of the number to its left, over questions"},
    "router": {"nodes": "nodes where the policy's configuration has a defined alignment",
               "CI": "cluster-bootstrap interval of the mean alignment over questions"},
    "oracle": {"CI": "cluster-bootstrap interval of the net share over questions"},
    "proxies": {"topk_overlap": "top-k overlap of p and q per token, the view's mean over the scored rollouts [95% "
                                "interval over questions]",
                "tokens": "scored tokens of the view with a finite value (the largest count over its proxies)"},
}


def table_html(header: list[str], rows: list[list[str]], *, cls: str = "", titles: dict | None = None) -> str:
  """An HTML table; every cell escaped. `cls`: the table's class (CSS); `titles`: header -> tooltip (th title),
  `glossary()` by default where it names the header."""
  titles = {**glossary(), **(titles or {})}
  head = "".join(f'<th title="{html.escape(titles[h])}">{html.escape(h)}</th>' if h in titles
                 else f"<th>{html.escape(h)}</th>" for h in header)
  body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
  attr = f' class="{html.escape(cls)}"' if cls else ""
  return f"<table{attr}><tr>{head}</tr>{body}</table>"


def glossary_html() -> str:
  """The visible glossary: every column name of the page with its one-line meaning."""
  items = "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in glossary().items())
  return ('<h2 id="glossary">Glossary</h2><p class="note">Every column of the tables above (hover a column name '
          f"for the same line).</p><dl class=\"glossary\">{items}</dl>")


_table = table_html


def document(title: str, parts: list[str]) -> str:
  """A standalone page (CSS inline, no scripts) of the HTML fragments `parts`."""
  return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" + html.escape(title)
          + "</title><style>" + CSS + "</style></head>\n<body>\n" + "\n".join(parts) + "\n</body></html>\n")


def _img(png: bytes, alt: str) -> str:
  return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def render_html(*, title: str, verdict: dict, summary: pd.DataFrame, figures: dict[str, bytes],
                where: pd.DataFrame | None, predictors: pd.DataFrame | None, meta: dict, notes: list[str],
                router: dict | None = None, pages: list[tuple[str, str]] | None = None,
                proxies: pd.DataFrame | None = None) -> str:
  """The page as a string. `figures`: name -> PNG bytes ("alignment", "where_<split>", "predictors");
  `router`: router.route's result (a section after the predictors); `pages`: (relative link, label) of the
  per-token pages (tokens_pages.write_pages; the first is the index); `proxies`: proxies.proxy_table (a section
  before the router)."""
  parts = [f"<h1>{html.escape(title)}</h1>", '<p class="note">Hover a column name for its meaning; all of them '
           'are in the <a href="#glossary">glossary</a> at the end.</p>']
  weak = "" if verdict.get("verdict") == "use" else " weak"
  parts.append(f'<h2>Verdict</h2><p class="verdict{weak}">{html.escape(verdict["line"])}</p>')
  for cls, items in (("details", verdict.get("details")), ("validation", verdict.get("validation"))):
    if items:
      parts.append(f'<ul class="{cls}">' + "".join(f"<li>{html.escape(i)}</li>" for i in items) + "</ul>")
  step = verdict_text.next_step(verdict)             # what would decide it: the console's line after the verdict
  if step:
    parts.append(f'<p class="note">{html.escape(step)}</p>')
  note = html.escape(verdict_text.table_note(verdict))
  parts.append(f'<h2>Ranking: configurations against the best</h2><p class="note">{note}</p>'
               + _table(verdict_text.TABLE_HEADER, verdict_text.table_rows(verdict), titles=TABLE_TITLES["ranking"]))
  power = verdict_text.power_text(verdict.get("power"))
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
                       "teacher advantage", "ceiling", "split-half"], rows, titles=TABLE_TITLES["summary"]))
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
                          fmt(r.get("filter_capture"), 3)] for _, r in predictors.iterrows()],
                        titles=TABLE_TITLES["predictors"]))
    parts.append('<p class="note">filter mean: keep only the nodes this predictor ranks highest (as many as have '
                 "alignment &gt; 0, the oracle's share) and average their alignment. filter capture = (filter mean - "
                 "mean of all nodes) / (oracle kept mean - mean of all nodes): 1 = the predictor filters as well as "
                 "the oracle that sees the alignments, 0 = no better than keeping every node. See the "
                 '<a href="#glossary">glossary</a>.</p>')
  if proxies is not None and len(proxies):
    parts.append("<h2>Cheap proxies per configuration (no targeted rollouts)</h2>"
                 f'<p class="note">{html.escape(proxy_lib.NOTE)} Intervals: cluster bootstrap over questions.</p>'
                 + _table(*proxy_lib.wide(proxies), titles=TABLE_TITLES["proxies"]))
  if router is not None:
    parts.append("<h2>Router (cross-validated by question)</h2>")
    weak = "" if router.get("rows") and not router.get("underpowered") else " weak"
    parts.append(f'<p class="verdict{weak}">{html.escape(router["line"])}</p>')
    if router.get("rows"):
      parts.append(f'<p class="note">{html.escape(rt.note(router))}</p>'
                   + _table(rt.ROUTER_HEADER, rt.table_rows(router), titles=TABLE_TITLES["router"]))
  if pages:
    links = "".join(f'<li><a href="{html.escape(href)}">{html.escape(label)}</a></li>' for href, label in pages)
    parts.append(f"<h2>Per-token pages</h2><ul>{links}</ul>")
  parts.append("<h2>Oracle filter</h2>" + _table(
      ["config", "group", "kept share", "kept mean", "gain", "net share", "CI", "positive-sum share"],
      [[r["config_id"], r["group"], fmt(r["oracle_kept_share"], 3), fmt(r["oracle_kept_mean"], 3),
        fmt(r["oracle_gain"], 3), fmt(r["oracle_net_share"], 3),
        ci(r["oracle_net_share_ci_lo"], r["oracle_net_share_ci_hi"], 3), fmt(r["oracle_positive_sum_share"], 3)]
       for _, r in summary.iterrows()], titles=TABLE_TITLES["oracle"]))
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
  parts.append(glossary_html())
  return document(title, parts)
