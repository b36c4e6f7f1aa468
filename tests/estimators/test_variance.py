"""The variance split (estimators/variance.py) against statsmodels' MixedLM on a balanced nested sample (where
the ANOVA and REML estimates coincide when positive), and against the known components of a simulation."""
import numpy as np
import pandas as pd
import pytest
import statsmodels.formula.api as smf

from opd_jax.estimators import variance


def _simulate(rng, q=60, m=8, r=8, s_q=0.04, s_n=0.09, s_c=0.5):
  """Node values of q questions x m nodes, each the mean of r continuations' noise around its true value; the
  halves are the means of its first and second r / 2."""
  mu_q = rng.normal(0, np.sqrt(s_q), q)
  mu = np.repeat(mu_q, m) + rng.normal(0, np.sqrt(s_n), q * m)
  noise = rng.normal(0, np.sqrt(s_c), (q * m, r))
  a, b = mu + noise[:, :r // 2].mean(1), mu + noise[:, r // 2:].mean(1)
  return (a + b) / 2, a, b, np.repeat(np.arange(q), m)


def test_the_moments_match_mixedlm_on_a_balanced_sample():
  values, _, _, questions = _simulate(np.random.default_rng(0), q=40, m=6)
  got = variance.components(values, None, None, questions, r=8)
  fit = smf.mixedlm("v ~ 1", pd.DataFrame({"v": values, "g": questions}), groups="g").fit(reml=True)
  np.testing.assert_allclose(got.question, float(fit.cov_re.iloc[0, 0]), rtol=1e-4)
  np.testing.assert_allclose(got.node, float(fit.scale), rtol=1e-4)          # within: s2_node + s2_c / r here


def test_the_three_components_are_recovered_and_predict_the_variance_of_other_designs():
  rng = np.random.default_rng(1)
  got = [variance.components(*(x := _simulate(rng, q=80))[:3], x[3], r=8) for _ in range(40)]
  for name, want in (("question", 0.04), ("node", 0.09), ("continuation", 0.5)):
    est = np.array([getattr(c, name) for c in got])
    assert abs(est.mean() - want) < 3 * est.std() / np.sqrt(len(est)) + 0.02 * want, (name, est.mean())
  c = variance.Components(question=0.04, node=0.09, continuation=0.5, questions=1, nodes=1, r=1)
  means = [_simulate(rng, q=20, m=4, r=2)[0].mean() for _ in range(3000)]   # another design, simulated
  np.testing.assert_allclose(np.var(means), c.variance(20, 4, 2), rtol=0.1)


def test_too_small_a_pilot_is_refused():
  with pytest.raises(ValueError, match="needs >= 2 questions"):
    variance.components([1.0, 2.0], None, None, ["a", "a"], r=4)
