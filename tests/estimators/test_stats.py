"""Issue 14, item 8 (statistics made honest): the corrected noise ceiling against the exact toy, Holm, the
study-level cluster bootstrap, and the oracle filter's well-conditioned quantities; issue 25: the CR2 /
Bell-McCaffrey mean against the general matrix form and statsmodels, power against statsmodels' TTestPower."""
import jax
import numpy as np
import pandas as pd
import pytest
from scipy import stats as sp_stats
import statsmodels.api as sm
from statsmodels.stats.power import TTestPower

from opd_jax.estimators import stats

from opd_jax.estimators import sample_size
from opd_jax.validation import exact_toys
from opd_jax.report import ceiling

VERIFY = exact_toys.sum_mod_verifier(3)


def cos_rows(a, b):
  na, nb = np.linalg.norm(a, axis=-1), np.linalg.norm(b, axis=-1)
  with np.errstate(invalid="ignore", divide="ignore"):
    return np.where((na < 1e-12) | (nb < 1e-12), np.nan, (a * b).sum(-1) / (na * nb))


@pytest.fixture(scope="module")
def toy_nodes():
  """Distinct prefixes (depth 1-4) of 16 rollouts of the seed-0 toy (V = 4, H = 6) with exact P_succ, g* != 0."""
  student = exact_toys.ToyPolicy.random(vocab=4, horizon=6, scale=2.5, seed=0)
  rollouts = student.sample(16, key=jax.random.key(0))
  nodes, seen = [], set()
  for seq in rollouts:
    for t in range(1, 5):
      prefix = tuple(int(x) for x in seq[:t])
      if prefix in seen:
        continue
      seen.add(prefix)
      p, ps = student.probs(list(prefix)), student.exact_p_succ(list(prefix), VERIFY)
      g = p * (ps - p @ ps)                                   # exact g* by hand (numpy)
      if np.linalg.norm(g) > 1e-6:
        nodes.append((p, ps, g))
  assert len(nodes) >= 20
  return nodes


