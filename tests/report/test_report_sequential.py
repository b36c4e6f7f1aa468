"""Issue 33, items 2 and 3: the sequential design's boundaries against independent computations, the decisions it
reads on constructed node tables, the fixed design unchanged, and a power statement that holds when se is
estimated."""
import math

import numpy as np
import pytest
from scipy import integrate
from scipy import stats as sp_stats

from benchmarks import verdict_calibration as calibration
from opd_jax.estimators import sample_size
from opd_jax.report import decision
from opd_jax.report import sequential


@pytest.mark.parametrize("spending", ["obrien_fleming", "pocock"])
@pytest.mark.parametrize("alpha", [0.05, 0.05 / 3])
def test_two_look_boundaries_spend_alpha_under_the_bivariate_normal(alpha, spending):
  """P(|Z_1| >= c_1) = alpha*(t_1) and P(|Z_1| < c_1, |Z_2| < c_2) = 1 - alpha, corr(Z_1, Z_2) = sqrt(t_1),
  by scipy's bivariate normal cdf (Genz), not by the grid recursion."""
  t1 = 0.4
  c = sequential.boundaries((t1, 1.0), alpha, spending)
  first = sequential.spent(t1, alpha, spending)
  np.testing.assert_allclose(2 * sp_stats.norm.sf(c[0]), first, rtol=1e-10)
  r = math.sqrt(t1)
  mvn = sp_stats.multivariate_normal([0.0, 0.0], [[1.0, r], [r, 1.0]])
  inside = mvn.cdf(c, lower_limit=-c)
  np.testing.assert_allclose(1 - inside, alpha, rtol=2e-4)
  if spending == "obrien_fleming":                      # Lan & DeMets 1983: spends alpha*(t) = 2 - 2 Phi(z / sqrt t)
    np.testing.assert_allclose(first, 2 * sp_stats.norm.sf(sp_stats.norm.isf(alpha / 2) / math.sqrt(t1)))


def test_four_look_boundaries_match_a_seeded_brownian_motion():
  """Cumulative z statistics of a simulated Brownian motion cross the boundaries at each look with the spent
  increments, and at some look with probability alpha (the last look spends what is left)."""
  fractions, alpha = (0.25, 0.5, 0.75, 1.0), 0.05
  c = sequential.boundaries(fractions, alpha)
  t = np.array(fractions)
  rng = np.random.default_rng(0)
  steps = rng.normal(size=(400_000, 4)) * np.sqrt(np.diff(t, prepend=0.0))
  z = np.cumsum(steps, axis=1) / np.sqrt(t)
  crossed = np.abs(z) >= c
  first = np.where(crossed.any(1), crossed.argmax(1), -1)
  got = np.array([np.mean(first == k) for k in range(4)])
  want = np.diff(sequential.spent(t, alpha), prepend=0.0)
  np.testing.assert_allclose(got.sum(), alpha, atol=0.0015)           # MC se 3.4e-4
  np.testing.assert_allclose(got, want, atol=0.0012)
  assert c[0] > c[1] > c[2] > c[3] > sp_stats.norm.isf(alpha / 2)   # O'Brien-Fleming: strict early, ~fixed late


def test_alpha_is_spent_at_the_last_look_and_when_the_pool_runs_out():
  design = sequential.Design(looks=(10, 20, 40, 80))
  spent = [sequential.alpha_spent(design, k) for k in (1, 2, 3, 4)]
  assert spent[-1] == design.alpha and all(a < b for a, b in zip(spent, spent[1:]))
  assert sequential.alpha_spent(design, 2, final=True) == design.alpha
  # Ran out at look 2: it is the last look (t = 1), so its boundary spends what look 1 left.
  c = sequential.boundaries((0.125, 1.0), design.alpha / 3)
  np.testing.assert_allclose(sequential.nominal_alpha(design, 2, pairs=3, final=True), 2 * sp_stats.norm.sf(c[1]))
  assert sequential.nominal_alpha(design, 2, pairs=3, final=True) > sequential.nominal_alpha(design, 2, pairs=3)
  assert sequential.nominal_alpha(sequential.Design(looks=(30,)), 1, pairs=3) == 0.05 / 3
  for bad in ({"looks": (20, 10)}, {"looks": (0, 10)}, {"alpha": 1.5}, {"margin": 0.0}, {"spending": "linear"}):
    with pytest.raises(ValueError):
      sequential.Design(**bad)
  with pytest.raises(ValueError, match="look must be in 1 .. 4"):
    sequential.nominal_alpha(design, 5)


