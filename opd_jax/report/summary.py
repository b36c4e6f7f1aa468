"""summarize: one row per (configuration, correctness group) with counts, means and cluster intervals.

paper.md, "Where opd_jax goes further": every mean comes with a cluster-bootstrap interval over questions
(opd_jax.estimators.stats.cluster_bootstrap_ci); the power rule counts questions as well as nodes (common.underpowered).
"""
import math

import numpy as np
import pandas as pd

from opd_jax import records
from opd_jax.estimators import gradients
from opd_jax.estimators import stats
from opd_jax.report import common


def config_columns(rows: pd.DataFrame, config_id: str) -> dict:
  """teacher, context, divergence (and beta, clip when recorded) of one configuration; must be unique."""
  out = {}
  for column in ("teacher", "context", "divergence", "beta", "clip", "divergence_param"):
    if column not in rows.columns:
      continue
    values = rows[column].drop_duplicates()
    if len(values) > 1:
      raise ValueError(f"config_id {config_id!r} has several {column} values {list(values)[:4]}; a config_id "
                       "names one configuration: give each configuration its own id")
    out[column] = values.iloc[0]
  return out


def _group_row(rows: pd.DataFrame, *, n_boot: int, seed: int, level: float, min_nodes: int,
               min_questions: int) -> dict:
  """Counts, means with intervals, ceilings and oracle filter over one (config, group)."""
  align = rows["alignment"].to_numpy(np.float64)
  questions = rows["question_id"].astype(str).to_numpy()
  defined = ~np.isnan(align)
  reasons = rows["alignment_nan_reason"].fillna("").astype(str).to_numpy()
  degenerate = rows["degenerate"].astype(bool).to_numpy()
  undefined = ~defined & ~degenerate
  named = {r: int((undefined & (reasons == r)).sum()) for r in records.NAN_REASONS if r != gradients.DEGENERATE}
  n_questions = int(rows["question_id"].nunique())
  n_defined_questions = int(pd.unique(questions[defined]).size)
  row = {
      "n_nodes": len(rows),
      "n_defined": int(defined.sum()),
      "n_degenerate": int(degenerate.sum()),
      "n_nondegenerate": int((~degenerate).sum()),
      **{f"n_{r}": c for r, c in named.items()},
      "n_nan_other": int((undefined & ~np.isin(reasons, list(named))).sum()),
      "n_questions": n_questions,
      "n_defined_questions": n_defined_questions,
      "n_rollouts": len(rows[["question_id", "rollout_id"]].drop_duplicates()),
      "underpowered": common.underpowered(int(defined.sum()), n_defined_questions, min_nodes=min_nodes,
                                          min_questions=min_questions),
  }
  boot = dict(n_boot=n_boot, level=level, seed=seed)
  row["mean_alignment"], row["alignment_ci_lo"], row["alignment_ci_hi"] = stats.cluster_bootstrap_ci(
      align, questions, **boot)
  row["alignment_std"] = float(np.std(align[defined], ddof=1)) if defined.sum() > 1 else math.nan
  advantage = rows["teacher_advantage"].to_numpy(np.float64)
  row["mean_teacher_advantage"], row["teacher_advantage_ci_lo"], row["teacher_advantage_ci_hi"] = (
      stats.cluster_bootstrap_ci(advantage, questions, **boot))
  for column, name in (("noise_ceiling", "mean_split_half_ceiling"), ("ceiling", "mean_ceiling")):
    if column in rows.columns:
      values = rows[column].to_numpy(np.float64)[defined]
      row[name] = float(np.nanmean(values)) if np.isfinite(values).any() else math.nan
  oracle = stats.oracle_filter(align)
  row["oracle_kept_share"] = oracle.kept_share
  row["oracle_kept_mean"] = oracle.kept_mean
  row["oracle_gain"] = oracle.gain
  row["oracle_positive_sum_share"] = oracle.positive_sum_share
  # net share = sum(a) / sum(|a|) with its cluster interval (a ratio of sums: stat on the concatenation).
  row["oracle_net_share"], row["oracle_net_share_ci_lo"], row["oracle_net_share_ci_hi"] = (
      stats.cluster_bootstrap_ci(align, questions, stat=_net_share, **boot) if defined.any()
      else (math.nan,) * 3)
  return row


