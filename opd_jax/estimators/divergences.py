"""The divergence registry: each distillation divergence's loss on a candidate axis and its direction.

paper.md, "Gradients in logit space". One entry of `REGISTRY` per divergence, and nothing else in opd_jax knows
divergence names or their '@' parameters: configuration specs (`contexts.parse`), the study's node directions
(`gradients.distillation_gradient`) and the trainer's full-vocabulary losses (`training.losses`) all go through
`parse` / `get` / `direction`.

Every vector lives on the last axis `K` (leading axes are batched): p is the student's distribution, q the
teacher's; at a study node they are restricted to the candidate set C(u) and renormalised (padded slots carry
p = q = 0 and contribute 0), in training K is the whole vocabulary. Float inputs are promoted to at least fp32.

Sign convention (paper.md): a direction is the way the update moves the student logits z, p = softmax(z):
g = -dLoss/dz. An entry's `loss` is a function of the probabilities (p, q); the teacher side is a constant (no
gradient flows to q). Its direction is the entry's closed form when it has one (a tested fast path), else
`-jax.grad` of the loss through p = softmax(z) at z = log p (the autodiff default, `autodiff_direction`).

Log-probabilities: every loss and direction also takes `logp=` and `logq=` (log p and log q on the same axis,
-inf where a probability is 0) and then forms every log term from them, never from p or q: exact in fp32 at
any logit gap (the trainer passes log_softmax outputs, `training.losses`; a teacher 120 nats below the student
gives the reverse KL to 1e-6 relative, where logs of fp32 probabilities stop at log tiny = -87.3). Without them
(the study's candidate sets: probabilities renormalised on C(u)) logs are taken at max(x, tiny), tiny =
jnp.finfo(dtype).tiny, so a padded slot contributes exactly 0 (0 log 0 = 0) and a slot with p > 0 = q gets a
large finite push (not inf). Either way a slot with p = 0 adds nothing to p-weighted terms (no 0 x inf).

Add a divergence: write its loss `fn(p, q, *, <param>, logp=None, logq=None)` forming its log terms with
`logs(p, q, logp, logq)` and its p-weighted terms with `weighted` (and, optionally, its closed-form direction
with the same arguments), add one `Divergence(...)` to `REGISTRY` below (with an `example` parameter value when
the parameter has no default); the registry tests run it (tests/estimators/test_divergences.py: its direction is
-jax.grad of its loss; tests/test_registries.py: through the smoke study). `topk_reverse_kl` is the worked
example (registered without a closed form, tested against numpy); a float64 reference in
tests/training/test_losses.py (`_np_loss_and_direction`) adds the any-gap exactness test.
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
import math
from typing import Any, Callable

import jax
import jax.numpy as jnp

from opd_jax.estimators import predictors


def as_float(x: jax.Array) -> jax.Array:
  """x as an array of at least float32."""
  x = jnp.asarray(x)
  return x.astype(jnp.promote_types(x.dtype, jnp.float32))


def safe_log(x: jax.Array) -> jax.Array:
  """log max(x, tiny): finite for x = 0, and its gradient is 0 there (not NaN)."""
  return jnp.log(jnp.maximum(x, jnp.finfo(x.dtype).tiny))


def logs(p: jax.Array, q: jax.Array, logp: jax.Array | None, logq: jax.Array | None):
  """(log p, log q) the formulas use: the given log-probabilities (as floats), else `safe_log` of p and q."""
  return (safe_log(p) if logp is None else as_float(logp)), (safe_log(q) if logq is None else as_float(logq))


def weighted(w: jax.Array, x: jax.Array) -> jax.Array:
  """w * x, and 0 where w == 0 (a slot without mass adds nothing, even where x is +-inf)."""
  return jnp.where(w > 0, w * x, 0.0)


def centred(p: jax.Array, f: jax.Array) -> jax.Array:
  """p * (f - sum_k p_k f_k): the softmax Jacobian applied to a per-candidate score f."""
  return p * (f - jnp.sum(p * f, axis=-1, keepdims=True))


def check_same(name_a: str, a: jax.Array, name_b: str, b: jax.Array) -> None:
  """Raises ValueError unless a and b have the same shape [..., K]."""
  if a.shape != b.shape or a.ndim == 0:
    raise ValueError(f"{name_a} and {name_b} must have the same shape [..., K], got {a.shape} and {b.shape}")


def _static_number(name: str, value: Any) -> float:
  try:
    return float(value)
  except (TypeError, jax.errors.ConcretizationTypeError):
    raise ValueError(f"{name} must be a static Python number, got a traced value {value!r}") from None


def check_clip(clip: float | None) -> float:
  """The clipped reverse KL's threshold tau as a Python float; ValueError unless a static number > 0."""
  if clip is None:
    raise ValueError("clip is required for divergence 'clipped_reverse_kl' (the threshold tau), e.g. clip=0.05")
  value = _static_number("clip", clip)
  if not value > 0:
    raise ValueError(f"clip must be > 0, got {clip}; use a positive threshold tau such as 0.05")
  return value


