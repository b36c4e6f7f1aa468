"""Summary of a study's node records: alignment by configuration x correctness, predictors, oracle filter.

  python -m opd_jax.report --workdir=runs/teacher_sweep     # rebuilds summary.md, summary.csv, alignment.png

Reads `<workdir>/records/nodes/part-*.parquet` (one part per question, from every host: the parts of all
processes of a multi-host study land in the same directory, so reading them all merges the shards), and
`config.json` / `manifest.json` beside them when present (title and run facts). Every mean comes with a
cluster-bootstrap interval over questions (opd_jax.stats). `rollout_html` renders one rollout token by token,
coloured by alignment or by a predictor. paper.md, "What the paper reports" and "Where opd_jax goes further".
"""
import glob
import html
import io
import json
import math
import os

from absl import app
from absl import flags
import numpy as np
import pandas as pd

from opd_jax import records
from opd_jax import stats

GROUPS = ("correct", "incorrect", "all")
# Per-node predictor columns copied from the tokens table (paper.md, "Divergence predictors").
PREDICTORS = ("kl_pq", "kl_qp", "js", "jsd_beta", "tv", "cosine", "entropy_p", "entropy_q", "topk_overlap",
              "logq_minus_logp")
NAN_REASONS = ("degenerate", "zero_distillation_gradient", "context_unavailable")
REQUIRED_COLUMNS = ("config_id", "question_id", "rollout_id", "position", "teacher", "context", "divergence",
                    "correct", "alignment", "alignment_nan_reason", "degenerate", "teacher_advantage")


def _check_nodes(nodes: pd.DataFrame) -> None:
  """Raises ValueError when the node records miss columns, repeat a node, or contradict themselves."""
  missing = [c for c in REQUIRED_COLUMNS if c not in nodes.columns]
  if missing:
    raise ValueError(f"nodes is missing columns {missing} (has {list(nodes.columns)}); pass the node records "
                     "written by opd_jax.records (pandas.read_parquet('<workdir>/records/nodes'))")
  if nodes["correct"].isna().any():
    raise ValueError("nodes.correct has missing values; every node needs its rollout's correctness (reward == 1)")
  key = ["config_id", "question_id", "rollout_id", "position"]
  duplicated = nodes.duplicated(subset=key)
  if duplicated.any():
    first = nodes.loc[duplicated, key].iloc[0].to_dict()
    raise ValueError(f"nodes has {int(duplicated.sum())} duplicate rows for (config_id, question_id, rollout_id, "
                     f"position), e.g. {first}; records of two studies were mixed in one workdir: remove the "
                     "stale part files")
  defined_degenerate = nodes["degenerate"].astype(bool) & nodes["alignment"].notna()
  if defined_degenerate.any():
    raise ValueError(f"{int(defined_degenerate.sum())} nodes are marked degenerate but have a defined alignment; "
                     "a degenerate node has g* = 0 and alignment NaN: the records are inconsistent")


def _config_columns(rows: pd.DataFrame, config_id: str) -> dict:
  """teacher, context, divergence (and beta, clip when recorded) of one configuration; must be unique."""
  out = {}
  for column in ("teacher", "context", "divergence", "beta", "clip"):
    if column not in rows.columns:
      continue
    values = rows[column].drop_duplicates()
    if len(values) > 1:
      raise ValueError(f"config_id {config_id!r} has several {column} values {list(values)[:4]}; a config_id "
                       "names one configuration: give each configuration its own id")
    out[column] = values.iloc[0]
  return out


