"""The exact toy experiment's analysis (`opd_jax/validation/toy_training.py`): bootstrap weights over its runs,
Spearman correlations of predictors with the training gain with intervals, and what a predictor says beyond the
sign of the gain (`beyond_sign`)."""
from __future__ import annotations

import itertools
from typing import Sequence

import numpy as np
import pandas as pd

from opd_jax.estimators import stats


def bootstrap_weights(df: pd.DataFrame, by: Sequence[str] = (), *, n_boot: int = 1000,
                      seed: int = 0) -> np.ndarray:
  """Multiplicities float64 [n_boot, len(df)] of each configuration in bootstrap replicates.

  by = (): resample configurations (rows) as if independent, `stats.ClusterBootstrap` over the row index. by =
  ("teacher",): resample the distinct teachers with replacement, every configuration of a drawn teacher comes
  along (a cluster bootstrap). by = ("teacher", "seed"): teachers and seeds drawn independently (seed + j for
  factor j), a configuration's multiplicity the product of its teacher's and its seed's (a two-way bootstrap).
  """
  if not by:
    return stats.ClusterBootstrap(np.arange(len(df)), n_boot=n_boot, seed=seed).weights
  w = np.ones((n_boot, len(df)))
  for j, factor in enumerate(by):
    boot = stats.ClusterBootstrap(df[factor].to_numpy(), n_boot=n_boot, seed=seed + j)
    w = w * boot.weights[:, boot.index(df[factor].to_numpy())]
  return w


def rho_interval(x, y, weights: np.ndarray, level: float = 0.95) -> tuple[float, float, float]:
  """(rho, lo, hi): `stats.spearman` of x and y and the percentile interval of its replicates under `weights`
  ([n_boot, len(x)] multiplicities, `bootstrap_weights`; `stats.weighted_spearman`)."""
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  reps = stats.weighted_spearman(x, y, weights)
  return (stats.spearman(x, y), *stats.percentile_interval(reps, level))


def spearman_table(df: pd.DataFrame, predictor_names: Sequence[str], targets: Sequence[str], *,
                   n_boot: int = 1000, level: float = 0.95, seed: int = 0, by: Sequence[str] = ()) -> pd.DataFrame:
  """Spearman rho (`stats.spearman`, scipy.stats.spearmanr) of each predictor with each target over the
  configurations, with a percentile bootstrap interval (`bootstrap_weights(df, by)`: by = () resamples
  configurations, ("teacher",) teachers; the same resamples for every pair). NaN predictor values drop their
  configuration from that pair.

  Returns:
    Rows (predictor, target, rho, lo, hi, n).
  """
  weights = bootstrap_weights(df, by, n_boot=n_boot, seed=seed)
  rows = []
  for pred, target in itertools.product(predictor_names, targets):
    x, y = df[pred].to_numpy(np.float64), df[target].to_numpy(np.float64)
    rho, lo, hi = rho_interval(x, y, weights, level)
    rows.append(dict(predictor=pred, target=target, rho=rho, lo=lo, hi=hi,
                     n=int(np.sum(~np.isnan(x) & ~np.isnan(y)))))
  return pd.DataFrame(rows)


def beyond_sign(df: pd.DataFrame, target: str, predictor_names: Sequence[str], *, n_boot: int = 1000,
                level: float = 0.95, seed: int = 0) -> dict:
  """What each predictor says about `target` (a dJ column) beyond its sign, with teacher-resampled intervals.

  Every interval resamples the 10 teachers (`bootstrap_weights(df, ("teacher",))`; "naive" ones resample
  configurations, "teacher_seed" teachers and student seeds). Keys, per predictor x:
    rho: (rho, lo, hi) of x with the target; rho_naive, rho_teacher_seed: the same rho, other intervals.
    helpful: (rho, lo, hi) over the configurations with target > 0 (same teacher draws, restricted).
    helpful_success: rho over the helpful configurations of the success-conditioned teachers alone (no interval:
      4 teachers).
  and "sign_only": (rho, lo, hi) of sign(target) with the target, the ceiling of a predictor that knows only
  whether a configuration helps; "sign_then_<x>": the Spearman of the predictor that ranks by the sign first and
  by x within it (sign(target) * 10 + rank share of x), and "gain_<x>": its difference from sign_only, paired
  replicates: what x adds to the sign. n, n_helpful: configuration counts.
  """
  y = df[target].to_numpy(np.float64)
  w = {k: bootstrap_weights(df, by, n_boot=n_boot, seed=seed)
       for k, by in (("teacher", ("teacher",)), ("naive", ()), ("teacher_seed", ("teacher", "seed")))}
  helpful = y > 0
  success = df["teacher"].str.startswith("success").to_numpy()
  sign = np.sign(y)
  sign_reps = stats.weighted_spearman(sign, y, w["teacher"])
  out = {"target": target, "n": int(len(y)), "n_helpful": int(helpful.sum()),
         "sign_only": (stats.spearman(sign, y), *stats.percentile_interval(sign_reps, level))}
  for name in predictor_names:
    x = df[name].to_numpy(np.float64)
    res = {"rho": rho_interval(x, y, w["teacher"], level), "rho_naive": rho_interval(x, y, w["naive"], level),
           "rho_teacher_seed": rho_interval(x, y, w["teacher_seed"], level),
           "helpful": rho_interval(x[helpful], y[helpful], w["teacher"][:, helpful], level),
           "helpful_success": stats.spearman(x[helpful & success], y[helpful & success])}
    finite = ~np.isnan(x)
    share = np.full_like(x, np.nan)
    share[finite] = stats.rankdata(x[finite]) / (finite.sum() + 1)              # in (0, 1): below the sign's step
    combo = sign * 10.0 + share
    combo_reps = stats.weighted_spearman(combo, y, w["teacher"])
    res["sign_then"] = (stats.spearman(combo, y), *stats.percentile_interval(combo_reps, level))
    keep = finite                                                                  # sign_only on the same rows
    gain_reps = combo_reps - stats.weighted_spearman(sign[keep], y[keep], w["teacher"][:, keep])
    res["gain"] = (res["sign_then"][0] - stats.spearman(sign[keep], y[keep]),
                   *stats.percentile_interval(gain_reps, level))
    out[name] = res
  return out