def check_k(k: float | None) -> int:
  """The top-k reverse KL's k as a Python int; ValueError unless a static whole number >= 1."""
  if k is None:
    raise ValueError("k is required for divergence 'topk_reverse_kl' (how many student candidates), e.g. k=8")
  value = _static_number("k", k)
  if not (value >= 1 and value == int(value)):
    raise ValueError(f"k must be a whole number >= 1, got {k}; e.g. 'topk_reverse_kl@8'")
  return int(value)


# ---- losses: functions of (p, q) over the last axis, [..., K] -> [...] -------------------------------------

@jax.jit
def reverse_kl(p: jax.Array, q: jax.Array, *, logp: jax.Array | None = None,
               logq: jax.Array | None = None) -> jax.Array:
  """KL(p || q) = sum_k p_k (log p_k - log q_k) over the candidates (the OPD loss).

  Args:
    p: [..., K] float student probabilities; padded slots 0.
    q: [..., K] float teacher probabilities; padded slots 0.
    logp, logq: optional [..., K] log p and log q (-inf at 0); None: logs of p and q clamped at tiny.
  Returns:
    [...] float; >= 0 up to rounding, exactly 0 where q == p; +inf where p > 0 = q with log-probabilities.
  """
  p, q = as_float(p), as_float(q)
  check_same("p", p, "q", q)
  lp, lq = logs(p, q, logp, logq)
  return jnp.sum(weighted(p, lp - lq), axis=-1)


@jax.jit
def forward_kl(p: jax.Array, q: jax.Array, *, logp: jax.Array | None = None,
               logq: jax.Array | None = None) -> jax.Array:
  """KL(q || p) = sum_k q_k (log q_k - log p_k) over the candidates.

  Args:
    p: [..., K] float student probabilities; padded slots 0.
    q: [..., K] float teacher probabilities; padded slots 0.
    logp, logq: optional [..., K] log p and log q (-inf at 0); None: logs of p and q clamped at tiny.
  Returns:
    [...] float; >= 0 up to rounding, exactly 0 where q == p; +inf where q > 0 = p with log-probabilities
    (e.g. a teacher token outside a truncated student policy).
  """
  check_same("p", as_float(p), "q", as_float(q))
  return reverse_kl(q, p, logp=logq, logq=logp)      # the same sum with the roles swapped


def jsd(p: jax.Array, q: jax.Array, beta: float = 0.5, *, logp: jax.Array | None = None,
        logq: jax.Array | None = None) -> jax.Array:
  """JSD_beta = beta KL(q || m) + (1 - beta) KL(p || m), m = beta q + (1 - beta) p (GKD/TRL; paper.md).

  Args:
    p: [..., K] float student probabilities; padded slots 0.
    q: [..., K] float teacher probabilities; padded slots 0.
    beta: static Python float strictly inside (0, 1).
    logp, logq: optional [..., K] log p and log q (-inf at 0); None: logs of p and q clamped at tiny.
  Returns:
    [...] float; exactly 0 where q == p.
  Raises:
    ValueError: if beta is outside (0, 1) or traced (predictors.check_beta).
  """
  return _jsd(p, q, logp, logq, beta=predictors.check_beta(beta))


