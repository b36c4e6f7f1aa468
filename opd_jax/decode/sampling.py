"""Batched sampling on device: prefill, a decode loop over a donated KV cache, and prefix branching.

Three jit-compiled pure functions over plain pytrees do the work (`sharding.sharded_jit`: jax.jit with
explicit in / out shardings on the params' mesh); each takes the model's state (`Model.params`) and its static
graphdef and merges them inside (`decoder.merge`), never a Module; `sample` and `branch` are thin Python
wrappers that pad to bucket shapes (so repeated calls do not recompile), prefill each distinct prompt once,
decode in segments of `SEGMENT` steps that move the rows still generating into smaller batches (rows that
stopped early cost nothing) and grow the cache by GROW slots as it fills, and unpad the results.

- `prefill`: run prompts (left-padded, pad positions -1) through the model into a fresh KV cache.
- `decode`: from a cache and the next-token logits, sample up to N tokens per row, stopping at stop ids; the
  cache is donated and updated in place; on accelerators a known number of steps (no host sync per step).
- `branch`: from the KV cache of whole base rollouts, start many continuations at any position t, each with a
  forced first token: one copy of each node's prefix (its base row's slots at positions < t) serves all the
  node's branches (shared-prefix attention, `decoder.with_prefix`), and each branch holds only its own suffix
  (no re-prefill and no copy of the shared prefix per branch).

Randomness: row r of a call draws step i's noise from `fold_in(fold_in(key, row_id[r]), i)`, so a row's
samples depend on the caller's key and its row id only, never on the batch it sits in or its padding.
Reproducibility: bitwise on one mesh and platform. On another mesh the same uniforms meet logits that differ
by fp32 round-off (matmuls split over devices), so a draw whose uniform falls within round-off of a CDF
boundary may differ; tests/models/test_sharding.py checks that the smoke study's tokens and counts are equal on 8 fake
devices and on 1.

Returned log-probs are those of the sampled tokens under the policy actually sampled (`policy_logprobs`:
temperature, top-k and top-p applied, renormalised): the p of every estimator (paper.md, "Policy"). With the
defaults (temperature 1, no truncation) they equal the raw log_softmax of the logits.
"""
from __future__ import annotations

import collections
import dataclasses
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from opd_jax.decode import truncation
from opd_jax.models import decoder
from opd_jax.models import sharding
from opd_jax.models.sharding import CACHE, PARAMS, REPLICATED, ROWS

# Calls counted by the Python wrappers: "prefill_rows" (rows prefilled), "prefill_calls", "branch_calls",
# "branch_rows", "compactions" (batches shrunk to their live rows). Tests and benchmarks read it to show one
# prefill per base rollout.
COUNTERS: collections.Counter = collections.Counter()

SEGMENT = 64   # decode steps between checks for rows that stopped (`decode_compacting`)
MIN_ROWS = 8   # batches shrink no further than this
GROW = 256     # a decode cache grows by multiples of this many slots as its rows generate (`decode_compacting`)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SamplingParams:
  """How tokens are drawn (static under jit). temperature 0 = greedy; top_k 0 = off; top_p 1 = off."""
  temperature: float = 1.0
  top_p: float = 1.0
  top_k: int = 0

  def __post_init__(self):
    if self.temperature < 0:
      raise ValueError(f"temperature must be >= 0, got {self.temperature}")
    if not 0.0 < self.top_p <= 1.0:
      raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
    if self.top_k < 0:
      raise ValueError(f"top_k must be >= 0 (0 = off), got {self.top_k}")


@dataclasses.dataclass(frozen=True)
class Samples:
  """Sampler output (numpy, unpadded rows).

  tokens:   int32 [B, N] sampled tokens; `pad_id` after the stop token.
  logprobs: float32 [B, N] log-prob of each sampled token under the sampled policy (`policy_logprobs`;
            0 after stop).
  lengths:  int32 [B] number of tokens generated, the stop token included.
  finished: bool [B] True when a stop token was sampled, or the answer closed under `branch`'s answer stop
            (False when the token cap was hit).
  """
  tokens: np.ndarray
  logprobs: np.ndarray
  lengths: np.ndarray
  finished: np.ndarray


