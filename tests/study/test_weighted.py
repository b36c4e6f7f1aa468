"""Weighted allocation of targeted continuations (issue 33, item 1) on the exact toy (V = 4, H = 6, sum = 0 mod 3).

References: a numpy Neyman allocation written out here (Jacobian columns by np.linalg.norm, the floor by a
loop that fixes floored candidates), a uniform run with R = r_max and the same key (row ids), exact P_succ by
enumeration (bias), the toy policy called directly with the documented row ids (the uniform path unchanged).
"""
import jax
import numpy as np
import pytest

from configs import teacher_sweep
from opd_jax.study import allocation
from opd_jax.study import preflight
from opd_jax.study import targeted
from opd_jax.estimators import success
from opd_jax.validation import exact_toys

VERIFY = exact_toys.sum_mod_verifier(3)


@pytest.fixture(scope="module")
def student():
  return exact_toys.ToyPolicy.random(vocab=4, horizon=6, scale=2.5, seed=0)


def reference_weights(p, qs):
  """w_k per the allocation.weights docstring, one node, written with explicit vectors."""
  K = len(p)
  jac = np.array([np.linalg.norm(p[k] * (np.eye(K)[k] - p)) for k in range(K)])
  terms = [jac ** 2 / np.sum(jac ** 2)]
  adv = [(q - p) ** 2 / np.sum((q - p) ** 2) for q in qs if np.sum((q - p) ** 2) > 0]
  if adv:
    terms.append(np.mean(adv, 0))
  return np.sqrt(np.mean(terms, 0))


def reference_counts(w, total, minimum):
  """Neyman n_k ∝ w_k with a floor: candidates whose share falls below `minimum` are fixed there, repeat."""
  floor = np.zeros(len(w), bool)
  while True:
    n = np.where(floor, minimum, (total - minimum * floor.sum()) * w / np.sum(w[~floor]))
    if not np.any(~floor & (n < minimum)):
      return n
    floor |= n < minimum


def test_weights_and_counts_match_a_numpy_neyman_allocation():
  p = np.array([0.55, 0.3, 0.1, 0.05])
  qs = [np.array([0.1, 0.2, 0.6, 0.1]), p.copy()]                # the second teacher equals p: no say
  valid = np.ones((1, 4), bool)
  w = allocation.weights(p[None], [q[None] for q in qs], valid)[0]
  np.testing.assert_allclose(w, reference_weights(p, qs), rtol=1e-12)
  got = allocation.weighted_counts(p[None], [q[None] for q in qs], valid, mean=6, minimum=2, r_max=64,
                                   min_mass=0.0)[0]
  want = reference_counts(w, 24, 2)
  assert got.sum() == 24 and np.all(got >= 2) and np.all(np.abs(got - want) < 1), (got, want)
  # The cap binds: its surplus goes to the others; padding and candidates below min_mass get 0, except that a
  # node keeps its two largest candidates.
  capped = allocation.weighted_counts(p[None], [], valid, mean=6, minimum=2, r_max=8, min_mass=0.0)[0]
  assert capped.max() == 8 and capped.sum() == 24
  p2 = np.array([[0.97, 0.02, 0.01, 0.0], [0.5, 0.498, 0.002, 0.0]])
  v2 = np.array([[1, 1, 1, 0], [1, 1, 1, 0]], bool)
  n2 = allocation.weighted_counts(p2, [], v2, mean=4, minimum=2, r_max=64, min_mass=0.05)
  np.testing.assert_array_equal(n2 > 0, [[True, True, False, False], [True, True, False, False]])
  np.testing.assert_array_equal(n2.sum(-1), [12, 12])
  with pytest.raises(ValueError, match="minimum <= mean"):
    allocation.weighted_counts(p2, [], v2, mean=1, minimum=2, r_max=64, min_mass=0.0)


def toy_nodes(student, n=3, with_exact=True):
  seqs = student.sample(n, key=jax.random.key(0)).tolist()
  rollouts, probs, teach, exact = [], [], [], []
  for i, seq in enumerate(seqs):
    pos = [1, 2, 4]
    rollouts.append((i, seq, pos, np.tile(np.arange(4), (3, 1))))
    probs.append(np.stack([student.probs(seq[:t]) for t in pos]))
    teach.append([np.tile([0.1, 0.2, 0.3, 0.4], (3, 1))])
    if with_exact:
      exact.append(np.stack([student.exact_p_succ(seq[:t], VERIFY) for t in pos]))
  return rollouts, probs, teach, exact


