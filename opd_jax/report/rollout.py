"""Per-token view of one rollout: each response token coloured by alignment or by a predictor (HTML)."""
import html

import numpy as np
import pandas as pd

from opd_jax.records import PREDICTORS


def colour(value: float, scale: float) -> str:
  """Red (< 0) to white to green (> 0) as an rgb() string; value / scale clipped to [-1, 1]."""
  t = float(np.clip(value / scale, -1.0, 1.0)) if scale > 0 else 0.0
  fade = int(round(255 * (1 - abs(t))))
  return f"rgb(255,{fade},{fade})" if t < 0 else f"rgb({fade},255,{fade})"


def rollout_html(nodes: pd.DataFrame, tokens: pd.DataFrame, *, question_id: str, rollout_id: int,
                 config_id: str, colour_by: str = "alignment", decode=None) -> str:
  """One rollout as HTML, each response token coloured by alignment (nodes) or by a predictor (every token).

  paper.md, "Where opd_jax goes further": per-token view of where a configuration helps (green) or hurts (red).
  Colour by "alignment": selected nodes are coloured by align in [-1, 1]; nodes with an undefined alignment
  get a dashed grey box; other tokens stay white. Colour by a predictor column of the tokens table (e.g.
  "kl_pq", "logq_minus_logp"): every token, scaled by the largest |finite value| of the rollout. Hovering a
  token shows its position, the predictors and, at nodes, alignment, V and teacher advantage.

  Args:
    nodes: node records (all questions are fine; this rollout and config_id are selected).
    tokens: token records holding this rollout's positions for the configuration's (teacher, context).
    question_id, rollout_id, config_id: which rollout and configuration.
    colour_by: "alignment" or a predictor column name of `tokens`.
    decode: token id -> text (e.g. `lambda t: tokenizer.decode([t])`); default shows the ids as `[id]`.
  Returns:
    A standalone HTML document.
  Raises:
    ValueError: unknown config_id, no tokens for the rollout, or an unknown colour_by column.
  """
  config_rows = nodes[nodes["config_id"] == config_id]
  if config_rows.empty:
    raise ValueError(f"config_id {config_id!r} not in nodes; known: {sorted(pd.unique(nodes['config_id']))}")
  teacher, context = config_rows["teacher"].iloc[0], config_rows["context"].iloc[0]
  toks = tokens[(tokens["question_id"] == question_id) & (tokens["rollout_id"] == rollout_id)
                & (tokens["teacher"] == teacher) & (tokens["context"] == context)].sort_values("position")
  if toks.empty:
    raise ValueError(f"no tokens for question_id={question_id!r} rollout_id={rollout_id} teacher={teacher!r} "
                     f"context={context!r}; pick a rollout that the study scored")
  if colour_by != "alignment" and colour_by not in toks.columns:
    raise ValueError(f"colour_by={colour_by!r} is neither 'alignment' nor a tokens column "
                     f"({[c for c in PREDICTORS if c in toks.columns]})")
  at = config_rows[(config_rows["question_id"] == question_id) & (config_rows["rollout_id"] == rollout_id)]
  spans = token_spans(toks, at.set_index("position"), colour_by=colour_by, decode=decode)
  title = html.escape(f"{config_id}: question {question_id}, rollout {rollout_id}, coloured by {colour_by}")
  return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" + title + "</title></head>\n"
          "<body style=\"font-family:monospace;white-space:pre-wrap\">\n<h3>" + title + "</h3>\n"
          + "".join(spans) + "\n</body></html>\n")


MAX_CANDIDATES_SHOWN = 8


def _candidates_tip(node: pd.Series, decode, *, head: str = "candidates (p, q, P_succ [95% Wilson]):") -> list[str]:
  """Hover lines for a node's candidates: token, p, q, P_succ [Wilson 95%] (largest p first, at most 8)."""
  if "candidates" not in node.index or node["candidates"] is None:
    return []
  cands = list(node["candidates"])
  cols = {c: list(node[c]) if c in node.index and node[c] is not None else [] for c in
          ("p", "q", "p_succ", "p_succ_lo", "p_succ_hi")}
  get = lambda c, k: cols[c][k] if k < len(cols[c]) else np.nan
  order = sorted(range(len(cands)), key=lambda k: -np.nan_to_num(get("p", k), nan=-1.0))
  lines = [head]
  for k in order[:MAX_CANDIDATES_SHOWN]:
    lines.append(f"  {decode(int(cands[k]))!r} p={get('p', k):.3g} q={get('q', k):.3g} "
                 f"P_succ={get('p_succ', k):.3g} [{get('p_succ_lo', k):.3g}, {get('p_succ_hi', k):.3g}]")
  if len(cands) > MAX_CANDIDATES_SHOWN:
    lines.append(f"  ... {len(cands) - MAX_CANDIDATES_SHOWN} more")
  return lines


