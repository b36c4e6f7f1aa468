"""P_succ from the rewards of targeted continuations, and every estimate at a node built on it (paper.md,
"Estimators"): point estimates (`p_succ`, `estimator_p_succ` for slots not run), Wilson intervals, and
`node_estimates` (node value V, ideal gradient g*, distillation gradient g_D, alignment, teacher advantage, NaN
reasons). `opd_jax/study/targeted.py` runs the continuations that count the successes."""
from __future__ import annotations

import dataclasses

import jax
import numpy as np

from opd_jax.estimators import gradients


def wilson_interval(successes, n, z: float = 1.959964) -> tuple[np.ndarray, np.ndarray]:
  """Wilson score interval for a binomial proportion (float64 arrays; [0, 1] where n = 0)."""
  s, n = np.asarray(successes, np.float64), np.asarray(n, np.float64)
  safe = np.maximum(n, 1)
  ph = s / safe
  denom = 1 + z * z / safe
  center = (ph + z * z / (2 * safe)) / denom
  half = z * np.sqrt(ph * (1 - ph) / safe + z * z / (4 * safe * safe)) / denom
  lo, hi = np.clip(center - half, 0, 1), np.clip(center + half, 0, 1)
  return np.where(n > 0, lo, 0.0), np.where(n > 0, hi, 1.0)


def p_succ(successes, n) -> np.ndarray:
  """P_succ = successes / n (float64; 0 where n = 0: padded candidate slots and slots not run, which have p = 0
  and so no weight in V or g*)."""
  s, n = np.asarray(successes, np.float64), np.asarray(n, np.float64)
  return np.where(n > 0, s / np.maximum(n, 1), 0.0)


def estimator_p_succ(p: np.ndarray, successes, n) -> np.ndarray:
  """The P_succ that V, g* and alignment read, float64 [M, K]: `p_succ`, except on a slot with p > 0 that was
  not run (n = 0: left out by weighted allocation), which gets the node value over the slots run,
  V_run = sum_{k run} p_k P^_k / sum_{k run} p_k [ours]. Then V = V_run (p renormalised over the slots run), g*
  is 0 on the slot, and the estimators' error from leaving it out is at most its p mass m (|V - V_run| =
  m |P_succ(k) - V_run| <= m). Bitwise `p_succ` where no slot with p > 0 is left out (uniform runs)."""
  p = np.asarray(p, np.float64)
  ps, ran = p_succ(successes, n), np.asarray(n) > 0
  gap = (p > 0) & ~ran
  if not gap.any():
    return ps
  w = np.where(ran, p, 0.0)
  ref = np.take_along_axis(ps, np.argmax(w, -1)[..., None], -1)         # centred: exact when P^ is constant
  mass = w.sum(-1, keepdims=True)
  v_run = ref + np.sum(w * (ps - ref), -1, keepdims=True) / np.where(mass > 0, mass, 1.0)
  return np.where(gap, v_run, ps)


@dataclasses.dataclass(frozen=True)
class NodeEstimates:
  """Estimates at M nodes for one configuration (arrays [M] unless stated; computed in float64)."""
  p_succ: np.ndarray               # [M, K] (`estimator_p_succ`: imputed on a slot with p > 0 not run)
  value: np.ndarray                # V = sum_k p_k P_succ(k)
  alignment: np.ndarray            # cos(g*, g_D); NaN when undefined
  nan_reason: np.ndarray           # object [M]: one of gradients.NAN_REASONS
  teacher_advantage: np.ndarray    # sum_k q_k P_succ(k) - V (q renormalised over the slots run: `node_estimates`)
  degenerate: np.ndarray           # bool, decided on the integer counts
  g_ideal: np.ndarray              # [M, K]
  g_distill: np.ndarray            # [M, K]


