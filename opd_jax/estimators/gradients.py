"""Closed-form gradients in logit space at one node, over its candidate set (paper.md, "Gradients in logit space").

Every vector here lives on the candidate axis `K` of one node (the last axis; leading axes are batched): p is
the student's distribution restricted to the candidate set C(u) and renormalised (`restrict`), q a teacher's,
p_succ the estimated success probability after forcing each candidate. Padded slots carry p = q = 0 and
contribute 0. Float inputs are promoted to at least float32. All functions are pure and jitted (callable inside
jit, grad and vmap); options (divergence, beta, clip) are checked in Python and passed as static arguments, so a
traced beta or clip is refused with a ValueError.

Sign convention (paper.md): every direction is the way the update moves the student logits z, with
p = softmax(z): the ideal g* = +dV/dz, a distillation direction g = -dLoss/dz. So alignment(g*, g) > 0 means
the loss pushes where success lies. Each has the form g = p * (f - sum_k p_k f_k) for a per-candidate score f.

Zero probabilities: log 0 is never formed. Logs of probabilities are taken at max(x, tiny), tiny the smallest
normal number of the dtype (jnp.finfo(dtype).tiny; log tiny = -87.3 in fp32, -708.4 in fp64). A padded slot
(p = q = 0) then contributes exactly 0 (0 log 0 = 0). A candidate with p > 0 but q = 0 (only after underflow:
candidate sets come from the union of top-k of p and of q, so both are positive after softmax) gets the finite
score log tiny - log p: a large, finite push off that candidate, and a finite KL, instead of inf or NaN. A
candidate with q > 0 but p = 0 gets direction 0 from every KL-type loss (it is scaled by p); forward KL gives
q - p = q there.

The divergences themselves (names, '@' parameters, losses, closed-form or autodiff directions) are the registry
of opd_jax/estimators/divergences.py; `distillation_gradient` and `DIVERGENCES` here are its entry points for the study.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from opd_jax.estimators import divergences
# The divergence registry and its losses live in opd_jax/estimators/divergences.py; these names stay here for callers.
from opd_jax.estimators.divergences import DIVERGENCES, clipped_reverse_kl, forward_kl, jsd, reverse_kl  # noqa: F401

NORM_EPS = 1e-12  # a gradient whose L2 norm is below this is treated as zero by `alignment` and `nan_reason`
# A distillation direction with |g| < DISTILLATION_NOISE * |p| is at the level of the fp32 round-off of p and q
# (log-probs from fp32 logits carry relative errors of ~1e-6): `nan_reason` calls it zero, never a cosine of noise.
DISTILLATION_NOISE = 1e-5
NAN_REASONS = ("", "degenerate", "zero_distillation_gradient", "zero_ideal_gradient")  # indexed by nan_reason
DEGENERATE, ZERO_DISTILLATION_GRADIENT, ZERO_IDEAL_GRADIENT = NAN_REASONS[1:]    # the names other modules use


_float, _log, _centred, _check_same = (divergences.as_float, divergences.safe_log, divergences.centred,
                                      divergences.check_same)


@jax.jit
def restrict(logp: jax.Array, candidates: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Restricts a full-vocabulary distribution to a node's candidate set and renormalises it (paper.md, "C(u)").

  p_c[k] = p[candidates[k]] / mass, mass = sum over valid k of p[candidates[k]]. Since p_c = softmax of the
  logits at the candidates, a loss of p_c has a gradient w.r.t. the full logits that is 0 off the candidates.
  Works for teacher log-probs too.

  Args:
    logp: [..., V] float full-vocabulary log-probabilities; -inf allowed.
    candidates: [..., K] int token ids in [0, V), distinct within a row; negative ids (-1) are padding.
  Returns:
    p_c: [..., K] float, sums to 1 over the valid candidates, exactly 0 on padding (and on every slot of a row
      with no valid candidate or no mass on them).
    mass: [...] float in [0, 1], the probability the valid candidates covered before renormalising.
  Raises:
    ValueError: if candidates is not integer or its leading axes differ from logp's.
  """
  logp, candidates = _float(logp), jnp.asarray(candidates)
  if candidates.shape[:-1] != logp.shape[:-1] or candidates.ndim == 0 or not jnp.issubdtype(candidates.dtype,
                                                                                              jnp.integer):
    raise ValueError(f"candidates must be integer ids of shape {logp.shape[:-1]} + (K,), got {candidates.dtype} "
                     f"{candidates.shape}")
  valid = candidates >= 0
  logits = jnp.take_along_axis(logp, jnp.where(valid, candidates, 0), axis=-1)
  logits = jnp.where(valid, logits, -jnp.inf)
  lse = jax.nn.logsumexp(logits, axis=-1, keepdims=True)
  ok = valid & (lse > -jnp.inf)
  p_c = jnp.where(ok, jnp.exp(jnp.where(ok, logits - lse, 0.0)), 0.0)
  return p_c, jnp.exp(lse[..., 0])


