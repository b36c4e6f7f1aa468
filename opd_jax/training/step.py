"""One OPD train step: student and teacher forwards over rollouts, the chunked loss, optax update (pure, jitted).

Batch layout (`make_batch`, numpy): each row is a prompt left-padded to a common width P (pad positions -1, never
attended to) followed by the rollout's response right-padded to T (pad positions -1 as well). The student reads
[student prompt; response], the teacher [teacher context; response] (the same prompt for an external teacher;
the privileged context for a self-teacher). The hidden state at column P - 1 + t predicts response token t, so

  h_s = student.hidden_states(tokens_s)[:, Ps - 1 : Ps - 1 + T],  h_t likewise with Pt,

and `losses.opd_loss` reduces over the full vocabulary in chunks of positions (never a [B, T, V] array), the
teacher side under stop-gradient.

Trainable params: LoRA adapters (`lora.adapt(keep_apart=True)` inside the step: the block matrices computed
unmerged, x W + s (x A) B, in any dtype: no update rounds away next to bf16 weights and no merged copy of the
weights is formed; the base weights are an input, not updated) or the whole student state (full
fine-tuning). The self-teacher's weights (`config.train.teacher_weights`, `teacher_weights`):
  initial   the base student (adapters off; full fine-tuning: a copy of the initial params) reading its context:
            what the study diagnosed, frozen (the default; OPSD's `--fixed_teacher`, verl's and TRL's frozen base);
  current   the current student with its adapters: a teacher that moves with every update;
  ema@d     an exponential moving average of the trainable params (LoRA: of the factors A and B),
            teacher <- d teacher + (1 - d) params after each applied update, from teacher = params at step 0.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from opd_jax.decode import sampling
from opd_jax.decode import scoring
from opd_jax.models import decoder
from opd_jax.training import lora
from opd_jax.training import losses


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Batch:
  """Arrays of one step (numpy; shapes bucketed by the caller's widths)."""
  tokens_s: np.ndarray    # int32 [B, Ps + T] student prompt (left-padded) + response (right-padded)
  pos_s: np.ndarray       # int32 [B, Ps + T] positions; -1 at pads
  tokens_t: np.ndarray    # int32 [B, Pt + T] teacher context + response
  pos_t: np.ndarray       # int32 [B, Pt + T]
  response: np.ndarray    # int32 [B, T] response ids (0 at pads)
  mask: np.ndarray        # bool [B, T] True on response tokens


def _rows(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], P: int, T: int):
  B = len(prompts)
  tokens = np.zeros((B, P + T), np.int32)
  pos = np.full((B, P + T), -1, np.int32)
  for b, (p, y) in enumerate(zip(prompts, responses)):
    tokens[b, P - len(p):P], pos[b, P - len(p):P] = p, np.arange(len(p))
    tokens[b, P:P + len(y)], pos[b, P:P + len(y)] = y, np.arange(len(p), len(p) + len(y))
  return tokens, pos


def make_batch(student_prompts: Sequence[Sequence[int]], teacher_prompts: Sequence[Sequence[int]],
               responses: Sequence[Sequence[int]], *, rows: int | None = None) -> Batch:
  """Pad B rollouts into one `Batch` (widths bucketed: powers of two, then multiples of 512).

  Args:
    student_prompts, teacher_prompts: per row the prompt ids (>= 1 token) each model reads before the response.
    responses: per row the sampled response ids (may be empty: the row then adds nothing to the loss).
    rows: pad the batch to this many rows (empty dummy rows) so that every step has one shape.
  Raises:
    ValueError: lists of different lengths, an empty prompt, or more rollouts than `rows`.
  """
  B = len(responses)
  if not len(student_prompts) == len(teacher_prompts) == B:
    raise ValueError(f"got {len(student_prompts)} student prompts, {len(teacher_prompts)} teacher prompts and {B} "
                     "responses; pass one of each per rollout")
  if any(len(p) == 0 for p in list(student_prompts) + list(teacher_prompts)):
    raise ValueError("every prompt needs at least one token (the last one predicts the first response token)")
  rows = B if rows is None else rows
  if rows < B:
    raise ValueError(f"rows={rows} is fewer than the {B} rollouts")
  pad = rows - B
  sp, tp = list(student_prompts) + [[0]] * pad, list(teacher_prompts) + [[0]] * pad
  ys = list(responses) + [[]] * pad
  bucket = scoring._bucket  # pylint: disable=protected-access  (scoring's shape buckets: few compiles)
  T = bucket(max(1, max(len(y) for y in ys)), 16)
  tokens_s, pos_s = _rows(sp, ys, bucket(max(map(len, sp)), 16), T)
  tokens_t, pos_t = _rows(tp, ys, bucket(max(map(len, tp)), 16), T)
  response = np.zeros((rows, T), np.int32)
  mask = np.zeros((rows, T), bool)
  for b, y in enumerate(ys):
    response[b, :len(y)], mask[b, :len(y)] = y, True
  return Batch(tokens_s, pos_s, tokens_t, pos_t, response, mask)


