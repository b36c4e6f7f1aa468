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


# ----------------------------------------------------------------------------------------------------------
# Log-space forms of |J_k|^2 and (q_k - p_k)^2, shared by both allocators (issue 49, item 6). At a confident node
# (a lead of >= 20 nats) the plain float64 form p_k^2 ((1 - p_k)^2 + sum_j p_j^2 - p_k^2) cancels the others'
# squares against p_k^2 ~ 1, and q_k - p_k cancels to 0 where p and q both put ~1 on candidate k, so part of its
# weight was lost (10 continuations instead of 15). Here no term subtracts two numbers near 1: 1 - p_k is the
# others' mass, summed as such.

def _log_normalise(x: np.ndarray, valid: np.ndarray, log: bool) -> tuple[np.ndarray, np.ndarray]:
  """(log-probabilities renormalised over `valid`, float64 [..., K], -inf off it; whether the node has mass [...]).

  x: probabilities (any positive scale; NaN and values <= 0 read as 0) or, with `log`, log-probabilities (any
  offset; NaN and -inf read as probability 0). The largest entry is normalised as -log1p(the others' relative
  mass), so a top candidate of 1 - 1e-20 keeps its 1e-20."""
  x = np.asarray(x, np.float64)
  with np.errstate(divide="ignore", invalid="ignore"):
    lx = np.where(x < np.inf, x, np.nan) if log else np.log(np.where(x > 0, x, 0.0))
  lx = np.where(valid & ~np.isnan(lx), lx, -np.inf)
  m = np.max(lx, -1, keepdims=True)
  has = np.isfinite(m[..., 0])
  y = lx - np.where(np.isfinite(m), m, 0.0)
  first = np.arange(lx.shape[-1]) == np.argmax(lx, -1)[..., None]
  return y - np.log1p(np.sum(np.where(first, 0.0, np.exp(y)), -1, keepdims=True)), has


def _lse(x: np.ndarray) -> np.ndarray:
  """log sum exp over the last axis (-inf where every entry is -inf), exact to the rounding of its result."""
  m = np.max(x, -1, keepdims=True)
  m = np.where(np.isfinite(m), m, 0.0)
  with np.errstate(divide="ignore"):
    return m[..., 0] + np.log(np.sum(np.exp(x - m), -1))


