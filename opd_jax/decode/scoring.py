"""Student and teacher log-probs along student rollouts, and the per-position predictors (paper.md, "Objects",
"Divergence predictors"), streamed in chunks of positions so no `[B, T, V]` tensor ever exists.

One row is (student prompt, teacher context, response): the student's chat-formatted question, the teacher's
own context (it may differ in length: paper.md, "Self-distillation contexts") and the student's sampled tokens
y_1..y_T, which both models read verbatim after their own prompt. Response token t is predicted by p(u_t) =
pi_theta(. | x, y_<t) and q_c(u_t) = pi_T(. | context_c(x), y_<t).

Array layout (the jitted function `score_arrays`; the Python wrapper `score` builds it from token lists):
  prompt   int32 [B, P]  left-padded (any id at the pad slots), prompt_len [B] >= 1 real tokens at the right end;
                         prompt token i of a row sits at position i.
  response int32 [B, T]  right-padded (any id beyond each row's length), lengths [B] in [0, T]; token t of a
                         row sits at position prompt_len + t.
V is the number of ids that exist, `Config.real_vocab_size` (shared by student and teacher, whose embeddings may
be padded beyond it: `heads.check_vocab`). Masks come from `prompt_len` and `lengths` only, never from a pad id
(Qwen's pad id is also an end-of-text id, which a response may contain inside its length).

Streaming (both models, one pass): the prompt minus its last token is prefilled into a KV cache in chunks of
at most C tokens; then the feed sequence [last prompt token, y_0, .., y_{T-2}] runs through the model C
tokens at a time, each chunk attending to the cache, and the hidden states of chunk j (which predict response
tokens jC .. jC+C-1) go through the output head, an fp32 log-softmax and `predictors.predictors` before the
next chunk. So the live memory is the KV caches plus one chunk:
  KV cache       2 L B S K Dh x bytes(params dtype) per model, S = prompt slots + T rounded up to C;
  attention      about 2 B H C S x 4 bytes (one chunk of queries against the cache, fp32 scores and probs);
  logits         about 5 B C V x 4 bytes (logits and log-softmax of both models; the predictors add no [B, C, V]
                 temporaries: they sum the vocabulary in blocks, `predictors.PREDICTOR_BLOCK`);
instead of B T V x 4 bytes per model for the logits and B H S^2 x 4 bytes for a full-sequence attention.
Compiled numbers for a tiny model are printed by `pytest -s tests/decode/test_scoring.py -k memory`.

Self-teacher: pass the student itself as the teacher (`teacher is student`; `t_params=None` in the jitted
functions). Both sides then run through one `lax.map` over a leading "side" axis of 2, i.e. the same compiled
code; with identical prompts q and p are bitwise identical and every predictor is exactly 0 (cosine and top-k
overlap exactly 1): the `self:plain` check of paper.md. (Taken when the two prompt widths bucket alike, as identical
prompts do; a much longer self-teacher context runs as a separate model. Equal param trees, or the separate path,
give values equal up to float round-off only.) The `lax.map` path holds one extra copy of the KV caches.

External teacher: a user's Flax NNX module with the google/tunix call (`models.flax_adapter.from_module`) runs
one full forward over [teacher prompt; response] instead of the KV-cache stream (its own memory); its hidden
states then go through its head C positions at a time like the student's, so no [B, T, V] array exists either.
"""
from __future__ import annotations

import functools
import numbers
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from opd_jax.decode import heads
from opd_jax.decode import sampling
from opd_jax.estimators import predictors
from opd_jax.models import decoder
from opd_jax.models import flax_adapter
from opd_jax.models import sharding
from opd_jax.models.sharding import PARAMS, ROWS

DENSE_KEYS = ("logp", "logq") + predictors.PREDICTORS  # outputs of `score_arrays` besides "mask"


def _left_positions(prompt_len: jax.Array, width: int) -> jax.Array:
  """Positions [B, width] of left-padded prompts: 0.. on the last prompt_len columns, -1 before."""
  col = jnp.arange(width, dtype=jnp.int32)[None, :]
  start = width - prompt_len.astype(jnp.int32)[:, None]
  return jnp.where(col >= start, col - start, -1)