@functools.partial(jax.jit, static_argnames="beta")
def _jsd(p, q, logp, logq, *, beta):
  p, q = as_float(p), as_float(q)
  check_same("p", p, "q", q)
  log_m_over_p, log_m_over_q = predictors.log_mixture_ratios(*logs(p, q, logp, logq), beta)
  return jnp.sum(weighted(beta * q, -log_m_over_q) + weighted((1.0 - beta) * p, -log_m_over_p), axis=-1)


def clipped_reverse_kl(p: jax.Array, q: jax.Array, clip: float, *, logp: jax.Array | None = None,
                       logq: jax.Array | None = None) -> jax.Array:
  """min(KL(p || q), clip) at the node (OPSD-style clip at threshold tau = clip; paper.md).

  The value is lifted to 0 where rounding makes KL a few ulp negative (p ~ q), without changing its gradient,
  so the result lies in [0, clip]. Where KL >= clip the clip binds and the gradient is exactly 0.

  Args:
    p: [..., K] float student probabilities; padded slots 0.
    q: [..., K] float teacher probabilities; padded slots 0.
    clip: static Python float > 0.
    logp, logq: optional [..., K] log p and log q (-inf at 0); None: logs of p and q clamped at tiny.
  Returns:
    [...] float in [0, clip].
  Raises:
    ValueError: if clip is None, not > 0, or traced.
  """
  return _clipped_reverse_kl(p, q, logp, logq, clip=check_clip(clip))


@functools.partial(jax.jit, static_argnames="clip")
def _clipped_reverse_kl(p, q, logp, logq, *, clip):
  kl = reverse_kl(p, q, logp=logp, logq=logq)
  kl = kl + jax.lax.stop_gradient(jnp.maximum(kl, 0.0) - kl)
  return jnp.where(kl < clip, kl, clip)


def _sampled_advantage(p, q, sampled_token, advantage, logp=None, logq=None):
  """(y, A): A = `advantage`, else log q_y - log p_y (`logs`), held fixed (stop-gradient)."""
  y = jnp.asarray(sampled_token)
  if y.shape != p.shape[:-1] or not jnp.issubdtype(y.dtype, jnp.integer):
    raise ValueError(f"sampled_token must be integer indices of shape {p.shape[:-1]}, got {y.dtype} {y.shape}")
  if advantage is None:
    at = lambda x: jnp.take_along_axis(x, y[..., None], axis=-1)[..., 0]
    lp, lq = logs(p, q, logp, logq)
    advantage = at(lq) - at(lp)
  advantage = as_float(advantage)
  if advantage.shape != p.shape[:-1]:
    raise ValueError(f"advantage must have shape {p.shape[:-1]}, got {advantage.shape}")
  return y, jax.lax.stop_gradient(advantage)


def sampled_token_loss(p: jax.Array, q: jax.Array, sampled_token: jax.Array, advantage: jax.Array | None = None, *,
                       logp: jax.Array | None = None, logq: jax.Array | None = None) -> jax.Array:
  """Sampled-token OPD surrogate -stopgrad(A) * log p_y (tinker-cookbook / Thinking Machines' on-policy
  distillation: the per-token reverse KL log p(y) - log q(y) as a negative advantage; paper.md).

  Args:
    p: [..., K] float student probabilities; q: [..., K] float teacher probabilities.
    sampled_token: [...] int index of the sampled token y_t on the last axis (must be a valid slot).
    advantage: optional [...] float A (e.g. the full-vocabulary log q(y_t) - log p(y_t)); default
      log q_y - log p_y on the given axis. Held fixed either way.
    logp, logq: optional [..., K] log p and log q (-inf at 0); None: logs of p and q clamped at tiny.
  Returns:
    [...] float; its value is -A log p_y (not a divergence: only its gradient means something).
  """
  p, q = as_float(p), as_float(q)
  check_same("p", p, "q", q)
  y, a = _sampled_advantage(p, q, sampled_token, advantage, logp, logq)
  lp, _ = logs(p, q, logp, logq)
  return -a * jnp.take_along_axis(lp, y[..., None], axis=-1)[..., 0]


