"""Summary of a study's node records: alignment by configuration x correctness, predictors, oracle filter.

  python -m opd_jax.report --workdir=runs/teacher_sweep           # rebuilds summary.md / summary.csv, prints it

Reads `<workdir>/records/nodes/part-*.parquet` (one part per question, from every host: the parts of all
processes of a multi-host study land in the same directory, so reading them all merges the shards), and
`config.json` / `manifest.json` beside them when present (title and run facts). Every mean comes with a
cluster-bootstrap interval over questions (opd_jax.stats). paper.md, "What the paper reports" and "Where
opd_jax goes further".
"""
import glob
import json
import math
import os
import tempfile

from absl import app
from absl import flags
import numpy as np
import pandas as pd

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


def read_records(workdir: str, table: str = "nodes") -> pd.DataFrame:
  """All part files of `<workdir>/records/<table>` in one DataFrame (parts in file-name order).

  Reads `part-*.parquet` only, so a temporary file left by an interrupted write is never read.

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
  return pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True)


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


def _atomic_write(path: str, text: str) -> None:
  fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=f".{os.path.basename(path)}.", suffix=".tmp")
  try:
    with os.fdopen(fd, "w") as f:
      f.write(text)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def write_summary(workdir: str, *, n_boot: int = 2000, seed: int = 0, min_nodes: int = 10) -> str:
  """Rebuilds `<workdir>/summary.md` and `<workdir>/summary.csv` from the node records.

  Each file is written atomically (temporary file in the workdir, then os.replace). The markdown depends only
  on the records, config.json, manifest.json and the arguments (no clock, no absolute paths), so rebuilding
  gives the same bytes.

  Args:
    workdir: the study's working directory (holds records/nodes).
    n_boot, seed, min_nodes: see `summarize`.
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
    rollouts = read_records(workdir, "rollouts")
    reward = rollouts["reward"].to_numpy(np.float64)
    meta["rollouts"] = (f"{len(rollouts)} rollouts, {rollouts['question_id'].nunique()} questions, "
                        f"accuracy {np.mean(reward == 1):.3f}")
  except (FileNotFoundError, KeyError):
    pass
  meta["intervals"] = (f"{100 * summary['ci_level'].iloc[0]:g}% percentile cluster bootstrap over questions, n_boot={n_boot}, "
                       f"seed={seed}; underpowered below {min_nodes} defined alignments")
  if config is not None:
    meta["config.json"] = _flatten(config)
  if manifest is not None:
    meta["manifest.json"] = _flatten(manifest)
  markdown = render_markdown(summary, title=f"opd_jax summary: {name}", meta=meta)
  _atomic_write(os.path.join(workdir, "summary.md"), markdown)
  _atomic_write(os.path.join(workdir, "summary.csv"), summary.to_csv(index=False))
  return markdown


def _main(argv) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments {argv[1:]}; use --workdir=...")
  print(write_summary(flags.FLAGS.workdir, n_boot=flags.FLAGS.n_boot, seed=flags.FLAGS.seed), end="")


if __name__ == "__main__":
  # Flags are defined here, not at import, so that opd_jax.main (which has its own --workdir) can import this.
  flags.DEFINE_string("workdir", None, "Study working directory holding records/nodes.")
  flags.DEFINE_integer("n_boot", 2000, "Bootstrap replicates per interval.")
  flags.DEFINE_integer("seed", 0, "Bootstrap seed.")
  flags.mark_flag_as_required("workdir")
  app.run(_main)
