"""Small statistics for the report: cluster bootstrap, CR2 cluster-robust means, power, Spearman, AUROC, Holm,
the oracle filter.

scipy.stats where it has the function (ranks, Spearman, Mann-Whitney U for AUROC, t and noncentral t
distributions); the cluster bootstrap, Holm's step-down adjustment and the CR2 / Bell-McCaffrey mean are not in
scipy or statsmodels and are written here (tests check them against the general matrix forms and statsmodels).

paper.md, "Where opd_jax goes further": every mean gets a cluster-bootstrap interval over questions (nodes of
one question share its difficulty, its rollouts and its P_succ estimates, so they are not independent);
paper.md, "Divergence predictors": Spearman correlation and AUROC for `align > 0` of each predictor;
paper.md, "What the paper reports": the oracle filter that keeps only positively aligned tokens.
Issue 25: the decision's paired differences use `cr2_mean` (intervals that keep their level with ~10 questions)
and `detectable_difference` / `questions_needed` (power); issue 33: with `se_df`, power averaged over the
sampling error of the estimated standard error (`expected_t_power`).
"""
from typing import Callable, NamedTuple

import numpy as np
from scipy import stats as sp_stats


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
  """Average ranks, 1-based, ties share the mean of their ranks (scipy.stats.rankdata, method 'average').

  Args:
    x: [N] float without NaN; +-inf are ordinary values (inf ranks last, -inf first).
  Returns:
    [N] float64 ranks.
  """
  return sp_stats.rankdata(_as_float_1d("x", x), method="average").astype(np.float64)


def spearman(x, y) -> float:
  """Spearman rank correlation of x and y (scipy.stats.spearmanr on the kept pairs).

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
  x, y = x[keep], y[keep]
  if x.size < 2 or np.all(x == x[0]) or np.all(y == y[0]):
    return float("nan")
  # Ranks first: spearmanr itself would turn +-inf into NaN correlations.
  rho = sp_stats.spearmanr(sp_stats.rankdata(x), sp_stats.rankdata(y)).statistic
  return float(np.clip(rho, -1.0, 1.0))


def auroc(scores, labels) -> float:
  """Area under the ROC curve of `scores` for binary `labels`: Mann-Whitney U / (n_pos n_neg).

  AUROC = P(s_pos > s_neg) + 1/2 P(s_pos = s_neg) over all (positive, negative) pairs (U of
  scipy.stats.mannwhitneyu, ties counted half). NaN scores are dropped with their labels; +-inf scores are kept
  (ranked last/first). 0.5 = no signal; < 0.5 = the predictor points the wrong way.

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
  # U from ranks (mannwhitneyu's definition); ranking first keeps +-inf ordinary values.
  ranks = sp_stats.rankdata(scores)
  u = sp_stats.mannwhitneyu(ranks[labels], ranks[~labels], method="asymptotic").statistic
  return float(u / (n_pos * n_neg))


def holm(pvalues) -> np.ndarray:
  """Holm's step-down adjusted p-values (family-wise error control over the m tests; not in scipy.stats).

  Sorted ascending p_(1) <= ... <= p_(m): adj_(i) = max_{j <= i} min(1, (m - j + 1) p_(j)); rejecting where
  adj <= alpha is Holm's procedure at level alpha. NaN p-values are left NaN and not counted in m.

  Args:
    pvalues: [m] float in [0, 1] (NaN allowed).
  Returns:
    [m] float64 adjusted p-values in the input order.
  """
  p = _as_float_1d("pvalues", pvalues)
  out = np.full(p.shape, np.nan)
  idx = np.flatnonzero(~np.isnan(p))
  if idx.size == 0:
    return out
  order = idx[np.argsort(p[idx], kind="stable")]
  m = order.size
  adjusted = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
  out[order] = adjusted
  return out


def normal_quantile(prob: float) -> float:
  """z with Phi(z) = prob (scipy.stats.norm.ppf); e.g. 0.975 -> 1.95996."""
  return float(sp_stats.norm.ppf(prob))