def _group_row(rows: pd.DataFrame, *, n_boot: int, seed: int, level: float, min_nodes: int) -> dict:
  """Counts, means with intervals, predictor statistics and oracle filter over one (config, group)."""
  align = rows["alignment"].to_numpy(np.float64)
  questions = rows["question_id"].astype(str).to_numpy()
  defined = ~np.isnan(align)
  reasons = rows["alignment_nan_reason"].fillna("").astype(str).to_numpy()
  degenerate = rows["degenerate"].astype(bool).to_numpy()
  undefined = ~defined & ~degenerate
  row = {
      "n_nodes": len(rows),
      "n_defined": int(defined.sum()),
      "n_degenerate": int(degenerate.sum()),
      "n_nondegenerate": int((~degenerate).sum()),
      "n_zero_distillation_gradient": int((undefined & (reasons == "zero_distillation_gradient")).sum()),
      "n_context_unavailable": int((undefined & (reasons == "context_unavailable")).sum()),
      "n_nan_other": int((undefined & ~np.isin(reasons, NAN_REASONS[1:])).sum()),
      "n_questions": int(rows["question_id"].nunique()),
      "n_rollouts": len(rows[["question_id", "rollout_id"]].drop_duplicates()),
      "underpowered": bool(defined.sum() < min_nodes),
  }
  boot = dict(n_boot=n_boot, level=level, seed=seed)
  row["mean_alignment"], row["alignment_ci_lo"], row["alignment_ci_hi"] = stats.cluster_bootstrap_ci(
      align, questions, **boot)
  row["alignment_std"] = float(np.std(align[defined], ddof=1)) if defined.sum() > 1 else math.nan
  advantage = rows["teacher_advantage"].to_numpy(np.float64)
  row["mean_teacher_advantage"], row["teacher_advantage_ci_lo"], row["teacher_advantage_ci_hi"] = (
      stats.cluster_bootstrap_ci(advantage, questions, **boot))
  if "noise_ceiling" in rows.columns:
    ceiling = rows["noise_ceiling"].to_numpy(np.float64)
    row["mean_noise_ceiling"] = float(np.nanmean(ceiling)) if np.isfinite(ceiling).any() else math.nan
  oracle = stats.oracle_filter(align)
  row["oracle_kept_share"] = oracle.kept_share
  row["oracle_signal_ratio"] = oracle.signal_ratio
  row["oracle_positive_sum_share"] = oracle.positive_sum_share
  for name in PREDICTORS:
    if name in rows.columns:
      x = rows[name].to_numpy(np.float64)[defined]
      row[f"spearman_{name}"] = stats.spearman(x, align[defined])
      row[f"auroc_{name}"] = stats.auroc(x, align[defined] > 0)
  return row


def summarize(nodes: pd.DataFrame, *, n_boot: int = 2000, seed: int = 0, min_nodes: int = 10,
              level: float = 0.95) -> pd.DataFrame:
  """One row per (configuration, correctness group) of the node records.

  Groups: "correct" (the rollout's reward == 1), "incorrect", "all"; a group without nodes still gets a row
  (counts 0, statistics NaN, underpowered). Configurations keep their order of first appearance.

  Columns:
    config_id, teacher, context, divergence (beta, clip when recorded), group;
    n_nodes; n_defined (alignment not NaN: the nodes every alignment statistic uses); n_degenerate (g* = 0,
      P_succ constant over C(u)); n_nondegenerate = n_nodes - n_degenerate; NaN alignments of non-degenerate
      nodes by `alignment_nan_reason`: n_zero_distillation_gradient, n_context_unavailable, n_nan_other;
      n_questions, n_rollouts;
    underpowered: n_defined < min_nodes (nodes with an undefined alignment carry no evidence either, so they
      do not count towards power);
    mean_alignment, alignment_ci_lo, alignment_ci_hi: mean of the defined alignments with a percentile
      cluster-bootstrap interval over question_id (stats.cluster_bootstrap_ci); alignment_std (ddof 1);
    mean_teacher_advantage, teacher_advantage_ci_lo/hi: the same over non-NaN teacher advantages (degenerate
      nodes included: their advantage is 0, a real zero);
    mean_noise_ceiling (when recorded; NaN ceilings skipped);
    oracle_kept_share, oracle_signal_ratio, oracle_positive_sum_share (stats.oracle_filter);
    spearman_<predictor>, auroc_<predictor> for each predictor column present: Spearman(predictor, alignment)
      and AUROC(predictor, alignment > 0) over the defined nodes of the group (render_markdown shows "all").
    ci_level, min_nodes: the arguments (so that the table is self-describing).

  Args:
    nodes: the node records (schema: opd_jax.records), one row per (question, rollout, position, config).
    n_boot: bootstrap replicates per interval.
    seed: bootstrap seed; the same seed is used for every interval (deterministic summary).
    min_nodes: fewer defined alignments than this marks the group underpowered.
    level: interval coverage in (0, 1).
  Returns:
    DataFrame with 3 rows per configuration, in the column order above.
  Raises:
    ValueError: missing columns, duplicate nodes, a config_id with two teachers/contexts/divergences, a
      degenerate node with a defined alignment, or an empty table.
  """
  if len(nodes) == 0:
    raise ValueError("nodes is empty: no node was scored; check the study's budget and its records/nodes")
  _check_nodes(nodes)
  correct = nodes["correct"].astype(bool)
  rows = []
  for config_id in pd.unique(nodes["config_id"]):
    in_config = (nodes["config_id"] == config_id).to_numpy()
    head = {"config_id": config_id, **_config_columns(nodes[in_config], config_id)}
    for group in GROUPS:
      mask = in_config if group == "all" else in_config & (correct.to_numpy() == (group == "correct"))
      row = _group_row(nodes[mask], n_boot=n_boot, seed=seed, level=level, min_nodes=min_nodes)
      rows.append({**head, "group": group, **row, "ci_level": level, "min_nodes": min_nodes})
  return pd.DataFrame(rows)


