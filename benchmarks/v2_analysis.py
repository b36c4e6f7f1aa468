"""Validation v2's primary test (issue 47, item 5): does a predictor rank the training gains within strata?

The statistic is the mean over strata of Spearman's rho between a predictor's value and the gain of the
configurations of that stratum (strata: the teacher held fixed, docs/data/validation_v2/PLAN.md). Its null
distribution permutes the gains within each stratum (exactly, over every within-stratum permutation, when there are
at most `n_perm` of them; else `n_perm` random ones). Its interval resamples, in each draw and independently:
  - the configurations within each stratum (with replacement);
  - the study's questions (the predictor: a ratio of per-question sums, num @ w / den @ w);
  - the evaluation's questions (the same draw for every run: the runs share them, paired);
  - each configuration's seed replicates (the gain: the mean over the drawn replicates).
Spearman's rho is `validate_training.rank_correlations`'s (v1's table); benchmarks/validate_v2.py reads the
committed CSVs into these arrays.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from benchmarks import validate_training


def within_strata(x: np.ndarray, y: np.ndarray, strata) -> float:
  """Mean over strata of Spearman's rho of x and y [C] within each stratum (strata: [C] labels); strata where rho
  is undefined are left out (NaN when all are)."""
  strata = np.asarray(strata)
  rhos = [validate_training.rank_correlations(x[strata == s], y[strata == s])[0]
          for s in dict.fromkeys(strata.tolist())]
  rhos = [r for r in rhos if np.isfinite(r)]
  return float(np.mean(rhos)) if rhos else math.nan


def permutation_p(x: np.ndarray, y: np.ndarray, strata, n_perm: int = 10_000, seed: int = 0) -> tuple[float, int]:
  """(one-sided p of `within_strata` against gains permuted within strata, permutations used). Exact (every
  within-stratum permutation, p = the share at or above the observed) when their number is at most n_perm, else
  (1 + #{permuted >= observed}) / (1 + n_perm) over n_perm random ones (Phipson & Smyth 2010)."""
  strata = np.asarray(strata)
  groups = [np.flatnonzero(strata == s) for s in dict.fromkeys(strata.tolist())]
  observed = within_strata(x, y, strata)
  total = math.prod(math.factorial(len(g)) for g in groups)
  eps = 1e-12                                  # ties with the observed statistic count as at or above it
  if total <= n_perm:
    count = 0
    for perms in itertools.product(*(itertools.permutations(g) for g in groups)):
      yp = np.array(y, float)
      for g, p in zip(groups, perms):
        yp[g] = np.asarray(y, float)[list(p)]
      count += within_strata(x, yp, strata) >= observed - eps
    return count / total, total
  rng = np.random.default_rng(seed)
  count = 0
  for _ in range(n_perm):
    yp = np.array(y, float)
    for g in groups:
      yp[g] = yp[rng.permutation(g)]
    count += within_strata(x, yp, strata) >= observed - eps
  return (1 + count) / (1 + n_perm), n_perm


def gains(diffs: list[np.ndarray], eidx=None, seeds=None) -> np.ndarray:
  """Each configuration's gain [C]: the mean over its seed replicates (or the drawn ones, `seeds[c]`) of the mean
  over evaluation questions (or the drawn ones, `eidx`) of after - before. diffs[c]: [S_c, E]."""
  out = []
  for c, d in enumerate(diffs):
    d = d if seeds is None else d[seeds[c]]
    out.append(float((d if eidx is None else d[:, eidx]).mean()))
  return np.asarray(out)


def interval(num: np.ndarray, den: np.ndarray, diffs: list[np.ndarray], strata, n_boot: int = 2000, seed: int = 0,
             level: float = 0.95) -> tuple[float, float, float]:
  """(statistic, lo, hi): `within_strata` of the predictor num @ 1 / den @ 1 [C] (num, den: [C, Q] per-question
  sums) and the gains (`gains`), with a percentile interval over draws that resample configurations within strata,
  study questions, evaluation questions and seed replicates (module docstring)."""
  strata = np.asarray(strata)
  n_q, n_e = num.shape[1], diffs[0].shape[1]
  with np.errstate(invalid="ignore", divide="ignore"):
    x = num.sum(1) / den.sum(1)
  stat = within_strata(x, gains(diffs), strata)
  groups = [np.flatnonzero(strata == s) for s in dict.fromkeys(strata.tolist())]
  rng = np.random.default_rng(seed)
  draws = []
  for _ in range(n_boot):
    w = np.bincount(rng.integers(0, n_q, n_q), minlength=n_q).astype(float)
    eidx = rng.integers(0, n_e, n_e)
    seeds = [rng.integers(0, len(d), len(d)) for d in diffs]
    pick = np.concatenate([rng.choice(g, len(g)) for g in groups])
    with np.errstate(invalid="ignore", divide="ignore"):
      xb = (num @ w) / (den @ w)
    draws.append(within_strata(xb[pick], gains(diffs, eidx, seeds)[pick], strata[pick]))
  draws = np.asarray(draws)
  draws = draws[np.isfinite(draws)]
  a = (1 - level) / 2
  lo, hi = (np.quantile(draws, [a, 1 - a]) if len(draws) else (math.nan, math.nan))
  return stat, float(lo), float(hi)
