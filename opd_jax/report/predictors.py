"""Why, cheaply (issue 14, item 3): how well each divergence predictor ranks tokens by alignment > 0, with
cluster-bootstrap intervals, and a predictor-based filter against the oracle filter at the same kept share."""
import numpy as np
import pandas as pd

from opd_jax import records
from opd_jax.estimators import stats
from opd_jax.report import common


def _orient(x: np.ndarray, a: np.ndarray) -> float:
  """+1 when larger predictor values go with aligned tokens (AUROC >= 0.5 on all data), else -1."""
  u = stats.auroc(x, a > 0)
  return -1.0 if np.isfinite(u) and u < 0.5 else 1.0


def predictor_table(nodes: pd.DataFrame, *, group: str = "all", n_boot: int = 200, seed: int = 0,
                    level: float = 0.95) -> pd.DataFrame:
  """One row per (config, predictor) over the group's defined nodes.

  Columns: config_id, group, predictor, n, spearman (+ spearman_lo/hi), auroc (+ auroc_lo/hi) for alignment > 0
  (stats.spearman / stats.auroc; percentile intervals of the same statistics over the replicates of
  stats.ClusterBootstrap(every question of `nodes`, n_boot, seed), computed from the draw multiplicities by
  stats.weighted_spearman / stats.weighted_auroc);
  filter_mean: mean alignment of the nodes the predictor ranks highest (oriented by the sign of its AUROC),
  keeping the oracle's share mean(a > 0); oracle_mean: mean(a | a > 0) at that share; all_mean: mean(a);
  filter_capture = (filter_mean - all_mean) / (oracle_mean - all_mean): the share of the oracle's gain the
  predictor recovers (1 = oracle, 0 = no better than keeping everything).
  """
  rows = []
  in_group = common.group_mask(nodes, group)
  boot = stats.ClusterBootstrap(nodes["question_id"].astype(str).to_numpy(), n_boot=n_boot, seed=seed)
  for config_id in pd.unique(nodes["config_id"]):
    sub = nodes[in_group & (nodes["config_id"] == config_id).to_numpy() & nodes["alignment"].notna().to_numpy()]
    a = sub["alignment"].to_numpy(np.float64)
    q = sub["question_id"].astype(str).to_numpy()
    weights = boot.weights[:, boot.index(q)]                         # [n_boot, N] node multiplicities
    oracle = stats.oracle_filter(a)
    for name in [p for p in records.PREDICTORS if p in sub.columns]:
      x = sub[name].to_numpy(np.float64)
      row = {"config_id": config_id, "group": group, "predictor": name, "n": int(a.size),
             "spearman": stats.spearman(x, a), "auroc": stats.auroc(x, a > 0) if a.size else np.nan}
      for stat, reps in (("spearman", stats.weighted_spearman(x, a, weights)),
                         ("auroc", stats.weighted_auroc(x, a > 0, weights))):
        row[f"{stat}_lo"], row[f"{stat}_hi"] = stats.percentile_interval(reps, level)
      if a.size and oracle.kept_share > 0:
        keep = max(1, int(round(oracle.kept_share * a.size)))
        score = np.nan_to_num(_orient(x, a) * x, nan=-np.inf)
        top = np.argsort(-score, kind="stable")[:keep]
        row["filter_mean"] = float(a[top].mean())
        row["oracle_mean"] = oracle.kept_mean
        row["all_mean"] = float(a.mean())
        gap = oracle.kept_mean - a.mean()
        row["filter_capture"] = float((a[top].mean() - a.mean()) / gap) if gap > 0 else np.nan
      rows.append(row)
  return pd.DataFrame(rows)