def _feed(prompt, prompt_len, response, lengths, T_pad):
  """Feed tokens and positions [B, T_pad]: column t holds the token whose hidden state predicts y_t.

  Column 0 is the last prompt token, column t >= 1 the response token t - 1; columns t >= lengths get position
  -1 (never attended to, outputs masked).
  """
  T = response.shape[1]
  response = jnp.pad(response, ((0, 0), (0, T_pad - T)))
  tokens = jnp.concatenate([prompt[:, -1:], response[:, :T_pad - 1]], axis=1)
  t = jnp.arange(T_pad, dtype=jnp.int32)[None, :]
  positions = jnp.where(t < lengths[:, None], prompt_len[:, None].astype(jnp.int32) - 1 + t, -1)
  return jnp.where(positions >= 0, tokens, 0), positions


def _prefill(model, prompt, prompt_len, rows=None, *, chunk, extra):
  """A KV cache holding all but the last prompt column, with `extra` free slots after them.

  The P - 1 prompt columns are left-padded to a multiple of c (`prompt_chunks`: the fewest chunks of at most
  `chunk` columns, equal sizes) and run c at a time, so the attention scores are at most [B, H, c, S].
  rows: None, or int32 [B] when the prompts are U distinct ones [U, P]: each is prefilled once and row b of the
  cache copies prompt rows[b].
  """
  B, P = prompt.shape
  n = P - 1
  c, width = prompt_chunks(n, chunk)
  positions = jnp.pad(_left_positions(prompt_len, P)[:, :n], ((0, 0), (width - n, 0)), constant_values=-1)
  tokens = jnp.pad(prompt[:, :n], ((0, 0), (width - n, 0)))
  tokens = jnp.where(positions >= 0, tokens, 0)
  cache = model.init_cache(B, width + extra)

  def body(cache, j):
    sl = lambda a: jax.lax.dynamic_slice_in_dim(a, j * c, c, axis=1)
    _, cache = model.hidden_states(sl(tokens), sl(positions), cache)
    return cache, None

  if n:
    cache, _ = jax.lax.scan(body, cache, jnp.arange(width // c))
  return (cache if rows is None else decoder.map_cache_rows(lambda a: a[rows], cache),)


def prompt_chunks(n: int, chunk: int) -> tuple[int, int]:
  """(c, width) of a prompt prefill of n columns: the fewest chunks k = ceil(n / chunk), each c = ceil(n / k)
  columns, so the padding is under k columns (not up to a whole chunk); width = k c. n = 0 gives (1, 0)."""
  k = max(1, -(-n // max(chunk, 1)))
  c = max(1, -(-n // k))
  return c, (k * c if n else 0)


def _logprob_step(model, cache, tokens, positions):
  """One chunk through the model: (cache, fp32 log-softmax [B, C, V] of the next-token logits over the real ids,
  h [B, C, D])."""
  h, cache = model.hidden_states(tokens, positions, cache)
  return cache, heads.logprobs_of(model, h), h


def _sides(mode, fn, s, t, *xs):
  """fn(model, *xs_side) for the student and the teacher (merged `decoder.Decoder`s); fn returns a tuple.

  mode "stacked" (teacher is the student): each x is stacked [2, ...] (student, teacher) and one `lax.map`
  runs the same compiled body for both sides; the outputs come back stacked. "identical" (teacher is the
  student on identical inputs): each x is a pair, fn runs once on the student's and its outputs serve both
  sides. "pair": each x is a pair (student, teacher) and the outputs come back as pairs. In every mode
  out[i][0] is the student's, out[i][1] the teacher's.
  """
  if mode == "stacked":
    return jax.lax.map(lambda a: fn(s, *a), xs)
  if mode == "identical":
    return tuple((o, o) for o in fn(s, *(x[0] for x in xs)))
  return tuple(zip(fn(s, *(x[0] for x in xs)), fn(t, *(x[1] for x in xs))))


def _setup(s_params, t_params, s_prompt, s_prompt_len, t_prompt, t_prompt_len, response, lengths, s_rows=None,
           t_rows=None, *, s_graphdef, t_graphdef, chunk, identical=False, reuse=False):
  """Checks and inputs of `score_arrays`: (mode, pack, caches, s feed, t feed, C, T_pad, s, t, t_hidden), mode as
  in `_sides`, s and t the merged student and teacher (`decoder.merge`; t is s when t_params is None).
  s_rows, t_rows: the prompts are distinct ones and row b reads prompt s_rows[b] (t_rows[b]); None: one per row.
  reuse: the student's hidden states are given, so the student side gets no KV cache (its
  entry of `caches` is None; the teacher's too when identical). An external teacher (`flax_adapter.Adapter`)
  gets no KV cache either: t_hidden [B, T_pad, Dt] are its hidden states from one full forward (else None)."""
  shared = t_params is None
  if identical and not shared:
    raise ValueError("identical=True means the teacher is the student on the student's own prompts: pass "
                     "t_params=None")
  mode = "pair" if not shared else "identical" if identical else "stacked"
  if reuse and mode == "stacked":
    raise ValueError("s_hidden with t_params=None needs identical=True (the self:plain view); for another "
                     "self-teacher context pass the student's params as t_params")
  _check_positive("chunk", chunk)
  if shared:
    if t_graphdef is not None and t_graphdef != s_graphdef:
      raise ValueError("t_params=None means the teacher is the student, but t_graphdef differs from s_graphdef; "
                       "pass t_graphdef=None or the teacher's params")
  s = decoder.merge(s_graphdef, s_params)
  t = s if shared else decoder.merge(t_graphdef, t_params)
  s_config, t_config = s.config, t.config
  if shared:
    if s_prompt.shape != t_prompt.shape:
      raise ValueError(f"with the student as teacher (t_params=None) both prompts must be padded to one width, got "
                       f"s_prompt {s_prompt.shape} and t_prompt {t_prompt.shape}")
  heads.check_vocab(s_config, t_config)
  B, T = response.shape
  if (s_rows is None) != (t_rows is None):
    raise ValueError("pass both s_rows and t_rows (distinct prompts on both sides) or neither")
  for name, a, rows in (("s_prompt", s_prompt, s_rows), ("t_prompt", t_prompt, t_rows)):
    if rows is not None and rows.shape != (B,):
      raise ValueError(f"{name[0]}_rows must be int32 [B={B}] indices of distinct prompts, got shape {rows.shape}")
    if a.ndim != 2 or a.shape[1] < 1 or (rows is None and a.shape[0] != B):
      raise ValueError(f"{name} must be [B={B}, P >= 1] token ids (or [U, P] distinct prompts with {name[0]}_rows), "
                       f"got shape {a.shape}")
  per_row = lambda a, rows: a if rows is None else a[rows]
  C = max(1, min(chunk, T))
  T_pad = -(-T // C) * C
  pack = (lambda a, b: jnp.stack([a, b])) if mode == "stacked" else (lambda a, b: (a, b))
  prefill = functools.partial(_prefill, chunk=chunk, extra=T_pad)     # prompts in chunks of `chunk`, not of C <= T
  t_hidden = None
  if isinstance(t, flax_adapter.Adapter):                  # one full forward of its own, no KV cache
    t_hidden = t.feed_hidden(per_row(t_prompt, t_rows), per_row(t_prompt_len, t_rows), response, lengths, T_pad)
    caches = (None if reuse else prefill(s, s_prompt, s_prompt_len, s_rows)[0], None)
  elif reuse:
    caches = (None, None if identical else prefill(t, t_prompt, t_prompt_len, t_rows)[0])
  elif s_rows is None:
    (caches,) = _sides(mode, prefill, s, t, pack(s_prompt, t_prompt), pack(s_prompt_len, t_prompt_len))
  else:
    (caches,) = _sides(mode, prefill, s, t, pack(s_prompt, t_prompt), pack(s_prompt_len, t_prompt_len),
                       pack(s_rows, t_rows))
  s_feed = _feed(per_row(s_prompt, s_rows), per_row(s_prompt_len, s_rows), response, lengths, T_pad)
  t_feed = _feed(per_row(t_prompt, t_rows), per_row(t_prompt_len, t_rows), response, lengths, T_pad)
  return mode, pack, caches, s_feed, t_feed, C, T_pad, s, t, t_hidden


@sharding.sharded_jit(in_specs=(PARAMS, PARAMS) + (ROWS,) * 9, out_specs=ROWS,
                      static_argnames=("s_graphdef", "t_graphdef", "chunk", "top_k", "beta", "return_hidden",
                                       "identical"))
def score_arrays(s_params, t_params, s_prompt, s_prompt_len, t_prompt, t_prompt_len, response, lengths,
                 s_hidden=None, s_rows=None, t_rows=None, *, s_graphdef, t_graphdef=None, chunk: int = 128,
                 top_k: int = 8, beta: float = 0.5, return_hidden: bool = False,
                 identical: bool = False) -> dict[str, jax.Array]:
  """Log-probs of the response tokens and every predictor at every response position, streamed in chunks.

  For each row and each t < lengths: logp = log p(y_t | x, y_<t), logq = log q_c(y_t | context_c, y_<t), and
  `predictors.predictors(log p(u_t), log q_c(u_t), y_t)` (paper.md, "Divergence predictors"): KL(p || q),
  KL(q || p), JS (beta 0.5), JSD_beta (GKD convention), total variation, cosine(p, q), entropies (nats), top-k
  overlap, log q(y_t) - log p(y_t). Layout, memory per chunk and the self-teacher guarantee: module docstring.

  Args:
    s_params, t_params: states (`Model.params`) of the student and the teacher (or of an external teacher,
      `flax_adapter.FlaxTeacher.params`); t_params=None: the teacher is the student (one compiled body for both
      sides; bitwise-equal outputs for identical prompts).
    s_prompt: int32 [B, Ps] left-padded student prompts; s_prompt_len: int32 [B] in [1, Ps].
    t_prompt: int32 [B, Pt] left-padded teacher contexts; t_prompt_len: int32 [B] in [1, Pt].
    response: int32 [B, T] right-padded response ids, read by both models; lengths: int32 [B] in [0, T].
    s_graphdef, t_graphdef: static `Model.graphdef`s (t_graphdef None or equal to s_graphdef when t_params is
      None); each side is `decoder.merge(graphdef, params)` inside the trace.
    chunk: static C, positions per chunk (T need not be a multiple: it is padded up inside).
    top_k: static k of "topk_overlap"; beta: static JSD_beta weight strictly inside (0, 1).
    return_hidden: static; also return the final-normed hidden states that predict each response token,
      "h_p" [B, T, Ds] and "h_q" [B, T, Dt] (params' dtype), for `head_logprobs` at nodes without another pass.
    identical: static; the teacher is the student (t_params=None) on the student's own prompt (t_prompt ==
      s_prompt, the caller's promise): one pass whose outputs serve both sides, so logq, h_q are logp, h_p
      bitwise on any mesh, and every predictor is exactly that of q = p (the `self:plain` view).
    s_hidden: optional [B, T, Ds] final-normed student hidden states of these rows (the "h_p" of an earlier
      call on the same student prompts and responses): the student side then runs only its output head, no
      prefill and no layers (one student pass serves every view). With identical=True no model body runs.
    s_rows, t_rows: optional int32 [B] each (both or neither): the prompts are then Us (Ut) distinct ones,
      s_prompt [Us, Ps] and s_prompt_len [Us], and row b reads prompt s_rows[b] (t_prompt t_rows[b]): each
      distinct prompt is prefilled once and its KV cache copied to its rows (the rollouts of one question share
      the student's prompt and most teacher contexts). Equal to the per-row prompts up to float round-off of
      the smaller prefill batch.
  Returns:
    {name: fp32 [B, T]} for name in DENSE_KEYS, exactly 0 at masked positions, and "mask": bool [B, T],
    t < lengths (plus "h_p", "h_q" with return_hidden).
  Raises:
    ValueError: bad chunk, top_k or beta, real vocabularies that differ, prompts of different widths with
      t_params=None, or arrays of inconsistent shapes.
  """
  mode, pack, caches, s_feed, t_feed, C, T_pad, s, t, t_hidden = _setup(
      s_params, t_params, s_prompt, s_prompt_len, t_prompt, t_prompt_len, response, lengths, s_rows, t_rows,
      s_graphdef=s_graphdef, t_graphdef=t_graphdef, chunk=chunk, identical=identical, reuse=s_hidden is not None)
  s_config = s.config
  B, T = response.shape
  t_idx = jnp.arange(T_pad, dtype=jnp.int32)[None, :]
  mask = t_idx < lengths[:, None]
  targets = jnp.where(mask, jnp.pad(response, ((0, 0), (0, T_pad - T))), 0)
  if s_hidden is not None:
    if s_hidden.ndim != 3 or s_hidden.shape[:2] != (B, T) or s_hidden.shape[2] != s_config.d_model:
      raise ValueError(f"s_hidden must be [B={B}, T={T}, D={s_config.d_model}], got shape {s_hidden.shape}")
    s_hidden = jnp.pad(s_hidden, ((0, 0), (0, T_pad - T), (0, 0)))

  def step(model, cache, hidden, feed, sl):
    """One side's chunk: its head only when its hidden states are given, else its layers on the cache."""
    if hidden is None:
      return _logprob_step(model, cache, sl(feed[0]), sl(feed[1]))
    h = sl(hidden)
    return cache, heads.logprobs_of(model, h), h

  def body(caches, j):
    sl = lambda a: jax.lax.dynamic_slice_in_dim(a, j * C, C, axis=1)
    if mode == "pair":
      caches, logps, hs = zip(step(s, caches[0], s_hidden, s_feed, sl), step(t, caches[1], t_hidden, t_feed, sl))
    elif s_hidden is None:
      caches, logps, hs = _sides(mode, _logprob_step, s, t, caches, pack(sl(s_feed[0]), sl(t_feed[0])),
                                 pack(sl(s_feed[1]), sl(t_feed[1])))
    else:                                                           # identical: the student's head serves both
      h_p = sl(s_hidden)
      logp = heads.logprobs_of(s, h_p)
      logps, hs = (logp, logp), (h_p, h_p)
    logp, logq = logps[0], logps[1]                                              # [B, C, V] fp32 each
    y, m = sl(targets), sl(mask)
    out = predictors.predictors(logp, logq, y, beta=beta, top_k=top_k)
    at = lambda lp: jnp.take_along_axis(lp, y[..., None], axis=-1)[..., 0]
    out["logp"], out["logq"] = at(logp), at(logq)
    out = {k: jnp.where(m, out[k], 0.0).astype(jnp.float32) for k in DENSE_KEYS}
    if return_hidden:
      out["h_p"], out["h_q"] = hs[0], hs[1]
    return caches, out

  _, outs = jax.lax.scan(body, caches, jnp.arange(T_pad // C))                  # {k: [n, B, C, ...]}
  result = {k: jnp.moveaxis(v, 0, 1).reshape(B, T_pad, *v.shape[3:])[:, :T] for k, v in outs.items()}
  result["mask"] = mask[:, :T]
  return result


# ----------------------------------------------------------------------------------------------- Python wrappers


def _bucket(n: int, minimum: int) -> int:
  """Few distinct shapes: powers of two up to 512, then multiples of 512."""
  n = max(n, minimum)
  return 1 << (n - 1).bit_length() if n <= 512 else -(-n // 512) * 512


def prompt_width(n: int) -> int:
  """Padded prompt width: powers of two up to 64, then multiples of 32 up to 512, then of 128. Every padded
  column runs through the model in the prefill, so prompt widths are bucketed finer than T (a 131-token context
  pads to 160, not 256), at the price of a few more compiled shapes."""
  if n <= 64:
    return _bucket(n, 16)
  step = 32 if n <= 512 else 128
  return -(-n // step) * step


def _check_ids(name: str, seqs: Sequence[Sequence[int]], vocab: int) -> None:
  for r, s in enumerate(seqs):
    a = np.asarray(s, np.int64)
    if a.size and (a.min() < 0 or a.max() >= vocab):
      raise ValueError(f"{name}[{r}] has token ids outside [0, V = {vocab}) (min {a.min()}, max {a.max()}); "
                       "pass ids of the shared tokenizer, without padding")


def _prepare(student, teacher, student_prompts, teacher_prompts, responses, chunk, batch_size):
  """Validates the wrapper inputs; returns whether the teacher is the student."""
  _check_positive("chunk", chunk)
  _check_positive("batch_size", batch_size)
  s_config, t_config = student.config, teacher.config
  heads.check_vocab(s_config, t_config)
  if isinstance(teacher, flax_adapter.FlaxTeacher):
    teacher.check_student(student)
  shared = teacher is student or (teacher.params is student.params and teacher.graphdef == student.graphdef)
  n = len(responses)
  if not n or len(student_prompts) != n or len(teacher_prompts) != n:
    raise ValueError(f"student_prompts, teacher_prompts and responses must be non-empty lists of equal length, got "
                     f"{len(student_prompts)}, {len(teacher_prompts)} and {n}")
  for name, prompts, config in (("student_prompts", student_prompts, s_config),
                                ("teacher_prompts", teacher_prompts, t_config)):
    for r, p in enumerate(prompts):
      if not len(p):
        raise ValueError(f"{name}[{r}] is empty: every prompt needs at least one token (its last token predicts "
                         "the first response token)")
      if len(p) + len(responses[r]) > config.max_seq_len:
        raise ValueError(f"{name}[{r}] ({len(p)} tokens) + responses[{r}] ({len(responses[r])} tokens) exceeds the "
                         f"model's context ({config.max_seq_len}); shorten the context or the response")
    _check_ids(name, prompts, config.real_vocab_size)
  _check_ids("responses", responses, s_config.real_vocab_size)
  return shared


def _check_positive(name: str, value: Any) -> None:
  if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
    raise ValueError(f"{name} must be an int >= 1, got {value!r}")


def _batches(n: int, batch_size: int, mesh=None):
  for start in range(0, n, batch_size):
    rows = list(range(start, min(n, start + batch_size)))
    yield rows, sharding.pad_rows(min(_bucket(len(rows), 1), batch_size), mesh)


def _pad_rows(prompts_s, prompts_t, responses, rows, Bp, chunk, mesh=None, shared=False):
  """numpy arrays for `score_arrays` at bucketed shapes, each side's distinct prompts once: (s_prompt [Us, Ps],
  s_prompt_len, t_prompt [Ut, Pt], t_prompt_len, response [Bp, T], lengths, s_rows [Bp], t_rows [Bp]). Dummy rows
  are scored as empty (length 0, reading prompt 0); shared (one model for both sides) pads Us and Ut alike."""
  rs = [list(responses[r]) for r in rows] + [[]] * (Bp - len(rows))
  T = _bucket(max(1, max(map(len, rs))), 16)
  if T > chunk:
    T = -(-T // chunk) * chunk

  def distinct(prompts):
    index: dict[tuple[int, ...], int] = {}
    at = [index.setdefault(tuple(prompts[r]), len(index)) for r in rows]
    return [list(p) for p in index], np.array(at + [0] * (Bp - len(rows)), np.int32)

  (ps, s_rows), (pt, t_rows) = distinct(prompts_s), distinct(prompts_t)
  Us, Ut = (sharding.pad_rows(_bucket(len(p), 1), mesh) for p in (ps, pt))
  if shared:
    Us = Ut = max(Us, Ut)
  ps, pt = ps + [[0]] * (Us - len(ps)), pt + [[0]] * (Ut - len(pt))
  Ps, Pt = prompt_width(max(map(len, ps))), prompt_width(max(map(len, pt)))

  def left(seqs, width):
    out = np.zeros((len(seqs), width), np.int32)
    for i, s in enumerate(seqs):
      out[i, width - len(s):] = s
    return out, np.array([len(s) for s in seqs], np.int32)

  response = np.zeros((Bp, T), np.int32)
  for i, s in enumerate(rs):
    response[i, :len(s)] = s
  return (*left(ps, Ps), *left(pt, Pt), response, np.array([len(s) for s in rs], np.int32), s_rows, t_rows)


def _teacher_args(student, teacher, shared, arrays):
  """(t_params, t_graphdef) for one batch: (None, None), i.e. one compiled body for both sides (bitwise-equal p and
  q on identical prompts), when the teacher is the student and both prompt widths bucket alike; otherwise the
  teacher's own (a self-teacher with a much longer context then does not pad the student's prompts to it)."""
  if shared and arrays[0].shape == arrays[2].shape:
    return None, None
  return teacher.params, teacher.graphdef


def score(student: Any, teacher: Any, student_prompts: Sequence[Sequence[int]],
          teacher_prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], *, chunk: int = 128,
          top_k: int = 8, beta: float = 0.5, batch_size: int = 8, return_hidden: bool = False,
          student_hidden: Sequence[np.ndarray] | None = None) -> dict[str, list[np.ndarray]]:
  """Per-token log-probs and predictors of rollouts under a student and a teacher (paper.md, "Divergence
  predictors"); see `score_arrays` for the quantities and the module docstring for memory.

  Rows are scored `batch_size` at a time, padded to bucketed shapes (batch: powers of two up to batch_size;
  prompt widths: `prompt_width`; T: powers of two up to 512, then multiples of 512, and a multiple of chunk) so
  that repeated calls reuse a few compiled programs. Within a batch each distinct prompt of each side is prefilled
  once (`score_arrays`' s_rows, t_rows): the rollouts of one question share the student's prompt and most
  teacher contexts, and with short responses the prompts are most of the FLOPs. A row's result does not depend
  on the other rows (beyond float round-off from the batch shape).

  Args:
    student, teacher: `opd_jax.models.Model`-like objects with `.config` (decoder.Config) and `.params`; the
      teacher may be an external Flax module (`flax_adapter.FlaxTeacher`). Pass
      the student itself as the teacher for self-distillation; where a batch's teacher prompts equal the
      student's (the `self:plain` view) one pass serves both sides: q = p bitwise on any mesh.
    student_prompts: per row, the student's prompt ids (>= 1 token).
    teacher_prompts: per row, the teacher's context ids (>= 1 token; any length).
    responses: per row, the student's sampled ids y_0..y_{L-1} (may be empty; pad/end-of-text ids inside are
      scored like any other token).
    chunk: positions per chunk C (memory O(B C V)); top_k: k of "topk_overlap"; beta: JSD_beta weight.
      Log-probs and predictors are of the raw distributions (temperature 1, no truncation).
    batch_size: rows per compiled call.
    return_hidden: also return "h_p" [L_r, Ds] and "h_q" [L_r, Dt] per row, the final hidden states that
      predict each response token (feed them to `head_logprobs` for p and q at nodes: no second pass).
    student_hidden: optional per row the "h_p" [L_r, Ds] of an earlier `score` of the same student prompt and
      response (any teacher): the student then runs only its output head (`score_arrays`' s_hidden), so one
      student pass serves every (teacher, context) view. Equal to recomputing up to float round-off.
  Returns:
    {name: [float32 [L_r] per row r]} for name in DENSE_KEYS ("logp", "logq" and every predictors.PREDICTORS),
    plus "h_p", "h_q" with return_hidden.
  Raises:
    ValueError: mismatched list lengths, empty prompts, ids outside [0, V), real vocabularies that differ, prompt +
      response longer than a model's context, or bad chunk / top_k / beta / batch_size.
  """
  shared = _prepare(student, teacher, student_prompts, teacher_prompts, responses, chunk, batch_size)
  if student_hidden is not None and (len(student_hidden) != len(responses) or any(
      np.shape(h) != (len(y), student.config.d_model) for h, y in zip(student_hidden, responses))):
    raise ValueError(f"student_hidden must hold one [L_r, D={student.config.d_model}] array per response, as "
                     "score(..., return_hidden=True)['h_p'] returns")
  keys = DENSE_KEYS + (("h_p", "h_q") if return_hidden else ())
  out = {k: [None] * len(responses) for k in keys}
  mesh = sharding.mesh_of(student.params)
  for rows, Bp in _batches(len(responses), batch_size, mesh):
    *arrays, s_rows, t_rows = _pad_rows(student_prompts, teacher_prompts, responses, rows, Bp, chunk, mesh, shared)
    t_params, t_graphdef = _teacher_args(student, teacher, shared, arrays)
    identical = t_params is None and all(list(student_prompts[r]) == list(teacher_prompts[r]) for r in rows)
    h = None
    if student_hidden is not None:                    # the student's head only: no student prefill or layers
      h = np.zeros(arrays[4].shape + (student.config.d_model,), np.asarray(student_hidden[rows[0]]).dtype)
      for i, r in enumerate(rows):
        h[i, :len(responses[r])] = student_hidden[r]
      if t_params is None and not identical:          # a self-teacher context: the student's body, teacher side
        t_params, t_graphdef = teacher.params, teacher.graphdef
    got = score_arrays(student.params, t_params, *arrays, h, s_rows, t_rows, s_graphdef=student.graphdef,
                       t_graphdef=t_graphdef, chunk=chunk, top_k=top_k, beta=beta, return_hidden=return_hidden,
                       identical=identical)
    got = {k: np.asarray(got[k]) for k in keys}
    for i, r in enumerate(rows):
      for k in keys:
        out[k][r] = got[k][i, :len(responses[r])]
  return out


@sharding.sharded_jit(in_specs=(PARAMS, ROWS, ROWS), out_specs=ROWS, static_argnames=("graphdef", "top_k", "policy"))
def _head_logprobs(params, h, candidates, *, graphdef, top_k, policy):
  valid = jnp.ones(h.shape[:-1], bool)
  out = heads.node_outputs(decoder.merge(graphdef, params), h[None], candidates[None], valid[None], top_k=top_k,
                      policy=policy)
  return tuple(a[0] for a in out)                                    # [N, ...]: rows over "data"


def head_logprobs(model: Any, h: np.ndarray, candidates: np.ndarray | None = None, *, top_k: int = 8,
                  policy: sampling.SamplingParams | None = None) -> dict[str, np.ndarray]:
  """Full-vocabulary log-probs at given hidden states (from `score(..., return_hidden=True)`).

  Args:
    model: the model whose hidden states these are (its head and config are used).
    h: [N, D] final-normed hidden states (N nodes); candidates: int [N, K] token ids, -1 padded (or None).
    top_k: k of the returned top-k, 1 <= k <= V.
    policy: None for the raw distribution (softmax of the logits), or the `sampling.SamplingParams` of a
      processed one (`sampling.policy_logprobs`): the student's sampled policy (paper.md, "Policy"), or a
      temperature-scaled teacher (`SamplingParams(temperature=T)`, never truncated).
  Returns:
    "logp": fp32 [N, K] log-probs at the candidates (-inf at padding and outside a truncated policy);
    "topk_ids": int32 [N, k] the k most likely ids (ties: lower id first); "topk_logp": fp32 [N, k] their
    log-probs.
  """
  h = np.asarray(h)
  N = h.shape[0]
  cand = np.full((N, 0), -1, np.int32) if candidates is None else np.asarray(candidates, np.int32)
  Nb = sharding.pad_rows(_bucket(max(N, 1), 8), sharding.mesh_of(model.params))     # few shapes, few compiles
  Kb = _bucket(max(cand.shape[1], 1), 1)
  hp = np.zeros((Nb, h.shape[1]), h.dtype)
  hp[:N] = h
  cp = np.full((Nb, Kb), -1, np.int32)
  cp[:N, :cand.shape[1]] = cand
  at, ids, top = _head_logprobs(model.params, hp, cp, graphdef=model.graphdef, top_k=top_k, policy=policy)
  return {"logp": np.asarray(at)[:N, :cand.shape[1]], "topk_ids": np.asarray(ids)[:N],
          "topk_logp": np.asarray(top)[:N]}