def token_spans(toks: pd.DataFrame, at: pd.DataFrame, *, colour_by: str = "alignment", decode=None) -> list[str]:
  """One `<span title=... style=...>text</span>` per row of `toks` (columns position, token, optional
  predictors), coloured by the node rows `at` (indexed by position: alignment, teacher_advantage, value,
  candidates, p, q, p_succ, p_succ_lo/hi) or by the predictor column `colour_by` of `toks` (scaled by its
  largest |finite value|). See rollout_html for the colours."""
  decode = decode or (lambda t: f"[{t}]")
  if colour_by == "alignment":
    scale = 1.0
  else:
    finite = toks[colour_by].to_numpy(np.float64)
    finite = np.abs(finite[np.isfinite(finite)])
    scale = float(finite.max()) if finite.size else 0.0
  spans = []
  for _, tok in toks.iterrows():
    position = int(tok["position"])
    tip = [f"position {position}"] + [f"{c}={tok[c]:.4g}" for c in PREDICTORS if c in toks.columns]
    style, extra = "", []
    if position in at.index:
      node = at.loc[position]
      tip += [f"alignment={node['alignment']:.4g}", f"teacher_advantage={node['teacher_advantage']:.4g}"]
      if "value" in at.columns:
        tip.append(f"V={node['value']:.4g}")
      if pd.isna(node["alignment"]):
        tip.append(f"undefined: {node['alignment_nan_reason']}")
      extra = _candidates_tip(node, decode)
    if colour_by == "alignment":
      if position in at.index:
        a = at.loc[position, "alignment"]
        style = "border:1px dashed grey" if pd.isna(a) else f"background:{colour(a, scale)};font-weight:bold"
    elif np.isfinite(tok[colour_by]):
      style = f"background:{colour(tok[colour_by], scale)}"
    text = html.escape(decode(int(tok["token"])))
    title = html.escape("\n".join(["; ".join(tip)] + extra))
    spans.append(f'<span title="{title}" style="{style}">{text}</span>')
  return spans


def _node_style(a: float) -> str:
  """CSS custom properties of a node coloured by alignment `a` (NaN: dashed outline)."""
  if pd.isna(a):
    return "1px dashed grey", "transparent", "normal"
  return "none", colour(a, 1.0), "bold"


def selector_spans(toks: pd.DataFrame, configs: list[tuple[str, pd.DataFrame]],
                   views: list[tuple[str, pd.DataFrame]], *, colour_by: str, decode=None) -> list[str]:
  """The response once: one `<span title=... style="--c0:...;--c1:...">text</span>` per position, carrying one
  colour per option (CSS variables --c<i>, --w<i> (font weight), --d<i> (outline); token_pages' radio buttons
  pick which one shows): options 0..len(configs)-1 colour the nodes of each configuration by alignment (see
  rollout_html), the next ones every token by the predictor `colour_by` of each view (scaled by the largest
  |finite value| of that view's row).

  Args:
    toks: the response's tokens (position, token), one row per position.
    configs: (label, node rows of the configuration at this rollout, indexed by position).
    views: (label, that view's token rows indexed by position, with the predictor columns).
    colour_by: the predictor of the view options.
    decode: token id -> text; default `[id]`.
  Returns:
    One span per row of `toks`; the title lists, per configuration, alignment, teacher advantage and V at nodes
    (with the reason where undefined), the first node's candidates, and every view's predictors.
  """
  decode = decode or (lambda t: f"[{t}]")
  scales = []
  for _, rows in views:
    finite = rows[colour_by].to_numpy(np.float64) if colour_by in rows.columns else np.array([])
    finite = np.abs(finite[np.isfinite(finite)])
    scales.append(float(finite.max()) if finite.size else 0.0)
  spans = []
  for _, tok in toks.iterrows():
    position = int(tok["position"])
    tip, extra, style = [f"position {position}"], [], []
    for i, (label, at) in enumerate(configs):
      if position not in at.index:
        continue
      node = at.loc[position]
      line = (f"{label}: alignment={node['alignment']:.4g}, teacher advantage={node['teacher_advantage']:.4g}"
              + (f", V={node['value']:.4g}" if "value" in at.columns else ""))
      if pd.isna(node["alignment"]):
        line += f" (undefined: {node['alignment_nan_reason']})"
      tip.append(line)
      if not extra:
        extra = _candidates_tip(node, decode, head=f"candidates (p, q of {label}, P_succ [95% Wilson]):")
      outline, background, weight = _node_style(node["alignment"])
      style.append(f"--c{i}:{background};--w{i}:{weight};--d{i}:{outline}")
    for j, (label, rows) in enumerate(views):
      if position not in rows.index:
        continue
      row = rows.loc[position]
      tip.append(f"{label}: " + "; ".join(f"{c}={row[c]:.4g}" for c in PREDICTORS if c in rows.columns))
      if colour_by in rows.columns and np.isfinite(row[colour_by]):
        style.append(f"--c{len(configs) + j}:{colour(row[colour_by], scales[j])}")
    text = html.escape(decode(int(tok["token"])))
    title = html.escape("\n".join(tip + extra))
    spans.append(f'<span title="{title}" style="{";".join(style)}">{text}</span>')
  return spans