Q_BLOCK = 512   # queries per attention block in the train step's forwards (decoder._attention_blocked)


def _response_hidden(model: decoder.Decoder, tokens, pos, T: int, remat: bool = False) -> jax.Array:
  h, _ = model.hidden_states(tokens, pos, remat=remat, q_block=Q_BLOCK)
  P = tokens.shape[1] - T
  return h[:, P - 1:P - 1 + T]


def loss_fn(trainable, base, teacher_state, batch: Batch, *, s_graph, t_graph, lora_scale: float | None,
            divergence: str, chunk: int, vocab_size: int | None, remat: bool = True,
            policy: sampling.SamplingParams | None = None,
            teacher_policy: sampling.SamplingParams | None = None) -> jax.Array:
  """The OPD loss of one batch (`losses.opd_loss`: mean over response tokens, then over rollouts).

  Args:
    trainable: LoRA adapters (`lora.init`) when lora_scale is set, else the student's whole nnx.State.
    base: the frozen student state (LoRA), or None (full fine-tuning).
    teacher_state: an external teacher's state, the self-teacher's frozen or averaged params (read with s_graph),
      or None for the current student as the self-teacher.
    batch: `Batch` arrays (jax or numpy).
    s_graph, t_graph: the student's and the external teacher's graphdefs (static; t_graph None: the student's).
    remat: recompute the student's layer activations in the backward pass (`Decoder.hidden_states`): memory of
      one layer's activations instead of all L, for one more forward.
    policy, teacher_policy: the study's p and q (`preflight.policy`, `preflight.teacher_policy`: temperature,
      top-k, top-p of the sampled policy; the teacher's T_q), as `losses.token_losses`; None: temperature 1.
  """
  params = lora.adapt(base, trainable, scale=lora_scale, keep_apart=True) if lora_scale is not None else trainable
  student = decoder.merge(s_graph, params)
  T = batch.response.shape[1]
  h_s = _response_hidden(student, batch.tokens_s, batch.pos_s, T, remat)
  teacher = student if teacher_state is None else decoder.merge(t_graph or s_graph, teacher_state)
  h_t = jax.lax.stop_gradient(_response_hidden(teacher, batch.tokens_t, batch.pos_t, T))
  return losses.opd_loss(h_s, student.head, h_t, teacher.head, batch.response, batch.mask, divergence=divergence,
                         chunk=chunk, vocab_size=vocab_size, field="config.train.divergence", policy=policy,
                         teacher_policy=teacher_policy)


TEACHER_WEIGHTS = ("initial", "current", "ema@<d>")


def teacher_weights(spec: str, *, field: str = "config.train.teacher_weights") -> tuple[str, float | None]:
  """("initial" | "current" | "ema", decay or None) of a `teacher_weights` spec.

  Raises:
    ValueError: naming `field` and the forms, for anything else (an EMA decay must lie in (0, 1)).
  """
  if spec in ("initial", "current"):
    return spec, None
  if isinstance(spec, str) and spec.startswith("ema@") and spec == "".join(spec.split()):   # as typed: no spaces
    try:
      d = float(spec.removeprefix("ema@"))
    except ValueError:
      d = float("nan")
    if 0.0 < d < 1.0:
      return "ema", d
  raise ValueError(f"{field}={spec!r}: use 'initial' (the base student, frozen: what the study diagnoses), "
                   "'current' (the student being trained) or 'ema@<d>' with 0 < d < 1, no spaces (e.g. ema@0.99)")


