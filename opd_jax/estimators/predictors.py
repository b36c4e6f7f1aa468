"""Per-position divergence predictors between student and teacher (paper.md, "Divergence predictors").

Every function reads full-vocabulary log-probabilities: `logp [..., V]` of the student p and `logq [..., V]` of
the teacher q (the last axis is the vocabulary, leading axes are batched), and reduces the last axis. They are
pure and jitted (options such as beta and k are checked in Python, then static). `predictors` computes all of
them in one compiled call, e.g. on a chunk `[B, C, V]` with V = 151936, computing p = exp(logp) and
q = exp(logq) once; everything else is elementwise work fused into reductions over V, and the top-k overlap
uses jax.lax.top_k (no sort). Measured on XLA:CPU (jax 0.10.2) for [1, 64, 151936] fp32 inputs: temporaries of
about 6.5 input-sized arrays at beta = 0.5 and 10 at another beta (CPU reductions do not fuse select/exp
producers); memory is O(chunk x V), so pick the chunk C accordingly.

Conventions (shared by every function here):
- Inputs are promoted to at least float32; the result has that dtype.
- Support is decided on the log-probs: a token is in the support of p when logp > -inf (so a token whose
  probability underflows in exp still counts). 0 log 0 = 0: tokens outside the support contribute 0.
- Where the support condition fails (p > 0 where q = 0 for KL(p || q)), the divergence is +inf, never NaN.
  JSD_beta is always finite.
- Identical inputs (logp == logq bitwise) give exactly 0 for every divergence ("kl_pq", "kl_qp", "js",
  "jsd_beta", "tv", "logq_minus_logp") and exactly 1 for the two similarities ("cosine", "topk_overlap"); the
  two entropies are then equal. The divergences are computed from the differences logq - logp to make this
  exact, which is the self-teacher check of paper.md ("Self-distillation contexts", `plain`).
"""
from __future__ import annotations

import dataclasses
import functools
import numbers
from typing import Callable

import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True, kw_only=True)
class Predictor:
  """One per-position predictor: a record column of every view's `tokens` and `nodes` rows and a row of the
  report's predictor table. The one place a predictor is described.

  Attributes:
    name: the record column.
    about: what it measures, with its units: the report's glossary line for the name (`report/page.py`).
    fn: `fn(logp [..., V], logq [..., V], tokens [...]) -> [...]` float, jittable, reducing the vocabulary axis
      (a fork's predictor); None: one of the sums of the fused single pass (`predictors`).
    on_text: how a view whose teacher reads text (another tokenizer: `teachers/cross_view.py`) forms it, as
      `on_text(logp [L], logq [L], own [L]) -> [L]` float64 from the student's log p and the teacher's log q of
      each sampled token's text and the value the student's own pass gave; None: undefined there (NaN), the
      default, since a predictor that compares two distributions over one vocabulary has no meaning across two.
    reference: with `fn`, required: the same quantity written another way in numpy, `reference(logp [..., V],
      logq [..., V], tokens [...]) -> [...]` on float64 arrays; tests/estimators/test_predictors.py compares `fn`
      with it on random, zero-probability and extreme inputs (the built-ins' references are scipy, in the test).
  """
  name: str
  about: str
  fn: Callable | None = None
  on_text: Callable | None = None
  reference: Callable | None = None

  def __post_init__(self):
    if self.fn is not None and self.reference is None:
      raise ValueError(f"predictor {self.name!r} has fn but no reference: give reference=fn(logp, logq, tokens) "
                       "-> [...], the same quantity in numpy on float64 arrays (tests/estimators/test_predictors.py "
                       "compares the two; docs/usage.md, \"A predictor\")")


