"""The cross-fitted |g*|^2 and the alignment ratio (issue 48, item 1), against exact expectations by enumerating
every outcome of the continuations (numpy, binomial probabilities), independent of the estimator's code."""
import itertools

import numpy as np
import pytest

from opd_jax.estimators import success


def _g(p, ps):
  """g* = p (P - V), numpy float64: the paper's formula written out."""
  return p * (ps - np.sum(p * ps))


@pytest.mark.parametrize("r", [2, 3, 4])
def test_crossfit_norm2_is_exactly_unbiased_and_the_plug_in_is_not(r):
  p = np.array([0.5, 0.3, 0.2])
  ps = np.array([0.9, 0.4, 0.15])
  g2 = float(np.sum(_g(p, ps) ** 2))
  expect_x, expect_plug = 0.0, 0.0
  for outcome in itertools.product((0, 1), repeat=3 * r):        # every candidate's r rewards
    rewards = [np.array(outcome[k * r:(k + 1) * r], float) for k in range(3)]
    prob = np.prod([ps[k] ** x.sum() * (1 - ps[k]) ** (r - x.sum()) for k, x in enumerate(rewards)])
    s_a, n_a, s_b, n_b = success.halves(rewards)
    assert list(n_a) == [(r + 1) // 2] * 3 and list(n_b) == [r // 2] * 3
    expect_x += prob * float(success.crossfit_norm2(p[None], s_a[None], n_a[None], s_b[None], n_b[None])[0])
    expect_plug += prob * float(np.sum(_g(p, (s_a + s_b) / (n_a + n_b)) ** 2))
  np.testing.assert_allclose(expect_x, g2, rtol=1e-12, atol=1e-15)
  var_trace = np.sum([p[k] ** 2 * ps[k] * (1 - ps[k]) for k in range(3)]) / r   # the plug-in's excess is O(1/r)
  assert expect_plug - g2 > 0.3 * var_trace


def test_halves_alternate_and_a_single_continuation_cannot_be_crossed():
  s_a, n_a, s_b, n_b = success.halves([np.array([1, 0, 1, 1, 0]), np.array([0.0]), np.array([])])
  assert s_a.tolist() == [2, 0, 0] and n_a.tolist() == [3, 1, 0] and s_b.tolist() == [1, 0, 0]
  assert n_b.tolist() == [2, 0, 0]
  p = np.array([[0.6, 0.4, 0.0]])                               # the second candidate ran once: NaN
  assert np.isnan(success.crossfit_norm2(p, s_a[None], n_a[None], s_b[None], n_b[None])[0])
  p = np.array([[1.0, 0.0, 0.0]])                               # ... unless it has no p mass
  assert success.crossfit_norm2(p, s_a[None], n_a[None], s_b[None], n_b[None])[0] == 0.0