def test_weighted_draws_are_a_uniform_r_max_runs_and_unbiased(student):
  rollouts, probs, teach, exact = toy_nodes(student)
  design = targeted.Weighted(r_max=16, mean=4, min_mass=0.0)
  run = lambda key, **kw: targeted.estimate_successes(student, exact_toys.task_verifier(VERIFY), [], rollouts, R=4,
                                                      key=key, max_response_len=6, **kw)
  got = run(jax.random.key(3), weighted=design, probs=probs, teacher_probs=teach)
  ref = targeted.estimate_successes(student, exact_toys.task_verifier(VERIFY), [], rollouts, R=16, key=jax.random.key(3),
                                    max_response_len=6)
  counts = np.concatenate([o.n for o in got])
  assert sum(o.continuations for o in got) == 4 * counts.size and len(np.unique(counts)) > 2
  for a, u in zip(got, ref):
    for m in range(3):
      for k in range(4):
        np.testing.assert_array_equal(a.replicates(m, k), u.rewards[m, k, :a.n[m, k]])
  # Unbiased: the design reads no outcome. Mean P^ over keys against the exact P_succ.
  P = np.concatenate(exact)
  keys = 12
  mean = sum(np.concatenate([success.p_succ(o.successes, o.n) for o in run(jax.random.key(100 + s),
                                                                               weighted=design, probs=probs,
                                                                               teacher_probs=teach)])
             for s in range(keys)) / keys
  se = np.sqrt(P * (1 - P) / counts / keys) + 1e-9
  assert np.all(np.abs(mean - P) < 4.5 * se), (mean - P) / se


def test_uniform_path_is_the_documented_draws(student):
  """allocation off: rewards are the policy's draws at row id rid * ROLLOUT_STRIDE + (m K + k) R + r."""
  rollouts, _, _, _ = toy_nodes(student, n=1, with_exact=False)
  key, R = jax.random.key(9), 3
  got = targeted.estimate_successes(student, exact_toys.task_verifier(VERIFY), [], rollouts, R=R, key=key,
                                    max_response_len=6)[0]
  _, seq, pos, cand = rollouts[0]
  branches = [(m, k, r) for m in range(3) for k in range(4) for r in range(R)]
  res = student.continue_branches([], [seq], [0] * len(branches), [pos[m] for m, _, _ in branches],
                                  [int(cand[m, k]) for m, k, _ in branches], key=key, max_response_len=6,
                                  row_ids=[(m * 4 + k) * R + r for m, k, r in branches])
  want = np.array([VERIFY(s) for s, _ in res]).reshape(3, 4, R)
  assert got.counts is None
  np.testing.assert_array_equal(got.rewards, want)


def test_a_candidate_left_out_is_imputed_with_the_value_of_the_others():
  p = np.array([[0.6, 0.35, 0.05]])
  q = np.array([[0.2, 0.7, 0.1]])
  s, n = np.array([[3, 1, 0]]), np.array([[4, 4, 0]])
  est = success.node_estimates(p, q, s, n, divergence="reverse_kl")
  P = np.array([0.75, 0.25])
  v_run = np.sum(p[0, :2] * P) / 0.95
  np.testing.assert_allclose(est.value, [v_run], rtol=1e-12)
  np.testing.assert_allclose(est.g_ideal[0], [*(p[0, :2] * (P - v_run)), 0.0], atol=1e-15)
  np.testing.assert_allclose(est.teacher_advantage, [np.sum(q[0, :2] * P) / 0.9 - v_run], rtol=1e-12)
  # The bound: for any P_succ of the candidate left out, |V - V_run| <= its p mass, |A - A_run| <= p + q mass.
  for x in (0.0, 1.0):
    full = success.node_estimates(p, q, np.array([[3, 1, 4 * x]]).astype(int), np.array([[4, 4, 4]]),
                                   divergence="reverse_kl")
    assert abs(full.value[0] - est.value[0]) <= 0.05 + 1e-12
    assert abs(full.teacher_advantage[0] - est.teacher_advantage[0]) <= 0.05 + 0.1 + 1e-12
  # Nothing left out with p > 0: bitwise the plain P^ (uniform records unchanged).
  s0, n0 = np.array([[3, 1, 0]]), np.array([[4, 4, 0]])
  np.testing.assert_array_equal(success.estimator_p_succ(np.array([[0.6, 0.4, 0.0]]), s0, n0),
                                success.p_succ(s0, n0))


@pytest.mark.parametrize("fields, field", [
    ({"allocation": "weightd"}, "config.budget.allocation"),
    ({"allocation": "weighted", "adaptive": True}, "config.budget.allocation"),
    ({"allocation": "weighted", "continuations_mean": 1.0}, "config.budget.continuations_mean"),
    ({"allocation": "weighted", "allocation_minimum": 0}, "config.budget.allocation_minimum"),
    ({"allocation": "weighted", "allocation_min_mass": 1.0}, "config.budget.allocation_min_mass"),
])
def test_bad_allocation_settings_name_the_field(fields, field):
  config = teacher_sweep.get_config()
  config.budget.update(fields)
  with pytest.raises(ValueError) as err:
    preflight.validate(config)
  assert str(err.value).startswith(field) and "\n" not in str(err.value)
  config = teacher_sweep.get_config()
  config.budget.allocation = "weighted"
  preflight.validate(config)
  assert preflight.allocation(config) == "weighted"