@jax.jit
def node_value(p: jax.Array, p_succ: jax.Array) -> jax.Array:
  """Node value V(u) = sum_k p_k P_succ(k | u) (paper.md, "Targeted rollouts").

  Args:
    p: [..., K] float student probabilities over the candidates, renormalised; padded slots 0.
    p_succ: [..., K] float success probabilities in [0, 1].
  Returns:
    [...] float in [0, 1].
  """
  p, p_succ = _float(p), _float(p_succ)
  _check_same("p", p, "p_succ", p_succ)
  return jnp.sum(p * p_succ, axis=-1)


@jax.jit
def ideal_gradient(p: jax.Array, p_succ: jax.Array) -> jax.Array:
  """Ideal direction g* = dV/dz = p * (P_succ - V) (paper.md, "Gradients in logit space", row "ideal").

  Computed as p * (f - sum p f) with f = P_succ - P_succ[argmax p]: equal to the formula when p sums to 1,
  and exactly 0 (in any dtype) when P_succ is constant on p's support, as on a degenerate node.

  Args:
    p: [..., K] float student probabilities over the candidates, renormalised; padded slots 0.
    p_succ: [..., K] float success probabilities in [0, 1] (any finite value on padded slots).
  Returns:
    [..., K] float, the direction that raises V fastest; 0 on padded slots.
  """
  p, p_succ = _float(p), _float(p_succ)
  _check_same("p", p, "p_succ", p_succ)
  reference = jnp.take_along_axis(p_succ, jnp.argmax(p, axis=-1)[..., None], axis=-1)
  return _centred(p, p_succ - reference)


def distillation_gradient(divergence: str, p: jax.Array, q: jax.Array, *, beta: float = 0.5,
                          clip: float | None = None, sampled_token: jax.Array | None = None,
                          advantage: jax.Array | None = None, **params) -> jax.Array:
  """Direction a distillation loss moves the student logits, g = -dLoss/dz (paper.md, "Gradients" table).

  - "reverse_kl":  p * (log q - log p + KL(p || q))
  - "forward_kl":  q - p (q must sum to 1 over the candidates)
  - "jsd":         (1 - beta) p * (log(m / p) + KL(p || m)), m = beta q + (1 - beta) p, 0 < beta < 1
  - "sampled_token": A * (e_y - p): the policy-gradient surrogate -A log p_y with A held fixed; A is
    `advantage` (the full-vocabulary log q(y_t) - log p(y_t)) when given, else log q[y] - log p[y] on the
    renormalised candidates. Its expectation over y ~ p with A = log q_y - log p_y is the reverse-KL direction.
  - "clipped_reverse_kl": the reverse-KL direction where KL(p || q) < clip, exactly 0 where the clip binds.
  - any other name of the registry (`divergences.REGISTRY`, e.g. "topk_reverse_kl" with k=8): its closed form,
    else -jax.grad of its loss (`divergences.direction`).
  Every direction is exactly 0 where q == p (and, for "sampled_token", the advantage is 0). Logs of zero
  probabilities are clamped at tiny (module docstring).

  Args:
    divergence: static, one of DIVERGENCES (the registry's names).
    p: [..., K] float student probabilities over the candidates, renormalised; padded slots 0.
    q: [..., K] float teacher probabilities over the same candidates, renormalised; padded slots 0.
    beta: static float strictly inside (0, 1); used by "jsd" only.
    clip: static float > 0, the threshold tau; required by "clipped_reverse_kl".
    sampled_token: [...] int, the index within the candidate axis (not the token id) of the sampled token
      y_t; required by "sampled_token"; must point to a valid slot.
    advantage: optional [...] float A for "sampled_token"; must be finite (predictors.logq_minus_logp is -inf
      where the teacher gives y_t zero probability: clamp it first).
    **params: the static parameter of another registered divergence, e.g. k=8 for "topk_reverse_kl".
  Returns:
    [..., K] float direction, 0 on padded slots (except "sampled_token" at y, which is never padding).
  Raises:
    ValueError: on an unknown divergence (listing the registered names), mismatched shapes, beta outside (0, 1),
      a missing or non-positive clip (or another bad parameter), a missing sampled_token, or a traced beta/clip.
  """
  return divergences.direction(divergence, p, q, beta=beta, clip=clip, sampled_token=sampled_token,
                                advantage=advantage, **params)


