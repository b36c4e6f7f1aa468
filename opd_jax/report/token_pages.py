"""Per-token pages (issue 14, item 5; issue 27, item 9): `<workdir>/html/` with one static page per node rollout
(capped) and an index. Each page starts with the question, the gold answer, the rollout's extracted answer and
reward; then the response once, coloured by the option picked above it (one configuration's alignment at its nodes:
green helps, red hurts, dashed: undefined; or a view's predictor on every token; radio buttons and CSS, no
script); then a table of the nodes with each configuration's alignment and teacher advantage. Hovering a token
shows every configuration's values and the candidates with p, q and P_succ [95% Wilson].
Inputs are records tables only (nodes, tokens; rollouts for the question and answers, and response_ids where the
tokens table is missing)."""
import html
import os
import re

import numpy as np
import pandas as pd

from opd_jax import atomic
from opd_jax.report.rollout import colour as _colour
from opd_jax.report.rollout import selector_spans

DEFAULT_PAGES = 20
DEFAULT_COLOUR_BY = "kl_pq"
CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:1em auto;padding:0 1em;color:#222}
.tokens{font-family:monospace;white-space:pre-wrap;line-height:1.7;border:1px solid #ddd;padding:.4em;
margin:.2em 0 1em}table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:2px 6px;
text-align:right}th{background:#f3f3f3}td:first-child{text-align:left}.note{color:#555;font-size:13px}
.question{border-left:6px solid #57a;background:#f2f6fb;padding:.5em .8em;margin:.5em 0 1em}
.question p{white-space:pre-wrap;margin:.3em 0 .6em}.question dl{display:grid;grid-template-columns:max-content auto;
gap:.2em 1em;margin:0}.question dt{font-weight:bold}.question dd{margin:0;font-family:monospace}
.pick label{display:inline-block;border:1px solid #bbb;border-radius:3px;padding:1px 6px;margin:2px;
font-size:13px;cursor:pointer}.pick input{margin-left:.6em}td.tok{font-family:monospace;white-space:pre}"""
_PAGE_NAME = re.compile(r"^rollout-\d+\.html$")
_MARKERS = re.compile(r"<\|[^<>|]*\|>|<(?:start|end)_of_turn>|</?s>|\[/?INST\]")
ROLLOUT_COLUMNS = ["question_id", "question_index", "rollout_id", "prompt_ids", "text", "answer", "extracted",
                   "reward", "truncated"]


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


def question_text(prompt_ids, decode) -> str | None:
  """The user message of a chat-rendered prompt (rollouts.prompt_ids): the prompt decoded token by token, cut at
  the chat markers (<|...|>, <start_of_turn>, [INST], <s>), the segment after the role "user" (the last one; a
  system prompt is skipped), role name dropped. Without chat markers: the whole decoded prompt. None without
  `decode` or prompt ids."""
  if decode is None or prompt_ids is None or len(prompt_ids) == 0:
    return None
  segments = [s for s in _MARKERS.split("".join(decode(int(t)) for t in prompt_ids)) if s.strip()]
  user = None
  for i, s in enumerate(segments):
    role, _, rest = s.lstrip().partition("\n")
    if role.strip() == "user":
      user = rest.strip() or (segments[i + 1].strip() if i + 1 < len(segments) else "")
  return user if user else "\n".join(s.strip() for s in segments)


def first_words(text: str | None, n_words: int = 8, n_chars: int = 60) -> str:
  """The first `n_words` words of `text` (at most `n_chars` characters), with "..." when cut."""
  words = (text or "").split()
  short = " ".join(words[:n_words])
  if len(short) > n_chars:
    short = short[:n_chars].rsplit(" ", 1)[0] or short[:n_chars]
  return short + ("..." if short != " ".join(words) else "")


def rollout_info(rollouts: pd.DataFrame | None, decode=None) -> dict:
  """(question_id, rollout_id) -> {"number", "question", "answer", "extracted", "reward", "truncated", "text"}
  from the rollout records (the columns present; `number`: the question's index in the task pool, else its
  order among the questions). Empty without records."""
  if rollouts is None or not len(rollouts):
    return {}
  order = {q: i for i, q in enumerate(sorted(pd.unique(rollouts["question_id"])))}
  texts = {}
  out = {}
  for _, r in rollouts.iterrows():
    q = r["question_id"]
    if q not in texts:
      texts[q] = question_text(r.get("prompt_ids"), decode)
    number = r.get("question_index")
    out[(q, int(r["rollout_id"]))] = {
        "number": int(number) if number is not None and not pd.isna(number) else order[q], "question": texts[q],
        **{k: r.get(k) for k in ("answer", "extracted", "reward", "truncated", "text")}}
  return out


def link_label(info: dict, rollout_id: int, correct: bool) -> str:
  """A link text a person reads: question number, first words of the question, rollout number, outcome."""
  words = first_words(info.get("question"))
  return (f"question {info['number']}" + (f' "{words}"' if words else "")
          + f", rollout {rollout_id}, {'correct' if correct else 'incorrect'}")


def _doc(title: str, body: list[str], css: str = "") -> str:
  return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" + html.escape(title)
          + "</title><style>" + CSS + css + "</style></head>\n<body>\n" + "\n".join(body) + "\n</body></html>\n")


def _value(x) -> str:
  return "none" if x is None or (isinstance(x, float) and np.isnan(x)) else str(x)


def _question_block(info: dict, question_id: str) -> str:
  """The question, gold answer, extracted answer and reward (what a reader needs before the response)."""
  question = info.get("question")
  reward = info.get("reward")
  reward_text = _value(reward if reward is None or pd.isna(reward) else f"{float(reward):g}")
  if info.get("truncated") is True or info.get("truncated") is np.True_:
    reward_text += " (truncated: no stop token)"
  rows = [("gold answer", _value(info.get("answer"))), ("extracted answer", _value(info.get("extracted"))),
          ("reward", reward_text)]
  text = (html.escape(question) if question else
          '<span class="note">the question text needs the tokenizer (python -m opd_jax.report --tokenizer=...)'
          "</span>")
  dl = "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in rows)
  return (f'<div class="question"><b>Question</b><p>{text}</p><dl>{dl}</dl></div>'
          f'<p class="note">question {html.escape(str(info.get("number")))} = its index in the task\'s question '
          f"pool; question id {html.escape(str(question_id))}</p>")


def rollout_page(nodes: pd.DataFrame, toks: pd.DataFrame, *, question_id: str, rollout_id: int, correct: bool,
                 colour_by: str = DEFAULT_COLOUR_BY, decode=None, index_href: str = "index.html",
                 info: dict | None = None) -> str:
  """One node rollout's page. `toks`: this rollout's token rows (position, token, teacher, context, predictors;
  teacher / context NaN when taken from the rollouts table, then no predictor options); `info`: rollout_info's
  entry (question, answer, extracted, reward, text); without it the question block says what is missing."""
  info = {"number": question_id, **(info or {})}
  decode_or_id = decode or (lambda t: f"[{t}]")
  at_rollout = nodes[(nodes["question_id"] == question_id) & (nodes["rollout_id"] == rollout_id)]
  outcome = "correct" if correct else "incorrect"
  title = f"Question {info['number']}, rollout {rollout_id}: {outcome}"
  body = [f'<p><a href="{index_href}">index</a> | <a href="../report.html">report</a></p>',
          f"<h1>{html.escape(title)}</h1>", _question_block(info, question_id)]
  has_views = "teacher" in toks.columns and not toks["teacher"].isna().all()
  response = toks.drop_duplicates("position").sort_values("position")
  configs, labels = [], []
  for config_id, rows in at_rollout.groupby("config_id", sort=False):
    configs.append((str(config_id), rows.set_index("position")))
    labels.append((f"alignment: {config_id}", f"{rows['teacher'].iloc[0]}, {rows['context'].iloc[0]}, "
                                              f"{rows['divergence'].iloc[0]}"))
  views = []
  if has_views and colour_by in toks.columns:
    for (teacher, context), rows in toks.groupby(["teacher", "context"], sort=False):
      views.append((f"view ({teacher}, {context})", rows.drop_duplicates("position").set_index("position")))
      labels.append((f"{colour_by}: ({teacher}, {context})", f"{colour_by} of the view of teacher {teacher} in "
                                                               f"context {context}, on every token"))
  spans = selector_spans(response, configs, views, colour_by=colour_by, decode=decode)
  first = first_defined(configs, views, colour_by)
  picks = "".join(f'<input type="radio" name="colour" id="o{i}"{" checked" if i == first else ""}>'
                  f'<label for="o{i}" title="{html.escape(tip)}">{html.escape(name)}</label>'
                  for i, (name, tip) in enumerate(labels))
  css = "".join(f"#o{i}:checked~.tokens span{{background:var(--c{i},transparent);font-weight:var(--w{i},normal);"
                f"outline:var(--d{i},none)}}#o{i}:checked+label{{background:#333;color:#fff}}"
                for i in range(len(labels)))
  body.append(f"<h2>Response ({len(response)} tokens)</h2>"
              '<p class="note">Colour by (pick one): a configuration\'s alignment colours its nodes (bold): green = '
              "its update raises P(success), red = lowers it (cos(g*, g_c) in [-1, 1]), dashed = undefined; other "
              f"tokens are not nodes. {html.escape(colour_by)} colours every token of a (teacher, context) view "
              "(green = large, red = negative; scaled to the largest |value| of the view). Hover a token for every "
              "configuration's alignment, teacher advantage and V, the candidates with P_succ and 95% Wilson "
              "intervals, and the views' predictors.</p>"
              f'<div class="pick">{picks}<div class="tokens">{"".join(spans)}</div></div>')
  if not has_views and colour_by != "alignment":
    body.append(f'<p class="note">no {html.escape(colour_by)} column in the token records: predictor options '
                "skipped</p>")
  text = info.get("text")
  if isinstance(text, str) and text != "".join(decode_or_id(int(t)) for t in response["token"]):
    body.append('<details><summary>the response decoded in one piece (the tokens above read differently: no '
                f'tokenizer, or tokens that decode only together)</summary><div class="tokens">{html.escape(text)}'
                "</div></details>")
  body.append(_node_table(response, configs, decode_or_id))
  return _doc(title, body, css)


def first_defined(configs: list[tuple[str, pd.DataFrame]], views: list[tuple[str, pd.DataFrame]],
                  colour_by: str) -> int:
  """The option a page opens on: the first configuration with a defined (finite) alignment at a node of the
  rollout, else the first view with a finite `colour_by` value, else 0 (nothing is defined)."""
  for i, (_, rows) in enumerate(configs):
    if np.isfinite(rows["alignment"].to_numpy(np.float64)).any():
      return i
  for j, (_, rows) in enumerate(views):
    if colour_by in rows.columns and np.isfinite(rows[colour_by].to_numpy(np.float64)).any():
      return len(configs) + j
  return 0


def _node_table(response: pd.DataFrame, configs: list[tuple[str, pd.DataFrame]], decode) -> str:
  """Nodes x configurations: alignment (coloured) and teacher advantage, then the mean over the nodes."""
  positions = sorted({int(p) for _, at in configs for p in at.index})
  token = response.set_index("position")["token"]
  head = ("<tr><th rowspan=\"2\">position</th><th rowspan=\"2\">token</th>"
          + "".join(f'<th colspan="2">{html.escape(c)}</th>' for c, _ in configs) + "</tr><tr>"
          + '<th title="cos(g*, g_c): does the update raise P(success)">alignment</th>'
            '<th title="sum_k q_k P_succ(k) - V: teacher\'s expected success minus the student\'s">teacher adv</th>'
          * len(configs) + "</tr>")
  rows = []
  for p in positions:
    cells = [f"<td>{p}</td>", f'<td class="tok">{html.escape(decode(int(token[p]))) if p in token.index else ""}</td>']
    for _, at in configs:
      if p not in at.index:
        cells += ["<td></td>", "<td></td>"]
        continue
      a, adv = at.loc[p, "alignment"], at.loc[p, "teacher_advantage"]
      if pd.isna(a):
        cells.append(f'<td title="undefined: {html.escape(str(at.loc[p, "alignment_nan_reason"]))}">n/a</td>')
      else:
        cells.append(f'<td style="background:{_colour(a, 1.0)}">{a:+.3f}</td>')
      cells.append(f"<td>{_signed(adv)}</td>")
    rows.append("<tr>" + "".join(cells) + "</tr>")
  means = []
  for _, at in configs:
    a = at["alignment"].to_numpy(np.float64)
    means += [f"{np.nanmean(a):+.3f} ({int(np.isfinite(a).sum())}/{len(a)})" if np.isfinite(a).any()
              else f"n/a (0/{len(a)})", _signed(at["teacher_advantage"].mean())]
  rows.append("<tr><th>mean</th><th></th>" + "".join(f"<th>{m}</th>" for m in means) + "</tr>")
  return ("<h2>Nodes by configuration</h2><p class=\"note\">One row per node (a response position whose "
          "continuations were sampled); alignment and teacher advantage of each configuration there (n/a: undefined, "
          "hover for the reason); mean: over the nodes (defined / all).</p>"
          f"<table>{head}{''.join(rows)}</table>")


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
                rollouts: pd.DataFrame | None = None, out: dict | None = None) -> list[tuple[str, str]]:
  """Writes `<workdir>/html/index.html` and one page per selected node rollout (select_rollouts), removing pages
  of an earlier build that this one did not write, as one set (`atomic.write_files`).

  Args:
    workdir: the study directory.
    nodes: node records (common.check_nodes).
    tokens: rollout_tokens(...) rows for (at least) the selected rollouts.
    max_pages: the cap on rollout pages (0: no html/ pages, returns []).
    colour_by: the predictor of the view options ("alignment" alone: none).
    decode: token id -> text; default `[id]` (and no question text).
    rollouts: rollout records (ROLLOUT_COLUMNS, those present) of the selected rollouts: the question, gold and
      extracted answers, reward and response text of each page, and the link labels.
    out: path -> bytes (None: remove) of a larger set of files that the caller writes as one (the report's);
      None: written here.
  Returns:
    (link relative to the workdir, label) of the index and each page; labels name the question by number and
    first words (link_label), never by question id.
  """
  chosen = select_rollouts(nodes, max_pages)
  directory = os.path.join(workdir, "html")
  files = {} if out is None else out
  if os.path.isdir(directory):
    for name in os.listdir(directory):
      if _PAGE_NAME.match(name) and name >= page_name(len(chosen)):
        files[os.path.join(directory, name)] = None
  if not len(chosen):
    if out is None:
      atomic.write_files(files)
    return []
  by_rollout = dict(tuple(tokens.groupby(["question_id", "rollout_id"], sort=False)))
  infos = rollout_info(rollouts, decode)
  order = {q: i for i, q in enumerate(sorted(pd.unique(nodes["question_id"])))}
  configs = list(pd.unique(nodes["config_id"]))
  rows, links = [], [("html/index.html", f"index of {len(chosen)} node rollouts")]
  for i, r in chosen.iterrows():
    key = (r["question_id"], int(r["rollout_id"]))
    toks = by_rollout.get((r["question_id"], r["rollout_id"]))
    if toks is None:
      raise ValueError(f"no token records for question_id={r['question_id']!r} rollout_id={r['rollout_id']}; the "
                       "records are incomplete: rerun the study for that question")
    info = infos.get(key) or {"number": order[r["question_id"]]}
    files[os.path.join(directory, page_name(i))] = rollout_page(
        nodes, toks, question_id=r["question_id"], rollout_id=key[1], correct=bool(r["correct"]),
        colour_by=colour_by, decode=decode, info=info)
    at = nodes[(nodes["question_id"] == r["question_id"]) & (nodes["rollout_id"] == r["rollout_id"])]
    means = at.groupby("config_id", sort=False)["alignment"].mean()
    label = link_label(info, key[1], bool(r["correct"]))
    answers = f"{_value(info.get('extracted'))} (gold {_value(info.get('answer'))})" if "answer" in info else ""
    rows.append([f'<a href="{page_name(i)}" title="question id {html.escape(str(r["question_id"]))}">'
                 f"{html.escape(label)}</a>", html.escape(answers), str(at["position"].nunique())]
                + [_signed(means.get(c, np.nan)) for c in configs])
    links.append((f"html/{page_name(i)}", label))
  head = "".join(f"<th>{html.escape(h)}</th>" for h in ["rollout", "answer given", "nodes"]
                 + [f"mean align {c}" for c in configs])
  table = f"<table><tr>{head}</tr>" + "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>"
                                               for row in rows) + "</table>"
  n_all = nodes[["question_id", "rollout_id"]].drop_duplicates().shape[0]
  files[os.path.join(directory, "index.html")] = _doc("per-token pages", [
      '<p><a href="../report.html">report</a></p>', "<h1>Per-token pages</h1>",
      f'<p class="note">{len(chosen)} of {n_all} node rollouts (incorrect first; cap max_pages={max_pages}); '
      "each page shows the question, the answers, the response coloured by a configuration's alignment or by "
      f"{html.escape(colour_by)}, and the nodes. mean align: mean alignment over the rollout's nodes.</p>", table])
  if out is None:
    atomic.write_files(files)
  return links


def _signed(x) -> str:
  return "n/a" if pd.isna(x) else f"{x:+.3f}"