def _log_share(lx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(exp(lx) / sum exp(lx) over the last axis, 0 where every entry is -inf; whether any is finite)."""
  m = np.max(lx, -1, keepdims=True)
  e = np.exp(lx - np.where(np.isfinite(m), m, 0.0))
  tot = e.sum(-1, keepdims=True)
  return e / np.where(tot > 0, tot, 1.0), tot[..., 0] > 0


def _others(lp: np.ndarray) -> np.ndarray:
  """[..., k, j] = log p_j for j != k, -inf on the diagonal."""
  return np.where(np.eye(lp.shape[-1], dtype=bool), -np.inf, lp[..., None, :])


def log_jacobian_sq(lp: np.ndarray) -> np.ndarray:
  """log |J_k|^2 = log(p_k^2 ((1 - p_k)^2 + sum_{j != k} p_j^2)) from normalised log p [..., K] (-inf: p = 0).

  J_k = dg*/dP_succ(k) = p_k (e_k - p) (`weights`). 1 - p_k is the others' mass, logsumexp_{j != k} log p_j, and
  the squares are summed over j != k, never formed as a difference: exact to rounding at any logit gap."""
  others = _others(lp)
  return 2 * lp + np.logaddexp(2 * _lse(others), _lse(2 * others))


def _log_abs_diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """log |e^a - e^b| (-inf where equal): e^hi (1 - e^(lo - hi)) with expm1, exact to rounding at any gap."""
  hi, lo = np.maximum(a, b), np.minimum(a, b)
  with np.errstate(divide="ignore", invalid="ignore"):
    out = hi + np.log(-np.expm1(lo - hi))
  return np.where(np.isneginf(lo), hi, np.where(np.isneginf(hi), -np.inf, out))


def _log_advantage_sq(lq: np.ndarray, lp: np.ndarray, has_p: np.ndarray) -> np.ndarray:
  """log (q_k - p_k)^2 from normalised log q and log p [..., K] (p = 0 where not has_p [...]). Where p_k or q_k
  > 1/2 it is formed as (1 - p_k) - (1 - q_k), the others' masses: a candidate both hold at 1 - 1e-300 keeps its
  difference, which log p_k ~ -1e-300 (0 in float64) would lose."""
  top = has_p[..., None] & (np.maximum(lq, lp) > -np.log(2.0))
  return 2 * np.where(top, _log_abs_diff(_lse(_others(lp)), _lse(_others(lq))), _log_abs_diff(lq, lp))


# ----------------------------------------------------------------------------------------------------------
# Adaptive allocation.

def _terms(p: np.ndarray, successes: np.ndarray, n: np.ndarray, valid: np.ndarray, prior: float, fixed=None):
  """(w, c, v, g2) per node: |J_j|^2 [M, K], |J_j|^2 - (u.J_j)^2 [M, K], P~(1 - P~) [M, K], |g|^2 [M].

  A fixed slot's P~ is its observed s / n (exact) and its v is 0."""
  p = np.where(valid, np.nan_to_num(np.asarray(p, np.float64)), 0.0)                # NaN reads as 0
  p = p / np.maximum(p.sum(-1, keepdims=True), 1e-300)
  s, n = np.asarray(successes, np.float64), np.asarray(n, np.float64)
  fixed = np.zeros(np.shape(valid), bool) if fixed is None else np.asarray(fixed, bool)
  pt = np.where(fixed, s / np.maximum(n, 1), (s + prior) / (n + 2 * prior))
  v = np.where(valid & ~fixed, pt * (1 - pt), 0.0)
  g = p * (pt - np.sum(p * pt, -1, keepdims=True))
  with np.errstate(divide="ignore"):
    w = np.exp(log_jacobian_sq(np.log(p)))                                        # |p_j (e_j - p)|^2
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


# ----------------------------------------------------------------------------------------------------------
# Weighted allocation (issue 33, item 1): a fixed design from p and q, before any continuation [ours].

def _weights(lp: np.ndarray, has_p: np.ndarray, lqs) -> np.ndarray:
  """`weights` from normalised log p [M, K] (and whether each node has p) and [(log q, has q)] per view."""
  j2, has_j = _log_share(log_jacobian_sq(lp))
  has_j &= has_p
  adv, count = np.zeros(lp.shape), np.zeros(lp.shape[:-1])
  for lq, has_q in lqs:
    a, has = _log_share(_log_advantage_sq(lq, lp, has_p))
    has &= has_q
    adv, count = adv + np.where(has[..., None], a, 0.0), count + has
  adv = adv / np.maximum(count, 1)[..., None]
  terms = has_j.astype(np.float64) + (count > 0)          # statistics with a defined share
  return np.sqrt((np.where(has_j[..., None], j2, 0.0) + adv) / np.maximum(terms, 1)[..., None])


def weights(p: np.ndarray, qs, valid: np.ndarray, *, log: bool = False) -> np.ndarray:
  """Each candidate's share of the verdict's sensitivity to its P_succ, float64 [M, K] (0 off `valid`).

  The verdict reads, per configuration c, the alignment cos(g*, g_c) and the teacher advantage
  A_c = sum_k q_k P_succ(k) - V (paper.md, "Gradients"). Their derivatives with respect to P_succ(k) are
    dg*/dP_k = J_k = p_k (e_k - p)                      (through g* = p (P_succ - V));
    d cos/dP_k = J_k . (u_c - cos u*) / |g*|,  |.| <= |J_k| / |g*|   (u = unit vectors; 1/|g*| is shared by the
                                                        node's candidates, so within a node it weighs as |J_k|);
    dA_c/dP_k = q_k - p_k.
  A statistic T's variance is sum_k (dT/dP_k)^2 sigma_k^2 / n_k; the sum over statistics is smallest at
  n_k ∝ sigma_k sqrt(sum_T (dT/dP_k)^2) (Neyman allocation), and sigma_k <= 1/2 is unknown before sampling, so
    w_k^2 = 1/2 |J_k|^2 / sum_j |J_j|^2 + 1/2 mean_c (q_ck - p_k)^2 / sum_j (q_cj - p_j)^2,
  each statistic normalised over the node so that alignment and the teachers' advantages count equally (a
  term whose denominator is 0, e.g. q_c = p, or a q_c with no mass on the node, is left out of its mean; with
  none left, alignment alone). |J_k|^2 = p_k^2 ((1 - p_k)^2 + sum_{j != k} p_j^2).
  Computed in log space (`log_jacobian_sq`; 1 - p_k as the others' mass, |q_k - p_k| with expm1), so the weights
  agree with the formula evaluated exactly to ~1e-11 relative at any lead of the top candidate
  (tests/study/test_allocation_exact.py: decimal arithmetic with 40 digits to spare, leads up to 5000 nats).

  Args:
    p: float [M, K] student probabilities on C(u) (any positive scale: renormalised over `valid` here; NaN reads
      as 0), or log-probabilities with `log`.
    qs: sequence of float [M, K] teacher probabilities on C(u), one per view (renormalised likewise; NaN reads
      as 0), or log-probabilities with `log`. May be empty.
    valid: bool [M, K] the candidates that may be continued.
    log: p and qs are log-probabilities (any per-node offset; -inf and NaN read as probability 0), e.g. the
      records' log p on C(u): then a candidate whose probability underflows in exp keeps its weight.
  Returns:
    float64 [M, K] in [0, 1]; sum_k w_k^2 = 1 on a node where some term is defined, else 0.
  """
  valid = np.asarray(valid, bool)
  lp, has_p = _log_normalise(p, valid, log)
  return _weights(lp, has_p, [_log_normalise(q, valid, log) for q in qs])


def _water_fill(w: np.ndarray, open_: np.ndarray, budget: np.ndarray, minimum: int, r_max: int) -> np.ndarray:
  """x_k = clip(c w_k, minimum, r_max) on the open slots, 0 elsewhere, with c per node such that the node sums to
  `budget` [M]; c = 0 where the floor already reaches it, c -> infinity where the caps cannot (every positive
  weight at r_max). Exact: sum_k x_k(c) is linear between consecutive breakpoints minimum / w_k, r_max / w_k, so
  c is solved on the segment that holds the budget (no bisection: any ratio of weights, 1e-300 included)."""
  pos = open_ & (w > 0)
  with np.errstate(divide="ignore"):
    lo_k, hi_k = np.where(pos, minimum / w, np.inf), np.where(pos, r_max / w, np.inf)

  def fill(c):                                             # c [M, J] -> x [M, J, K]
    with np.errstate(invalid="ignore"):                    # inf x 0 off `pos`, replaced
      cw = np.where(pos[..., None, :], c[..., None] * w[..., None, :], 0.0)
    return np.where(open_[..., None, :], np.clip(cw, minimum, r_max), 0.0)

  cs = np.concatenate([np.zeros(w.shape[:-1] + (1,)), np.sort(np.concatenate([lo_k, hi_k], -1), -1)], -1)
  f = fill(cs).sum(-1)                                     # [M, 2K + 1], nondecreasing
  reach = f >= budget[..., None]
  at = np.argmax(reach, -1)
  prev = np.maximum(at - 1, 0)[..., None]
  c0, f0 = np.take_along_axis(cs, prev, -1)[..., 0], np.take_along_axis(f, prev, -1)[..., 0]
  linear = pos & (lo_k <= c0[..., None]) & (hi_k > c0[..., None])
  slope = np.sum(np.where(linear, w, 0.0), -1)
  c = np.where(at == 0, 0.0, c0 + (budget - f0) / np.where(slope > 0, slope, 1.0))
  c = np.where(reach.any(-1), c, np.inf)
  return fill(c[..., None])[..., 0, :]


def weighted_counts(p: np.ndarray, qs, valid: np.ndarray, *, mean: float, minimum: int, r_max: int,
                    min_mass: float, fixed: np.ndarray | None = None, log: bool = False) -> np.ndarray:
  """Continuations per candidate of the weighted design, int64 [M, K] (0: not run), from p and q only.

  Per node: N = round(mean x valid candidates) replicates in all (the uniform budget at R = mean; round half to
  even). A candidate is kept when its p or some q_c is >= min_mass (renormalised over `valid`; the two of
  largest max(p_k, q_ck), ties to the lower slot, so that g* stays defined, and every fixed slot are always
  kept); a kept fixed slot (its outcome is decided without sampling, run once) gets `minimum`; the other kept
  slots get n_k = clip(c w_k, minimum, r_max) with c such that the node sums to N (`weights`' Neyman allocation
  with a floor and a cap; uniform where every kept w_k is 0; every positive-weight slot at r_max where the caps
  cannot reach N), rounded to integers by largest remainders (rounded to 9 decimals, so that remainders equal
  but for rounding, as at a node of two symmetric candidates, go to the lower slot on every host). A design
  fixed by p and q, never by outcomes, so every P^_k = s_k / n_k stays exactly unbiased. Equal to the design
  computed exactly at any logit gap (tests/study/test_allocation_exact.py).

  Args:
    p, qs, valid, log: as `weights`.
    mean: budget per valid candidate (>= minimum).
    minimum: continuations of every kept candidate (2 keeps the split-half noise ceiling defined).
    r_max: most continuations of one candidate (>= mean).
    min_mass: drop threshold on max(p_k, max_c q_ck) (0: keep every valid candidate).
    fixed: bool [M, K] or None (`targeted.fixed_branches`).
  Returns:
    int64 [M, K]: >= minimum on kept slots, 0 elsewhere; sum <= N per node (less only where caps bind).
  Raises:
    ValueError: minimum < 1, or not minimum <= mean <= r_max, or min_mass outside [0, 1).
  """
  if minimum < 1 or not minimum <= mean <= r_max or not 0 <= min_mass < 1:
    raise ValueError(f"weighted allocation needs 1 <= minimum <= mean <= r_max and 0 <= min_mass < 1, got "
                     f"minimum={minimum}, mean={mean}, r_max={r_max}, min_mass={min_mass}")
  valid = np.asarray(valid, bool)
  fixed = np.zeros(valid.shape, bool) if fixed is None else np.asarray(fixed, bool) & valid
  lp, has_p = _log_normalise(p, valid, log)
  lqs = [_log_normalise(q, valid, log) for q in qs]
  mass = lp
  for lq, _ in lqs:
    mass = np.maximum(mass, lq)                            # log max(p_k, q_ck); -inf off valid
  slot = np.broadcast_to(np.arange(valid.shape[-1]), valid.shape)
  order = np.lexsort((slot, -mass, ~valid), axis=-1)      # valid first, then by mass, ties to the lower slot
  rank = np.argsort(order, -1)
  top = valid & (rank < 2)                                 # two candidates at least: g* needs two to be defined
  with np.errstate(divide="ignore"):
    kept = valid & ((mass >= np.log(min_mass)) | top | fixed)
  open_ = kept & ~fixed
  w = np.where(open_, _weights(lp, has_p, lqs), 0.0)
  w = np.where(open_ & (w.sum(-1, keepdims=True) <= 0), 1.0, w)      # no information: uniform
  budget = np.round(mean * valid.sum(-1)) - minimum * fixed.sum(-1)
  x = _water_fill(w, open_, budget, minimum, r_max)
  n = np.floor(x + 1e-9)
  short = np.maximum(np.minimum(budget, x.sum(-1).round()) - n.sum(-1), 0).astype(np.int64)
  rem = np.round(x - n, 9)                                 # equal but for rounding: the lower slot first
  order = np.argsort(-np.where(open_ & (n < r_max), rem, -1.0), axis=-1, kind="stable")
  extra = np.zeros(n.shape)
  np.put_along_axis(extra, order, (np.arange(n.shape[-1]) < short[..., None]).astype(float), -1)
  n = n + np.where(open_, extra, 0.0)
  return np.where(fixed & kept, minimum, n).astype(np.int64)