def table(mu, questions, seed, noise=1.0):
  """calibration.simulate's node table, its configurations' differences shrunk by `noise`."""
  align, q = calibration.simulate(np.random.default_rng(seed), [0.0] * len(mu), questions, "unif15")
  common = align.mean(1, keepdims=True)
  return common + noise * (align - common) + np.asarray(mu), q


def test_one_look_design_gives_the_fixed_decision_exactly():
  align, q = table([0.2, 0.0, 0.1], 30, seed=1)
  nodes = calibration.as_nodes(align, q)
  fixed = decision.decide(nodes, n_boot=20, min_effect=0.05)
  for design in (sequential.Design(), sequential.Design(looks=(30,))):
    seq = decision.decide(nodes, n_boot=20, design=design, look=1)
    for key, value in fixed.items():
      if key == "comparisons":
        assert [{k: v for k, v in c.items() if k != "equivalent"} for c in seq[key]] == value
      elif key == "details":                     # the design's state first, then the fixed design's words
        assert seq[key][-len(value):] == value and seq[key][0].startswith("fixed design, "), seq[key]
      elif key != "line":
        assert seq[key] == value, key
    assert seq["look"] == 1 and seq["alpha_spent"] == 0.05 and seq["stop"]
  raw = decision.compare_arrays(align, q)
  one = decision.compare_arrays(align, q, design=sequential.Design(looks=(30,)), look=1)
  for key, value in raw.items():
    np.testing.assert_array_equal(one[key], value)


def test_use_equivalent_continue_and_cap_on_constructed_tables():
  design = sequential.Design(looks=(10, 20, 40), margin=0.05)
  # A ahead of B and C by 0.5 with small configuration noise: "use A" at the first look.
  align, q = table([0.5, 0.0, 0.0], 40, seed=2, noise=0.05)
  v = decision.decide(calibration.as_nodes(align[q < 10], q[q < 10]), n_boot=20, design=design, look=1)
  assert (v["decision"], v["decided"], v["stop"], v["best"], v["best_set"]) == ("use", True, True, "c0", ["c0"])
  assert v["line"].startswith("use c0 on incorrect nodes: c0 - c1 = +") and v["line"].endswith("(look 1 of 3: decided)")
  assert v["details"][0].startswith("look 1 of 3 (10 questions), decided; simultaneous over every look: alpha spent")
  # The interval is the t interval at this look's nominal level (scipy, by hand), and it excludes 0.
  c = v["comparisons"][0]
  half = sp_stats.t.ppf(1 - v["nominal_alpha"] / 2, c["df"]) * c["se"]
  np.testing.assert_allclose([c["ci_lo"], c["ci_hi"]], [c["diff"] - half, c["diff"] + half], atol=1e-9)
  np.testing.assert_allclose(v["nominal_alpha"], sequential.nominal_alpha(design, 1, pairs=3), rtol=1e-12)
  assert c["ci_hi"] < 0 and not c["equivalent"]
  # A and B equal to within 0.002, C far behind: "equivalent: c0, c1" (order by the data), C named behind.
  align, q = table([0.0, 0.0, -0.8], 40, seed=3, noise=0.002)
  align[:, 2] = align[:, 0] - 0.8 + 0.1 * np.random.default_rng(0).normal(size=q.size)
  v = decision.decide(calibration.as_nodes(align[q < 20], q[q < 20]), n_boot=20, design=design, look=2)
  assert v["decision"] == "equivalent" and sorted(v["equivalent"]) == ["c0", "c1"] and v["stop"]
  pair = next(c for c in v["comparisons"] if c["config_id"] in ("c0", "c1"))
  assert pair["equivalent"] and -0.05 < pair["ci_lo"] < pair["ci_hi"] < 0.05
  assert v["line"].startswith("use any of c") and "equivalent within +-0.05" in v["line"]
  assert v["details"][0].startswith("look 2 of 3 (20 questions), decided")
  assert "equivalent within +-0.05 on incorrect nodes" in v["details"][1] and "c2 distinguishably behind" in (
      v["details"][1])
  # Equal configurations with the simulation's full noise: undecided; "continue" before the cap, "cap" at it.
  align, q = table([0.0, 0.0], 40, seed=4)
  v = decision.decide(calibration.as_nodes(align[q < 20], q[q < 20]), n_boot=20, design=design, look=2)
  assert (v["decision"], v["decided"], v["stop"]) == ("continue", False, False)
  need = v["undecided"][0]["questions_needed"]
  want = sample_size.questions_needed(0.05, v["comparisons"][0]["se"], v["comparisons"][0]["df"], 20,
                                alpha=sequential.nominal_alpha(design, 3), se_df=v["comparisons"][0]["df"])
  assert need == math.ceil(want) > 40 and f"(~{need} questions to detect 0.05 at the last look's level)" in (
      v["details"][1])
  assert v["line"].startswith("no configuration is shown better on incorrect nodes: ")
  assert v["line"].endswith("(look 2 of 3: goes on)") and v["details"][0].startswith(
      "look 2 of 3 (20 questions), continue") and v["details"][1].startswith("undecided against ")
  last = decision.decide(calibration.as_nodes(align, q), n_boot=20, design=design, look=3)
  assert (last["decision"], last["decided"], last["stop"], last["alpha_spent"]) == ("cap", False, True, 0.05)
  assert last["line"].startswith("no configuration is shown better on incorrect nodes: ")
  assert last["details"][0].startswith("look 3 of 3 (40 questions), cap reached, undecided")
  ran_out = decision.decide(calibration.as_nodes(align[q < 20], q[q < 20]), n_boot=20, design=design, look=2,
                            final=True)
  assert ran_out["stop"] and ran_out["alpha_spent"] == 0.05 and "the pool of questions ran out" in (
      ran_out["details"][0])
  with pytest.raises(ValueError, match="min_effect"):
    decision.decide(calibration.as_nodes(align, q), design=design, look=1, min_effect=0.1)
  with pytest.raises(ValueError, match="need a design"):
    decision.compare_arrays(align, q, look=2)