def _fmt(x, digits: int = 4) -> str:
  if x is None or (isinstance(x, float) and math.isnan(x)):
    return "n/a"
  if isinstance(x, (float, np.floating)):
    return f"{x:.{digits}f}" if np.isfinite(x) else str(x)
  return str(x)


def _ci(lo, hi) -> str:
  return "n/a" if math.isnan(lo) or math.isnan(hi) else f"[{lo:.4f}, {hi:.4f}]"


def _divergence_label(row: pd.Series) -> str:
  params = [f"{k}={row[k]:g}" for k in ("beta", "clip") if k in row.index and not pd.isna(row[k])]
  return f"{row['divergence']}({', '.join(params)})" if params else str(row["divergence"])


def _table(header: list[str], body: list[list[str]]) -> list[str]:
  lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
  return lines + ["| " + " | ".join(cells) + " |" for cells in body]


def _meta_lines(meta: dict) -> list[str]:
  lines = []
  for key, value in meta.items():
    if isinstance(value, dict):
      lines += ["", f"<details><summary>{key}</summary>", ""]
      lines += [f"- `{k}`: {v}" for k, v in value.items()]
      lines += ["", "</details>", ""]
    else:
      lines.append(f"- **{key}**: {value}")
  return lines


def render_markdown(summary: pd.DataFrame, *, title: str, meta: dict) -> str:
  """Markdown tables of a `summarize` result.

  Sections: run facts (`meta`: key -> value; a dict value becomes a collapsed key/value list), mean alignment
  and teacher advantage per configuration x group with intervals and node counts, one line
  "UNDERPOWERED: <config> / <group>: only N non-degenerate nodes with a defined alignment (< min)" per
  underpowered group, Spearman and AUROC of each predictor (group "all"), the oracle filter.

  Args:
    summary: the DataFrame returned by `summarize`.
    title: the document title.
    meta: run facts shown under the title, in order.
  Returns:
    The markdown text, ending with a newline.
  """
  level = float(summary["ci_level"].iloc[0]) if len(summary) else 0.95
  ci = f"{100 * level:g}% CI"
  lines = [f"# {title}", ""] + _meta_lines(meta) + [""]

  lines += ["## Alignment and teacher advantage by configuration x correctness", "",
            "align = cos(g*, g_c) per node (> 0: the distillation update raises the student's success "
            f"probability); means over nodes with a defined alignment, {ci} by cluster bootstrap over questions. "
            "Teacher advantage = sum_k q_k P_succ(k) - V.", ""]
  configs = summary.drop_duplicates("config_id")
  lines += _table(["config", "teacher", "context", "divergence"],
                  [[str(r["config_id"]), str(r["teacher"]), str(r["context"]), _divergence_label(r)]
                   for _, r in configs.iterrows()]) + [""]
  body = []
  for _, r in summary.iterrows():
    body.append([str(r["config_id"]), r["group"], str(r["n_nodes"]), str(r["n_defined"]), str(r["n_degenerate"]),
                 str(r["n_zero_distillation_gradient"]), str(r["n_context_unavailable"]), str(r["n_nan_other"]),
                 str(r["n_questions"]), _fmt(r["mean_alignment"]), _ci(r["alignment_ci_lo"], r["alignment_ci_hi"]),
                 _fmt(r["alignment_std"]), _fmt(r["mean_teacher_advantage"]),
                 _ci(r["teacher_advantage_ci_lo"], r["teacher_advantage_ci_hi"])])
  lines += _table(["config", "group", "nodes", "defined", "degenerate", "zero grad", "no context", "other NaN",
                   "questions", "mean align", ci, "std align", "teacher adv", ci], body)
  underpowered = summary[summary["underpowered"]]
  if len(underpowered):
    lines.append("")
    for _, r in underpowered.iterrows():
      lines.append(f"- UNDERPOWERED: {r['config_id']} / {r['group']}: only {r['n_defined']} non-degenerate "
                   f"nodes with a defined alignment (< {r['min_nodes']})")

  predictors = [c[len("spearman_"):] for c in summary.columns if c.startswith("spearman_")]
  all_rows = summary[summary["group"] == "all"]
  if predictors:
    lines += ["", "## Divergence predictors (group all)", "",
              "Spearman(predictor, align) and AUROC(predictor, align > 0) over nodes with a defined alignment "
              "(AUROC 0.5: no signal; < 0.5: the predictor points the wrong way).", ""]
    for kind in ("spearman", "auroc"):
      body = [[str(r["config_id"]), str(r["n_defined"])] + [_fmt(r[f"{kind}_{p}"], 3) for p in predictors]
              for _, r in all_rows.iterrows()]
      lines += [f"**{'Spearman' if kind == 'spearman' else 'AUROC'}**", ""]
      lines += _table(["config", "nodes"] + predictors, body) + [""]
    lines.pop()

  lines += ["", "## Oracle filter: keep only tokens with align > 0", "",
            "kept share = mean(align > 0); signal ratio = mean(align | align > 0) / |mean(align)|; positive-sum "
            "share = sum(align > 0) / sum(|align|).", ""]
  body = [[str(r["config_id"]), r["group"], str(r["n_defined"]), _fmt(r["oracle_kept_share"], 3),
           _fmt(r["oracle_signal_ratio"], 2), _fmt(r["oracle_positive_sum_share"], 3)]
          for _, r in summary.iterrows()]
  lines += _table(["config", "group", "nodes", "kept share", "signal ratio", "positive-sum share"], body)
  return "\n".join(lines) + "\n"


