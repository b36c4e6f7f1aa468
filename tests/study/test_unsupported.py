"""Candidates outside the sampled policy's support get no continuations (issue 25 item 8): the other slots'
draws, V, g* and alignment are those of the full run; the teacher advantage uses q renormalised over the slots
run (success.node_estimates)."""
import functools

import jax
import numpy as np

from opd_jax.estimators import success
from opd_jax.study import targeted
from opd_jax.validation import exact_toys

VERIFY = exact_toys.task_verifier(exact_toys.sum_mod_verifier(3))
POLICY = exact_toys.ToyPolicy.random(vocab=4, horizon=5, scale=2.0, seed=3)


@functools.cache
def _outcomes(mask: tuple | None):
  run = None if mask is None else [np.array(mask, bool)]
  response = POLICY.sample(1, key=jax.random.PRNGKey(0))[0].tolist()
  cands = np.array([[0, 1, 2, 3], [1, 2, 3, -1]], np.int64)
  return targeted.estimate_successes(POLICY, VERIFY, [], [(0, response, np.array([1, 3]), cands)], R=6,
                                     key=jax.random.PRNGKey(1), max_response_len=5, run=run)[0]


def test_slots_not_run_get_n_0_and_the_others_the_same_draws():
  full = _outcomes(None)
  mask = ((True, False, True, False), (True, True, False, False))
  part = _outcomes(mask)
  mask = np.array(mask)
  np.testing.assert_array_equal(part.n, np.where(mask, 6, 0))
  np.testing.assert_array_equal(part.successes, np.where(mask, full.successes, 0))
  assert part.continuations == int(mask.sum()) * 6 < full.continuations


def test_estimates_equal_the_full_run_where_p_is_0_and_advantage_renormalises_q():
  full = _outcomes(None)
  mask = ((True, False, True, True), (True, True, False, False))
  part = _outcomes(mask)
  mask = np.array(mask)
  p = np.where(mask, [[0.5, 0, 0.3, 0.2], [0.6, 0.4, 0, 0]], 0.0)          # p = 0 exactly where not run
  q = np.array([[0.1, 0.4, 0.3, 0.2], [0.2, 0.3, 0.5, 0.0]])
  a = success.node_estimates(p, q, full.successes, full.n, divergence="forward_kl")
  b = success.node_estimates(p, q, part.successes, part.n, divergence="forward_kl")
  np.testing.assert_array_equal(a.value, b.value)
  np.testing.assert_array_equal(a.g_ideal, b.g_ideal)
  np.testing.assert_array_equal(a.alignment, b.alignment)
  ps = part.successes / np.maximum(part.n, 1)
  by_hand = [(q[m] * mask[m] * ps[m]).sum() / (q[m] * mask[m]).sum() - (p[m] * ps[m]).sum() for m in range(2)]
  np.testing.assert_allclose(b.teacher_advantage, by_hand, atol=1e-12)
  q0 = np.where(mask, 0.0, [[0, 1.0, 0, 0], [0, 0, 1.0, 0]])                 # q only where nothing ran: NaN
  assert np.isnan(success.node_estimates(p, q0, part.successes, part.n, divergence="forward_kl")
                  .teacher_advantage).all()
  # every candidate run: the teacher advantage is the paper's formula, unchanged
  np.testing.assert_allclose(a.teacher_advantage, np.sum((q - p) * success.p_succ(full.successes, full.n), -1),
                             atol=1e-15)
