"""Small statistics for the report: cluster bootstrap, Spearman, AUROC, the oracle filter (numpy only).

paper.md, "Where opd_jax goes further": every mean gets a cluster-bootstrap interval over questions (nodes of
one question share its difficulty, its rollouts and its P_succ estimates, so they are not independent);
paper.md, "Divergence predictors": Spearman correlation and AUROC for `align > 0` of each predictor;
paper.md, "What the paper reports": the oracle filter that keeps only positively aligned tokens.
"""
from typing import Callable, NamedTuple

import numpy as np


def _as_1d(name: str, x) -> np.ndarray:
  x = np.asarray(x)
  if x.ndim != 1:
    raise ValueError(f"{name} must be 1-D, got shape {x.shape}; pass one value per node")
  return x


def _as_float_1d(name: str, x) -> np.ndarray:
  x = _as_1d(name, x)
  try:
    return x.astype(np.float64)
  except (TypeError, ValueError) as e:
    raise ValueError(f"{name} must be numeric, got dtype {x.dtype}; pass numbers (NaN for missing)") from e


def cluster_bootstrap_ci(values, clusters, *, stat: Callable[[np.ndarray], float] = np.mean,
                         n_boot: int = 2000, level: float = 0.95, seed: int = 0) -> tuple[float, float, float]:
  """Statistic of `values` with a percentile bootstrap interval that resamples whole clusters (questions).

  Protocol (the contract; tests reproduce it): NaN values are dropped with their cluster labels; the G distinct
  clusters are ordered as `np.unique` orders them; `rng = np.random.default_rng(seed)` draws
  `rng.integers(0, G, size=(n_boot, G))`; replicate b concatenates the values of the drawn clusters (a cluster
  drawn twice enters twice) and applies `stat`; the interval is the `(1 - level) / 2` and `(1 + level) / 2`
  quantiles (`np.quantile`, linear) of the replicates. With one cluster per value this is the ordinary
  bootstrap. For `stat=np.mean` the replicates are computed as weighted cluster sums (same draws, same result,
  no concatenation).

  Args:
    values: [N] float, one per node; NaN entries are dropped.
    clusters: [N] cluster labels (e.g. question_id strings), any sortable dtype.
    stat: statistic of a 1-D float array -> float. Default np.mean.
    n_boot: number of bootstrap replicates, >= 1.
    level: interval coverage in (0, 1).
    seed: seed of the resampling; same inputs and seed -> same interval.
  Returns:
    (estimate, lo, hi) floats: stat of all kept values and the percentile interval. All NaN when no value is
    left after dropping NaN.
  Raises:
    ValueError: shapes differ, n_boot < 1, or level outside (0, 1).
  """
  values = _as_float_1d("values", values)
  clusters = _as_1d("clusters", clusters)
  if values.shape != clusters.shape:
    raise ValueError(f"values and clusters must have the same length, got {values.shape[0]} and "
                     f"{clusters.shape[0]}; pass one cluster label per value")
  if int(n_boot) < 1:
    raise ValueError(f"n_boot must be >= 1, got {n_boot}")
  if not 0.0 < level < 1.0:
    raise ValueError(f"level must lie in (0, 1), got {level}; e.g. 0.95 for a 95% interval")
  keep = ~np.isnan(values)
  values, clusters = values[keep], clusters[keep]
  if values.size == 0:
    return float("nan"), float("nan"), float("nan")
  _, cluster_index = np.unique(clusters, return_inverse=True)
  cluster_index = cluster_index.reshape(-1)
  n_clusters = int(cluster_index.max()) + 1
  rng = np.random.default_rng(seed)
  draws = rng.integers(0, n_clusters, size=(int(n_boot), n_clusters))
  if stat is np.mean:
    sums = np.bincount(cluster_index, weights=values, minlength=n_clusters)
    counts = np.bincount(cluster_index, minlength=n_clusters).astype(np.float64)
    replicates = sums[draws].sum(axis=1) / counts[draws].sum(axis=1)
  else:
    order = np.argsort(cluster_index, kind="stable")
    members = np.split(values[order], np.cumsum(np.bincount(cluster_index, minlength=n_clusters))[:-1])
    replicates = np.array([stat(np.concatenate([members[g] for g in row])) for row in draws], np.float64)
  alpha = (1.0 - level) / 2.0
  lo, hi = np.quantile(replicates, [alpha, 1.0 - alpha])
  return float(stat(values)), float(lo), float(hi)


def rankdata(x) -> np.ndarray:
  """Average ranks, 1-based, ties share the mean of their ranks (as scipy.stats.rankdata 'average').

  Args:
    x: [N] float without NaN; +-inf are ordinary values (inf ranks last, -inf first).
  Returns:
    [N] float64 ranks.
  """
  x = _as_float_1d("x", x)
  order = np.argsort(x, kind="mergesort")
  sorted_x = x[order]
  # Start of each run of equal values; a run [s, e) gets the average rank (s + 1 + e) / 2.
  starts = np.flatnonzero(np.r_[True, sorted_x[1:] != sorted_x[:-1]])
  ends = np.r_[starts[1:], x.size]
  ranks = np.empty(x.size, np.float64)
  ranks[order] = np.repeat((starts + 1 + ends) / 2.0, ends - starts)
  return ranks