@jax.jit
def alignment(g_ideal: jax.Array, g: jax.Array) -> jax.Array:
  """Gradient alignment score align_c(u) = cos(g*, g_c) over the last axis (paper.md, "Gradients").

  Args:
    g_ideal: [..., K] float ideal direction (`ideal_gradient`).
    g: [..., K] float distillation direction (`distillation_gradient`).
  Returns:
    [...] float in [-1, 1]; NaN where either vector's L2 norm is below NORM_EPS = 1e-12 (undefined: call
    `nan_reason` for why).
  """
  g_ideal, g = _float(g_ideal), _float(g)
  _check_same("g_ideal", g_ideal, "g", g)
  norm_a, norm_b = jnp.linalg.norm(g_ideal, axis=-1), jnp.linalg.norm(g, axis=-1)
  undefined = (norm_a < NORM_EPS) | (norm_b < NORM_EPS)
  cos = jnp.sum(g_ideal * g, axis=-1) / jnp.where(undefined, 1.0, norm_a * norm_b)
  return jnp.where(undefined, jnp.nan, jnp.clip(cos, -1.0, 1.0))


@jax.jit
def projection(g_ideal: jax.Array, g: jax.Array) -> jax.Array:
  """Projection of g* on the distillation direction, <g*, g> / |g| over the last axis [ours, issue 33].

  The first-order change in the node value V per unit step of the logits along g (dV/dz = g*, so
  d/ds V(z + s g / |g|) at s = 0 is <g*, g> / |g|): alignment times |g*|. Linear in P_succ (g* is), so an
  unbiased estimate of its value at the true P_succ whatever the number of continuations, and 0 (not undefined)
  where g* = 0, as on a degenerate node; the cosine `alignment` is neither.

  Args:
    g_ideal: [..., K] float ideal direction (`ideal_gradient`).
    g: [..., K] float distillation direction (`distillation_gradient`).
  Returns:
    [...] float, in units of V per unit L2 step of the logits; NaN where |g| < NORM_EPS (no direction).
  """
  g_ideal, g = _float(g_ideal), _float(g)
  _check_same("g_ideal", g_ideal, "g", g)
  norm = jnp.linalg.norm(g, axis=-1)
  undefined = norm < NORM_EPS
  return jnp.where(undefined, jnp.nan, jnp.sum(g_ideal * g, axis=-1) / jnp.where(undefined, 1.0, norm))


