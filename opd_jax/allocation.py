"""Adaptive allocation of targeted continuations: spend replicates where they change g* (issue 15, item 4) [ours].

A round-based, greedy allocator. After each round every (node, candidate) pair has counts (s, n); the next
round's replicates go, `unit` at a time, to the pairs whose next batch most lowers the predicted 1 - cos(ĝ, g*)
of their node (the quantity `benchmarks/adaptive.py` scores against the exact toy). Pure numpy, no model:
`targeted.estimate_successes` runs the rounds.

The loss model of one node (p: student probabilities on C(u), renormalised over the valid slots):
  P~_j = (s_j + a) / (n_j + 2a)                   Beta(a, a) posterior mean: 0/n and n/n keep a variance
  sigma_j^2 = P~_j (1 - P~_j) / n_j               variance of P^_j = s_j / n_j
  g = p (P~ - p.P~),  J_j = dg / dP_j = p_j (e_j - p)        (g* = p (P_succ - V), paper.md "Gradients")
  S = sum_j |J_j|^2 sigma_j^2                      trace of Var(ĝ) (delta method; the P^_j are independent)
  S_perp = sum_j (|J_j|^2 - (u.J_j)^2) sigma_j^2   the part orthogonal to u = g / |g| (it is what turns ĝ)
  L(G) = S_perp / (2 G + S_perp)                   predicted 1 - cos(ĝ, g*) for |g*|^2 = G: S_perp / (2G) when
                                                   the node is resolved, -> 1 when it is noise
|g*|^2 itself is uncertain: G lies in [max(|g|^2 - spread S, 0), |g|^2 + spread S] (fixed within a round).
The gain of `unit` more replicates at (m, j) is the largest drop L(G; n) - L(G; n + unit e_j) over that
interval (optimistic: a node whose |g*| could be near its noise level is worth resolving; the drop is unimodal
in G with its peak at 2G = sqrt(S_perp(n) S_perp(n + unit e_j))). A node stops receiving replicates once
L(|g|^2) <= tolerance; a candidate once it has r_max. A fixed candidate (its outcome is decided without
sampling: a forced stop token, or the token cap reached; `targeted.fixed_branches`) has sigma_j^2 = 0 and
never receives replicates.
"""
from __future__ import annotations

import heapq

import numpy as np


def _terms(p: np.ndarray, successes: np.ndarray, n: np.ndarray, valid: np.ndarray, prior: float, fixed=None):
  """(w, c, v, g2) per node: |J_j|^2 [M, K], |J_j|^2 - (u.J_j)^2 [M, K], P~(1 - P~) [M, K], |g|^2 [M].

  A fixed slot's P~ is its observed s / n (exact) and its v is 0."""
  p = np.where(valid, np.asarray(p, np.float64), 0.0)
  p = p / np.maximum(p.sum(-1, keepdims=True), 1e-300)
  s, n = np.asarray(successes, np.float64), np.asarray(n, np.float64)
  fixed = np.zeros(np.shape(valid), bool) if fixed is None else np.asarray(fixed, bool)
  pt = np.where(fixed, s / np.maximum(n, 1), (s + prior) / (n + 2 * prior))
  v = np.where(valid & ~fixed, pt * (1 - pt), 0.0)
  g = p * (pt - np.sum(p * pt, -1, keepdims=True))
  w = p * p * ((1 - p) ** 2 + np.sum(p * p, -1, keepdims=True) - p * p)          # |p_j (e_j - p)|^2
  norm = np.sqrt(np.sum(g * g, -1, keepdims=True))
  u = np.where(norm > 0, g / np.maximum(norm, 1e-300), 0.0)
  uj = p * (u - np.sum(u * p, -1, keepdims=True))                                # u . J_j
  c = np.where(valid, np.maximum(w - uj * uj, 0.0), 0.0)
  return np.where(valid, w, 0.0), c, v, np.sum(g * g, -1)