def topk_reverse_kl(p: jax.Array, q: jax.Array, k: int, *, logp: jax.Array | None = None,
                    logq: jax.Array | None = None) -> jax.Array:
  """KL(p_S || q_S) over the student's top-k candidates S, both renormalised on S [ours; the top-k truncation of
  the OPD reverse KL, as in sparse logit distillation (e.g. Anshumann et al. 2025, "Sparse Logit Sampling"),
  with the set taken from the student, which is what an on-policy sampler can afford to score].

  S = the k largest p (ties: lowest index, `jax.lax.top_k`), chosen without gradient; p_S = p / sum_S p and
  q_S = q / sum_S q on S, 0 off S. With k >= K it is `reverse_kl`. Registered without a closed form: its
  direction is the autodiff default (p_S (log q_S - log p_S + KL) on S, 0 off S).

  Args:
    p: [..., K] float student probabilities; q: [..., K] float teacher probabilities.
    k: static whole number >= 1.
    logp, logq: optional [..., K] log p and log q (-inf at 0): S and the renormalised logs come from them
      (log p_S = log p - logsumexp_S log p); None: from p and q, logs clamped at tiny.
  Returns:
    [...] float >= 0 up to rounding; 0 where q is proportional to p on S.
  """
  return _topk_reverse_kl(p, q, logp, logq, k=check_k(k))


@functools.partial(jax.jit, static_argnames="k")
def _topk_reverse_kl(p, q, logp, logq, *, k):
  p, q = as_float(p), as_float(q)
  check_same("p", p, "q", q)
  _, top = jax.lax.top_k(jax.lax.stop_gradient(p if logp is None else as_float(logp)), min(k, p.shape[-1]))
  on = jnp.any(jnp.arange(p.shape[-1]) == top[..., None], axis=-2)
  if logp is None:
    renorm = lambda x: jnp.where(on, x, 0.0) / jnp.maximum(jnp.sum(jnp.where(on, x, 0.0), -1, keepdims=True),
                                                            jnp.finfo(x.dtype).tiny)
    return reverse_kl(renorm(p), renorm(q))
  lp, lq = logs(p, q, logp, logq)
  renorm_log = lambda x: jnp.where(on, x - jax.nn.logsumexp(jnp.where(on, x, -jnp.inf), -1, keepdims=True), -jnp.inf)
  lp_s, lq_s = renorm_log(lp), renorm_log(lq)
  return reverse_kl(jnp.exp(lp_s), jnp.exp(lq_s), logp=lp_s, logq=lq_s)


# ---- closed-form directions g = -dLoss/dz (fast paths; tests/estimators/test_divergences.py checks each) -------------

def _centred_log(p, f):
  """`centred` with f's infinities where p = 0 left out (they carry no mass)."""
  f = jnp.where(p > 0, f, 0.0)
  return centred(p, f)


def _reverse_kl_direction(p, q, *, logp=None, logq=None):
  lp, lq = logs(p, q, logp, logq)
  return (centred if logp is None else _centred_log)(p, lq - lp)


def _forward_kl_direction(p, q, *, logp=None, logq=None):
  del logp, logq
  return q - p      # exact when q sums to 1 over the candidates


def _jsd_direction(p, q, *, beta, logp=None, logq=None):
  log_m_over_p, _ = predictors.log_mixture_ratios(*logs(p, q, logp, logq), beta)
  return (1.0 - beta) * (centred if logp is None else _centred_log)(p, log_m_over_p)


def _clipped_reverse_kl_direction(p, q, *, clip, logp=None, logq=None):
  return jnp.where((reverse_kl(p, q, logp=logp, logq=logq) < clip)[..., None],
                   _reverse_kl_direction(p, q, logp=logp, logq=logq), 0.0)


def _sampled_token_direction(p, q, sampled_token, advantage=None, *, logp=None, logq=None):
  y, a = _sampled_advantage(p, q, sampled_token, advantage, logp, logq)
  return a[..., None] * (jax.nn.one_hot(y, p.shape[-1], dtype=p.dtype) - p)


