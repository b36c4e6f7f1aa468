"""Issue 25 item 4: the corrected noise ceiling invents no noise where every replicate of every candidate agrees,
and the exact E cos(g*_R, g*) of benchmarks/ceiling_check.py against a Monte Carlo of the same binomial model."""
import numpy as np

from benchmarks import ceiling_check
from opd_jax.report import ceiling


def test_unanimous_nodes_get_ceiling_1_and_the_others_are_unchanged():
  p = np.array([[0.5, 0.3, 0.2, 0.0], [0.5, 0.3, 0.2, 0.0], [0.4, 0.3, 0.3, 0.0]])
  s = np.array([[4, 0, 4, 0], [3, 0, 4, 0], [0, 4, 4, 0]])        # nodes 0 and 2 unanimous (slot 3: padding)
  n = np.array([[4, 4, 4, 0], [4, 4, 4, 0], [4, 4, 4, 0]])
  got = ceiling.expected_cosine(p, s, n, n_sim=300, seed=1)
  before = ceiling.expected_cosine(p, s, n, n_sim=300, seed=1, unanimous=False)
  np.testing.assert_allclose(got[[0, 2]], 1.0, atol=1e-12)        # truth at a fixed-outcome node: 1
  assert (before[[0, 2]] < 0.98).all()                            # the shrinkage invented noise
  one = lambda **kw: ceiling.expected_cosine(p[1:2], s[1:2], n[1:2], n_sim=300, seed=1, **kw)
  assert one() == one(unanimous=False) and 0.5 < one() < 0.99       # not unanimous: shrunk as before


def test_exact_expected_cosine_matches_monte_carlo():
  p, ps, R = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.7, 0.5]), 6
  rng = np.random.default_rng(0)
  s = rng.binomial(R, ps, size=(200_000, 3)) / R
  cos = ceiling_check._cos(ceiling_check._g(p, s), ceiling_check._g(p, ps)[None])
  np.testing.assert_allclose(ceiling_check.exact_expected_cosine(p, ps, R), np.nanmean(cos), atol=3e-3)