def plot_alignment(summary: pd.DataFrame, path: str) -> None:
  """Mean alignment with its interval per configuration (x) and correctness group (marker), as a PNG.

  Uses matplotlib's object API (no pyplot, no global backend change); written atomically.

  Args:
    summary: the DataFrame returned by `summarize`.
    path: the PNG file to write, e.g. `<workdir>/alignment.png`.
  """
  from matplotlib.backends.backend_agg import FigureCanvasAgg  # pylint: disable=g-import-not-at-top
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top

  configs = list(pd.unique(summary["config_id"]))
  fig = Figure(figsize=(max(4.0, 1.3 * len(configs) + 2.0), 3.5), dpi=120)
  FigureCanvasAgg(fig)
  ax = fig.add_subplot(1, 1, 1)
  for offset, (group, marker) in zip((-0.2, 0.0, 0.2), zip(GROUPS, "o^s")):
    rows = summary[summary["group"] == group].set_index("config_id").reindex(configs)
    mean = rows["mean_alignment"].to_numpy(np.float64)
    err = np.stack([mean - rows["alignment_ci_lo"].to_numpy(np.float64),
                    rows["alignment_ci_hi"].to_numpy(np.float64) - mean])
    err = np.clip(np.nan_to_num(err), 0.0, None)          # empty groups: no point and no bar
    ax.errorbar(np.arange(len(configs)) + offset, mean, yerr=err, fmt=marker, capsize=3, label=group)
  ax.axhline(0.0, color="grey", lw=0.8)
  ax.set_xticks(np.arange(len(configs)))
  ax.set_xticklabels(configs, rotation=20, ha="right")
  ax.set_ylabel("mean alignment cos(g*, g_c)")
  level = float(summary["ci_level"].iloc[0])
  ax.set_title(f"alignment by configuration ({100 * level:g}% cluster-bootstrap CI)", fontsize=9)
  ax.legend(fontsize=8)
  fig.tight_layout()
  buffer = io.BytesIO()
  fig.savefig(buffer, format="png")
  records.atomic_write_bytes(path, buffer.getvalue())