@pytest.mark.parametrize("diff, se, df, fraction", [(0.05, 0.08, 15.0, 0.25), (0.0, 0.02, 30.0, 0.5),
                                                    (0.2, 0.05, 8.0, 0.4), (0.03, 0.001, 50.0, 0.75)])
def test_p_resolved_matches_simulated_future_questions(diff, se, df, fraction):
  """The probability of resolving at the cap, by simulating the cap's estimate as the mean of the questions so
  far (their mean diff) and the remaining questions (per-question sd se sqrt(n)), not by the closed forms'
  variances: the current trend (true difference diff) and the predictive (true difference drawn from the flat
  prior's posterior N(diff, se^2) first, issue 49 item 5)."""
  n, margin, alpha = 40, 0.05, 0.05 / 15
  cap = n / fraction
  rng = np.random.default_rng(0)
  half = sp_stats.t.isf(alpha / 2, df * cap / n) * se * math.sqrt(n / cap)
  for predictive, truth in ((False, np.full(400_000, diff)), (True, rng.normal(diff, se, size=400_000))):
    future = rng.normal(truth, se * math.sqrt(n) / math.sqrt(cap - n))
    final = (n * diff + (cap - n) * future) / cap
    resolved = (np.abs(final) > half) | (np.abs(final) + half < margin)
    got = sequential.p_resolved(diff, se, df, fraction, margin, alpha, predictive=predictive)
    np.testing.assert_allclose(got, resolved.mean(), atol=0.003)
  assert sequential.p_resolved(np.nan, se, df, fraction, margin, alpha) == 1.0          # nothing to project


