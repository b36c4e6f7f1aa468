"""Power and sample size for the verdict's paired t comparisons (docs/results.md, "A power statement that holds"):
t intervals, the power of a t test (noncentral t, scipy.stats), its expectation over the standard error's own
uncertainty, the difference detectable with a given power, and the questions needed to detect one."""
from __future__ import annotations

import numpy as np
from scipy import optimize
from scipy import stats as sp_stats

_U, _UW = np.polynomial.legendre.leggauss(96)     # Gauss-Legendre nodes and weights on (0, 1) for
_U, _UW = (_U + 1.0) / 2.0, _UW / 2.0             # expected_t_power


def t_test(mean, se, df, level: float = 0.95) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Two-sided t interval and p-value of "the mean is 0": mean -+ t_{(1 + level) / 2, df} se and
  2 P(T_df > |mean / se|) (scipy.stats.t; df need not be an integer). se = 0: the interval is the point, p = 1
  when mean = 0 else 0. NaN where se or df is NaN. Arrays broadcast; returns (lo, hi, p).
  Raises ValueError for level outside (0, 1)."""
  if not 0.0 < level < 1.0:
    raise ValueError(f"level must lie in (0, 1), got {level}; e.g. 0.95 for a 95% interval")
  mean, se, df = (np.asarray(x, np.float64) for x in (mean, se, df))
  with np.errstate(invalid="ignore", divide="ignore"):
    half = np.where(se > 0, sp_stats.t.ppf((1.0 + level) / 2.0, df) * se, 0.0)
    p = np.where(se > 0, 2.0 * sp_stats.t.sf(np.abs(mean) / se, df), np.where(mean == 0, 1.0, 0.0))
  bad = np.isnan(se) | np.isnan(df) | np.isnan(mean)
  return (np.where(bad, np.nan, mean - half), np.where(bad, np.nan, mean + half), np.where(bad, np.nan, p))


def t_power(nc: float, df: float, alpha: float) -> float:
  """Power of the two-sided t test at level alpha with df degrees of freedom when the true mean is nc standard
  errors: P(T > c) + P(T < -c), T ~ noncentral t(df, nc), c = t_{1 - alpha / 2, df} (scipy.stats.nct; the same
  as statsmodels' TTestPower.power with nobs = df + 1, effect size nc / sqrt(nobs), where that one is finite)."""
  c = sp_stats.t.ppf(1.0 - alpha / 2.0, df)
  return float(sp_stats.nct.sf(c, df, nc) + np.nan_to_num(sp_stats.nct.sf(c, df, -nc)))


def expected_t_power(nc: float, df: float, alpha: float, se_df: float) -> float:
  """Expected power of the two-sided t test when the true mean is nc *estimated* standard errors.

  The standard error se_hat behind a planned difference d = nc se_hat is itself estimated, with
  se_hat^2 / se^2 ~ chi2(se_df) / se_df, so the true noncentrality is nc sqrt(X / se_df), X ~ chi2(se_df). The
  expected power over X (Julious & Owen 2006, Pharmaceutical Statistics 5(1), "sample size calculations allowing
  for uncertainty about the variance"; O'Hagan, Stevens & Campbell 2005, Pharmaceutical Statistics 4(3), call
  the Bayesian version assurance):
    E_X[t_power(nc sqrt(X / se_df), df, alpha)] = int_0^1 t_power(nc sqrt(F^-1(u) / se_df), df, alpha) du,
  F the chi2(se_df) cdf, computed with 96-node Gauss-Legendre quadrature in u (deterministic; tests check it
  against scipy.integrate.quad). It is also the frequentist probability that a study planted with the difference
  nc se_hat found by an independent study like this one (same df) rejects: what "detectable with 80% power" must
  mean when se is estimated. se_df = inf: t_power.

  Args:
    nc: the planned difference in estimated standard errors, >= 0.
    df: degrees of freedom of the test.
    alpha: two-sided level of the test.
    se_df: degrees of freedom of the standard error estimate (> 0; inf: known).
  Returns:
    float in [alpha, 1).
  """
  if not np.isfinite(se_df):
    return t_power(nc, df, alpha)
  ratio = np.sqrt(sp_stats.chi2.ppf(_U, se_df) / se_df)
  c = sp_stats.t.ppf(1.0 - alpha / 2.0, df)
  power = sp_stats.nct.sf(c, df, nc * ratio) + np.nan_to_num(sp_stats.nct.sf(c, df, -nc * ratio))
  return float(_UW @ power)


def _power_fn(df: float, alpha: float, se_df: float | None):
  if se_df is None:
    return lambda nc, d=df: t_power(nc, d, alpha)
  return lambda nc, d=df: expected_t_power(nc, d, alpha, se_df)


def detectable_difference(se: float, df: float, *, alpha: float = 0.05, power: float = 0.8,
                          se_df: float | None = None) -> float:
  """Minimum detectable difference (Bloom 1995, Evaluation Review 19(5), with the noncentral t): the true
  difference d = nc se at which the two-sided t test at level alpha with df degrees of freedom rejects with
  probability `power` (t_power). Large df: (z_{1 - alpha / 2} + z_power) se. NaN unless se > 0 and df >= 1.

  se_df (issue 33, item 3): se is an estimate with se_df degrees of freedom (pass df); then d = nc se with
  expected_t_power(nc, df, alpha, se_df) = power, so that planting d in a new study of the same size rejects with
  probability `power` on average over the se that produced d (without it: 0.67 instead of 0.8 at 10 questions,
  benchmarks/verdict_calibration.py --cells=planted). None: se known (the formula above)."""
  if not (np.isfinite(se) and se > 0 and np.isfinite(df) and df >= 1):
    return float("nan")
  fn = _power_fn(df, alpha, se_df)
  return float(optimize.brentq(lambda nc: fn(nc) - power, 0.0, 1e4) * se)


def questions_needed(effect: float, se: float, df: float, n_questions: int, *, alpha: float = 0.05,
                     power: float = 0.8, se_df: float | None = None) -> float:
  """Questions at which a true difference `effect` is detected with probability `power` (two-sided, level alpha).

  The study is read as df + 1 "effective" questions (equal to G when questions are balanced; fewer when nodes per
  question are unequal) with a per-effective-question standard deviation se sqrt(df + 1); more questions of the
  same kind scale both: nobs' effective questions give nc = effect sqrt(nobs') / (se sqrt(df + 1)) and df nobs' - 1
  (statsmodels TTestPower's one-sample t model), nobs' >= 2. Returns nobs' G / (df + 1) (not rounded); NaN unless
  se > 0, df >= 1 and effect > 0. se_df: se is estimated with se_df degrees of freedom (pass df): the power is
  expected_t_power's, averaged over the standard deviation the estimate could come from (Julious & Owen 2006);
  at nobs' = df + 1 this inverts detectable_difference with the same se_df. None: se known."""
  if not (np.isfinite(se) and se > 0 and np.isfinite(df) and df >= 1 and effect > 0):
    return float("nan")
  sd = se * np.sqrt(df + 1.0)

  def gap(nobs):
    return _power_fn(nobs - 1.0, alpha, se_df)(effect * np.sqrt(nobs) / sd) - power

  if gap(2.0) >= 0:                                        # two effective questions already suffice
    return float(2.0 * n_questions / (df + 1.0))
  hi = 4.0
  while gap(hi) < 0:
    if hi > 1e12:
      return float("inf")
    hi *= 2.0
  return float(optimize.brentq(gap, hi / 2.0, hi) * n_questions / (df + 1.0))
