"""Per-token pages (issue 14, item 5): `<workdir>/html/` with one static page per node rollout (capped) and an
index. Each page shows the response once per configuration coloured by alignment (green helps, red hurts,
dashed: undefined) and once per (teacher, context) view coloured by a predictor; hovering a token shows its
predictors and, at nodes, alignment, teacher advantage, V and the candidates with p, q and P_succ [95% Wilson].
Inputs are records tables only (nodes, tokens; rollouts' response_ids where the tokens table is missing)."""
import html
import os
import re

import numpy as np
import pandas as pd

from opd_jax import records
from opd_jax.report.rollout import token_spans

DEFAULT_PAGES = 20
DEFAULT_COLOUR_BY = "kl_pq"
CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:1em auto;padding:0 1em;color:#222}
.tokens{font-family:monospace;white-space:pre-wrap;line-height:1.7;border:1px solid #ddd;padding:.4em;
margin:.2em 0 1em}table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:2px 6px;
text-align:right}th{background:#f3f3f3}td:first-child{text-align:left}.note{color:#555;font-size:13px}"""
_PAGE_NAME = re.compile(r"^rollout-\d+\.html$")


def page_name(i: int) -> str:
  return f"rollout-{i:04d}.html"


def select_rollouts(nodes: pd.DataFrame, max_pages: int) -> pd.DataFrame:
  """The node rollouts given pages: (question_id, rollout_id, correct), incorrect first (where OPD is meant to
  help), then by question_id and rollout_id; the first `max_pages` (>= 0)."""
  if max_pages < 0:
    raise ValueError(f"max_pages must be >= 0, got {max_pages}")
  keys = nodes[["question_id", "rollout_id", "correct"]].drop_duplicates(["question_id", "rollout_id"])
  keys = keys.assign(correct=keys["correct"].astype(bool)).sort_values(["correct", "question_id", "rollout_id"])
  return keys.head(max_pages).reset_index(drop=True)


def _doc(title: str, body: list[str]) -> str:
  return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" + html.escape(title)
          + "</title><style>" + CSS + "</style></head>\n<body>\n" + "\n".join(body) + "\n</body></html>\n")


def rollout_page(nodes: pd.DataFrame, toks: pd.DataFrame, *, question_id: str, rollout_id: int, correct: bool,
                 colour_by: str = DEFAULT_COLOUR_BY, decode=None, index_href: str = "index.html",
                 text: str | None = None) -> str:
  """One node rollout's page. `toks`: this rollout's token rows (position, token, teacher, context, predictors;
  teacher / context NaN when taken from the rollouts table, then no predictor rows are drawn); `text`: the
  rollout's decoded response (rollouts.text), shown above the token rows."""
  at_rollout = nodes[(nodes["question_id"] == question_id) & (nodes["rollout_id"] == rollout_id)]
  title = f"question {question_id}, rollout {rollout_id} ({'correct' if correct else 'incorrect'})"
  body = [f'<p><a href="{index_href}">index</a> | <a href="../report.html">report</a></p>',
          f"<h1>{html.escape(title)}</h1>",
          '<p class="note">Rows coloured by alignment: node tokens in bold, green = the configuration\'s update '
          "raises P(success), red = lowers it (cos(g*, g_c) in [-1, 1]), dashed = undefined (hover for the "
          "reason); other tokens are not nodes. Hover a token for its predictors, V, teacher advantage and the "
          "candidates with P_succ and 95% Wilson intervals.</p>"]
  if text is not None:
    body.append(f'<h3>response text</h3><div class="tokens">{html.escape(text)}</div>')
  views = toks[["teacher", "context"]].drop_duplicates() if "teacher" in toks.columns else pd.DataFrame()

  def view_tokens(teacher, context):
    if views.empty or toks["teacher"].isna().all():
      return toks.drop_duplicates("position").sort_values("position")
    return toks[(toks["teacher"] == teacher) & (toks["context"] == context)].sort_values("position")

  for config_id, rows in at_rollout.groupby("config_id", sort=False):
    teacher, context = rows["teacher"].iloc[0], rows["context"].iloc[0]
    mine = view_tokens(teacher, context)
    a = rows["alignment"].to_numpy(np.float64)
    mean = f"{np.nanmean(a):+.3f}" if np.isfinite(a).any() else "n/a"
    body.append(f"<h3>{html.escape(str(config_id))} ({html.escape(str(teacher))}, {html.escape(str(context))}, "
                f"{html.escape(str(rows['divergence'].iloc[0]))}): mean alignment {mean} over "
                f"{int(np.isfinite(a).sum())} of {len(rows)} nodes</h3>")
    spans = token_spans(mine, rows.set_index("position"), colour_by="alignment", decode=decode)
    body.append('<div class="tokens">' + "".join(spans) + "</div>")
  if colour_by in toks.columns and not views.empty and not toks["teacher"].isna().all():
    for _, view in views.iterrows():
      mine = view_tokens(view["teacher"], view["context"])
      body.append(f"<h3>{html.escape(colour_by)} of view ({html.escape(str(view['teacher']))}, "
                  f"{html.escape(str(view['context']))}) (green = large, red = negative; scaled to the largest "
                  "|value| of the row)</h3>")
      empty = pd.DataFrame(columns=["alignment"]).set_index(pd.Index([], name="position"))
      spans = token_spans(mine, empty, colour_by=colour_by, decode=decode)
      body.append('<div class="tokens">' + "".join(spans) + "</div>")
  elif colour_by != "alignment":
    body.append(f'<p class="note">no {html.escape(colour_by)} column in the token records: predictor rows '
                "skipped</p>")
  return _doc(title, body)