def _net_share(a: np.ndarray) -> float:
  total = np.sum(np.abs(a))
  return float(np.sum(a) / total) if total > 0 else math.nan


def summarize(nodes: pd.DataFrame, *, n_boot: int = 2000, seed: int = 0, min_nodes: int = common.MIN_NODES,
              min_questions: int = common.MIN_QUESTIONS, level: float = 0.95) -> pd.DataFrame:
  """One row per (configuration, correctness group) of the node records.

  Groups: "correct" (the rollout's reward == 1), "incorrect", "all"; a group without nodes still gets a row
  (counts 0, statistics NaN, underpowered). Configurations keep their order of first appearance.

  Columns:
    config_id, teacher, context, divergence (beta, clip when recorded), group;
    n_nodes; n_defined (alignment not NaN: the nodes every alignment statistic uses); n_degenerate (g* = 0,
      P_succ constant over C(u)); n_nondegenerate = n_nodes - n_degenerate; NaN alignments of non-degenerate
      nodes by `alignment_nan_reason` (records.NAN_REASONS): n_zero_distillation_gradient, n_zero_ideal_gradient,
      n_context_unavailable, and n_nan_other for any other reason;
    n_questions, n_defined_questions (questions with a defined alignment), n_rollouts;
    underpowered: n_defined < min_nodes or n_defined_questions < min_questions (common.underpowered): its
      intervals are indicative only;
    mean_alignment, alignment_ci_lo, alignment_ci_hi: mean of the defined alignments with a percentile
      cluster-bootstrap interval over question_id (stats.cluster_bootstrap_ci); alignment_std (ddof 1);
    mean_teacher_advantage, teacher_advantage_ci_lo/hi: the same over non-NaN teacher advantages (degenerate
      nodes included: their advantage is 0, a real zero);
    mean_split_half_ceiling: mean of the records' split-half `noise_ceiling` over the defined nodes (the
      reliability of an R/2 estimate); mean_ceiling: mean of the direct ceiling E cos(g*_R, g*)
      (ceiling.node_ceilings, when a `ceiling` column was added) over the defined nodes;
    oracle_kept_share, oracle_kept_mean, oracle_gain, oracle_positive_sum_share (stats.oracle_filter),
      oracle_net_share with oracle_net_share_ci_lo/hi (sum(a) / sum(|a|), cluster bootstrap);
    ci_level, min_nodes, min_questions: the arguments (so that the table is self-describing).

  Args:
    nodes: the node records (schema: opd_jax.records), one row per (question, rollout, position, config).
    n_boot: bootstrap replicates per interval.
    seed: bootstrap seed; the same seed is used for every interval (deterministic summary).
    min_nodes, min_questions: the power rule (common.underpowered).
    level: interval coverage in (0, 1).
  Returns:
    DataFrame with 3 rows per configuration, in the column order above.
  Raises:
    ValueError: missing columns, duplicate nodes, a config_id with two teachers/contexts/divergences, a
      degenerate node with a defined alignment, or an empty table.
  """
  common.check_nodes(nodes)
  rows = []
  for config_id in pd.unique(nodes["config_id"]):
    in_config = (nodes["config_id"] == config_id).to_numpy()
    head = {"config_id": config_id, **config_columns(nodes[in_config], config_id)}
    for group in common.GROUPS:
      mask = in_config & common.group_mask(nodes, group)
      row = _group_row(nodes[mask], n_boot=n_boot, seed=seed, level=level, min_nodes=min_nodes,
                       min_questions=min_questions)
      rows.append({**head, "group": group, **row, "ci_level": level, "min_nodes": min_nodes,
                   "min_questions": min_questions})
  return pd.DataFrame(rows)