class ClusterMean(NamedTuple):
  """A node-weighted mean over clusters with its CR2 standard error and Bell-McCaffrey degrees of freedom."""
  mean: np.ndarray         # [...] sum of values / number of values (NaN without a value)
  se: np.ndarray           # [...] CR2 standard error (NaN with fewer than 2 clusters)
  df: np.ndarray           # [...] Bell-McCaffrey degrees of freedom (NaN with fewer than 2 clusters)
  n: np.ndarray            # [...] number of values
  n_clusters: np.ndarray   # [...] clusters holding a value


def cr2_mean(sums, sumsq, counts) -> ClusterMean:
  """The mean of values grouped in clusters, with a small-sample cluster-robust standard error and df.

  Inputs are per-cluster sufficient statistics, so any leading axes are batched (pairs, simulations). For the
  intercept-only regression x_gi = mu + e_gi (N values, G clusters of n_g; mu_hat = sum x / N, residual sums
  r_g = s_g - n_g mu_hat):
    CR2 (Bell & McCaffrey 2002, Survey Methodology 28(2); Pustejovsky & Tipton 2018, JBES 36(4)): the residuals of
      cluster g are scaled by (I - H_gg)^(-1/2) with H_gg = 1 1' / N, which multiplies their sum by
      (1 - n_g / N)^(-1/2): V = sum_g w_g r_g^2, w_g = 1 / (N^2 (1 - n_g / N)).
    df (Bell & McCaffrey 2002, section 3; with the random-effects working model of Imbens & Kolesar 2016, ReStat
      98(4), section 5): V is a quadratic form e' A e; for e ~ N(0, Omega), Omega_g = sigma^2 I + tau^2 1 1',
      df = tr(W K)^2 / tr(W K W K), K = B'(I - H) Omega (I - H) B = diag(m) - (m n' + n m') / N + n n' sum(m) / N^2,
      m_g = sigma^2 n_g + tau^2 n_g^2, B the [N, G] cluster indicator. sigma^2 and tau^2 are the one-way ANOVA
      moment estimates (MSW; max(0, (MSB - MSW) / n0), n0 = (N - sum n_g^2 / N) / (G - 1): Searle, Casella &
      McCulloch 1992, Variance Components, section 3.6). Equal cluster sizes give df = G - 1 for any sigma, tau.
  With equal cluster sizes V equals statsmodels' CR1 (G / (G - 1) sum r_g^2 / N^2).

  Args:
    sums: [..., G] sum of the values of each cluster (0 for a cluster without values).
    sumsq: [..., G] sum of their squares.
    counts: [..., G] number of values per cluster (0: the cluster is absent).
  Returns:
    ClusterMean of [...] arrays. se = 0 when every residual sum is 0 (e.g. identical configurations).
  Raises:
    ValueError: the three arrays differ in shape or a count is negative.
  """
  s, ss, n = (np.asarray(x, np.float64) for x in (sums, sumsq, counts))
  if not s.shape == ss.shape == n.shape or s.ndim < 1:
    raise ValueError(f"sums, sumsq and counts must share one shape [..., G], got {s.shape}, {ss.shape}, {n.shape}")
  if np.any(n < 0):
    raise ValueError("counts must be >= 0 (the number of values of each cluster)")
  big_n, big_g = n.sum(-1), (n > 0).sum(-1)
  with np.errstate(invalid="ignore", divide="ignore"):
    mean = s.sum(-1) / big_n
    r = s - n * mean[..., None]
    w = 1.0 / (big_n[..., None] ** 2 * (1.0 - n / big_n[..., None]))
    var = np.sum(np.where(n > 0, w * r ** 2, 0.0), -1)
    # Working model: one-way ANOVA moment estimates of the within (sigma^2) and between (tau^2) variances.
    per = np.where(n > 0, s ** 2 / np.where(n > 0, n, 1.0), 0.0)
    msw = np.maximum(ss.sum(-1) - per.sum(-1), 0.0) / (big_n - big_g)
    msb = (per.sum(-1) - s.sum(-1) ** 2 / big_n) / (big_g - 1)
    n0 = (big_n - (n ** 2).sum(-1) / big_n) / (big_g - 1)
    tau2 = np.maximum(0.0, (msb - np.nan_to_num(msw)) / n0)
    sigma2 = np.where(big_n > big_g, msw, 1.0)               # one value per cluster: only tau^2 + sigma^2 matters
    sigma2 = np.where(np.nan_to_num(sigma2) + np.nan_to_num(tau2) > 0, sigma2, 1.0)   # no spread: any model
    m = sigma2[..., None] * n + np.nan_to_num(tau2)[..., None] * n ** 2
    nn = big_n[..., None, None]
    k = (m[..., :, None] * np.eye(n.shape[-1]) - (m[..., :, None] * n[..., None, :] + n[..., :, None] * m[..., None, :])
         / nn + n[..., :, None] * n[..., None, :] * m.sum(-1)[..., None, None] / nn ** 2)
    wk = np.where(n[..., :, None] > 0, w[..., :, None], 0.0) * k
    df = np.einsum("...gg->...", wk) ** 2 / np.einsum("...gh,...hg->...", wk, wk)
  few = big_g < 2
  return ClusterMean(mean, np.where(few, np.nan, np.sqrt(var)), np.where(few, np.nan, df), big_n, big_g)