# Registered predictors, in record-column order. A fork adds one `Predictor(name=..., about=..., fn=...,
# reference=...)` here (docs/usage.md, "Extending"); the registry test (tests/test_registries.py) runs every entry
# through the smoke study, tests/estimators/test_predictors.py compares fn with reference, and the report's
# glossary reads `about`.
REGISTRY: dict[str, Predictor] = {p.name: p for p in (
    Predictor(name="kl_pq", about="KL(p || q) of the student's next-token distribution p from the teacher's q (nats)"),
    Predictor(name="kl_qp", about="KL(q || p), the reverse direction (nats)"),
    Predictor(name="js", about="Jensen-Shannon divergence of p and q (weights 0.5, nats)"),
    Predictor(name="jsd_beta", about="generalised Jensen-Shannon divergence with teacher weight beta "
                                     "(config.scoring.beta, nats)"),
    Predictor(name="tv", about="total variation distance (1/2) sum |p - q| between p and q (0..1)"),
    Predictor(name="cosine", about="cosine similarity of the probability vectors p and q (1 = same direction)"),
    Predictor(name="entropy_p", about="entropy of the student's distribution H(p) (nats)",
              on_text=lambda lp, lq, own: own),
    Predictor(name="entropy_q", about="entropy of the teacher's distribution H(q) (nats)"),
    Predictor(name="topk_overlap", about="share of the student's top-k tokens that are also in the teacher's top-k "
                                         "(k = config.scoring.top_k)"),
    Predictor(name="logq_minus_logp", about="log q(y) - log p(y) of the sampled token y (> 0: the teacher likes it "
                                            "more; nats)", on_text=lambda lp, lq, own: lq - lp),
)}
PREDICTORS = tuple(REGISTRY)


def check_beta(beta: float) -> float:
  """Returns beta as a Python float; raises ValueError unless it is a static number strictly inside (0, 1).

  JSD_beta is identically zero at beta = 0 and beta = 1 (paper.md, "Gradients in logit space"); forward and
  reverse KL are their own names. A traced beta cannot be checked, so it is refused: pass beta as a static
  Python float (e.g. through `static_argnames` of jax.jit).
  """
  try:
    value = float(beta)
  except (TypeError, jax.errors.ConcretizationTypeError):
    raise ValueError(f"beta must be a static Python float strictly inside (0, 1), got a traced value {beta!r}; "
                     "pass it as a static argument") from None
  if not 0.0 < value < 1.0:
    raise ValueError(f"beta must lie strictly inside (0, 1), got {beta}; use 'forward_kl' (beta -> 0) or "
                     "'reverse_kl' (beta -> 1) for the endpoints")
  return value


def log_mixture_ratios(logp: jax.Array, logq: jax.Array, beta: float) -> tuple[jax.Array, jax.Array]:
  """log(m / p) and log(m / q) for the GKD mixture m = beta q + (1 - beta) p, elementwise.

  With d = logq - logp: log(m / p) = log(1 + beta (e^d - 1)) for d <= 0, and log(m / q) =
  log(1 + (1 - beta) (e^-d - 1)) for d > 0; the other ratio is the first one -/+ d. Computed with log1p and
  expm1 of -|d| only, so it never overflows, and both ratios are exactly 0 where logp == logq.

  Args:
    logp: log p, any shape, float; -inf allowed.
    logq: log q, same shape as logp; -inf allowed.
    beta: teacher weight of the mixture, strictly inside (0, 1) (not checked here).
  Returns:
    (log(m / p), log(m / q)), each the shape of logp. log(m / p) = +inf where p = 0 < q, log(m / q) = +inf where
    q = 0 < p; NaN where both are -inf (callers mask those slots, which carry no mass).
  """
  d = logq - logp
  pos = d > 0
  small = jnp.log1p(jnp.where(pos, 1.0 - beta, beta) * jnp.expm1(jnp.where(pos, -d, d)))
  return jnp.where(pos, small + d, small), jnp.where(pos, small, small - d)


def _as_float(x: jax.Array) -> jax.Array:
  x = jnp.asarray(x)
  return x.astype(jnp.promote_types(x.dtype, jnp.float32))


def _check_pair(logp: jax.Array, logq: jax.Array) -> tuple[jax.Array, jax.Array]:
  logp, logq = _as_float(logp), _as_float(logq)
  if logp.shape != logq.shape or logp.ndim == 0:
    raise ValueError(f"logp and logq must have the same shape [..., V], got {logp.shape} and {logq.shape}")
  return logp, logq


def _finite(logp: jax.Array) -> jax.Array:
  """-inf replaced by the most negative finite float, so that 0 * log 0 = 0 needs no select."""
  return jnp.maximum(logp, jnp.finfo(logp.dtype).min)


def _kl(loga, logb, a):
  """KL(a || b) with a = exp(loga) given; see `kl`."""
  total = jnp.sum(a * (_finite(loga) - _finite(logb)), axis=-1)
  support_fails = jnp.any((loga > -jnp.inf) & (logb == -jnp.inf), axis=-1)
  return jnp.where(support_fails, jnp.inf, total)