def _micro(batch: Batch, k: int) -> Batch:
  """[B, ...] -> [k, B / k, ...]: micro-batch i holds rows i, i + k, i + 2k, ... (rows sharded in contiguous
  blocks over "data" stay on their devices)."""
  return jax.tree.map(lambda x: jnp.moveaxis(x.reshape((x.shape[0] // k, k) + x.shape[1:]), 1, 0), batch)


def _accumulated(grad, micro_batches: int):
  """value_and_grad of the whole batch's loss as a sum over micro-batches (`lax.scan`, one micro-batch's
  activations at a time). The loss is a mean over the rollouts with a response (`losses.opd_loss`), so micro-batch
  i is weighted n_i / n, n_i its rollouts with a response: equal to the one-batch loss and gradients up to
  float round-off."""
  if micro_batches == 1:
    return grad

  def fn(trainable, base, teacher_state, batch):
    mb = _micro(batch, micro_batches)
    n_i = jnp.sum(jnp.any(mb.mask, axis=-1), axis=-1).astype(jnp.float32)          # [k]
    w = n_i / jnp.maximum(jnp.sum(n_i), 1.0)

    def body(carry, xs):
      b, w_i = xs
      loss, g = grad(trainable, base, teacher_state, b)
      total, acc = carry
      return (total + w_i * loss.astype(jnp.float32),
              jax.tree.map(lambda a, x: a + w_i * x.astype(jnp.float32), acc, g)), None

    zeros = jax.tree.map(lambda x: jnp.zeros(x.shape, jnp.float32), trainable)
    (loss, grads), _ = jax.lax.scan(body, (jnp.zeros((), jnp.float32), zeros), (mb, w))
    return loss, jax.tree.map(lambda g, x: g.astype(x.dtype), grads, trainable)

  return fn


def make_train_step(tx: optax.GradientTransformation, *, s_graph, t_graph=None, lora_scale: float | None,
                    divergence: str, chunk: int, vocab_size: int | None, in_shardings: tuple | None = None,
                    remat: bool = True, micro_batches: int = 1, accumulate: int = 1,
                    policy: sampling.SamplingParams | None = None,
                    teacher_policy: sampling.SamplingParams | None = None, ema: float | None = None):
  """A jitted `step(state, base, teacher_state, batch, apply=True) -> (state, metrics)`; `state`
  (`state.init_state`, with `accumulate`) is donated. metrics: {"loss", "grad_norm", "update_norm"} fp32 scalars
  (the loss before the update; update_norm 0 on a step that only accumulates).

  accumulate > 1: one optimizer update over several steps. Each step adds n_s x its gradient to the state's
  accumulator, n_s its rollouts with a response (its loss is their mean), and a step with `apply` (a bool
  scalar: the loop's last step of a window, and the last step of the run) updates with sum(n_s g_s) / sum(n_s):
  the one-batch update of all those steps' rollouts, whatever their mix of rows (`optax.MultiSteps` averaged the
  steps equally and never applied a last partial window). accumulate 1: every step updates (`apply` ignored).

  On a mesh, pass `in_shardings` = the NamedSharding pytrees of (state, base, teacher_state, batch) (`shardings_of`
  of placed arrays; rows of the batch over "data"): the step is jitted with those explicit in-shardings and the
  state's as out-shardings (pjit), so the updated state stays where it was.

  policy, teacher_policy: the p the rollouts were sampled from and the teacher's q (`loss_fn`).

  ema: the self-teacher is an EMA of the trainable params with this decay d, kept in state["teacher"]
  (`state.init_state(teacher=True)`): the step's teacher is the student with those params (`teacher_state` is
  ignored), and after each applied update state["teacher"] <- d state["teacher"] + (1 - d) params, in the params'
  dtype. None: the teacher is `teacher_state` (an external teacher, or the frozen base student) or, when that is
  None, the current student.

  micro_batches: split the batch's B rows into this many micro-batches (B must be a multiple; on a mesh, of
  micro_batches x the "data" size) whose gradients are accumulated in fp32 before one optimizer update: the same
  update as one batch (up to round-off), with one micro-batch's activations in memory.
  """
  grad = _accumulated(jax.value_and_grad(functools.partial(
      loss_fn, s_graph=s_graph, t_graph=t_graph, lora_scale=lora_scale, divergence=divergence, chunk=chunk,
      vocab_size=vocab_size, remat=remat, policy=policy, teacher_policy=teacher_policy)), micro_batches)

  def update(state, grads):
    updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
    return optax.apply_updates(state["params"], updates), opt_state, optax.tree.norm(updates).astype(jnp.float32)

  def averaged(state, params, applied):
    """state with its EMA teacher moved toward `params` where `applied` (a bool scalar)."""
    if ema is None:
      return state
    moved = jax.tree.map(lambda t, p: (ema * t.astype(jnp.float32) + (1.0 - ema) * p.astype(jnp.float32))
                         .astype(t.dtype), state["teacher"], params)
    return {**state, "teacher": jax.tree.map(lambda m, t: jnp.where(applied, m, t), moved, state["teacher"])}

  def step(state, base, teacher_state, batch, apply=True):
    if batch.response.shape[0] % micro_batches:
      raise ValueError(f"a batch of {batch.response.shape[0]} rows does not split into {micro_batches} micro-batches")
    if ema is not None:           # the student with the averaged params (LoRA: the averaged adapters on the base)
      teacher_state = (lora.adapt(base, state["teacher"], scale=lora_scale, keep_apart=True)
                       if lora_scale is not None else state["teacher"])
    loss, grads = grad(state["params"], base, teacher_state, batch)
    metrics = {"loss": loss.astype(jnp.float32), "grad_norm": optax.tree.norm(grads).astype(jnp.float32)}
    if accumulate == 1:
      params, opt_state, metrics["update_norm"] = update(state, grads)
      state = averaged(state, params, jnp.bool_(True))
      return {**state, "step": state["step"] + 1, "params": params, "opt_state": opt_state}, metrics
    n_s = jnp.sum(jnp.any(batch.mask, axis=-1)).astype(jnp.float32)           # rollouts with a response
    acc = {"grads": jax.tree.map(lambda a, g: a + n_s * g.astype(jnp.float32), state["acc"]["grads"], grads),
           "weight": state["acc"]["weight"] + n_s}

    def now(_):
      mean = jax.tree.map(lambda a, x: (a / jnp.maximum(acc["weight"], 1.0)).astype(x.dtype), acc["grads"],
                          state["params"])
      params, opt_state, norm = update(state, mean)
      return params, opt_state, jax.tree.map(jnp.zeros_like, acc), norm

    later = lambda _: (state["params"], state["opt_state"], acc, jnp.zeros((), jnp.float32))
    params, opt_state, acc, metrics["update_norm"] = jax.lax.cond(jnp.asarray(apply), now, later, None)
    state = averaged(state, params, jnp.asarray(apply))
    return {**state, "step": state["step"] + 1, "params": params, "opt_state": opt_state, "acc": acc}, metrics

  if in_shardings is None:
    jitted = jax.jit(step, donate_argnums=0)
  else:
    mesh = next(s.mesh for s in jax.tree.leaves(in_shardings[0]))
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    jitted = jax.jit(step, donate_argnums=0, in_shardings=in_shardings + (replicated,),
                     out_shardings=(in_shardings[0], replicated))
  return lambda state, base, teacher_state, batch, apply=True: jitted(state, base, teacher_state, batch,
                                                                       np.bool_(apply))


def batch_shardings(mesh) -> Batch:
  """Every `Batch` array with its rows over "data" (the batch's row count must be a multiple of its size)."""
  rows = lambda ndim: jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data", *([None] * (ndim - 1))))
  return Batch(*(rows(2) for _ in dataclasses.fields(Batch)))


def shardings_of(tree):
  """The pytree of each placed array's sharding (None stays None)."""
  return jax.tree.map(lambda x: x.sharding, tree)