# ---- the registry -----------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, kw_only=True)
class Divergence:
  """One registered divergence.

  name: its name in configuration specs (`teacher:context:name[@param]`).
  loss: fn(p, q, [sampled_token, advantage,] **{param: value}, logp=None, logq=None) -> [...] over the last
    axis (module docstring).
  direction: optional closed form of -dloss/dz, same arguments; None uses `autodiff_direction`.
  param: the keyword of its one '@' parameter (e.g. "beta"), or None when it takes none.
  default: the parameter's value when the spec has no '@' (None: the parameter is required).
  check: fn(value) -> the static value passed on; raises ValueError (with a fix) on a bad or missing value.
  sampled: whether loss/direction take the sampled token (`sampled_token`, `advantage`).
  example: a parameter value the registry tests run it at (tests/estimators/test_divergences.py,
    tests/test_registries.py); needed when the parameter has no default.
  """
  name: str
  loss: Callable[..., jax.Array]
  direction: Callable[..., jax.Array] | None = None
  param: str | None = None
  default: float | None = None
  check: Callable[[Any], Any] | None = None
  sampled: bool = False
  example: float | None = None


REGISTRY: dict[str, Divergence] = {d.name: d for d in (
    Divergence(name="reverse_kl", loss=reverse_kl, direction=_reverse_kl_direction),
    Divergence(name="forward_kl", loss=forward_kl, direction=_forward_kl_direction),
    Divergence(name="jsd", loss=jsd, direction=_jsd_direction, param="beta", default=0.5,
               check=predictors.check_beta, example=0.3),
    Divergence(name="sampled_token", loss=sampled_token_loss, direction=_sampled_token_direction, sampled=True),
    Divergence(name="clipped_reverse_kl", loss=clipped_reverse_kl, direction=_clipped_reverse_kl_direction,
               param="clip", check=check_clip,
               example=10.0),
    Divergence(name="topk_reverse_kl", loss=topk_reverse_kl, param="k", check=check_k,
               example=3),                                                               # autodiff direction
)}
DIVERGENCES = tuple(REGISTRY)


def _prefix(where: str | None) -> str:
  return f"{where}: " if where else ""


def get(name: str, *, where: str | None = None) -> Divergence:
  """The registered divergence `name`; ValueError (prefixed with `where`, the config field) listing the names."""
  if name not in REGISTRY:
    close = difflib.get_close_matches(name, list(REGISTRY), n=3)
    raise ValueError(f"{_prefix(where)}unknown divergence {name!r}: "
                     + (f"did you mean {' or '.join(map(repr, close))}? " if close else "")
                     + f"divergence must be one of the registered names {tuple(REGISTRY)} "
                     "(opd_jax/estimators/divergences.py, REGISTRY)")
  return REGISTRY[name]


def options(name: str, value: Any = None, *, where: str | None = None) -> dict[str, Any]:
  """The checked keyword options of divergence `name` with parameter `value` (None: its default).

  Returns {} for a divergence without a parameter, else {param: checked value}, e.g. options("jsd") ==
  {"beta": 0.5}, options("topk_reverse_kl", 8.0) == {"k": 8}. Raises ValueError (prefixed with `where`) on an
  unknown name, a parameter given to a divergence that takes none, or a missing / bad value.
  """
  div = get(name, where=where)
  if div.param is None:
    if value is not None:
      raise ValueError(f"{_prefix(where)}divergence {name!r} takes no '@' parameter")
    return {}
  value = div.default if value is None else value
  if value is None:
    raise ValueError(f"{_prefix(where)}{div.param} is required for divergence {name!r}: write "
                     f"'{name}@<{div.param}>' in a spec, or pass {div.param}=...")
  try:
    return {div.param: div.check(value)}
  except ValueError as e:
    raise ValueError(f"{_prefix(where)}{e}") from None