def _jsd(logp, logq, p, q, beta):
  """JSD_beta with p, q given; see `jsd`. Finite logs make every log ratio finite, so p = 0 slots give 0."""
  log_m_over_p, log_m_over_q = log_mixture_ratios(_finite(logp), _finite(logq), beta)
  # KL(q || m) = sum q (-log(m / q)); negating inside the sum keeps the result +0.0 (not -0.0) when p == q.
  return jnp.sum(beta * q * -log_m_over_q + (1.0 - beta) * p * -log_m_over_p, axis=-1)


def _entropy(logp, p):
  return -jnp.sum(p * _finite(logp), axis=-1)


def _cosine(p, q):
  # cos = 1 - |p/|p| - q/|q|| ** 2 / 2: identical inputs give identical unit vectors, hence exactly 1.
  unit_p = p / jnp.linalg.norm(p, axis=-1, keepdims=True)
  unit_q = q / jnp.linalg.norm(q, axis=-1, keepdims=True)
  return jnp.clip(1.0 - 0.5 * jnp.sum(jnp.square(unit_p - unit_q), axis=-1), 0.0, 1.0)


@jax.jit
def kl(loga: jax.Array, logb: jax.Array) -> jax.Array:
  """KL(a || b) = sum_v a_v (log a_v - log b_v) in nats (paper.md, "Divergence predictors").

  kl(logp, logq) is KL(p || q) (predictor "kl_pq"); kl(logq, logp) is KL(q || p) ("kl_qp").

  Args:
    loga: [..., V] float log-probabilities of a; -inf allowed.
    logb: [..., V] float log-probabilities of b; -inf allowed.
  Returns:
    [...] float, >= 0 up to rounding; 0 log 0 = 0; +inf where a > 0 and b = 0 on some token.
  Raises:
    ValueError: if the shapes differ.
  """
  loga, logb = _check_pair(loga, logb)
  return _kl(loga, logb, jnp.exp(loga))


def jsd(logp: jax.Array, logq: jax.Array, beta: float = 0.5) -> jax.Array:
  """Generalised Jensen-Shannon divergence JSD_beta in nats, GKD/TRL convention (paper.md, "Gradients").

  m = beta q + (1 - beta) p;  JSD_beta = beta KL(q || m) + (1 - beta) KL(p || m). At beta = 0.5 this is the
  usual Jensen-Shannon divergence (predictor "js"), equal to scipy.spatial.distance.jensenshannon(p, q) ** 2.

  Args:
    logp: [..., V] float student log-probabilities; -inf allowed.
    logq: [..., V] float teacher log-probabilities; -inf allowed.
    beta: static Python float strictly inside (0, 1).
  Returns:
    [...] float in [0, log 2 (at beta = 0.5)], always finite; 0 log 0 = 0.
  Raises:
    ValueError: if the shapes differ, or beta is outside (0, 1) or traced (see `check_beta`).
  """
  return _jsd_jit(logp, logq, beta=check_beta(beta))


@functools.partial(jax.jit, static_argnames="beta")
def _jsd_jit(logp, logq, *, beta):
  logp, logq = _check_pair(logp, logq)
  return _jsd(logp, logq, jnp.exp(logp), jnp.exp(logq), beta)


@jax.jit
def total_variation(logp: jax.Array, logq: jax.Array) -> jax.Array:
  """Total variation distance 0.5 sum_v |p_v - q_v| (predictor "tv").

  Args:
    logp: [..., V] float log-probabilities; -inf allowed.
    logq: [..., V] float log-probabilities; -inf allowed.
  Returns:
    [...] float in [0, 1].
  Raises:
    ValueError: if the shapes differ.
  """
  logp, logq = _check_pair(logp, logq)
  return 0.5 * jnp.sum(jnp.abs(jnp.exp(logp) - jnp.exp(logq)), axis=-1)


@jax.jit
def cosine(logp: jax.Array, logq: jax.Array) -> jax.Array:
  """Cosine similarity of the probability vectors, sum p q / (|p| |q|) (predictor "cosine").

  Args:
    logp: [..., V] float log-probabilities; -inf allowed.
    logq: [..., V] float log-probabilities; -inf allowed.
  Returns:
    [...] float in [0, 1] (absolute error ~1e-7 in fp32); exactly 1 for identical inputs; 0 for disjoint
    supports.
  Raises:
    ValueError: if the shapes differ.
  """
  logp, logq = _check_pair(logp, logq)
  return _cosine(jnp.exp(logp), jnp.exp(logq))