class ClusterBootstrap:
  """One set of cluster-bootstrap draws over a study's questions, shared by every statistic of a report.

  Protocol (tests reproduce it): the G distinct labels of `clusters` are ordered as `np.unique` orders them;
  `rng = np.random.default_rng(seed)` draws `rng.integers(0, G, size=(n_boot, G))`; `weights[b, g]` is how often
  question g was drawn in replicate b. A statistic over any subset of nodes uses the same weights (a question
  without nodes in the subset contributes nothing), so paired and joint statistics (differences, argmax over
  configurations) see the same resampled questions. For a subset holding every question this gives exactly
  the replicates of `cluster_bootstrap_ci` with the same seed.

  Attributes:
    labels: [G] the distinct cluster labels (np.unique order).
    weights: float64 [n_boot, G] draw multiplicities; each row sums to G.
  """

  def __init__(self, clusters, *, n_boot: int = 2000, seed: int = 0):
    if int(n_boot) < 1:
      raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    self.labels = np.unique(_as_1d("clusters", clusters))
    g = self.labels.size
    draws = np.random.default_rng(seed).integers(0, g, size=(int(n_boot), g)) if g else np.zeros((n_boot, 0), int)
    flat = (np.arange(int(n_boot))[:, None] * g + draws).reshape(-1)
    self.weights = np.bincount(flat, minlength=int(n_boot) * g).reshape(int(n_boot), g).astype(np.float64)

  def index(self, clusters) -> np.ndarray:
    """int [N] position of each label in `labels`. Raises ValueError for a label not drawn from."""
    clusters = _as_1d("clusters", clusters)
    pos = np.searchsorted(self.labels, clusters)
    pos = np.clip(pos, 0, max(self.labels.size - 1, 0))
    if clusters.size and (self.labels.size == 0 or np.any(self.labels[pos] != clusters)):
      raise ValueError("clusters holds labels the bootstrap was not built on; build it on every question")
    return pos

  def sums(self, values, clusters) -> tuple[np.ndarray, np.ndarray]:
    """Per-cluster (sum of values, count) over the non-NaN values: float64 [G] each."""
    values = _as_float_1d("values", values)
    keep = ~np.isnan(values)
    index = self.index(clusters)[keep]
    g = self.labels.size
    return (np.bincount(index, weights=values[keep], minlength=g),
            np.bincount(index, minlength=g).astype(np.float64))

  def mean_replicates(self, values, clusters) -> np.ndarray:
    """float64 [n_boot] replicate means of the non-NaN values (NaN where a replicate drew none of them)."""
    s, c = self.sums(values, clusters)
    return ratio_replicates(self.weights, s, c)

  def mean_ci(self, values, clusters, *, level: float = 0.95) -> tuple[float, float, float]:
    """(mean, lo, hi): the plain mean of the non-NaN values and the percentile interval of its replicates."""
    values = _as_float_1d("values", values)
    est = float(np.nanmean(values)) if np.any(~np.isnan(values)) else float("nan")
    return (est, *percentile_interval(self.mean_replicates(values, clusters), level))