def _colour(value: float, scale: float) -> str:
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
  at = at.set_index("position")
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
    style = ""
    if position in at.index:
      node = at.loc[position]
      tip += [f"alignment={node['alignment']:.4g}", f"teacher_advantage={node['teacher_advantage']:.4g}"]
      if "value" in at.columns:
        tip.append(f"V={node['value']:.4g}")
      if pd.isna(node["alignment"]):
        tip.append(f"undefined: {node['alignment_nan_reason']}")
    if colour_by == "alignment":
      if position in at.index:
        a = at.loc[position, "alignment"]
        style = "border:1px dashed grey" if pd.isna(a) else f"background:{_colour(a, scale)};font-weight:bold"
    elif np.isfinite(tok[colour_by]):
      style = f"background:{_colour(tok[colour_by], scale)}"
    text = html.escape(decode(int(tok["token"])))
    spans.append(f'<span title="{html.escape("; ".join(tip))}" style="{style}">{text}</span>')
  title = html.escape(f"{config_id}: question {question_id}, rollout {rollout_id}, coloured by {colour_by}")
  return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" + title + "</title></head>\n"
          "<body style=\"font-family:monospace;white-space:pre-wrap\">\n<h3>" + title + "</h3>\n"
          + "".join(spans) + "\n</body></html>\n")


def read_records(workdir: str, table: str = "nodes", columns: list[str] | None = None) -> pd.DataFrame:
  """All part files of `<workdir>/records/<table>` in one DataFrame (parts in file-name order).

  Reads `part-*.parquet` only, so a temporary file left by an interrupted write is never read. `columns`
  restricts the columns read (all by default).

  Raises:
    FileNotFoundError: the directory is missing or holds no part file; the message names the directory.
  """
  directory = os.path.join(workdir, "records", table)
  if not os.path.isdir(directory):
    raise FileNotFoundError(f"no {table} records: directory {directory} does not exist; run the study first "
                            "(python -m opd_jax.main --workdir=...) or pass the workdir that holds records/")
  parts = sorted(glob.glob(os.path.join(directory, "part-*.parquet")))
  if not parts:
    raise FileNotFoundError(f"no {table} records: directory {directory} holds no part-*.parquet file; the study "
                            "has not finished a question yet")
  return pd.concat([pd.read_parquet(p, columns=columns) for p in parts], ignore_index=True)


def _flatten(tree, prefix: str = "") -> dict:
  """Scalar leaves of a JSON tree as {"a.b": value}; long values shortened."""
  out = {}
  if isinstance(tree, dict):
    for k, v in tree.items():
      out.update(_flatten(v, f"{prefix}{k}."))
  else:
    text = json.dumps(tree) if isinstance(tree, (list, tuple)) else str(tree)
    out[prefix[:-1]] = text if len(text) <= 160 else text[:157] + "..."
  return out


