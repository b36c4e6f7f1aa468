"""Estimates recomputed from node records (nodes.estimates_from_rows) and the continuations subsample of
benchmarks/fewer_continuations.py (issue 33): the records' own counts give the records' numbers back; fewer kept
continuations give counts of the records' rewards."""
import math

import numpy as np
import pandas as pd

from benchmarks import fewer_continuations as fc
from opd_jax import contexts, gradients, nodes, records, targeted


def _rows():
  """Node rows of one rollout, 3 nodes, 3 configurations (two views; jsd with beta) and a view without context."""
  rng = np.random.default_rng(0)
  confs = [contexts.parse("a", "t:plain:reverse_kl"), contexts.parse("b", "t:plain:jsd@0.3"),
           contexts.parse("c", "self:solution:forward_kl")]
  cands = np.array([[5, 6, 7], [5, 8, -1], [2, 3, 4]])
  logp = np.log(rng.dirichlet(np.ones(3), 3))
  rewards = rng.integers(0, 2, (3, 3, 6)).astype(np.int8)
  rewards[:, :, 0], rewards[:, :, 1] = 1, 0          # no node degenerate by chance
  out = targeted.Outcomes(rewards=rewards, valid=cands >= 0)
  views = {confs[0].scoring_key: np.log(rng.dirichlet(np.ones(3), 3)), confs[2].scoring_key: None}
  pred = {v: {k: np.zeros(3) for k in records.PREDICTORS} for v in views}
  at = nodes.RolloutNodes([0, 1, 2], cands, logp, views)
  return nodes.node_rows(confs, "q0", 0, False, [5, 5, 2], at, out, pred)


def test_estimates_from_rows_give_the_records_back_and_projection_is_alignment_times_the_ideal_norm():
  rows = _rows()
  got = nodes.estimates_from_rows(rows)
  np.testing.assert_allclose(got["alignment"], rows.alignment.to_numpy(float), atol=1e-12)
  np.testing.assert_allclose(got["teacher_advantage"], rows.teacher_advantage.to_numpy(float), atol=1e-12)
  assert np.isnan(got["projection"][rows.context.to_numpy() == "solution"]).all()     # no context: no q
  for i in np.flatnonzero(rows.context.to_numpy() != "solution"):
    r = rows.iloc[i]
    p, ps = np.asarray(r.p), np.asarray(r.p_succ)
    g_ideal = p * (ps - p @ ps)                                                        # numpy, the paper's g*
    assert math.isclose(got["projection"][i], r.alignment * np.linalg.norm(g_ideal), rel_tol=1e-9)


def test_subsampled_counts_come_from_the_records_rewards():
  rows = _rows()
  key = list(zip(rows.question_id, rows.rollout_id, rows.position))
  rewards = {k: [np.asarray(x, float) for x in rw] for k, rw in zip(key, rows.rewards)}
  full = fc.subsample(rewards, None, None)
  for k, s, n in zip(key, rows.successes, rows.n):
    np.testing.assert_array_equal(full[k][0], s) and np.testing.assert_array_equal(full[k][1], n)
  half = fc.subsample(rewards, 3, np.random.default_rng(1))
  for k, s in zip(key, rows.successes):
    assert (half[k][1] == 3).all() and (half[k][0] <= np.minimum(3, s)).all() and (half[k][0] >= np.asarray(s) - 3).all()
  again = nodes.estimates_from_rows(rows, half)
  assert np.isfinite(again["teacher_advantage"][rows.context.to_numpy() != "solution"]).all()
  assert not np.allclose(np.nan_to_num(again["alignment"]), np.nan_to_num(rows.alignment.to_numpy(float)))
