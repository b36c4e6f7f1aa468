"""Validation v2's primary test (benchmarks/v2_analysis.py) against independent computations: scipy's Spearman
per stratum, a brute-force enumeration of the within-stratum permutations, and planted cases whose p-value and
interval are known exactly."""
import itertools

import numpy as np
import scipy.stats

from benchmarks import v2_analysis


def test_the_statistic_is_the_mean_of_scipys_spearman_per_stratum():
  rng = np.random.default_rng(0)
  x, y = rng.normal(size=14), rng.normal(size=14)
  strata = ["a"] * 8 + ["b"] * 6
  want = np.mean([scipy.stats.spearmanr(x[:8], y[:8])[0], scipy.stats.spearmanr(x[8:], y[8:])[0]])
  assert np.isclose(v2_analysis.within_strata(x, y, strata), want)
  y[:8] = 1.0                                          # a constant stratum has no rho: the other one alone
  assert np.isclose(v2_analysis.within_strata(x, y, strata), scipy.stats.spearmanr(x[8:], y[8:])[0])


def test_the_exact_p_is_the_share_of_within_stratum_permutations_at_or_above_the_observed():
  rng = np.random.default_rng(1)
  x, y = rng.normal(size=7), rng.normal(size=7)
  strata = np.array([0, 0, 0, 1, 1, 1, 1])
  observed = np.mean([scipy.stats.spearmanr(x[:3], y[:3])[0], scipy.stats.spearmanr(x[3:], y[3:])[0]])
  stats = [np.mean([scipy.stats.spearmanr(x[:3], y[list(a)])[0], scipy.stats.spearmanr(x[3:], y[list(b)])[0]])
           for a in itertools.permutations(range(3)) for b in itertools.permutations(range(3, 7))]
  p, n = v2_analysis.permutation_p(x, y, strata, n_perm=1000)
  assert n == 6 * 24 and np.isclose(p, np.mean(np.asarray(stats) >= observed - 1e-12))


def test_a_perfect_ranking_in_every_stratum_has_the_smallest_p():
  x = np.arange(8.0)
  strata = [0] * 4 + [1] * 4
  assert v2_analysis.permutation_p(x, 2 * x + 1, strata, n_perm=10_000) == (1 / 576, 576)    # only the identity
  x12 = np.arange(12.0)                                # 720^2 permutations: 200 random ones, (1 + 0) / (1 + 200)
  p, n = v2_analysis.permutation_p(x12, x12, [0] * 6 + [1] * 6, n_perm=200, seed=3)
  assert (p, n) == (1 / 201, 200)


def test_gains_and_the_interval_of_a_noiseless_monotone_case():
  diffs = [np.full((2, 5), g) for g in (0.1, 0.2, 0.3, 0.05, 0.15, 0.25)]     # [seeds, eval questions] each
  diffs[0] = np.array([[0.05] * 5, [0.15] * 5])                                 # two seeds, mean 0.1
  diffs[1] = np.array([[0.2, 0.2, 0.2, 0.2, 0.2], [0.1, 0.3, 0.2, 0.2, 0.2]])   # mean 0.2 either way over all
  assert np.allclose(v2_analysis.gains(diffs), [0.1, 0.2, 0.3, 0.05, 0.15, 0.25])
  assert np.isclose(v2_analysis.gains([diffs[0]], seeds=[np.array([1, 1])])[0], 0.15)
  assert np.isclose(v2_analysis.gains([diffs[1]], eidx=np.array([1, 1]))[0], 0.25)
  num = np.repeat(np.array([[1.0], [2.0], [3.0], [1.0], [2.0], [3.0]]), 4, axis=1)   # predictor 1, 2, 3 per stratum
  den = np.ones_like(num)
  strata = [0, 0, 0, 1, 1, 1]
  stat, lo, hi = v2_analysis.interval(num, den, diffs[:1] + [np.full((2, 5), 0.2)] + diffs[2:], strata, n_boot=200)
  assert (stat, lo, hi) == (1.0, 1.0, 1.0)     # every draw keeps the order within a stratum (seeds of config 0 too)
  num[1, 0] = -20.0                            # one study question reverses configurations 0 and 1 when drawn often
  stat, lo, hi = v2_analysis.interval(num, den, diffs[:1] + [np.full((2, 5), 0.2)] + diffs[2:], strata, n_boot=400)
  assert stat == 0.75 and lo < 0.75 <= hi      # x = (1, -3.5, 3): rho 0.5 in stratum 0, 1 in stratum 1