def rollout_tokens(tokens: pd.DataFrame | None, rollouts: pd.DataFrame | None) -> pd.DataFrame:
  """Token rows (question_id, rollout_id, position, token, teacher, context, predictors) from the tokens table,
  or, where it is missing, from the rollouts' response_ids (teacher / context NaN, no predictors).

  Raises:
    ValueError: neither table is given (the message names both).
  """
  if tokens is not None and len(tokens):
    return tokens
  if rollouts is None or "response_ids" not in rollouts.columns:
    raise ValueError("per-token pages need records/tokens or records/rollouts with response_ids; run the study "
                     "with its default records, or write_summary(pages=0) to skip the pages")
  rows = rollouts[["question_id", "rollout_id", "response_ids"]].explode("response_ids").dropna()
  rows = rows.rename(columns={"response_ids": "token"})
  rows["position"] = rows.groupby(["question_id", "rollout_id"]).cumcount()
  return rows.assign(teacher=np.nan, context=np.nan, token=rows["token"].astype(np.int64))


def write_pages(workdir: str, nodes: pd.DataFrame, tokens: pd.DataFrame, *, max_pages: int = DEFAULT_PAGES,
                colour_by: str = DEFAULT_COLOUR_BY, decode=None,
                texts: dict | None = None) -> list[tuple[str, str]]:
  """Writes `<workdir>/html/index.html` and one page per selected node rollout (select_rollouts), removing pages
  of an earlier build that this one did not write.

  Args:
    workdir: the study directory.
    nodes: node records (common.check_nodes).
    tokens: rollout_tokens(...) rows for (at least) the selected rollouts.
    max_pages: the cap on rollout pages (0: no html/ pages, returns []).
    colour_by: the predictor of the predictor rows ("alignment" alone: none).
    decode: token id -> text; default `[id]`.
    texts: (question_id, rollout_id) -> decoded response (rollouts.text), shown on each page when given.
  Returns:
    (link relative to the workdir, label) of the index and each page.
  """
  chosen = select_rollouts(nodes, max_pages)
  directory = os.path.join(workdir, "html")
  if os.path.isdir(directory):
    for name in os.listdir(directory):
      if _PAGE_NAME.match(name) and name >= page_name(len(chosen)):
        os.remove(os.path.join(directory, name))
  if not len(chosen):
    return []
  os.makedirs(directory, exist_ok=True)
  by_rollout = dict(tuple(tokens.groupby(["question_id", "rollout_id"], sort=False)))
  configs = list(pd.unique(nodes["config_id"]))
  rows, links = [], [("html/index.html", f"index of {len(chosen)} node rollouts")]
  for i, r in chosen.iterrows():
    toks = by_rollout.get((r["question_id"], r["rollout_id"]))
    if toks is None:
      raise ValueError(f"no token records for question_id={r['question_id']!r} rollout_id={r['rollout_id']}; the "
                       "records are incomplete: rerun the study for that question")
    records.atomic_write_bytes(os.path.join(directory, page_name(i)), rollout_page(
        nodes, toks, question_id=r["question_id"], rollout_id=int(r["rollout_id"]), correct=bool(r["correct"]),
        colour_by=colour_by, decode=decode, text=(texts or {}).get((r["question_id"], r["rollout_id"]))))
    at = nodes[(nodes["question_id"] == r["question_id"]) & (nodes["rollout_id"] == r["rollout_id"])]
    means = at.groupby("config_id", sort=False)["alignment"].mean()
    rows.append([f'<a href="{page_name(i)}">{html.escape(str(r["question_id"]))}</a>', str(r["rollout_id"]),
                 "correct" if r["correct"] else "incorrect", str(at["position"].nunique())]
                + [_signed(means.get(c, np.nan)) for c in configs])
    links.append((f"html/{page_name(i)}", f"{r['question_id']} rollout {r['rollout_id']}"))
  head = "".join(f"<th>{html.escape(h)}</th>" for h in ["question", "rollout", "rollout was", "nodes"]
                 + [f"mean align {c}" for c in configs])
  table = f"<table><tr>{head}</tr>" + "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>"
                                               for row in rows) + "</table>"
  n_all = nodes[["question_id", "rollout_id"]].drop_duplicates().shape[0]
  records.atomic_write_bytes(os.path.join(directory, "index.html"), _doc("per-token pages", [
      '<p><a href="../report.html">report</a></p>', "<h1>Per-token pages</h1>",
      f'<p class="note">{len(chosen)} of {n_all} node rollouts (incorrect first; cap max_pages={max_pages}); '
      f"predictor rows coloured by {html.escape(colour_by)}.</p>", table]))
  return links


def _signed(x) -> str:
  return "n/a" if pd.isna(x) else f"{x:+.3f}"