@pytest.mark.parametrize("R", [4, 8, 16])
def test_corrected_noise_ceiling_matches_true_expected_cosine_on_exact_toy(toy_nodes, R):
  # Rewards of the continuations are Bernoulli(exact P_succ) (tests/validation/test_exact_toys.py checks the estimator against
  # this binomial model). Truth: mean over nodes and trials of cos(g*_R, g*) where g*_R != 0 (the nodes whose
  # alignment the records define).
  rng = np.random.default_rng(R)
  trials = 60
  truth, direct, half = [], [], []
  for p, ps, g in toy_nodes:
    rewards = rng.random((trials, 4, R)) < ps[None, :, None]
    p_hat = rewards.mean(-1)
    g_hat = p * (p_hat - (p_hat @ p)[:, None])
    truth.append(cos_rows(g_hat, g[None]))
    direct.append(ceiling.expected_cosine(np.broadcast_to(p, (trials, 4)), rewards.sum(-1),
                                          np.full((trials, 4), R), n_sim=100, seed=R))
    a, b = rewards[..., :R // 2].mean(-1), rewards[..., R // 2:].mean(-1)
    half.append(cos_rows(p * (a - (a @ p)[:, None]), p * (b - (b @ p)[:, None])))
  truth, direct, half = (float(np.nanmean(np.array(x))) for x in (truth, direct, half))
  print(f"R={R}: true E cos {truth:.3f}, direct ceiling {direct:.3f}, split-half {half:.3f}")
  assert abs(direct - truth) < 0.05, (R, direct, truth)
  assert half < truth - 0.05                   # the split-half ceiling underestimates: why it is corrected


def test_holm_matches_hand_computed_and_step_down():
  got = stats.holm([0.01, 0.04, 0.03, np.nan, 0.005])
  # m = 4 sorted: 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 = 0.04 -> monotone max 0.06.
  np.testing.assert_allclose(got, [0.03, 0.06, 0.06, np.nan, 0.02])
  assert np.all(np.isnan(stats.holm([np.nan])))
  np.testing.assert_allclose(stats.holm([0.9, 0.8]), [1.0, 1.0])


def test_study_bootstrap_equals_cluster_bootstrap_ci_on_full_data_and_handles_subsets():
  rng = np.random.default_rng(0)
  clusters = np.repeat([f"q{i:02d}" for i in range(15)], rng.integers(1, 6, 15))
  values = rng.normal(size=clusters.size) + 0.3
  boot = stats.ClusterBootstrap(clusters, n_boot=400, seed=3)
  assert np.all(boot.weights.sum(1) == 15)
  est, lo, hi = boot.mean_ci(values, clusters)
  np.testing.assert_allclose((est, lo, hi), stats.cluster_bootstrap_ci(values, clusters, n_boot=400, seed=3),
                             rtol=1e-12)
  # Subset: replicate b = sum over drawn questions of the subset's sums / counts (loop reference).
  sub = np.isin(clusters, ["q01", "q03", "q07"])
  draws = np.random.default_rng(3).integers(0, 15, size=(400, 15))
  labels = np.unique(clusters)
  want = []
  for row in draws:
    chosen = np.concatenate([values[sub & (clusters == labels[i])] for i in row])
    want.append(chosen.mean() if chosen.size else np.nan)
  np.testing.assert_allclose(boot.mean_replicates(values[sub], clusters[sub]), want, rtol=1e-12)
  with pytest.raises(ValueError, match="labels"):
    boot.sums([1.0], ["nope"])


def test_bootstrap_pvalue_and_scipy_backed_statistics():
  assert stats.bootstrap_pvalue([1.0, 2.0, 3.0, -1.0]) == 0.5
  assert stats.bootstrap_pvalue([1.0, 2.0]) == 0.0
  np.testing.assert_allclose(stats.normal_quantile(0.975), 1.959964, atol=1e-6)
  rng = np.random.default_rng(1)
  x, y = rng.normal(size=50), rng.normal(size=50)
  np.testing.assert_allclose(stats.spearman(x, y), sp_stats.spearmanr(x, y).statistic, atol=1e-12)


def test_oracle_filter_quantities_and_identity_with_the_papers_ratio():
  a = np.array([0.5, -0.2, 0.1, np.nan, -0.1, 0.3])
  got = stats.oracle_filter(a)
  # 5 defined; 3 positive; mean 0.12; kept mean 0.3; sum |a| 1.2; net 0.6 / 1.2.
  np.testing.assert_allclose([got.kept_share, got.kept_mean, got.gain, got.net_share, got.positive_sum_share],
                             [0.6, 0.3, 0.18, 0.5, 0.75])
  # The paper's ratio mean(a | a > 0) / |mean(a)| = positive_sum_share / (kept_share |net_share|).
  np.testing.assert_allclose(0.3 / 0.12, got.positive_sum_share / (got.kept_share * abs(got.net_share)))
  none = stats.oracle_filter([-0.5, -0.1])
  assert none.kept_share == 0.0 and np.isnan(none.kept_mean) and none.net_share == -1.0
  assert stats.oracle_filter([np.nan]).n == 0


def test_weighted_rank_statistics_equal_scipy_on_the_concatenated_replicates():
  rng = np.random.default_rng(2)
  clusters = np.repeat(np.arange(8), 5)
  x = np.round(rng.normal(size=40), 1)                      # ties
  x[3] = np.inf
  y = np.round(x + rng.normal(size=40), 1)
  y[5] = np.nan
  boot = stats.ClusterBootstrap(clusters, n_boot=30, seed=1)
  w = boot.weights[:, boot.index(clusters)]
  rho, auc = stats.weighted_spearman(x, y, w), stats.weighted_auroc(x, y > 0, w)
  for b in range(30):
    idx = np.repeat(np.arange(40), w[b].astype(int))         # the concatenated replicate sample
    xs, ys = x[idx], y[idx]
    keep = ~np.isnan(ys)
    np.testing.assert_allclose(rho[b], sp_stats.spearmanr(sp_stats.rankdata(xs[keep]),
                                                          sp_stats.rankdata(ys[keep])).statistic, atol=1e-10)
    lab = ys > 0
    u = sp_stats.mannwhitneyu(sp_stats.rankdata(xs)[lab], sp_stats.rankdata(xs)[~lab]).statistic
    np.testing.assert_allclose(auc[b], u / (lab.sum() * (~lab).sum()), atol=1e-10)


def cr2_by_matrices(y, g):
  """CR2 variance and Bell-McCaffrey df of the mean in the general matrix form (numpy, N x N), the working model
  Omega = sigma^2 I + tau^2 (block of ones per cluster) from the one-way ANOVA (pandas): Bell & McCaffrey 2002,
  Imbens & Kolesar 2016. A_g = (I - H_gg)^(-1/2) by eigendecomposition; v = e' (I - H) P P' (I - H) e."""
  n = y.size
  x = np.ones((n, 1))
  xtx_inv = np.linalg.inv(x.T @ x)
  h = x @ xtx_inv @ x.T
  e = y - h @ y
  p = np.zeros((n, np.unique(g).size))
  meat = 0.0
  for col, label in enumerate(np.unique(g)):
    idx = np.flatnonzero(g == label)
    vals, vecs = np.linalg.eigh(np.eye(idx.size) - h[np.ix_(idx, idx)])
    a_g = vecs @ np.diag(vals ** -0.5) @ vecs.T
    u = x[idx].T @ a_g @ e[idx]
    meat = meat + u @ u.T
    p[idx, col] = (a_g @ x[idx] @ xtx_inv).ravel()
  var = float((xtx_inv @ np.atleast_2d(meat) @ xtx_inv)[0, 0])
  frame = pd.DataFrame({"y": y, "g": g})
  by = frame.groupby("g")["y"]
  big_g = by.ngroups
  if big_g == n:                                            # one value per cluster: Omega is a multiple of I
    omega = np.eye(n)
  else:
    msw = float(((frame["y"] - by.transform("mean")) ** 2).sum() / (n - big_g))
    msb = float((by.count() * (by.mean() - y.mean()) ** 2).sum() / (big_g - 1))
    np.testing.assert_allclose(msb / msw, sp_stats.f_oneway(*[v.to_numpy() for _, v in by]).statistic, rtol=1e-10)
    n0 = (n - (by.count() ** 2).sum() / n) / (big_g - 1)
    omega = msw * np.eye(n) + max(0.0, (msb - msw) / n0) * (g[:, None] == g[None, :])
  quad = (np.eye(n) - h) @ p @ p.T @ (np.eye(n) - h)
  np.testing.assert_allclose(e @ quad @ e, var, rtol=1e-10)           # the quadratic form is the CR2 variance
  bo = quad @ omega
  return var, np.trace(bo) ** 2 / np.trace(bo @ bo)


def sums_of(y, g):
  labels, idx = np.unique(g, return_inverse=True)
  return (np.bincount(idx, y, labels.size), np.bincount(idx, y ** 2, labels.size),
          np.bincount(idx, minlength=labels.size))


def test_cr2_mean_equals_the_general_matrix_form_and_statsmodels_cr1_when_balanced():
  rng = np.random.default_rng(5)
  for sizes in ([1, 3, 8, 2, 5, 1, 12], [4] * 6, [1] * 9):
    g = np.repeat(np.arange(len(sizes)), sizes)
    y = rng.normal(size=len(sizes))[g] * 0.7 + rng.normal(size=g.size) + 0.2
    got = stats.cr2_mean(*sums_of(y, g))
    var, df = cr2_by_matrices(y, g)
    np.testing.assert_allclose([got.mean, got.se ** 2, got.df], [y.mean(), var, df], rtol=1e-9)
    if len(set(sizes)) == 1:                                   # balanced: CR2 = statsmodels CR1, df = G - 1
      fit = sm.OLS(y, np.ones((y.size, 1))).fit(cov_type="cluster", cov_kwds={"groups": g}, use_t=True)
      np.testing.assert_allclose([got.se, got.df], [fit.bse[0], len(sizes) - 1], rtol=1e-9)
      lo, hi, p = sample_size.t_test(got.mean, got.se, got.df, 0.9)
      np.testing.assert_allclose([lo, hi, p], [*fit.conf_int(0.1)[0], fit.pvalues[0]], rtol=1e-9)
    if sizes == [1] * 9:                                       # one value per cluster: the one-sample t test
      np.testing.assert_allclose(sample_size.t_test(got.mean, got.se, got.df)[2], sp_stats.ttest_1samp(y, 0).pvalue)
  # Batched over leading axes, absent clusters (count 0), one cluster, no spread.
  s, ss, n = sums_of(y, g)
  batch = stats.cr2_mean(np.stack([s, np.r_[s[:3], 0, s[4:]]]), np.stack([ss, np.r_[ss[:3], 0, ss[4:]]]),
                         np.stack([n, np.r_[n[:3], 0, n[4:]]]))
  keep = g != 3
  alone = stats.cr2_mean(*sums_of(y[keep], g[keep]))
  np.testing.assert_allclose(batch.se, [got.se, alone.se], rtol=1e-12)
  np.testing.assert_allclose(batch.df, [got.df, alone.df], rtol=1e-12)
  assert np.isnan(stats.cr2_mean([2.0], [3.0], [2]).se)
  flat = stats.cr2_mean(np.zeros(5), np.zeros(5), np.full(5, 3))
  assert flat.se == 0 and sample_size.t_test(flat.mean, flat.se, flat.df)[2] == 1.0
  with pytest.raises(ValueError, match="one shape"):
    stats.cr2_mean([1.0], [1.0, 2.0], [1])


def test_detectable_difference_and_questions_needed_match_statsmodels_ttestpower():
  se, df, g = 0.08, 11.0, 12
  mde = sample_size.detectable_difference(se, df, alpha=0.05)
  # TTestPower: one-sample t with nobs = df + 1; its effect size is d / (se sqrt(nobs)).
  want = TTestPower().solve_power(nobs=df + 1, alpha=0.05, power=0.8) * se * np.sqrt(df + 1)
  np.testing.assert_allclose(mde, want, rtol=1e-5)
  need = sample_size.questions_needed(0.1, se, df, g, alpha=0.01)
  nobs = TTestPower().solve_power(effect_size=0.1 / (se * np.sqrt(df + 1)), alpha=0.01, power=0.8)
  np.testing.assert_allclose(need, nobs * g / (df + 1), rtol=1e-5)
  np.testing.assert_allclose(sample_size.questions_needed(mde, se, df, g), g, rtol=1e-5)   # the budget detects its MDE
  big = sample_size.detectable_difference(1.0, 1e6, alpha=0.05)                            # normal limit (Bloom 1995)
  np.testing.assert_allclose(big, stats.normal_quantile(0.975) + stats.normal_quantile(0.8), rtol=1e-4)
  assert np.isnan(sample_size.detectable_difference(0.0, 5.0)) and np.isnan(sample_size.questions_needed(0.1, 0.1, 0.5, 3))