def ratio_replicates(weights: np.ndarray, numer: np.ndarray, denom: np.ndarray) -> np.ndarray:
  """(weights @ numer) / (weights @ denom) per replicate, NaN where the denominator is 0 (float64 [n_boot])."""
  n, d = weights @ numer, weights @ denom
  with np.errstate(invalid="ignore", divide="ignore"):
    return np.where(d > 0, n / np.where(d > 0, d, 1.0), np.nan)


def percentile_interval(replicates, level: float = 0.95) -> tuple[float, float]:
  """(lo, hi) = the (1 - level) / 2 and (1 + level) / 2 quantiles (np.quantile, linear) of the non-NaN
  replicates; NaN when none is left. Raises ValueError for level outside (0, 1)."""
  if not 0.0 < level < 1.0:
    raise ValueError(f"level must lie in (0, 1), got {level}; e.g. 0.95 for a 95% interval")
  r = _as_float_1d("replicates", replicates)
  r = r[~np.isnan(r)]
  if r.size == 0:
    return float("nan"), float("nan")
  alpha = (1.0 - level) / 2.0
  lo, hi = np.quantile(r, [alpha, 1.0 - alpha])
  return float(lo), float(hi)


def bootstrap_pvalue(replicates) -> float:
  """Two-sided bootstrap p-value of "the statistic is 0": min(1, 2 min(P*(r <= 0), P*(r >= 0))) over the
  non-NaN replicates r (the percentile interval at level 1 - p just touches 0). NaN when none is left."""
  r = _as_float_1d("replicates", replicates)
  r = r[~np.isnan(r)]
  if r.size == 0:
    return float("nan")
  return float(min(1.0, 2.0 * min(np.mean(r <= 0), np.mean(r >= 0))))


class OracleFilter(NamedTuple):
  """What an oracle that keeps only positively aligned tokens would keep (see `oracle_filter`)."""
  n: int                      # nodes with a defined (non-NaN) alignment
  kept_share: float           # mean(a > 0): share of tokens kept (paper: about 52%)
  kept_mean: float            # mean(a | a > 0): mean alignment of a kept token
  gain: float                 # mean(a | a > 0) - mean(a): what filtering adds per token (alignment units)
  net_share: float            # sum(a) / sum(|a|) in [-1, 1]: share of the alignment mass left after cancellation
  positive_sum_share: float   # sum(a[a > 0]) / sum(|a|): share of the total |alignment| kept


def oracle_filter(alignment) -> OracleFilter:
  """The oracle filter of paper.md ("What the paper reports"): keep only tokens whose alignment is > 0.

  Over the N nodes with a defined (non-NaN) alignment a:
    kept_share = mean(a > 0); kept_mean = mean(a[a > 0]); gain = kept_mean - mean(a);
    net_share = sum(a) / sum(|a|): the share of the alignment magnitude that survives cancellation between
      helping and hurting tokens (1: all help, 0: they cancel, -1: all hurt);
    positive_sum_share = sum(a[a > 0]) / sum(|a|).
  All are well conditioned (bounded denominators). The paper's "10-15x more effective signal" reads as
  mean(a | a > 0) / |mean(a)|, which divides by a mean near 0 (values of 25-30 on the smoke study); it follows
  from the quantities above as positive_sum_share / (kept_share |net_share|), so a ratio of 10-15 at a kept
  share near 0.5 and a positive-sum share near 0.55 means |net_share| of about 0.07-0.11: most of the
  unfiltered signal cancels. The report shows net_share with an interval instead of the ratio.

  Args:
    alignment: [N] float in [-1, 1], NaN where undefined (dropped).
  Returns:
    OracleFilter. All but n are NaN when n == 0; kept_mean and gain are NaN when no a > 0; net_share and
    positive_sum_share are NaN when every a == 0.
  """
  a = _as_float_1d("alignment", alignment)
  a = a[~np.isnan(a)]
  nan = float("nan")
  if a.size == 0:
    return OracleFilter(0, nan, nan, nan, nan, nan)
  positive = a[a > 0]
  kept_mean = float(np.mean(positive)) if positive.size else nan
  total = float(np.sum(np.abs(a)))
  net_share = float(np.sum(a) / total) if total > 0 else nan
  positive_sum_share = float(np.sum(positive) / total) if total > 0 else nan
  return OracleFilter(int(a.size), float(np.mean(a > 0)), kept_mean, kept_mean - float(np.mean(a)), net_share,
                      positive_sum_share)