def predicted_loss(p: np.ndarray, successes: np.ndarray, n: np.ndarray, valid: np.ndarray, *,
                   prior: float = 0.5, fixed: np.ndarray | None = None) -> np.ndarray:
  """Predicted 1 - cos(ĝ, g*) per node, float64 [M] (the loss model above).

  Args:
    p: float [M, K] student probabilities on C(u) (renormalised here over the valid slots).
    successes, n: int [M, K] counts so far (n >= 1 on valid slots).
    valid: bool [M, K] real candidates.
    prior: a of the Beta(a, a) prior that shrinks P^ (so 0/n and n/n still count as uncertain).
    fixed: bool [M, K] or None: slots whose outcome is decided without sampling (exact; no variance).
  """
  _, c, v, g2 = _terms(p, successes, n, valid, prior, fixed)
  sp = np.sum(c * v / np.maximum(n, 1), -1)
  return sp / np.maximum(2 * g2 + sp, 1e-300)


def allocate(p: np.ndarray, successes: np.ndarray, n: np.ndarray, valid: np.ndarray, *, budget: int, unit: int,
             r_max: int, tolerance: float = 0.0, prior: float = 0.5, spread: float = 1.0,
             fixed: np.ndarray | None = None) -> np.ndarray:
  """Extra replicates per (node, candidate) for the next round, int64 [M, K], summing to <= budget.

  Greedy in steps of `unit` replicates (fewer where r_max leaves fewer): each step goes to the pair with the
  largest predicted drop of its node's 1 - cos(ĝ, g*) (module docstring), recomputed for that node after
  every step. Pairs at r_max, padded or fixed slots and nodes whose predicted loss is <= tolerance get nothing.

  Args:
    p, successes, n, valid: as `predicted_loss`, M nodes (possibly of several rollouts stacked), K slots.
    budget: replicates this round may add in total (>= 0).
    unit: replicates per step (>= 1).
    r_max: cap on a candidate's replicates in total (its row-id stride).
    tolerance: per-node precision target on the predicted 1 - cos (0: spend the budget).
    prior: a of the Beta(a, a) prior.
    spread: width of the interval of |g*|^2, in units of S.
    fixed: bool [M, K] or None: slots whose outcome is decided without sampling (`targeted.fixed_branches`).
  Returns:
    int64 [M, K] replicates to add.
  Raises:
    ValueError: unit < 1 or budget < 0.
  """
  if unit < 1 or budget < 0:
    raise ValueError(f"allocate needs unit >= 1 and budget >= 0, got unit={unit}, budget={budget}")
  valid = np.asarray(valid, bool)
  n = np.asarray(n, np.int64).copy()
  start = n.copy()
  w, c, v, g2 = _terms(p, successes, n, valid, prior, fixed)
  open_ = valid if fixed is None else valid & ~np.asarray(fixed, bool)
  S = np.sum(w * v / np.maximum(n, 1), -1)
  g_lo, g_hi = np.maximum(g2 - spread * S, 0.0), g2 + spread * S
  L = lambda sp, G: sp / max(2 * G + sp, 1e-300)

  def push(heap, m):
    s0 = np.sum(c[m] * v[m] / np.maximum(n[m], 1))
    if L(s0, g2[m]) <= tolerance:
      return
    for k in np.flatnonzero(open_[m] & (n[m] < r_max)):
      step = min(unit, r_max - n[m, k])
      s1 = s0 - c[m, k] * v[m, k] * (1 / n[m, k] - 1 / (n[m, k] + step))
      G = min(max(np.sqrt(s0 * max(s1, 0.0)) / 2, g_lo[m]), g_hi[m])
      gain = L(s0, G) - L(s1, G)
      heapq.heappush(heap, (-gain / step, int(m), int(k), version[m]))     # gain per replicate

  heap, version = [], [0] * n.shape[0]
  for m in range(n.shape[0]):
    push(heap, m)
  left = int(budget)
  while heap and left > 0:
    _, m, k, seen = heapq.heappop(heap)
    if seen != version[m]:                                # stale: the node's gains changed since
      continue
    step = min(unit, r_max - n[m, k], left)
    n[m, k] += step
    left -= step
    version[m] += 1
    push(heap, m)
  return n - start