def spearman(x, y) -> float:
  """Spearman rank correlation of x and y: Pearson correlation of their average ranks.

  Pairs where x or y is NaN are dropped. +-inf are kept: they are valid extreme values (e.g. KL(p||q) = +inf
  where q has a zero on p's support) and ranks order them last/first, which is the sensible reading.

  Args:
    x: [N] float, e.g. a divergence predictor per node.
    y: [N] float, e.g. the alignment per node (NaN where undefined).
  Returns:
    rho in [-1, 1] as float; NaN when fewer than 2 pairs remain or either side is constant.
  Raises:
    ValueError: x and y differ in length.
  """
  x, y = _as_float_1d("x", x), _as_float_1d("y", y)
  if x.shape != y.shape:
    raise ValueError(f"x and y must have the same length, got {x.shape[0]} and {y.shape[0]}")
  keep = ~(np.isnan(x) | np.isnan(y))
  if keep.sum() < 2:
    return float("nan")
  rx, ry = rankdata(x[keep]), rankdata(y[keep])
  rx, ry = rx - rx.mean(), ry - ry.mean()
  denom = np.sqrt(np.sum(rx * rx) * np.sum(ry * ry))
  if denom == 0.0:
    return float("nan")
  return float(np.clip(np.sum(rx * ry) / denom, -1.0, 1.0))


def auroc(scores, labels) -> float:
  """Area under the ROC curve of `scores` for binary `labels` (Mann-Whitney U / (n_pos n_neg)).

  AUROC = P(s_pos > s_neg) + 1/2 P(s_pos = s_neg) over all (positive, negative) pairs; computed from average
  ranks: (sum of positive ranks - n_pos (n_pos + 1) / 2) / (n_pos n_neg). NaN scores are dropped with their
  labels; +-inf scores are kept (ranked last/first). 0.5 = no signal; < 0.5 = the predictor points the wrong way.

  Args:
    scores: [N] float, e.g. a predictor per node.
    labels: [N] bool or {0, 1}, e.g. alignment > 0 (drop nodes with NaN alignment before).
  Returns:
    AUROC in [0, 1] as float; NaN when either class is empty.
  Raises:
    ValueError: lengths differ or labels are not boolean / {0, 1}.
  """
  scores = _as_float_1d("scores", scores)
  labels = _as_1d("labels", labels)
  if scores.shape != labels.shape:
    raise ValueError(f"scores and labels must have the same length, got {scores.shape[0]} and "
                     f"{labels.shape[0]}")
  if labels.dtype != np.bool_:
    if not np.all(np.isin(labels, [0, 1])):
      raise ValueError(f"labels must be bool or 0/1, got values {np.unique(labels)[:5]}; pass e.g. align > 0")
    labels = labels.astype(bool)
  keep = ~np.isnan(scores)
  scores, labels = scores[keep], labels[keep]
  n_pos = int(labels.sum())
  n_neg = int(labels.size - n_pos)
  if n_pos == 0 or n_neg == 0:
    return float("nan")
  ranks = rankdata(scores)
  return float((ranks[labels].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


class OracleFilter(NamedTuple):
  """What an oracle that keeps only positively aligned tokens would keep (see `oracle_filter`)."""
  n: int                      # nodes with a defined (non-NaN) alignment
  kept_share: float           # mean(align > 0): share of tokens kept (paper: about 52%)
  signal_ratio: float         # mean(align | align > 0) / |mean(align)|: "x more effective signal" (paper: 10-15)
  positive_sum_share: float   # sum(align[align > 0]) / sum(|align|): share of the total |alignment| kept


def oracle_filter(alignment) -> OracleFilter:
  """The oracle filter of paper.md ("What the paper reports"): keep only tokens whose alignment is > 0.

  Over the N nodes with a defined (non-NaN) alignment a:
    kept_share = mean(a > 0), the share of tokens the filter keeps;
    signal_ratio = mean(a[a > 0]) / |mean(a)|, mean alignment per kept token over mean alignment per token
      without filtering (our reading of "10-15x more effective signal");
    positive_sum_share = sum(a[a > 0]) / sum(|a|), the share of the total alignment magnitude that points
      towards success.

  Args:
    alignment: [N] float in [-1, 1], NaN where undefined (dropped).
  Returns:
    OracleFilter(n, kept_share, signal_ratio, positive_sum_share). kept_share and positive_sum_share are NaN
    when n == 0 (the latter also when all a == 0); signal_ratio is NaN when no a > 0 or mean(a) == 0.
  """
  a = _as_float_1d("alignment", alignment)
  a = a[~np.isnan(a)]
  nan = float("nan")
  if a.size == 0:
    return OracleFilter(0, nan, nan, nan)
  positive = a[a > 0]
  mean_all = float(np.mean(a))
  signal_ratio = float(np.mean(positive) / abs(mean_all)) if positive.size and mean_all != 0.0 else nan
  total = float(np.sum(np.abs(a)))
  positive_sum_share = float(np.sum(positive) / total) if total > 0 else nan
  return OracleFilter(int(a.size), float(np.mean(a > 0)), signal_ratio, positive_sum_share)
