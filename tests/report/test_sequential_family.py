"""The family-wise error over looks when pairs become comparable late (issue 49, item 3): simulated null studies
whose third configuration is defined only from question 56, at the `:hour` looks (20, 40, 60, 80). Each pair's z
statistic is computed from its own shared questions (numpy); the rule of today (each pair spending alpha / m_k,
m_k counted at the look) against the family fixed in advance with each pair's own history (sequential.pair_nominal).
Then compare_arrays is checked to apply those per-pair levels."""
import numpy as np
from scipy import stats as sp_stats

from opd_jax.report import decision
from opd_jax.report import sequential

LOOKS = (20, 40, 60, 80)
LATE = 55                                   # configuration C is defined from question 56 on


def _fwer(rule, sims=40000, seed=0):
  """P(some pair rejects at some look) under the null, 3 configurations, C late (min 5 shared questions)."""
  rng = np.random.default_rng(seed)
  design = sequential.Design(looks=LOOKS)
  x = rng.normal(size=(sims, LOOKS[-1], 3))
  start = {(0, 1): 0, (0, 2): LATE, (1, 2): LATE}
  reject = np.zeros(sims, bool)
  for look, n in enumerate(LOOKS, 1):
    comparable = {p: n - s >= decision.MIN_SHARED_QUESTIONS for p, s in start.items()}
    for (i, j), s in start.items():
      if not comparable[(i, j)]:
        continue
      z = (x[:, s:n, i] - x[:, s:n, j]).sum(1) / np.sqrt(2.0 * (n - s))
      if rule == "m_k":
        level = sequential.nominal_alpha(design, look, pairs=sum(comparable.values()))
      else:
        seen = [k for k, m in enumerate(LOOKS[:look], 1) if m - s >= decision.MIN_SHARED_QUESTIONS]
        level = sequential.pair_nominal(design, look, pairs=3, tested=tuple(seen),
                                        info=tuple(float(LOOKS[k - 1] - s) for k in seen))
      reject |= np.abs(z) > sp_stats.norm.isf(level / 2.0)
  return reject.mean(), np.sqrt(reject.mean() * (1 - reject.mean()) / sims)


def test_a_family_fixed_in_advance_with_each_pairs_history_keeps_the_error_and_the_old_rule_did_not():
  old, se = _fwer("m_k")
  new, _ = _fwer("history")
  assert new <= 0.05 + 2 * se, new
  assert old > 0.05 + 3 * se and old > new, (old, new)


def test_pair_nominal_is_the_design_for_a_pair_seen_at_every_look_and_spends_alpha_once_for_a_late_one():
  design = sequential.Design(looks=LOOKS)
  for look in range(1, 5):
    np.testing.assert_allclose(sequential.pair_nominal(design, look, pairs=3, tested=tuple(range(1, look + 1)),
                                                       info=tuple(map(float, LOOKS[:look]))),
                               sequential.nominal_alpha(design, look, pairs=3), rtol=1e-9)
  late = sequential.pair_nominal(design, 3, pairs=3, tested=(3,), info=(5.0,))
  np.testing.assert_allclose(late, sequential.spent(0.75, 0.05 / 3), rtol=1e-12)   # all it may spend by t = 0.75
  same = sequential.pair_nominal(design, 4, pairs=3, tested=(3, 4), info=(5.0, 5.0))
  assert same == late                       # no new shared question: the same statistic, no new spending


def test_compare_arrays_gives_each_pair_the_level_of_its_history():
  rng = np.random.default_rng(3)
  q = np.repeat(np.arange(80), 2)
  align = rng.normal(size=(160, 3))
  align[q < LATE, 2] = np.nan
  design = sequential.Design(looks=LOOKS)
  history = [sequential.shared_questions(align[q < n], q[q < n]) for n in LOOKS[:3]]
  res = decision.compare_arrays(align, q, design=design, look=4, history=history)
  assert res["m"] == 3
  np.testing.assert_allclose(res["pair_nominal"][0, 1], sequential.nominal_alpha(design, 4, pairs=3), rtol=1e-12)
  want = sequential.pair_nominal(design, 4, pairs=3, tested=(3, 4), info=(5.0, 25.0))
  np.testing.assert_allclose([res["pair_nominal"][0, 2], res["pair_nominal"][1, 2]], want, rtol=1e-12)
  lo, hi = res["ci_lo"][0, 2], res["ci_hi"][0, 2]
  half = sp_stats.t.isf(want / 2, res["df"][0, 2]) * res["se"][0, 2]
  np.testing.assert_allclose([lo, hi], [res["diff"][0, 2] - half, res["diff"][0, 2] + half], rtol=1e-9)