def parse(spec: str, *, where: str | None = None) -> tuple[str, dict[str, Any]]:
  """Parses `name[@param]` (e.g. "jsd@0.3", "clipped_reverse_kl@0.5", "topk_reverse_kl@8") into
  (name, options(name, param)). Raises ValueError prefixed with `where` (the config field) on a bad spec."""
  name, at, arg = str(spec).partition("@")
  get(name, where=where)
  value = None
  if at:
    try:
      value = float(arg)
    except ValueError:
      raise ValueError(f"{_prefix(where)}the parameter after '@' must be a number, got {arg!r}") from None
    if not math.isfinite(value):
      raise ValueError(f"{_prefix(where)}the parameter after '@' must be a finite number, got {arg!r}")
  return name, options(name, value, where=where)


def autodiff_direction(loss: Callable[..., jax.Array], p: jax.Array, q: jax.Array, *, logp: jax.Array | None = None,
                       logq: jax.Array | None = None, **kwargs) -> jax.Array:
  """-d loss(softmax(z), q, **kwargs) / dz at z = log p: the default direction of a divergence without a closed
  form. Slots with p = q = 0 (padding) get exactly 0 (their true gradient is 0 in the limit).

  Args:
    loss: fn(p, q, **kwargs) -> [...], taking `logp=`, `logq=` when they are given.
    p, q: [..., K] float, p sums to 1 over its valid slots.
    logp, logq: optional log p and log q (-inf at 0): z = log p and the loss gets logp = log_softmax(z).
  Returns:
    [..., K] float, same dtype as p.
  """
  p, q = as_float(p), as_float(q)
  check_same("p", p, "q", q)
  if logp is None:
    g = -jax.grad(lambda z: jnp.sum(loss(jax.nn.softmax(z, axis=-1), q, **kwargs)))(safe_log(p))
  else:
    lq = logs(p, q, None, logq)[1]
    fn = lambda z: jnp.sum(loss(jax.nn.softmax(z, axis=-1), q, logp=jax.nn.log_softmax(z, axis=-1), logq=lq,
                                **kwargs))
    z = as_float(logp)
    g = -jax.grad(fn)(jnp.where(p > 0, z, jnp.finfo(z.dtype).min))   # -inf slots as the least finite logit
  return jnp.where((p > 0) | (q > 0), g, 0.0)


def direction(divergence: str, p: jax.Array, q: jax.Array, *, sampled_token: jax.Array | None = None,
              advantage: jax.Array | None = None, logp: jax.Array | None = None, logq: jax.Array | None = None,
              **params) -> jax.Array:
  """Direction g = -dLoss/dz of a registered divergence: its closed form, else `autodiff_direction`.

  Args:
    divergence: static, a name of REGISTRY.
    p, q: [..., K] float student / teacher probabilities; padded slots 0.
    logp, logq: optional [..., K] log p and log q (-inf at 0) every log term is formed from (module docstring);
      pass both or neither.
    sampled_token, advantage: for a `sampled` divergence ([...] int index on the last axis; optional [...] A).
    **params: the divergence's parameter, e.g. beta=0.3 (its default when omitted; unused ones are ignored).
  Returns:
    [..., K] float.
  Raises:
    ValueError: unknown divergence, bad parameter, missing sampled_token, mismatched shapes, traced parameter.
  """
  div = get(divergence)
  opts = options(divergence, params.get(div.param)) if div.param else {}
  if div.sampled:
    if sampled_token is None:
      raise ValueError(f"sampled_token (the index of y_t within the candidate axis, shape [...]) is required for "
                       f"divergence {divergence!r}")
  else:
    sampled_token = advantage = None
  if (logp is None) != (logq is None):
    raise ValueError("pass both logp and logq (log-probabilities) or neither")
  return _direction(p, q, sampled_token, advantage, logp, logq, divergence=divergence,
                    options=tuple(sorted(opts.items())))


@functools.partial(jax.jit, static_argnames=("divergence", "options"))
def _direction(p, q, sampled_token, advantage, logp, logq, *, divergence, options):
  p, q = as_float(p), as_float(q)
  check_same("p", p, "q", q)
  div, kwargs = REGISTRY[divergence], dict(options)
  if div.sampled:
    kwargs.update(sampled_token=sampled_token, advantage=advantage)
  if logp is not None:
    kwargs.update(logp=logp, logq=logq)
  if div.direction is not None:
    return div.direction(p, q, **kwargs)
  return autodiff_direction(div.loss, p, q, **kwargs)