def node_estimates(p: np.ndarray, q: np.ndarray, successes: np.ndarray, n: np.ndarray, *, divergence: str,
                   beta: float = 0.5, clip: float | None = None, sampled_index: np.ndarray | None = None,
                   advantage: np.ndarray | None = None, **params) -> NodeEstimates:
  """g*, g_D, alignment, teacher advantage at M nodes (paper.md, "Gradients in logit space").

  Args:
    p, q: float [M, K] student / teacher probabilities on C(u), renormalised, 0 on padding.
    successes, n: int [M, K] counts (n = 0 on padding).
    divergence, beta, clip: the configuration's divergence (`gradients.distillation_gradient`); **params: the
      parameter of another registered divergence (e.g. k=8), as in `contexts.TeacherConfig.options`.
    sampled_index: int [M] index in C(u) of the sampled token (needed by "sampled_token").
    advantage: float [M] full-vocabulary log q(y_t) - log p(y_t) (for "sampled_token"; optional).
  A candidate not run (n = 0 on a valid slot: outside the sampled policy's support, p = 0, or left out by
  weighted allocation, p and every q below its min_mass) has no P^: V, g* and alignment read
  `estimator_p_succ` (V over the candidates run, p renormalised there; the slot's g* component 0; no change when
  p = 0 there). Teacher advantage A = sum_k q_k P_succ(k) - V (paper.md, "Gradients") needs P_succ wherever q > 0:
  where a candidate with q > 0 was not run it is computed over the candidates run, q renormalised there [ours]:
  A = sum_{k run} q_k P_succ(k) / sum_{k run} q_k - V; NaN when q has no mass on them. Every other node uses q
  as is (bitwise the formula above). Leaving out p mass m and q mass m_q moves V by at most m and A by at most
  m + m_q.

  Returns:
    `NodeEstimates`. Alignment is NaN with a reason (`gradients.nan_reason`): "degenerate" when the counts make
    every P_succ equal (g* = 0), else "zero_distillation_gradient" when |g_D| < max(1e-12, 1e-5 |p|) (q = p on C(u) up
    to fp32 round-off, or the clip binds), else "zero_ideal_gradient" (P_succ differs only where p underflows).
  """
  # float64: near-degenerate nodes have g* components far below P_succ's scale (P_succ - V ~ 1e-7), where
  # fp32 cancellation would cost the alignment its second digit.
  p, q = np.asarray(p, np.float64), np.asarray(q, np.float64)
  ps = estimator_p_succ(p, successes, n)
  ran = np.asarray(n) > 0
  missing = np.any((q > 0) & ~ran, axis=-1, keepdims=True)      # some q mass on a slot not run
  q_mass = np.sum(np.where(ran, q, 0.0), -1, keepdims=True)
  q_adv = np.where(missing, np.where(ran, q, 0.0) / np.where(q_mass > 0, q_mass, 1.0), q)
  with jax.enable_x64(True):
    g_ideal = np.asarray(gradients.ideal_gradient(p, ps))
    g = np.asarray(gradients.distillation_gradient(
        divergence, p, q, beta=beta, clip=clip, sampled_token=sampled_index,
        advantage=None if advantage is None else np.asarray(advantage, np.float64), **params))
    degenerate = np.asarray(gradients.is_degenerate(successes, n))
    code = np.asarray(gradients.nan_reason(degenerate, g_ideal, g, p))
    cos = np.where(code > 0, np.nan, np.asarray(gradients.alignment(g_ideal, g)))
    value = np.asarray(gradients.node_value(p, ps))
    adv = np.asarray(gradients.teacher_advantage(p, q_adv, ps))
  adv = np.where(missing[..., 0] & (q_mass[..., 0] <= 0), np.nan, adv)
  reason = np.asarray(gradients.NAN_REASONS, object)[code]
  return NodeEstimates(p_succ=ps.astype(np.float64), value=value, alignment=cos, nan_reason=reason,
                       teacher_advantage=adv, degenerate=degenerate, g_ideal=g_ideal, g_distill=g)


def halves(rewards) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """Split each candidate's continuations into two independent halves: (successes_a, n_a, successes_b, n_b),
  int64 [K] each, half a the continuations at even places (0, 2, ...), half b those at odd places.

  rewards: K 1-d arrays of a node's 0/1 rewards per candidate (the records' `rewards`; > 0.5 is a success, as the
  study counts). The continuations of a candidate are exchangeable draws of its forced branch, so any fixed split
  gives independent halves, each a study that ran n_a (n_b) of them.
  """
  parts = [[np.asarray(x, np.float64)[i::2] for x in rewards] for i in (0, 1)]
  count = lambda part: (np.asarray([int(np.sum(x > 0.5)) for x in part], np.int64),
                        np.asarray([x.size for x in part], np.int64))
  return (*count(parts[0]), *count(parts[1]))


def crossfit_norm2(p: np.ndarray, successes_a, n_a, successes_b, n_b) -> np.ndarray:
  """<g*_a, g*_b>: an unbiased estimate of |g*|^2 at M nodes from two independent halves of the continuations
  [ours, issue 48; the cross-fitting of Chernozhukov et al. 2018 applied to a squared norm].

  Each half's g*_h = p * (P^_h - V^_h) is linear in its P^_h, so E g*_h = g* (the exact P_succ's), and the halves
  are independent: E <g*_a, g*_b> = <g*, g*>. The plug-in |g*^|^2 of all continuations is biased up by the trace
  of g*^'s covariance (~ sum_k p_k^2 P(1 - P) / r), which is what inflates |g*^| and shrinks the cosine at small r.
  A slot not run in either half (p = 0 there, or left out by weighted allocation) is imputed alike in both
  (`estimator_p_succ`).

  Args:
    p: float [M, K] student probabilities on C(u), renormalised, 0 on padding.
    successes_a, n_a, successes_b, n_b: int [M, K] counts of the two halves (`halves`).
  Returns:
    float64 [M], may be negative (an unbiased estimate of a small square); NaN at a node where a slot with p > 0
    was run in one half only (a candidate with a single continuation: nothing to cross).
  """
  p = np.asarray(p, np.float64)
  n_a, n_b = np.asarray(n_a), np.asarray(n_b)
  with jax.enable_x64(True):
    g_a = np.asarray(gradients.ideal_gradient(p, estimator_p_succ(p, successes_a, n_a)))
    g_b = np.asarray(gradients.ideal_gradient(p, estimator_p_succ(p, successes_b, n_b)))
  one_sided = np.any((p > 0) & ((n_a > 0) != (n_b > 0)), axis=-1)
  return np.where(one_sided, np.nan, np.sum(g_a * g_b, axis=-1))