@jax.jit
def entropy(logp: jax.Array) -> jax.Array:
  """Shannon entropy -sum_v p_v log p_v in nats (predictors "entropy_p", "entropy_q"); 0 log 0 = 0.

  Args:
    logp: [..., V] float log-probabilities; -inf allowed.
  Returns:
    [...] float in [0, log V].
  """
  logp = _as_float(logp)
  return _entropy(logp, jnp.exp(logp))


def topk_overlap(logp: jax.Array, logq: jax.Array, k: int = 8) -> jax.Array:
  """|top_k(p) ∩ top_k(q)| / k (predictor "topk_overlap").

  Uses jax.lax.top_k (no full sort) on the log-probs. Ties are broken deterministically: among equal
  log-probs the lower token id ranks first (jax.lax.top_k's documented rule), e.g. when fewer than k tokens
  have nonzero probability the remaining slots go to the lowest ids of the -inf tokens.

  Args:
    logp: [..., V] float log-probabilities; -inf allowed.
    logq: [..., V] float log-probabilities; -inf allowed.
    k: static int, 1 <= k <= V.
  Returns:
    [...] float in {0, 1/k, ..., 1}; exactly 1 for identical inputs.
  Raises:
    ValueError: if the shapes differ or k is outside [1, V].
  """
  return _topk_overlap_jit(logp, logq, k=_check_k(k, jnp.shape(logp)[-1:]))


def _check_k(k: int, vocab: tuple[int, ...]) -> int:
  if isinstance(k, bool) or not isinstance(k, numbers.Integral) or not vocab or not 1 <= k <= vocab[0]:
    raise ValueError(f"top_k must be an int in [1, V = {vocab[0] if vocab else None}], got {k!r}")
  return int(k)


@functools.partial(jax.jit, static_argnames="k")
def _topk_overlap_jit(logp, logq, *, k):
  logp, logq = _check_pair(logp, logq)
  _, ids_p = jax.lax.top_k(logp, k)
  _, ids_q = jax.lax.top_k(logq, k)
  hits = jnp.sum(jnp.any(ids_p[..., :, None] == ids_q[..., None, :], axis=-1), axis=-1)
  return hits.astype(logp.dtype) / k


@jax.jit
def logq_minus_logp(logp: jax.Array, logq: jax.Array, tokens: jax.Array) -> jax.Array:
  """log q(y_t) - log p(y_t) of the given tokens (predictor "logq_minus_logp", the sampled-token advantage).

  Args:
    logp: [..., V] float student log-probabilities; -inf allowed.
    logq: [..., V] float teacher log-probabilities; -inf allowed.
    tokens: [...] int token ids y_t in [0, V) (out-of-range ids give NaN).
  Returns:
    [...] float; exactly 0 where the two log-probs are equal (also when both are -inf); -inf where q(y_t) = 0
    < p(y_t), +inf where p(y_t) = 0 < q(y_t).
  Raises:
    ValueError: if the shapes differ or tokens is not [...] integer.
  """
  logp, logq = _check_pair(logp, logq)
  tokens = jnp.asarray(tokens)
  if tokens.shape != logp.shape[:-1] or not jnp.issubdtype(tokens.dtype, jnp.integer):
    raise ValueError(f"tokens must be integer ids of shape {logp.shape[:-1]} (logp's leading axes), got "
                     f"{tokens.dtype} {tokens.shape}")
  at = lambda x: jnp.take_along_axis(x, tokens[..., None], axis=-1)[..., 0]
  lp, lq = at(logp), at(logq)
  return jnp.where(lq == lp, 0.0, lq - lp).astype(logp.dtype)