def _load_json(path: str) -> dict | None:
  if not os.path.isfile(path):
    return None
  with open(path) as f:
    return json.load(f)


def write_summary(workdir: str, *, n_boot: int = 2000, seed: int = 0, min_nodes: int = 10,
                  plot: bool = True) -> str:
  """Rebuilds `<workdir>/summary.md`, `<workdir>/summary.csv` (and `alignment.png`) from the node records.

  Each file is written atomically (temporary file in the workdir, then os.replace). The markdown depends only
  on the records, config.json, manifest.json and the arguments (no clock, no absolute paths), so rebuilding
  gives the same bytes.

  Args:
    workdir: the study's working directory (holds records/nodes).
    n_boot, seed, min_nodes: see `summarize`.
    plot: also write `<workdir>/alignment.png` (plot_alignment) and link it from the markdown.
  Returns:
    The markdown written to summary.md.
  Raises:
    FileNotFoundError: records/nodes is missing or empty (the message names the directory).
  """
  nodes = read_records(workdir, "nodes")
  summary = summarize(nodes, n_boot=n_boot, seed=seed, min_nodes=min_nodes)
  config = _load_json(os.path.join(workdir, "config.json"))
  manifest = _load_json(os.path.join(workdir, "manifest.json"))
  name = (config or {}).get("name") or os.path.basename(os.path.abspath(workdir))
  meta = {"nodes": f"{len(nodes)} node rows, {nodes['question_id'].nunique()} questions, "
                   f"{nodes['config_id'].nunique()} configurations"}
  try:
    rollouts = read_records(workdir, "rollouts", columns=["question_id", "reward"])
    reward = rollouts["reward"].to_numpy(np.float64)
    meta["rollouts"] = (f"{len(rollouts)} rollouts, {rollouts['question_id'].nunique()} questions, "
                        f"accuracy {np.mean(reward == 1):.3f}")
  except (FileNotFoundError, KeyError, ValueError):        # no rollout records, or without a reward column
    pass
  meta["intervals"] = (f"{100 * summary['ci_level'].iloc[0]:g}% percentile cluster bootstrap over questions, "
                       f"n_boot={n_boot}, seed={seed}; underpowered below {min_nodes} defined alignments")
  if config is not None:
    meta["config.json"] = _flatten(config)
  if manifest is not None:
    meta["manifest.json"] = _flatten(manifest)
  markdown = render_markdown(summary, title=f"opd_jax summary: {name}", meta=meta)
  if plot:
    plot_alignment(summary, os.path.join(workdir, "alignment.png"))
    markdown += "\n![mean alignment by configuration and group](alignment.png)\n"
  records.atomic_write_bytes(os.path.join(workdir, "summary.md"), markdown)
  records.atomic_write_bytes(os.path.join(workdir, "summary.csv"), summary.to_csv(index=False))
  return markdown


def _main(argv) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments {argv[1:]}; use --workdir=...")
  try:
    markdown = write_summary(flags.FLAGS.workdir, n_boot=flags.FLAGS.n_boot, seed=flags.FLAGS.seed,
                             plot=flags.FLAGS.plot)
  except FileNotFoundError as e:
    raise SystemExit(f"error: {e}") from None
  print(markdown, end="")


if __name__ == "__main__":
  # Flags are defined here, not at import, so that opd_jax.main (which has its own --workdir) can import this.
  flags.DEFINE_string("workdir", None, "Study working directory holding records/nodes.")
  flags.DEFINE_integer("n_boot", 2000, "Bootstrap replicates per interval.")
  flags.DEFINE_integer("seed", 0, "Bootstrap seed.")
  flags.DEFINE_bool("plot", True, "Also write alignment.png.")
  flags.mark_flag_as_required("workdir")
  app.run(_main)