@jax.jit
def nan_reason(degenerate: jax.Array, g_ideal: jax.Array, g: jax.Array, p: jax.Array | None = None) -> jax.Array:
  """Why an alignment is undefined, as an index into NAN_REASONS (paper.md, "Gradients": "record why").

  First match wins: 1 "degenerate" where `degenerate` (from `is_degenerate` on the integer counts); 2
  "zero_distillation_gradient" where |g| < NORM_EPS, or, given p, |g| < DISTILLATION_NOISE * |p| (q = p on C up
  to fp32 round-off, or the clip binds); 3 "zero_ideal_gradient" where |g_ideal| < NORM_EPS on a node that is
  not degenerate (P_succ differs only where p underflows to 0); 0 "" where the alignment is defined. Without p
  the code is nonzero exactly where `alignment` is NaN; callers record NaN wherever the code is nonzero. Use
  NAN_REASONS[code] outside jit for the string.

  Args:
    degenerate: [...] bool, from `is_degenerate`.
    g_ideal: [..., K] float ideal direction.
    g: [..., K] float distillation direction.
    p: optional [..., K] float student probabilities on C(u), the scale of the round-off test.
  Returns:
    [...] int32 in {0, 1, 2, 3}.
  """
  g_ideal, g = _float(g_ideal), _float(g)
  _check_same("g_ideal", g_ideal, "g", g)
  floor = NORM_EPS if p is None else jnp.maximum(NORM_EPS, DISTILLATION_NOISE * jnp.linalg.norm(_float(p), axis=-1))
  zero_g = jnp.linalg.norm(g, axis=-1) < floor
  zero_ideal = jnp.linalg.norm(g_ideal, axis=-1) < NORM_EPS
  return jnp.where(degenerate, 1, jnp.where(zero_g, 2, jnp.where(zero_ideal, 3, 0))).astype(jnp.int32)


@jax.jit
def teacher_advantage(p: jax.Array, q: jax.Array, p_succ: jax.Array) -> jax.Array:
  """Teacher advantage A_c(u) = sum_k q_k P_succ(k) - sum_k p_k P_succ(k) (paper.md, "Gradients").

  Computed as sum_k (q_k - p_k) P_succ(k), so exactly 0 where q == p.

  Args:
    p: [..., K] float student probabilities over the candidates; padded slots 0.
    q: [..., K] float teacher probabilities over the candidates; padded slots 0.
    p_succ: [..., K] float success probabilities in [0, 1].
  Returns:
    [...] float in [-1, 1].
  """
  p, q, p_succ = _float(p), _float(q), _float(p_succ)
  _check_same("p", p, "q", q)
  _check_same("p", p, "p_succ", p_succ)
  return jnp.sum((q - p) * p_succ, axis=-1)


@jax.jit
def is_degenerate(successes: jax.Array, n: jax.Array) -> jax.Array:
  """Whether the estimated P_succ = successes / n is equal on every valid candidate (paper.md, "Degenerate node").

  Decided on the integers, never on floats: successes_k * n_j == successes_j * n_k for every pair of valid
  candidates (checked against the first valid candidate, which suffices since equality of ratios with n > 0
  is transitive). Products must fit the integer dtype (int32: counts up to 46340).

  Args:
    successes: [..., K] int successes per candidate.
    n: [..., K] int continuations per candidate; n > 0 marks a valid candidate, padding has n = 0.
  Returns:
    [...] bool; True also when fewer than 2 candidates are valid.
  Raises:
    ValueError: if the arrays are not integer or their shapes differ.
  """
  successes, n = jnp.asarray(successes), jnp.asarray(n)
  if not (jnp.issubdtype(successes.dtype, jnp.integer) and jnp.issubdtype(n.dtype, jnp.integer)):
    raise ValueError(f"successes and n must be integer counts, got {successes.dtype} and {n.dtype}")
  _check_same("successes", successes, "n", n)
  valid = n > 0
  first = jnp.argmax(valid, axis=-1)[..., None]
  s_ref = jnp.take_along_axis(successes, first, axis=-1)
  n_ref = jnp.take_along_axis(n, first, axis=-1)
  return jnp.all(jnp.where(valid, successes * n_ref == s_ref * n, True), axis=-1)
