"""Per-token on-policy distillation losses on the full vocabulary, chunked over positions (issue 13, item 1).

Every divergence of the registry (`opd_jax/estimators/divergences.py`: reverse KL, forward KL, JSD_beta in GKD/TRL's
convention, the sampled-token advantage of tinker-cookbook / Thinking Machines' OPD, the clipped reverse KL, the
top-k reverse KL, and whatever a fork adds) is applied per response position t over the whole vocabulary
(C(u) = V) to the study's p and q (paper.md, "Policy"; one definition for the study, the trainer and the
lookahead):

  p_t = the student's sampled policy: `sampling.policy_logprobs(z_t, policy)` (softmax(z / T), then top-k /
        top-p, renormalised; `preflight.policy(config)`),
  q_t = the teacher at T_q: softmax(z_q / T_q), never truncated (`preflight.teacher_policy(config)`),

both as log-probabilities (log_softmax in fp32): every log term of the loss is formed from them, never from
probabilities, so a loss is exact in fp32 at any logit gap (`distillation` module docstring). The backward pass
is the registry's direction g = -dLoss/du with respect to the policy's logits u = log p, taken back to the raw
logits through the policy map: -dloss_t / dz_t = J^T g (for T = 1 without truncation exactly
`gradients.distillation_gradient(divergence, p_t, q_t, ...)`; tests/training/test_losses.py).

Memory: the output heads run inside a chunk of `chunk` positions (a `lax.scan` over chunks whose body is
`jax.checkpoint`ed), so at most [B, chunk, V] logits exist at once, in the forward pass and in the backward pass
(which recomputes a chunk's logits from its hidden states); never a [B, T, V] array. The backward pass through
the loss is the registry's direction (`divergences.direction`: the closed form where registered, else -jax.grad
of the loss), zeroed where the forward saw p == q exactly (that comparison is the one value the backward keeps
rather than recomputes), so a teacher equal to the student gives exactly zero loss and zero gradients, in the
jitted trainer step too.

The functions are pure and traceable: call them inside the trainer's `jax.jit` over the model state, with heads
that close over that state (e.g. `lambda h: model.lm_head(h)` of a merged NNX module, or a head weight array).
Only a `head(h) -> logits` callable (or a [D, V] weight) and arrays are needed; nothing here knows the model.
"""
from __future__ import annotations

import functools
from typing import Callable

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from opd_jax.decode import sampling
from opd_jax.estimators import divergences

Head = Callable[[jax.Array], jax.Array] | jax.Array


def _as_head(head: Head, name: str) -> Callable[[jax.Array], jax.Array]:
  if callable(head):
    return head
  w = jnp.asarray(head)
  if w.ndim != 2:
    raise ValueError(f"{name} must be a callable head(h) -> logits or a [D, V] weight, got shape {w.shape}")
  return lambda h: h @ w


