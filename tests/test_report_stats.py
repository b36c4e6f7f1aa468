"""Issue 14, item 8 (statistics made honest): the corrected noise ceiling against the exact toy, Holm, the
study-level cluster bootstrap, and the oracle filter's well-conditioned quantities."""
import jax
import numpy as np
import pytest
from scipy import stats as sp_stats

from opd_jax import stats
from opd_jax import toy
from opd_jax.report import ceiling

VERIFY = toy.sum_mod_verifier(3)


def cos_rows(a, b):
  na, nb = np.linalg.norm(a, axis=-1), np.linalg.norm(b, axis=-1)
  with np.errstate(invalid="ignore", divide="ignore"):
    return np.where((na < 1e-12) | (nb < 1e-12), np.nan, (a * b).sum(-1) / (na * nb))


@pytest.fixture(scope="module")
def toy_nodes():
  """Distinct prefixes (depth 1-4) of 16 rollouts of the seed-0 toy (V = 4, H = 6) with exact P_succ, g* != 0."""
  student = toy.ToyPolicy.random(vocab=4, horizon=6, scale=2.5, seed=0)
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
  # Rewards of the continuations are Bernoulli(exact P_succ) (tests/test_toy.py checks the estimator against
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