def weighted_ranks(x, weights) -> np.ndarray:
  """Average ranks of each value of x in the sample where value i appears weights[b, i] times, per row b.

  Equals scipy.stats.rankdata (average) of the concatenated sample (every copy of x_i gets the same rank), for
  all rows at once: rank = (weight of values < x_i) + (weight of values == x_i + 1) / 2. This is how a cluster
  bootstrap replicate (weights = the drawn multiplicity of each node's question) is ranked without building it.

  Args:
    x: [N] float without NaN (+-inf allowed).
    weights: [B, N] non-negative integer-valued floats.
  Returns:
    float64 [B, N] ranks (meaningless where weights[b, i] == 0).
  """
  x = _as_float_1d("x", x)
  weights = np.asarray(weights, np.float64)
  values, inverse = np.unique(x, return_inverse=True)
  order = np.argsort(inverse, kind="stable")
  cum = np.cumsum(weights[:, order], axis=1)
  ends = np.searchsorted(inverse[order], np.arange(values.size), side="right") - 1   # last member of each value
  at_end = cum[:, ends]                                                             # weight of values <= v
  below = np.concatenate([np.zeros((weights.shape[0], 1)), at_end[:, :-1]], axis=1)
  ranks = below + (at_end - below + 1.0) / 2.0
  return ranks[:, inverse.reshape(-1)]


def weighted_spearman(x, y, weights) -> np.ndarray:
  """Spearman correlation of the replicate samples given by multiplicities `weights` [B, N] (rows b); equals
  `spearman` of each concatenated sample. Pairs with NaN are dropped. float64 [B] (NaN where undefined)."""
  x, y = _as_float_1d("x", x), _as_float_1d("y", y)
  keep = ~(np.isnan(x) | np.isnan(y))
  w = np.asarray(weights, np.float64)[:, keep]
  rx, ry = weighted_ranks(x[keep], w), weighted_ranks(y[keep], w)
  total = w.sum(1, keepdims=True)
  with np.errstate(invalid="ignore", divide="ignore"):
    dx = rx - (w * rx).sum(1, keepdims=True) / total
    dy = ry - (w * ry).sum(1, keepdims=True) / total
    cov, vx, vy = (w * dx * dy).sum(1), (w * dx * dx).sum(1), (w * dy * dy).sum(1)
    rho = cov / np.sqrt(vx * vy)
  return np.where((vx > 1e-12) & (vy > 1e-12), np.clip(rho, -1, 1), np.nan)


def weighted_auroc(scores, labels, weights) -> np.ndarray:
  """AUROC of the replicate samples given by multiplicities `weights` [B, N]; equals `auroc` of each
  concatenated sample. NaN scores dropped. float64 [B] (NaN where a class is empty)."""
  scores = _as_float_1d("scores", scores)
  labels = _as_1d("labels", labels).astype(bool)
  keep = ~np.isnan(scores)
  w = np.asarray(weights, np.float64)[:, keep]
  labels = labels[keep]
  ranks = weighted_ranks(scores[keep], w)
  n_pos, n_neg = w[:, labels].sum(1), w[:, ~labels].sum(1)
  with np.errstate(invalid="ignore", divide="ignore"):
    u = (w[:, labels] * ranks[:, labels]).sum(1) - n_pos * (n_pos + 1) / 2
    return np.where((n_pos > 0) & (n_neg > 0), u / (n_pos * n_neg), np.nan)