def _chunks(x: jax.Array, chunk: int) -> jax.Array:
  """[B, T, ...] -> [n, B, chunk, ...], T zero-padded to n * chunk."""
  b, t = x.shape[:2]
  n = -(-t // chunk)
  x = jnp.pad(x, [(0, 0), (0, n * chunk - t)] + [(0, 0)] * (x.ndim - 2))
  return jnp.moveaxis(x.reshape((b, n, chunk) + x.shape[2:]), 1, 0)


def _unit(sp: sampling.SamplingParams | None) -> bool:
  return sp is None or (sp.temperature == 1.0 and sp.top_k == 0 and sp.top_p >= 1.0)


def _logprobs(z: jax.Array, sp: sampling.SamplingParams | None) -> jax.Array:
  """log p of the policy `sp` at logits z [..., V] (None: temperature 1, no truncation)."""
  return jax.nn.log_softmax(z, axis=-1) if _unit(sp) else sampling.policy_logprobs(z, sp)


def check_policies(policy: sampling.SamplingParams | None, teacher_policy: sampling.SamplingParams | None,
                   divergence: str, *, field: str = "divergence") -> None:
  """Raises ValueError (one line, naming the fields) where the trainer's objective is undefined: a greedy
  student policy (temperature 0: p is a point mass, no gradient), a truncated teacher, or the forward KL under a
  truncated student policy (q puts mass on tokens p cannot draw: KL(q || p) = inf)."""
  if policy is not None and policy.temperature == 0.0:
    raise ValueError("config.sampling.temperature=0 (greedy): the policy is a point mass and its loss has no "
                     "gradient; OPD trains a sampled policy: set config.sampling.temperature > 0")
  if teacher_policy is not None and (teacher_policy.temperature <= 0 or teacher_policy.top_k
                                     or teacher_policy.top_p < 1.0):
    raise ValueError("the teacher q is softmax(z_q / T_q) with T_q > 0 and never truncated "
                     "(config.scoring.teacher_temperature)")
  name, _ = divergences.parse(divergence, where=field)
  if name == "forward_kl" and policy is not None and (policy.top_k or policy.top_p < 1.0):
    raise ValueError(f"{field}: forward_kl is infinite under a truncated policy (config.sampling.top_k="
                     f"{policy.top_k}, top_p={policy.top_p}): the teacher puts mass on tokens the student cannot "
                     "draw; set config.sampling.top_k=0 and top_p=1.0, or use reverse_kl or jsd")


def token_losses(student_hidden: jax.Array, student_head: Head, teacher_hidden: jax.Array, teacher_head: Head,
                 tokens: jax.Array, *, divergence: str, chunk: int = 128, vocab_size: int | None = None,
                 field: str = "divergence", policy: sampling.SamplingParams | None = None,
                 teacher_policy: sampling.SamplingParams | None = None) -> jax.Array:
  """Per-token OPD loss l_t = D(p_t, q_t) of a registered divergence, on the full vocabulary.

  Position t's hidden states predict token `tokens[:, t]` (the caller shifts): p_t = the policy's
  distribution at student_head(student_hidden[:, t]), q_t = the teacher's at teacher_head(teacher_hidden[:, t])
  (module docstring), both as fp32 log-probabilities, the teacher side under stop-gradient (no gradient
  reaches the teacher, even when it shares the student's parameters).

  Args:
    student_hidden: [B, T, D] float final hidden states of the student (after its final norm).
    student_head: head(h [B, C, D]) -> logits [B, C, V], or a [D, V] weight (logits = h @ W).
    teacher_hidden: [B, T, D_t] float final hidden states of the teacher on the same tokens.
    teacher_head: the teacher's head, as student_head.
    tokens: [B, T] int the sampled response token y_t at each position (used by sampled-token divergences).
    divergence: a registry spec `name[@param]`, e.g. "reverse_kl", "jsd@0.5", "clipped_reverse_kl@0.5",
      "topk_reverse_kl@8" (`divergences.parse`).
    chunk: positions per chunk (> 0); the peak logits array is [B, chunk, V].
    vocab_size: keep only the first vocab_size logits on both sides (the tokenizer's real tokens when the two
      embeddings are padded to different sizes); None: both heads must give the same V.
    field: the config field named in errors (e.g. "config.train.divergence").
    policy: the student's sampled policy p (static `sampling.SamplingParams`: temperature > 0, top-k, top-p);
      None: softmax of the logits (temperature 1, no truncation).
    teacher_policy: the teacher's q: `sampling.SamplingParams(temperature=T_q)` (never truncated); None: T_q 1.
  Returns:
    [B, T] per-token losses, float32 (float64 for float64 inputs); finite wherever the hidden states are.
  Raises:
    ValueError: unknown divergence or bad parameter (naming `field` and the registered names), chunk <= 0,
      mismatched shapes, vocabulary sizes that differ, or policies without an objective (`check_policies`).
  """
  name, options = divergences.parse(divergence, where=field)
  check_policies(policy, teacher_policy, divergence, field=field)
  div = divergences.REGISTRY[name]
  if not (isinstance(chunk, int) and chunk > 0):
    raise ValueError(f"chunk must be a positive int (positions per chunk), got {chunk!r}")
  tokens = jnp.asarray(tokens)
  if (student_hidden.ndim != 3 or teacher_hidden.ndim != 3 or tokens.shape != student_hidden.shape[:2]
      or teacher_hidden.shape[:2] != tokens.shape):
    raise ValueError(f"student_hidden [B, T, D], teacher_hidden [B, T, D_t] and tokens [B, T] must agree, got "
                     f"{student_hidden.shape}, {teacher_hidden.shape} and {tokens.shape}")
  s_head, t_head = _as_head(student_head, "student_head"), _as_head(teacher_head, "teacher_head")
  t = tokens.shape[1]

  def logits_of(head, h):
    z = head(h).astype(jnp.promote_types(h.dtype, jnp.float32))
    return z if vocab_size is None else z[..., :vocab_size]

  def value(lp, lq, y):                    # the registry's loss from log-probabilities
    return div.loss(jnp.exp(lp), jnp.exp(lq), **options, **({"sampled_token": y} if div.sampled else {}),
                    logp=lp, logq=lq)

  @jax.custom_vjp
  def loss_of_logits(z, lq, y):            # [B, C, V], [B, C, V], [B, C] -> [B, C]
    return value(_logprobs(z, policy), lq, y)

  def loss_fwd(z, lq, y):
    lp = _logprobs(z, policy)
    same = checkpoint_name(jnp.all(lp == lq, axis=-1), "p_is_q")   # [B, C], kept (step's policy)
    return value(lp, lq, y), (z, lq, y, same)

  def loss_bwd(res, ct):   # d loss / du = -direction at u = log p (closed form, else autodiff), then J^T to z
    z, lq, y, same = res
    lp, pull = jax.vjp(lambda z: _logprobs(z, policy), z)
    g = divergences.direction(name, jnp.exp(lp), jnp.exp(lq), sampled_token=y if div.sampled else None,
                               logp=lp, logq=lq, **options)
    # Where the forward saw p == q exactly, every divergence is at its minimum: direction 0. Recomputed here, XLA
    # may round the two sides' logits apart by an ulp (a gradient of 1e-7 at a loss of exactly 0, which Adam turns
    # into a step of the learning rate's size); the forward's comparison is kept instead.
    g = jnp.where(same[..., None], jnp.zeros_like(g), g)
    (dz,) = pull(-ct[..., None] * g)
    return dz, jnp.zeros_like(lq), None

  loss_of_logits.defvjp(loss_fwd, loss_bwd)

  @functools.partial(jax.checkpoint, policy=jax.checkpoint_policies.save_only_these_names("p_is_q"))
  def step(hs, ht, y):                     # [B, C, D], [B, C, D_t], [B, C] -> [B, C]
    z = logits_of(s_head, hs)
    zq = jax.lax.stop_gradient(logits_of(t_head, ht))
    if z.shape != zq.shape:
      raise ValueError(f"student and teacher logits differ in shape ({z.shape} vs {zq.shape}); pass "
                       "vocab_size= the tokenizer's real vocabulary size")
    return loss_of_logits(z, _logprobs(zq, teacher_policy), y)   # as p is: bitwise p when zq == z, same policy

  if chunk >= t:                           # one chunk: no loop
    return step(student_hidden, teacher_hidden, tokens)
  _, out = jax.lax.scan(lambda carry, xs: (carry, step(*xs)), None,
                        (_chunks(student_hidden, chunk), _chunks(teacher_hidden, chunk), _chunks(tokens, chunk)))
  return jnp.moveaxis(out, 0, 1).reshape(tokens.shape[0], -1)[:, :t]


def opd_loss(student_hidden: jax.Array, student_head: Head, teacher_hidden: jax.Array, teacher_head: Head,
             tokens: jax.Array, mask: jax.Array, *, divergence: str, chunk: int = 128, vocab_size: int | None = None,
             field: str = "divergence", policy: sampling.SamplingParams | None = None,
             teacher_policy: sampling.SamplingParams | None = None) -> jax.Array:
  """The OPD training loss: mean over response tokens per sequence, then mean over the batch (tinker-cookbook's
  and TRL's GKD per-sequence normalisation [ours: the choice between the two common normalisations]).

  loss = (1 / |B'|) sum_{b in B'} (sum_t mask_bt l_bt) / (sum_t mask_bt), B' the sequences with at least one
  response token (a sequence without any contributes nothing; a batch without any gives 0).

  Args:
    student_hidden, student_head, teacher_hidden, teacher_head, tokens, divergence, chunk, vocab_size, field,
      policy, teacher_policy: as in `token_losses`.
    mask: [B, T] bool or 0/1, True on response tokens (prompt and padding positions False).
  Returns:
    [] float scalar, the dtype of `token_losses`.
  Raises:
    ValueError: as `token_losses`, or a mask whose shape is not tokens'.
  """
  mask = jnp.asarray(mask)
  if mask.shape != jnp.shape(tokens):
    raise ValueError(f"mask must have the shape of tokens [B, T] = {jnp.shape(tokens)}, got {mask.shape}")
  losses = token_losses(student_hidden, student_head, teacher_hidden, teacher_head, tokens, divergence=divergence,
                        chunk=chunk, vocab_size=vocab_size, field=field, policy=policy,
                        teacher_policy=teacher_policy)
  mask = mask.astype(bool)
  count = jnp.sum(mask, axis=-1)
  per_sequence = jnp.sum(jnp.where(mask, losses, 0.0), axis=-1) / jnp.maximum(count, 1)
  has = count > 0
  return jnp.sum(jnp.where(has, per_sequence, 0.0)) / jnp.maximum(jnp.sum(has), 1)