def predictors(logp: jax.Array, logq: jax.Array, tokens: jax.Array, *, beta: float = 0.5,
               top_k: int = 8) -> dict[str, jax.Array]:
  """Every per-position predictor of paper.md ("Divergence predictors") in one jitted pass.

  Args:
    logp: [..., V] float student log-probabilities (fp32; e.g. a chunk [B, C, V]); -inf allowed.
    logq: [..., V] float teacher log-probabilities, same shape; -inf allowed.
    tokens: [...] int sampled token ids y_t.
    beta: static float strictly inside (0, 1), the teacher weight of "jsd_beta" ("js" always uses 0.5).
    top_k: static int k of "topk_overlap", 1 <= k <= V.
  Returns:
    {name: [...] float} for every name in PREDICTORS (`REGISTRY`, a fork's `fn` after the fused pass):
    "kl_pq" KL(p || q), "kl_qp" KL(q || p), "js" JSD_0.5, "jsd_beta" JSD_beta, "tv" total variation, "cosine" cos(p, q),
    "entropy_p" H(p), "entropy_q" H(q) (nats), "topk_overlap", "logq_minus_logp" log q(y_t) - log p(y_t).
    Conventions in the module docstring.
  Raises:
    ValueError: on mismatched shapes, beta outside (0, 1), or k outside [1, V].
  """
  extra = tuple(k for k, p in REGISTRY.items() if p.fn is not None)
  return _predictors_jit(logp, logq, tokens, beta=check_beta(beta), top_k=_check_k(top_k, jnp.shape(logp)[-1:]),
                         extra=extra)


# Vocabulary ids per step of `predictors`' single pass: a [rows, 1024] slice of every temporary stays in cache,
# so no [rows, V] intermediate is written to memory (5x faster on CPU at V = 152k than one fused op per predictor).
PREDICTOR_BLOCK = 1024


def _block_sums(logp, logq, beta):
  """Every term of `predictors` over one vocabulary block [..., W]: the blocks' values add up to the whole row's
  (a KL of +inf in any block, where the support condition fails, stays +inf)."""
  p, q = jnp.exp(logp), jnp.exp(logq)
  total = lambda x: jnp.sum(x, axis=-1)
  out = {"kl_pq": _kl(logp, logq, p), "kl_qp": _kl(logq, logp, q), "js": _jsd(logp, logq, p, q, 0.5),
         "tv": total(jnp.abs(p - q)), "entropy_p": _entropy(logp, p), "entropy_q": _entropy(logq, q),
         "pq": total(p * q), "pp": total(p * p), "qq": total(q * q), "differ": jnp.any(logp != logq, axis=-1)}
  if beta != 0.5:
    out["jsd_beta"] = _jsd(logp, logq, p, q, beta)
  return out


def _add_sums(a, b):
  return {k: (a[k] | b[k]) if a[k].dtype == jnp.bool_ else a[k] + b[k] for k in a}


@functools.partial(jax.jit, static_argnames=("beta", "top_k", "extra"))
def _predictors_jit(logp, logq, tokens, *, beta, top_k, extra=()):
  """`predictors` in one pass over the vocabulary in blocks of PREDICTOR_BLOCK ids (then top-k on the whole).

  Same formulas as the individual functions (kl, jsd, ...), summed block by block; cosine is sum pq /
  sqrt(sum p^2 sum q^2), exactly 1 where logp == logq on the whole row.
  """
  logp, logq = _check_pair(logp, logq)
  V = logp.shape[-1]
  W = min(PREDICTOR_BLOCK, V)
  n = V // W

  def body(i, acc):
    block = lambda x: jax.lax.dynamic_slice_in_dim(x, i * W, W, axis=-1)
    return _add_sums(acc, _block_sums(block(logp), block(logq), beta))

  shapes = jax.eval_shape(lambda: _block_sums(logp[..., :W], logq[..., :W], beta))
  sums = jax.lax.fori_loop(0, n, body, jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), shapes))
  if V % W:
    sums = _add_sums(sums, _block_sums(logp[..., n * W:], logq[..., n * W:], beta))
  cosine = jnp.clip(sums["pq"] / jnp.sqrt(sums["pp"] * sums["qq"]), 0.0, 1.0)
  return {
      "kl_pq": sums["kl_pq"],
      "kl_qp": sums["kl_qp"],
      "js": sums["js"],
      "jsd_beta": sums["jsd_beta" if beta != 0.5 else "js"],
      "tv": 0.5 * sums["tv"],
      "cosine": jnp.where(sums["differ"], cosine, 1.0).astype(logp.dtype),
      "entropy_p": sums["entropy_p"],
      "entropy_q": sums["entropy_q"],
      "topk_overlap": _topk_overlap_jit(logp, logq, k=top_k),
      "logq_minus_logp": logq_minus_logp(logp, logq, tokens),
      **{k: REGISTRY[k].fn(logp, logq, tokens).astype(logp.dtype) for k in extra},
  }