def test_futility_stops_a_hopeless_look_and_never_changes_a_claim():
  """Equal configurations with the simulation's full noise and a margin far below what the cap can resolve:
  "futile" at look 1 with futility, "continue" without; the comparisons are the same either way, and neither the
  last look nor an underpowered verdict is futile."""
  align, q = table([0.0, 0.0, 0.0], 40, seed=4)
  nodes = calibration.as_nodes(align[q < 10], q[q < 10])
  plain, futile = (sequential.Design(looks=(10, 14), margin=0.01, futility=f) for f in (0.0, 0.1))
  v0 = decision.decide(nodes, n_boot=20, design=plain, look=1)
  v1 = decision.decide(nodes, n_boot=20, design=futile, look=1)
  assert (v0["decision"], v0["stop"]) == ("continue", False) and "p_decided" not in v0 and "futility" not in v0
  assert (v1["decision"], v1["decided"], v1["stop"]) == ("futile", False, True) and v1["p_decided"] < 0.1
  assert v1["comparisons"] == v0["comparisons"] and v1["best_set"] == v0["best_set"]
  assert v1["line"] == (f"no configuration is shown better on incorrect nodes: stopped for futility, P(decided by the "
                        f"cap) = {v1['p_decided']:.2g} (look 1 of 2)")
  assert v1["details"][0].startswith(f"look 1 of 2 (10 questions), stopped for futility (predictive P(decided by the "
                                     f"cap of 14 questions) = {v1['p_decided']:.2g} < 0.1), undecided")
  # p_decided is the smallest p_resolved over the comparisons that block a decision.
  res = decision.compare_arrays(align[q < 10], q[q < 10], design=futile, look=1)
  b = res["best"]
  blocking = [i for i in np.flatnonzero(res["could_be_best"]) if i != b and not res["equivalent"][i, b]]
  assert res["blocking"] == blocking and len(v1["undecided"]) == len(blocking)
  want = sequential.p_resolved(res["diff"][blocking, b], res["se"][blocking, b], res["df"][blocking, b], 10 / 14, 0.01,
                               sequential.nominal_alpha(futile, 2, pairs=res["m"])).min()
  np.testing.assert_allclose(res["p_decided"], want, rtol=1e-12)
  last = decision.decide(calibration.as_nodes(align[q < 14], q[q < 14]), n_boot=20, design=futile, look=2)
  assert last["decision"] == "cap" and last["p_decided"] is None
  under = decision.decide(calibration.as_nodes(align[q < 3], q[q < 3]), n_boot=20, design=futile, look=1)
  assert under["verdict"] == "underpowered" and under["decision"] == "continue"
  with pytest.raises(ValueError, match="futility"):
    sequential.Design(looks=(10,), futility=1.0)


@pytest.mark.parametrize("nc, df, alpha", [(2.8, 9.0, 0.05), (3.5, 4.3, 0.01), (1.0, 1.5, 0.05)])
def test_expected_t_power_matches_quadrature_over_the_chi_square(nc, df, alpha):
  """The expectation over se_hat^2 / se^2 ~ chi2(df) / df by scipy.integrate.quad on the chi-square density."""
  want = integrate.quad(lambda x: sample_size.t_power(nc * math.sqrt(x / df), df, alpha) * sp_stats.chi2.pdf(x, df),
                        0, np.inf, limit=200)[0]
  np.testing.assert_allclose(sample_size.expected_t_power(nc, df, alpha, df), want, atol=1e-5)
  assert sample_size.expected_t_power(nc, df, alpha, np.inf) == sample_size.t_power(nc, df, alpha)


def test_planted_detectable_difference_is_detected_with_80_percent_power():
  """One-sample t tests of n = 10 normal values (df 9): a pilot's reported detectable difference, planted in an
  independent study of the same size, is detected 80% of the time with se_df (seeded Monte Carlo with
  scipy.stats.ttest_1samp); with se taken as known it is detected less often (0.75 here)."""
  n, alpha, sims = 10, 0.05, 20_000
  kappa = sample_size.detectable_difference(1.0, n - 1, alpha=alpha, se_df=n - 1)      # d = kappa se_hat (scale-free)
  np.testing.assert_allclose(sample_size.detectable_difference(0.3, n - 1, alpha=alpha, se_df=n - 1), 0.3 * kappa)
  np.testing.assert_allclose(sample_size.expected_t_power(kappa, n - 1, alpha, n - 1), 0.8, atol=1e-8)
  rng = np.random.default_rng(0)
  pilot_se = rng.normal(size=(sims, n)).std(1, ddof=1) / math.sqrt(n)
  study = rng.normal(size=(sims, n))
  for k, lo, hi in ((kappa, 0.785, 0.815), (sample_size.detectable_difference(1.0, n - 1, alpha=alpha), 0.72, 0.77)):
    test = sp_stats.ttest_1samp(study + (k * pilot_se)[:, None], 0.0, axis=1)
    power = np.mean((test.pvalue <= alpha) & (test.statistic > 0))
    assert lo <= power <= hi, (k, power)
  # questions_needed inverts the detectable difference at the same budget, with and without se_df.
  for se_df in (None, 9.0):
    mde = sample_size.detectable_difference(0.1, 9.0, alpha=alpha, se_df=se_df)
    np.testing.assert_allclose(sample_size.questions_needed(mde, 0.1, 9.0, 10, alpha=alpha, se_df=se_df), 10, rtol=1e-5)