def row_keys(key: jax.Array, row_ids: jax.Array) -> jax.Array:
  """Per-row keys [B] from the caller's key and int row ids [B]."""
  return jax.vmap(lambda r: jax.random.fold_in(key, r))(row_ids)


def categorical(logits: jax.Array, keys: jax.Array, block: int = 512) -> jax.Array:
  """One exact draw per row from softmax(logits): logits fp32 [B, N] (-inf = excluded), keys [B] -> int32 [B].

  Inverse CDF with one uniform u in (0, 1] per row, in two levels (blocks of `block` ids, then ids inside the
  chosen block) with the prefix sums as small triangular matmuls: two passes over [B, N] (the max; the block
  sums of exp) instead of the per-element random numbers of the Gumbel-max trick (4x faster per decode step on
  CPU at N = 152k). Tokens of zero probability are never drawn.
  """
  return _categorical(logits, keys, block)[0]


def _categorical(logits, keys, block: int = 512, temperature: float = 1.0):
  """`categorical` of logits / temperature and its log-normaliser log sum exp(logits / temperature) fp32 [B] (from
  the same block sums: no pass more). The scaling is applied inside each pass (never a scaled copy)."""
  B, N = logits.shape
  W = min(block, N)
  nb = -(-N // W)
  scale = (lambda x: x) if temperature == 1.0 else (lambda x: x / temperature)
  m = jnp.max(logits, axis=-1, keepdims=True)                                   # max(l / T) = max(l) / T
  sums = jax.lax.reduce_window(jnp.exp(scale(logits - m)), 0.0, jax.lax.add, (1, W), (1, W),   # block sums: the
                               ((0, 0), (0, nb * W - N)))                     # exps never stored (one pass)
  cum_blocks = sums @ jnp.triu(jnp.ones((nb, nb), logits.dtype))               # [B, nb] inclusive sums
  u = (1.0 - jax.vmap(lambda k: jax.random.uniform(k, (), jnp.float32))(keys)) * cum_blocks[:, -1]
  blk = jnp.minimum(jnp.sum(cum_blocks < u[:, None], axis=-1), nb - 1)
  before = jnp.take_along_axis(cum_blocks, jnp.maximum(blk - 1, 0)[:, None], axis=-1)[:, 0]
  before = jnp.where(blk > 0, before, 0.0)
  ids = blk[:, None] * W + jnp.arange(W)                                        # the chosen block's exps again
  p_blk = jnp.exp(scale(jnp.take_along_axis(logits, jnp.minimum(ids, N - 1), axis=-1) - m))
  inner = jnp.where(ids < N, p_blk, 0.0) @ jnp.triu(jnp.ones((W, W), logits.dtype))
  idx = jnp.minimum(jnp.sum(inner + before[:, None] < u[:, None], axis=-1), W - 1)
  return (blk * W + idx).astype(jnp.int32), scale(m[:, 0]) + jnp.log(cum_blocks[:, -1])


def _truncate(scaled: jax.Array, sp: SamplingParams, k: int) -> tuple[jax.Array, jax.Array]:
  """The k most likely of `scaled` [B, V] (sorted descending, ties toward the lower id) with the tokens outside
  the nucleus set to -inf: (values fp32 [B, k], ids int32 [B, k]). With top_k on, the nucleus is taken within
  the top-k renormalised; it keeps the most likely tokens up to and including the one whose cumulative mass
  crosses top_p (paper.md, "Policy")."""
  vals, idx = jax.lax.top_k(scaled, k)
  if sp.top_p < 1.0:
    if sp.top_k:
      probs = jax.nn.softmax(vals, axis=-1)
    else:
      probs = jnp.exp(vals - jax.nn.logsumexp(scaled, axis=-1, keepdims=True))
    before = jnp.cumsum(probs, axis=-1) - probs                        # mass strictly before each token
    vals = jnp.where(before < sp.top_p, vals, -jnp.inf)                # keeps the token crossing top_p
  return vals, idx


def policy_logprobs(logits: jax.Array, sp: SamplingParams) -> jax.Array:
  """Log-probs of the policy that `sample_logits` samples from (paper.md, "Policy": the p of every estimator).

  log pi(k) = log softmax(z / T) restricted to the top-k, then to the nucleus, renormalised there; -inf on
  the tokens that can never be drawn. temperature 0 (greedy) is the point mass on the argmax (lowest id among
  ties). With the defaults (T = 1, no truncation) it equals `jax.nn.log_softmax(logits)` bitwise.

  Args:
    logits: fp32 [..., V] raw next-token logits (-inf = excluded).
    sp: the sampling settings (static).
  Returns:
    fp32 [..., V] log-probs; logsumexp over V is 0.
  """
  shape, V = logits.shape, logits.shape[-1]
  if sp.temperature == 0.0:
    top = jax.nn.one_hot(jnp.argmax(logits, axis=-1), V, dtype=jnp.bool_)
    return jnp.where(top, 0.0, -jnp.inf).astype(jnp.float32)
  scaled = logits / sp.temperature
  if sp.top_k == 0 and sp.top_p >= 1.0:
    return jax.nn.log_softmax(scaled, axis=-1)
  flat = scaled.reshape(-1, V)
  if sp.top_k == 0:                  # top-p alone: the nucleus by a threshold search, no sort of the vocabulary
    return jax.nn.log_softmax(truncation.kept_logits(flat, top_k=0, top_p=sp.top_p), axis=-1).reshape(shape)
  vals, idx = _truncate(flat, sp, min(sp.top_k, V))
  kept = jnp.full_like(flat, -jnp.inf).at[jnp.arange(flat.shape[0])[:, None], idx].set(vals)
  return jax.nn.log_softmax(kept, axis=-1).reshape(shape)


def sample_logits(logits: jax.Array, keys: jax.Array, sp: SamplingParams) -> jax.Array:
  """Draw one token per row. logits fp32 [B, V]; keys [B] (one per row, already step-specific) -> int32 [B].

  Temperature, then top-k (the k most likely; ties broken toward the lower id), then top-p over what is left
  (the nucleus: the most likely tokens up to and including the one whose cumulative mass crosses top_p),
  then an exact draw (`categorical`): a draw from `policy_logprobs`. temperature 0 and top_k 1 are greedy
  (lowest id among ties).
  """
  return _draw(logits, keys, sp)[0]


def _draw(logits: jax.Array, keys: jax.Array, sp: SamplingParams) -> tuple[jax.Array, jax.Array]:
  """`sample_logits` and the drawn tokens' log-probs under the sampled policy (`policy_logprobs`):
  (int32 [B], fp32 [B]). Passes over the logits [B, V] (compiled, `benchmarks/decode_bytes.py --sampler`): 2 with
  no truncation; with top-k a `lax.top_k` of k, then the nucleus within those k; with top-p alone the nucleus
  by `truncation.kept`'s threshold search (no sort of the vocabulary), then the same draw over the vocabulary."""
  if sp.temperature == 0.0:
    return jnp.argmax(logits, axis=-1).astype(jnp.int32), jnp.zeros(logits.shape[:1], jnp.float32)
  if sp.top_k == 0 and sp.top_p >= 1.0:
    tok, log_z = _categorical(logits, keys, temperature=sp.temperature)
    return tok, jnp.take_along_axis(logits, tok[:, None], axis=-1)[:, 0] / sp.temperature - log_z
  scaled = logits / sp.temperature
  V = scaled.shape[-1]

  def restricted(k: int):
    vals, idx = _truncate(scaled, sp, k)
    choice = jnp.zeros(vals.shape[:1], jnp.int32) if k == 1 else categorical(vals, keys)
    lp = jnp.take_along_axis(jax.nn.log_softmax(vals, axis=-1), choice[:, None], axis=-1)[:, 0]
    return jnp.take_along_axis(idx, choice[:, None], axis=-1)[:, 0].astype(jnp.int32), lp

  if sp.top_k:
    return restricted(min(sp.top_k, V))
  nucleus = truncation.kept_logits(scaled, top_k=0, top_p=sp.top_p)
  tok, log_z = _categorical(nucleus, keys)
  return tok, jnp.take_along_axis(nucleus, tok[:, None], axis=-1)[:, 0] - log_z


@sharding.sharded_jit(in_specs=(PARAMS, ROWS, ROWS), out_specs=(ROWS, CACHE),
                      static_argnames=("graphdef", "cache_size"))
def prefill(params, tokens, positions, *, graphdef, cache_size: int):
  """Run left-padded prompts into a new KV cache.

  Args:
    params: the model's state (`Model.params`); graphdef: static, `Model.graphdef`.
    tokens: int32 [B, P]; positions: int32 [B, P] (-1 at pad slots, 0.. on real tokens).
    cache_size: S >= P slots (room for the tokens to come).
  Returns:
    (last-position logits fp32 [B, V], cache with `end` = P).
  """
  model = decoder.merge(graphdef, params)
  h, cache = model.hidden_states(tokens, positions, model.init_cache(tokens.shape[0], cache_size))
  return model.head(h[:, -1]), cache


def early_exit_default() -> bool:
  """Whether decode loops exit once every row has stopped (a data-dependent condition): on CPU, where the loop's
  condition costs nothing. On GPU / TPU a segment runs its known number of steps instead: a data-dependent exit
  makes XLA copy the flag to the host and wait every step."""
  return jax.default_backend() == "cpu"


@sharding.sharded_jit(in_specs=(PARAMS, CACHE, ROWS, ROWS, ROWS, ROWS, ROWS, REPLICATED, ROWS, REPLICATED),
                      out_specs=(ROWS, ROWS, ROWS, ROWS, CACHE, ROWS, ROWS, ROWS),
                      static_argnames=("graphdef", "sp", "max_new_tokens", "stop_ids", "pad_id", "early_exit"),
                      donate_argnums=(1, 2))
def decode(params, cache, logits, next_pos, keys, done, caps=None, start=0, span=None, table=None, *, graphdef,
           sp: SamplingParams, max_new_tokens: int, stop_ids: tuple[int, ...], pad_id: int = 0,
           early_exit: bool = True):
  """Sample up to N = max_new_tokens tokens per row on device.

  The cache and the logits are donated: the loop updates the cache in place (no copy of it per call or per
  step), and the caller must not use them after the call.

  Args:
    cache: KV cache with at least N free slots after `end` (donated).
    logits: fp32 [B, V] next-token logits of every row (donated).
    next_pos: int32 [B] position of the next token of each row.
    keys: [B] per-row keys (`row_keys`); step i uses fold_in(keys[b], start + i).
    done: bool [B] rows that must not generate (e.g. a forced stop token); they return length 0.
    caps: int32 [B] per-row token caps <= N (default N): a row stops, unfinished, after caps[b] tokens.
    start: int32 [] index of the first step in the rows' random streams (a later segment of the same rows).
    span, table: optional answer stop (`opd_jax.decode.stops`): int32 [B] each row's automaton state and the automaton
      int8 [S, V]; a row stops, finished, at the token that takes it to the last state (its first answer span
      closed). None: stop ids and caps only.
    early_exit: static. True: stop the loop once every row has stopped or reached its cap (a data-dependent
      condition, `early_exit_default` on CPU); False: run exactly N steps (a known trip count: no host sync per
      step on accelerators; rows that stopped write masked slots).
  Returns:
    tokens int32 [B, N], logprobs fp32 [B, N], lengths int32 [B], finished bool [B], and the state to
    continue from: final cache, next-token logits fp32 [B, V], next positions int32 [B], automaton states int32 [B]
    (the `span` given, or zeros).
  """
  B = logits.shape[0]
  model = decoder.merge(graphdef, params)
  stops = jnp.asarray(stop_ids if stop_ids else (-1,), jnp.int32)
  out_tok = jnp.full((B, max_new_tokens), pad_id, jnp.int32)
  out_lp = jnp.zeros((B, max_new_tokens), jnp.float32)

  caps = jnp.full((B,), max_new_tokens, jnp.int32) if caps is None else jnp.minimum(caps, max_new_tokens)
  span = jnp.zeros((B,), jnp.int32) if span is None else span.astype(jnp.int32)

  def cond(state):
    i, _, _, _, lengths, stopped, _, _, _ = state
    return (i < max_new_tokens) & ~jnp.all(stopped | (lengths >= caps))

  def body(state):
    i, cache, logits, pos, lengths, stopped, toks, lps, span = state
    active = ~stopped & (lengths < caps)
    step_keys = jax.vmap(lambda k: jax.random.fold_in(k, start + i))(keys)
    tok, lp = _draw(logits, step_keys, sp)
    tok = jnp.where(active, tok, pad_id)
    toks = jax.lax.dynamic_update_slice(toks, tok[:, None], (0, i))
    lps = jax.lax.dynamic_update_slice(lps, jnp.where(active, lp, 0.0)[:, None], (0, i))
    lengths = lengths + active.astype(jnp.int32)
    stopped = stopped | (active & jnp.any(tok[:, None] == stops[None, :], axis=-1))
    if table is not None:                                              # one gather per row: the answer closed?
      span = jnp.where(active, table[span, tok].astype(jnp.int32), span)
      stopped = stopped | (active & (span == table.shape[0] - 1))
    feed_pos = jnp.where(active, pos, -1)                              # inactive rows write masked slots
    new_logits, cache = model(tok[:, None], feed_pos[:, None], cache)
    return i + 1, cache, new_logits[:, 0], pos + 1, lengths, stopped, toks, lps, span

  state = (jnp.zeros((), jnp.int32), cache, logits, next_pos.astype(jnp.int32), jnp.zeros((B,), jnp.int32),
           done, out_tok, out_lp, span)
  if early_exit:
    state = jax.lax.while_loop(cond, body, state)
  else:                                                                # a known trip count
    state = jax.lax.fori_loop(0, max_new_tokens, lambda _, st: body(st), state)
  _, cache, logits, pos, lengths, finished, toks, lps, span = state
  # `finished` is set only by a stop token or a closed answer span (sampled, or forced before the call): rows
  # that hit a cap are not.
  return toks, lps, lengths, finished, cache, logits, pos, span


@sharding.sharded_jit(in_specs=(CACHE,), out_specs=CACHE, static_argnames=("slots",))
def _grow(cache, *, slots: int):
  """The cache with `slots` slots per row: the new ones empty (k, v 0; pos -1); a shared prefix unchanged."""
  extra = slots - cache["pos"].shape[1]
  kv = lambda a: jnp.pad(a, ((0, 0), (0, 0), (0, extra), (0, 0)))
  return {**cache, "k": tuple(map(kv, cache["k"])), "v": tuple(map(kv, cache["v"])),
          "pos": jnp.pad(cache["pos"], ((0, 0), (0, extra)), constant_values=-1)}


def cache_slots(need: int, full: int) -> int:
  """Slots of a decode cache that must hold `need` slots and never more than `full`: `need` rounded up to a
  multiple of GROW (few shapes), at most `full`."""
  return min(full, -(-need // GROW) * GROW)


@sharding.sharded_jit(in_specs=(REPLICATED, CACHE, ROWS, ROWS, ROWS), out_specs=(CACHE, ROWS, ROWS, ROWS))
def _take_rows(rows, cache, logits, next_pos, keys):
  """Rows `rows` (int32 [B']) of a decode state: the live rows of a batch, compacted."""
  return decoder.map_cache_rows(lambda a: a[rows], cache), logits[rows], next_pos[rows], keys[rows]


def decode_compacting(params, cache, logits, next_pos, keys, done, caps, *, graphdef, sp, max_new_tokens,
                       stop_ids, pad_id, segment, min_rows, progress=None, early_exit=None, span=None, table=None):
  """`decode` in segments of `segment` steps; once at most half of a batch's rows are still generating, the
  live rows move to a batch half as large (down to `min_rows`), so rows that stopped early cost nothing.
  The cache grows as the rows generate (`cache_slots`: a multiple of GROW slots, up to its `end` + N): a
  step's attention reads the slots written so far, not the whole cap's (the caller allocates the first
  segment's).

  A row's tokens depend only on its own key (step i of its stream is step i whatever the segment), so the
  output equals one `decode` call up to float round-off of the smaller batches. Returns numpy tokens [B, N],
  logprobs [B, N], lengths [B], finished [B] as `decode`. `progress(n)` (optional) is called after each segment
  with the number of tokens it decoded (a stage bar's update). `span` (int32 [B] automaton states) and `table`
  (int8 [S, V], on device): `decode`'s answer stop; each row's state is kept across segments.
  """
  B, N = logits.shape[0], max_new_tokens
  toks, lps = np.full((B, N), pad_id, np.int32), np.zeros((B, N), np.float32)
  lengths, finished = np.zeros(B, np.int32), np.asarray(done).copy()
  caps = np.full(B, N, np.int32) if caps is None else np.minimum(np.asarray(caps), N).astype(np.int32)
  spans = None if table is None else np.asarray(span, np.int32).copy()
  slots = np.arange(B)                                   # original row of each slot of the current batch
  live = np.ones(B, bool)                                # slot holds a real row (not a filler)
  mesh = sharding.mesh_of(params)
  early_exit = early_exit_default() if early_exit is None else early_exit
  end = int(cache["end"])
  full = end + N
  for start in range(0, N, segment):
    steps = min(segment, N - start)
    if cache["pos"].shape[1] < end + steps:              # this segment writes slots [end, end + steps) at most
      cache = _grow(cache, slots=cache_slots(end + steps, full))
      COUNTERS["cache_growths"] += 1
    rem = np.where(live, caps[slots] - lengths[slots], 0).astype(np.int32)
    stopped = ~live | finished[slots]
    # Early exit: every segment has one shape (rows stop at their caps); else exactly the steps left (the last
    # segment never runs past the cap, so the cache needs no room beyond it).
    seg = decode(params, cache, logits, next_pos, keys, stopped, rem, np.int32(start),
                 None if table is None else spans[slots], table, graphdef=graphdef, sp=sp,
                 max_new_tokens=segment if early_exit else steps, stop_ids=stop_ids, pad_id=pad_id,
                 early_exit=early_exit)
    t, lp, n, f = (np.asarray(a) for a in seg[:4])
    cache, logits, next_pos = seg[4:7]
    if table is not None:
      spans[slots[live]] = np.asarray(seg[7])[live]
    end = int(cache["end"])
    real = slots[live]
    toks[real, start:start + steps], lps[real, start:start + steps] = t[live, :steps], lp[live, :steps]
    lengths[real] += n[live]
    finished[real] |= f[live]
    if progress is not None:
      progress(int(n[live].sum()))
    going = live & ~finished[slots] & (lengths[slots] < caps[slots])
    if not going.any():
      break
    size = sharding.pad_rows(max(bucket(int(going.sum()), 1), min_rows), mesh)
    if size <= len(slots) // 2:                          # compact: live rows first, then fillers (stopped)
      keep = np.concatenate([np.flatnonzero(going), np.flatnonzero(~going)])[:size]
      cache, logits, next_pos, keys = _take_rows(keep.astype(np.int32), cache, logits, next_pos, keys)
      COUNTERS["compactions"] += 1
      slots, live = slots[keep], going[keep]
  return toks, lps, lengths, finished


def bucket(n: int, minimum: int = 8) -> int:
  """Smallest power of two >= n (>= minimum): few distinct shapes, so few compiles."""
  return max(minimum, 1 << max(0, (n - 1).bit_length()))


def left_pad(seqs: Sequence[Sequence[int]], width: int, pad_id: int) -> tuple[np.ndarray, np.ndarray]:
  tokens = np.full((len(seqs), width), pad_id, np.int32)
  positions = np.full((len(seqs), width), -1, np.int32)
  for r, s in enumerate(seqs):
    if len(s):
      tokens[r, width - len(s):] = s
      positions[r, width - len(s):] = np.arange(len(s))
  return tokens, positions


def _check_prompts(prompts, config: decoder.Config, max_new_tokens: int):
  if not len(prompts):
    raise ValueError("prompts is empty: pass a list of token-id lists")
  if max_new_tokens <= 0:
    raise ValueError(f"max_new_tokens must be > 0, got {max_new_tokens}")
  longest = max(len(p) for p in prompts)
  if min(len(p) for p in prompts) == 0:
    raise ValueError("every prompt needs at least one token")
  if longest + max_new_tokens > config.max_seq_len:
    raise ValueError(f"prompt of {longest} tokens + max_new_tokens={max_new_tokens} exceeds the model's context "
                     f"({config.max_seq_len}); shorten the prompt or lower max_new_tokens")


@sharding.sharded_jit(in_specs=(PARAMS, ROWS, ROWS, REPLICATED), out_specs=(ROWS, CACHE),
                      static_argnames=("graphdef", "cache_size"))
def _prefill_rows(params, tokens, positions, rows, *, graphdef, cache_size: int):
  """`prefill` of distinct prompts [U, P], then row b of the result copies prompt rows[b] (int32 [B])."""
  logits, cache = prefill.fun(params, tokens, positions, graphdef=graphdef, cache_size=cache_size)
  return logits[rows], decoder.map_cache_rows(lambda a: a[rows], cache)


def sample(model, prompts: Sequence[Sequence[int]], *, key: jax.Array | None = None, max_new_tokens: int,
           temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0, stop_ids=None,
           row_ids: Sequence[int] | None = None, keys: jax.Array | None = None, pad_id: int = 0,
           segment: int = SEGMENT, min_rows: int = MIN_ROWS, progress=None, early_exit: bool | None = None) -> Samples:
  """Sample continuations of `prompts` (lists of token ids) with `model` (`opd_jax.models.Model`).

  Each distinct prompt is prefilled once (n rollouts of one question cost one prefill); rows then decode
  together, and rows that stopped leave the batch (see `segment`).

  Args:
    key: a jax PRNG key; row r uses fold_in(key, row_ids[r]) (default row id r).
    max_new_tokens: N, the token cap (the output has exactly N columns).
    temperature, top_p, top_k: see `sample_logits`; temperature 0 = greedy.
    stop_ids: token ids that end a row (default: the model's stop ids).
    row_ids: stable int ids of the rows (so a row samples the same wherever it sits).
    keys: per-row keys [B] (e.g. from `row_keys`) instead of `key` and `row_ids`: rows of several questions,
      each with its own key, in one call.
    segment, min_rows: decode in segments of `segment` steps, moving the rows still generating to a smaller
      batch (>= min_rows) once at most half are (`decode_compacting`).
    progress: optional callable(n tokens decoded), called after each segment (stages.bar's update).
    early_exit: `decode`'s (None: `early_exit_default()`); the samples are the same either way.
  Returns:
    `Samples` (numpy): tokens [B, N], logprobs [B, N] (sampled policy, see module docstring), lengths [B],
    finished [B].
  Raises:
    ValueError: empty prompts, bad sampling settings, prompt + N longer than the model's context, neither or
      both of `key` and `keys`, or `keys` not of length B.
  """
  config, params = model.config, model.params
  sp = SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k)
  _check_prompts(prompts, config, max_new_tokens)
  stop = tuple(sorted(set(model.stop_ids if stop_ids is None else stop_ids)))
  B, mesh = len(prompts), sharding.mesh_of(params)
  if (key is None) == (keys is None):
    raise ValueError("pass exactly one of key (with optional row_ids) and keys (one key per prompt)")
  if keys is None:
    keys = row_keys(key, jnp.asarray(np.arange(B) if row_ids is None else row_ids, jnp.uint32))
  elif keys.shape != (B,):
    raise ValueError(f"keys must hold one key per prompt: shape ({B},), got {keys.shape}")
  distinct: dict[tuple[int, ...], int] = {}
  rows = [distinct.setdefault(tuple(p), len(distinct)) for p in prompts]
  U, Bp = len(distinct), sharding.pad_rows(bucket(B, 1), mesh)
  Up, P = sharding.pad_rows(bucket(U, 1), mesh), bucket(max(len(p) for p in prompts), 16)
  tokens, positions = left_pad(list(distinct) + [[pad_id]] * (Up - U), P, pad_id)
  positions[U:] = -1                                                   # dummy prompts: nothing to attend to
  rows = np.array(rows + [0] * (Bp - B), np.int32)                     # dummy rows copy row 0, then stay done
  keys = jnp.concatenate([keys, jnp.repeat(keys[:1], Bp - B)])      # dummy rows: done, never sample
  next_pos = np.array([len(p) for p in prompts] + [1] * (Bp - B), np.int32)
  COUNTERS["prefill_calls"] += 1
  COUNTERS["prefill_rows"] += U
  logits, cache = _prefill_rows(params, tokens, positions, rows, graphdef=model.graphdef,
                                cache_size=cache_slots(P + min(segment, max_new_tokens), P + max_new_tokens))
  out = decode_compacting(params, cache, logits, next_pos, keys, np.arange(Bp) >= B, None,
                           graphdef=model.graphdef, sp=sp, max_new_tokens=max_new_tokens, stop_ids=stop,
                           pad_id=pad_id, segment=segment, min_rows=min_rows, progress=progress,
                           early_exit=early_exit)
  return Samples(*(a[:B] for a in out))


