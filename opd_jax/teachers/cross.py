"""A teacher with another tokenizer than the student's: its probability of the student's candidates, by bytes.

A view (teacher, context) whose teacher reads other ids than the student ("cross-tokenizer view";
`models.tokenizer_differences` decides, or `config.scoring.cross_tokenizer.force`) cannot read the student's
tokens. It reads text instead: at position t of a rollout, the node's text x = bytes(y_<t) (the student's
tokens' bytes; special tokens write none), and for each candidate k of the position the teacher's probability
of the event "its continuation of x writes k" (`cross_tree.py`: the sums, the exact and canonical modes). The
teacher reads its own chat rendering of the view's context, then its own tokens of the whole response text
once (one forward, its KV cache kept as a shared prefix), and every teacher state the candidates need is a short
branch off that cache at the node's boundary (`decoder.with_prefix` with a per-row limit: the branch sees the
prefix up to the boundary only), so the extra cost per node is a few tokens, not a pass over the prompt.

Boundary: x's tokens in the teacher's tokenization of the whole response, up to the last token end at or before
`ByteVocab.stable_start` of x (after the last special token the teacher reads): no continuation of x changes the
teacher's tokens before it (checked against the teacher's own pre-tokenizer, whitespace rules and added tokens
included); the tail, the bytes between the boundary and t, is asked about together with the candidate.

The candidates' events, disjoint (docs/usage.md, "Teachers with another tokenizer"):
  exact      A(k) = the teacher's continuation from the boundary begins with tail + bytes(k), over every teacher
             tokenization; when bytes(k) begins bytes(k') (">" and "></"), A(k') lies inside A(k), so k keeps
             A(k) less the A(k') of the candidates that extend it (`cross_tree.exclusive`): q(k) is the
             probability that the teacher writes k's bytes and does not go on to write a longer candidate's;
  canonical  A(k) = the teacher's continuation begins with its canonical tokens of tail + bytes(k) (one token
             path), less the paths of the candidates that extend that path;
  q(k) = P(A(k) minus the nested events) / P(the continuation begins with the tail), the denominator exact in
  both modes (every path writing the tail: a canonical path of tail + bytes(k) is one of them, so log q <= 0).
  Candidates with one event (equal bytes; stop tokens mapped to the same teacher ids) share its probability
  equally. So the q of a node's candidates are probabilities of disjoint events: their sum, q_mass, is <= 1
  (up to pruning's bound). In nats, float64, per teacher temperature (softmax(z / T) at every teacher state).

Special tokens (`specials`): the student's stop tokens are the teacher's stop ids, another control token is the
teacher's token of the same text if it has one (read in the prefix, asked for as a candidate: the tail, ending
on a token end, then one of those ids; each teacher id an event of its own, shared by the candidates mapped to
it), else it writes nothing in the prefix and has log q = -inf as a candidate (the teacher cannot write another
model's control token); -inf also for bytes the teacher cannot write.

NaN, with a reason per query (`Result.reasons`, records.NAN_REASONS): records.TEACHER_NORMALIZES_TEXT where the
text before the boundary is text the teacher's normalizer changes (`ByteVocab.reads_as_is`: NFC and an Ohm sign
or a decomposed "é"): its tokenizer never gives it such text to read, so it is not conditioned on it (the
positions before it, and the other rollouts, keep their values; bytes it would normalize can still be asked
about as a candidate: the teacher writes bytes through its tokens, never through its normalizer);
records.TEACHER_STATE_BOUND where a string needs more teacher states than `max_tree_nodes` (the exact sums:
every string in exact mode, the tails in canonical mode).
"""
from __future__ import annotations

import bisect
import dataclasses
import functools
import math
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from opd_jax import records
from opd_jax.decode import sampling
from opd_jax.models import decoder
from opd_jax.models.token_bytes import ByteVocab, byte_vocab
from opd_jax.teachers import cross_tree


@dataclasses.dataclass(frozen=True, kw_only=True)
class Result:
  """`candidate_logprobs`'s output and what it ran."""
  logq: list[list[np.ndarray]]      # [rollout][query] float64 [n_temperatures, K]: log q(k | x) per candidate
  reasons: list[list[str]]          # [rollout][query] "" or why the query's q are NaN (module docstring)
  states: int                       # teacher states evaluated (distinct (rollout, boundary, path)), roots included
  branch_rows: int                  # branch rows run off the prefix caches
  branch_tokens: int                # tokens fed in them (padding included)
  prefix_tokens: int                # tokens of the teacher's prompt + response passes (padding included)
  teacher_calls: int = 0            # calls of the teacher's body (the pass, then branch batches)
  head_calls: int = 0               # calls of its output head (batches of states)
  too_many: int                     # candidates left NaN: more than max_tree_nodes states
  normalized: int = 0               # queries left NaN: the text before the boundary is normalized by the teacher
  pruned_bound: float = 0.0         # exact sums: the largest bound on a string's relative error from pruning
  clipped: float = 0.0              # the largest amount a q was clipped by into [0, 1] (pruning's error)


@dataclasses.dataclass(frozen=True)
class _Rollout:
  text: bytes                       # the response's bytes (special tokens write none)
  offsets: list[int]                # [L + 1] byte offset of the text before each student token
  marks: list[tuple[int, int]]      # (byte offset, student position) of the special tokens the teacher reads
  ids: list[int]                    # the teacher's tokens of the response
  ends: list[int]                   # their byte ends (a special token's is its offset)
  starts: list[int]                 # [L + 1] the stable start of the text before each student token
  as_is: bool                       # the teacher's normalizer leaves the whole text unchanged


def specials(sv: ByteVocab, tv: ByteVocab, student_stops, teacher_stops) -> dict[int, tuple[int, ...]]:
  """Student special id -> the teacher ids that write it: the student's stop tokens -> the teacher's stop ids;
  another special token -> the teacher's special tokens of the same text (e.g. <|im_start|> in two ChatML
  tokenizers); () when the teacher has none (it cannot write that control token)."""
  by_text: dict[str, list[int]] = {}
  for i in tv.special:
    by_text.setdefault(tv.tokenizer.convert_ids_to_tokens(int(i)), []).append(int(i))
  out = {}
  for i in sv.special:
    out[int(i)] = (tuple(teacher_stops) if i in student_stops
                   else tuple(by_text.get(sv.tokenizer.convert_ids_to_tokens(int(i)), ())))
  return out


def _rollout(sv: ByteVocab, tv: ByteVocab, response: Sequence[int], special: dict) -> _Rollout:
  offsets, marks, ids, ends, run = [0], [], [], [], []

  def flush():
    if run:
      got = tv.encode(b"".join(run))
      ids.extend(got)
      ends.extend((ends[-1] if ends else 0) + np.cumsum([len(tv.pieces[i]) for i in got]).astype(int))
      run.clear()

  for t, y in enumerate(response):
    piece = sv.pieces[int(y)]
    if piece is None:
      mapped = special.get(int(y), ())
      if mapped:                                  # the teacher reads the same control token there
        flush()
        ids.append(mapped[0])
        ends.append(offsets[-1])
        marks.append((offsets[-1], t))
      offsets.append(offsets[-1])
    else:
      run.append(piece)
      offsets.append(offsets[-1] + len(piece))
  flush()
  text = b"".join(sv.pieces[int(y)] or b"" for y in response)
  # Stable starts, incrementally: the start s of x_t is a pre-token start of every continuation, and a split
  # restarts at a pre-token start, so x_(t+1)'s is s + the stable start of its text from s (or from a special
  # token the teacher reads, where its tokenization restarts).
  starts, s = [], 0
  for t, o in enumerate(offsets):
    s = max([s] + [x for x, u in marks if u < t])
    s += tv.stable_start(text[s:o])
    starts.append(s)
  return _Rollout(text, offsets, marks, ids, [int(e) for e in ends], starts, tv.reads_as_is(text))


def boundary(tv: ByteVocab, r: _Rollout, t: int) -> tuple[int, bytes]:
  """(b, tail): the teacher tokens kept before position t's text (r.ids[:b]) and the bytes after them. The
  boundary is the last teacher token end at or before the text's stable start (`ByteVocab.stable_start`, after
  the last special token the teacher reads)."""
  del tv                                                    # the stable starts are the rollout's (`_rollout`)
  o, s = r.offsets[t], r.starts[t]
  b = bisect.bisect_right(r.ends, s) - sum(1 for x, u in r.marks if u >= t and x <= s)  # not its later specials
  start = r.ends[b - 1] if b else 0
  return b, r.text[start:o]


def candidate_logprobs(student: Any, teacher: Any, teacher_prompts: Sequence[Sequence[int]],
                       responses: Sequence[Sequence[int]], queries: Sequence[Sequence[tuple[int, Sequence[int]]]],
                       *, temperatures: Sequence[float] = (1.0,), mode: str = "exact", max_tree_nodes: int = 512,
                       prune: float = 10.0, batch_rows: int = 64) -> Result:
  """The teacher's log q of each student candidate at some positions of some rollouts (module docstring).

  Args:
    student, teacher: `models.Model`s (byte-level BPE tokenizers: `token_bytes.byte_vocab`).
    teacher_prompts: per rollout, the teacher's token ids of its chat-rendered context (>= 1 token).
    responses: per rollout, the student's response ids [L].
    queries: per rollout, (position t in [0, L), student candidate ids) pairs; a query's candidates are one
      node's: their events are made disjoint together (a candidate's q depends on the others').
    temperatures: teacher temperatures T (softmax(z / T)); mode: "exact" or "canonical" (`cross_tree`).
    max_tree_nodes: the exact sums' bound on teacher states per string; batch_rows: rows per teacher call.
    prune: exact sums: a teacher state is evaluated when its path's log-probability is within `prune` nats of
      the string's canonical log P (math.inf: every state); the left-out paths' mass bounds each string's
      relative error (`Result.pruned_bound`).
  Returns:
    `Result`; logq[r][j][i, c] for rollout r, query j, temperature i, candidate c; NaN with reasons[r][j].
  Raises:
    ValueError: a tokenizer is not byte-level, a position out of range, an empty teacher prompt.
  """
  if mode not in cross_tree.MODES:
    raise ValueError(f"unknown mode {mode!r}: one of {cross_tree.MODES}")
  sv, tv = byte_vocab(student.tokenizer), byte_vocab(teacher.tokenizer)
  special = specials(sv, tv, set(int(i) for i in student.stop_ids), tuple(int(i) for i in teacher.stop_ids))
  rolls = [_rollout(sv, tv, resp, special) for resp in responses]
  n_t = len(temperatures)
  # Phase 1: each query's events (per candidate, its atoms: (data, then) strings) and the strings to sum.
  strings: dict[tuple, None] = {}                                    # (rollout, b, data, then), in order
  plan = []                                                          # [rollout][query] (b, tail, events)
  for r, (roll, qs) in enumerate(zip(rolls, queries)):
    rows = []
    for t, cands in qs:
      if not 0 <= t < len(roll.offsets) - 1:
        raise ValueError(f"position {t} outside the response of rollout {r} (length {len(roll.offsets) - 1})")
      b, tail = boundary(tv, roll, t)
      if not roll.as_is and not tv.reads_as_is(roll.text[:roll.offsets[t] - len(tail)]):
        rows.append((b, None, [[] for _ in cands]))                  # records.TEACHER_NORMALIZES_TEXT
        continue
      events = []
      for k in cands:
        k = int(k)
        piece = sv.pieces[k] if 0 <= k < len(sv.pieces) else None
        events.append([(tail + piece, None)] if piece is not None else [(tail, (i,)) for i in special.get(k, ())])
      rows.append((b, tail, events))
      for st in [(tail, None)] + [a for ev in events for a in ev]:
        strings.setdefault((r, b) + st, None)
    plan.append(rows)
  ev = _Teacher(teacher, tv, teacher_prompts, rolls, strings, temperatures, batch_rows)
  # Phase 2: the canonical tokens' states of every string (the canonical sums, and the exact walks' lower
  # bounds for pruning).
  canonical: dict[tuple, set] = {}
  for st in strings:
    for path in cross_tree.needed(tv, st[2], st[3], mode="canonical", max_nodes=max_tree_nodes):
      canonical.setdefault(st, set()).add(path)
  ev.run({(st[0], st[1], path) for st, paths in canonical.items() for path in paths})
  # Phase 3: the exact sums (every string in exact mode, the tails in canonical mode), then each string's log P.
  tails = {(r, b, tail, None) for r, rows in enumerate(plan) for b, tail, _ in rows if tail is not None}
  walked = strings if mode == "exact" else {st: None for st in strings if st in tails}
  reached, failed, bounds = _exact_walks(ev, tv, walked, prune, max_tree_nodes)

  @functools.cache
  def logp(st, how):
    if how == "exact" and st in failed:
      return np.full(n_t, math.nan)
    return np.array([cross_tree.log_prob(tv, st[2], st[3], functools.partial(ev.look, st[0], st[1], i),
                                         mode=how, max_nodes=max_tree_nodes, known=reached.get(st) if how ==
                                         "exact" else None) for i in range(n_t)])

  # Phase 4: per query, q(A) / q(tail) of each atom, the nested atoms' mass taken out, shared by candidates.
  key_of = ((lambda a: a) if mode == "exact" else
            (lambda a: tuple(tv.encode(a[0]) if a[0] else []) + (a[1] or ())))
  contains = _contains_bytes if mode == "exact" else _contains_path
  out, reasons, clipped = [], [], 0.0
  for r, rows in enumerate(plan):
    per_query, why = [], []
    for b, tail, events in rows:
      if tail is None:
        per_query.append(np.full((n_t, len(events)), math.nan))
        why.append(records.TEACHER_NORMALIZES_TEXT)
        continue
      atoms = list(dict.fromkeys(a for e in events for a in e))
      den = logp((r, b, tail, None), "exact")
      with np.errstate(invalid="ignore"):
        lq = np.array([np.where(v == -math.inf, -math.inf, v - den) for v in
                       (logp((r, b) + a, mode) for a in atoms)]).reshape(len(atoms), n_t)
      over = np.nan_to_num(np.max(lq, initial=0.0), nan=0.0)             # a q above 1: pruning's error
      excl, cut = cross_tree.exclusive([key_of(a) for a in atoms], np.minimum(lq, 0.0), contains)
      clipped = max(clipped, float(np.expm1(over)), cut)
      holders = {a: sum(a in e for e in events) for a in atoms}             # candidates sharing the event
      with np.errstate(invalid="ignore"):                                  # NaN (state bound) stays NaN
        logq = np.array([np.logaddexp.reduce([excl[atoms.index(a)] - math.log(holders[a]) for a in e], axis=0)
                         if e else np.full(n_t, -math.inf) for e in events]).reshape(len(events), n_t)
      per_query.append(logq.T)
      why.append(records.TEACHER_STATE_BOUND if np.isnan(logq).any() else "")
    out.append(per_query)
    reasons.append(why)
  too_many = sum(int(np.isnan(a[0]).sum()) for q, w in zip(out, reasons) for a, y in zip(q, w)
                 if y == records.TEACHER_STATE_BOUND)
  return Result(logq=out, reasons=reasons, states=len(ev.values), too_many=too_many,
                normalized=sum(y == records.TEACHER_NORMALIZES_TEXT for w in reasons for y in w),
                pruned_bound=max(bounds.values(), default=0.0), clipped=clipped, **ev.stats())


def _contains_bytes(a, b) -> bool:
  """Exact mode: (data, then) atom b's event lies inside a's (b != a): a's bytes begin b's, a ends on no id."""
  return a != b and a[1] is None and b[0].startswith(a[0])


def _contains_path(a, b) -> bool:
  """Canonical mode: token path b extends token path a."""
  return len(a) < len(b) and b[:len(a)] == a


def _exact_walks(ev, tv, strings, prune: float, max_nodes: int):
  """The exact sums' teacher states, level by level from the boundary: a state is evaluated when its path's
  log-probability is within `prune` nats of the string's canonical log P (a lower bound of its exact P), for
  some temperature; the mass of the paths left out bounds the error (`Result.pruned_bound`).
  Returns (reached states per string, strings over max_nodes states, relative error bound per string)."""
  n_t = len(ev.temperatures)
  lower = {st: np.array([cross_tree.log_prob(tv, st[2], st[3], functools.partial(ev.look, st[0], st[1], i),
                                             mode="canonical") for i in range(n_t)]) for st in strings}
  reached = {st: {()} for st in strings}
  left_out = {st: np.full(n_t, -math.inf) for st in strings}
  failed = set()
  frontier = {st: [((), np.zeros(n_t))] for st in strings}
  while frontier:
    ev.run({(st[0], st[1], path) for st, items in frontier.items() for path, _ in items})
    nxt = {}
    for st, items in frontier.items():
      r, b, data, then = st
      for path, lp in items:
        rest = data[len(tv.decode(path)):]
        for w, _ in cross_tree.step(tv, rest, then)[1]:
          child = path + (w,)
          lp_c = lp + np.array([ev.look(r, b, i, path, ("ids", (w,))) for i in range(n_t)])
          if np.any(lp_c >= lower[st] - prune):
            reached[st].add(child)
            nxt.setdefault(st, []).append((child, lp_c))
          else:
            left_out[st] = np.logaddexp(left_out[st], lp_c)
      if len(reached[st]) > max_nodes:
        failed.add(st)
        nxt.pop(st, None)
    frontier = nxt
  bounds = {}
  for st in strings:
    if st not in failed and np.all(np.isfinite(lower[st])):
      bounds[st] = float(np.max(np.exp(left_out[st] - lower[st])))
  return reached, failed, bounds


# ----------------------------------------------------------------------------------------------------------
# The teacher: one pass over prompt + response per rollout (kept as a shared prefix), branches off it.

def _bucket(n: int, floor: int = 1) -> int:
  return max(floor, 1 << max(0, (max(n, 1) - 1).bit_length()))


_ROWS = 8        # the fewest rows of a branch or head call (fewer shapes to compile; a padded row costs little)


@functools.partial(jax.jit, static_argnames=("graphdef",))
def _prefix_pass(params, p_tokens, p_positions, prompt_of, r_tokens, r_positions, *, graphdef):
  """The teacher over each distinct prompt once (p_tokens [Gp, Pw], left-padded), then each rollout's response
  tokens (r_tokens [G, Tw]) on its prompt (prompt_of [G]). Returns the hidden states [G, Pw + Tw, D] of the rows
  [prompt; response] and their KV cache as one prefix per rollout (the branches' shared prefix; the prompt's
  keys and values are gathered per rollout: bytes, not FLOPs)."""
  model = decoder.merge(graphdef, params)
  h_p, cache_p = model.hidden_states(p_tokens, p_positions, model.init_cache(*p_tokens.shape))
  prompts = {"k": cache_p["k"], "v": cache_p["v"], "pos": cache_p["pos"]}
  own = decoder.with_prefix(model.init_cache(*r_tokens.shape), prompts, prompt_of)
  h_r, cache_r = model.hidden_states(r_tokens, r_positions, own)
  cat = lambda a, b: jnp.concatenate([a[prompt_of], b], axis=2)
  prefix = {"k": tuple(cat(a, b) for a, b in zip(cache_p["k"], cache_r["k"])),
            "v": tuple(cat(a, b) for a, b in zip(cache_p["v"], cache_r["v"])),
            "pos": jnp.concatenate([cache_p["pos"][prompt_of], cache_r["pos"]], axis=1)}
  return jnp.concatenate([h_p[prompt_of], h_r], axis=1), prefix


@functools.partial(jax.jit, static_argnames=("graphdef",))
def _branch_pass(params, prefix, k_own, v_own, pos_own, tokens, positions, group, limit, *, graphdef):
  """One new token per branch row: row n reads prefix group[n] up to position limit[n], then its own earlier
  tokens' keys and values (k_own, v_own: L arrays [N, K, S - 1, Dh], pos_own [N, S - 1], -1 = empty), then
  tokens [N, 1] at positions [N, 1]. Returns (hidden states [N, D], the new token's keys and values: L arrays
  [N, K, Dh] each)."""
  model = decoder.merge(graphdef, params)
  S = pos_own.shape[1] + 1
  pad = lambda x: jnp.pad(x.astype(model.embed.dtype), ((0, 0), (0, 0), (0, 1), (0, 0)))
  cache = {"k": tuple(pad(x) for x in k_own), "v": tuple(pad(x) for x in v_own),
           "pos": jnp.pad(pos_own, ((0, 0), (0, 1)), constant_values=-1), "end": jnp.asarray(S - 1, jnp.int32)}
  h, cache = model.hidden_states(tokens, positions, decoder.with_prefix(cache, prefix, group, limit))
  return h[:, 0], tuple(x[:, :, S - 1] for x in cache["k"]), tuple(x[:, :, S - 1] for x in cache["v"])


@functools.partial(jax.jit, static_argnames=("graphdef", "temperatures"))
def _log_softmax(params, h, *, graphdef, temperatures):
  """[n_T, M, N_real] fp32 log softmax(z / T) at hidden states h [M, D], ids past the real vocabulary dropped."""
  model = decoder.merge(graphdef, params)
  z = model.head(h)[:, :model.config.real_vocab_size]
  return jnp.stack([sampling.policy_logprobs(z, sampling.SamplingParams(temperature=float(t)))
                    for t in temperatures])


class _Teacher:
  """The teacher's side of one `candidate_logprobs` call: the pass over [prompt; its tokens of the response] per
  rollout, kept as a shared prefix cache, and `run`, which evaluates teacher states (branches off that cache at
  their boundary) and keeps, per state, the sums over its next-token distribution that any string through it
  reads (`values[(r, b, path)][key]` = float64 [n_T])."""

  def __init__(self, teacher, tv, teacher_prompts, rolls, strings, temperatures, batch_rows):
    self.teacher, self.tv, self.batch_rows = teacher, tv, batch_rows
    self.temperatures = tuple(float(t) for t in temperatures)
    self.values: dict = {}
    self.by_root: dict = {}
    for st in strings:
      canon = (tv.encode(st[2]) if st[2] else []) + ([st[3][0]] if st[3] else [])
      self.by_root.setdefault(st[:2], []).append((st[2], st[3], canon))
    self.ids = [x.ids for x in rolls]
    self.kv: dict = {}                       # branch state -> its last token's (keys, values) [L, K, Dh] each
    self.P = [len(p) for p in teacher_prompts]
    if min(self.P, default=1) < 1:
      raise ValueError("every teacher prompt needs at least one token")
    self.Pw = _bucket(max(self.P, default=1))
    Tw = _bucket(max((len(x.ids) for x in rolls), default=1))
    Gb = _bucket(len(rolls))
    distinct = {}
    prompt_of = np.zeros(Gb, np.int32)
    for r, p in enumerate(teacher_prompts):                   # each distinct prompt once (a question's rollouts
      prompt_of[r] = distinct.setdefault(tuple(p), len(distinct))           # share theirs)
    Gp = _bucket(len(distinct))
    p_tokens = np.zeros((Gp, self.Pw), np.int32)
    p_positions = np.full((Gp, self.Pw), -1, np.int32)
    for p, g in distinct.items():
      p_tokens[g, self.Pw - len(p):] = p
      p_positions[g, self.Pw - len(p):] = np.arange(len(p))
    r_tokens = np.zeros((Gb, Tw), np.int32)
    r_positions = np.full((Gb, Tw), -1, np.int32)
    for r, (p, x) in enumerate(zip(teacher_prompts, rolls)):
      r_tokens[r, :len(x.ids)] = x.ids
      r_positions[r, :len(x.ids)] = len(p) + np.arange(len(x.ids))
    h_full, self.prefix = _prefix_pass(teacher.params, p_tokens, p_positions, prompt_of, r_tokens, r_positions,
                                       graphdef=teacher.graphdef)
    self.h_full = np.asarray(h_full)
    self.counts = {"branch_rows": 0, "branch_tokens": 0, "prefix_tokens": int(p_tokens.size + r_tokens.size),
                   "teacher_calls": 1, "head_calls": 0}

  def stats(self) -> dict:
    return dict(self.counts)

  def look(self, r, b, i, path, key) -> float:
    return self.values[(r, b, path)][key][i]

  def _keys(self, r, b, path) -> set:
    """Every key a string of root (r, b) reads at state `path`: its canonical token there, and the exact sum's
    (`cross_tree.step`) where the path's bytes begin the string."""
    done = self.tv.decode(path)
    keys = set()
    for data, then, canon in self.by_root[(r, b)]:
      if len(path) < len(canon) and tuple(canon[:len(path)]) == path:
        keys.add(("ids", (canon[len(path)],)) if len(path) < len(canon) - 1 or not then else ("ids", tuple(then)))
      if data.startswith(done) and (len(done) < len(data) or then is not None):
        keys.update(cross_tree.step(self.tv, data[len(done):], then)[0])
    return keys

  def run(self, states) -> None:
    """Evaluate the states (r, b, path) not evaluated yet."""
    todo = sorted(s for s in set(states) if s not in self.values)
    if not todo:
      return
    teacher, D = self.teacher, self.h_full.shape[-1]
    hs = np.zeros((len(todo), D), self.h_full.dtype)
    branches = []
    for i, (r, b, path) in enumerate(todo):     # a path along the response's own teacher tokens is in the pass
      if tuple(self.ids[r][b:b + len(path)]) == path:
        hs[i] = self.h_full[r, self.Pw + b + len(path) - 1]
      else:
        branches.append((i, todo[i]))
    # Branches, shallowest first: each row feeds its state's last token; the tokens before it are read from the
    # prefix cache while they follow the response's teacher tokens (limit), then from the keys and values kept
    # of its evaluated ancestors (`self.kv`).
    by_depth: dict = {}
    for x in branches:
      by_depth.setdefault(len(x[1][2]), []).append(x)
    chunks = [level[i:i + self.batch_rows] for _, level in sorted(by_depth.items())
              for i in range(0, len(level), self.batch_rows)]
    for chunk in chunks:
      rows = []
      for i, (r, b, path) in chunk:
        on = 0
        while on < len(path) - 1 and b + on < len(self.ids[r]) and self.ids[r][b + on] == path[on]:
          on += 1
        rows.append((i, r, b, path, on, [(r, b, path[:j + 1]) for j in range(on, len(path) - 1)]))
      Nb, S1 = _bucket(len(chunk), _ROWS), _bucket(max(len(x[5]) for x in rows) + 1) - 1
      L = self.teacher.config.n_layers
      K, Dh = self.teacher.config.n_kv_heads, self.teacher.config.head_dim
      k_own = np.zeros((L, Nb, K, max(S1, 0), Dh), np.float32)
      v_own = np.zeros_like(k_own)
      pos_own = np.full((Nb, max(S1, 0)), -1, np.int32)
      tok = np.zeros((Nb, 1), np.int32)
      pos = np.full((Nb, 1), -1, np.int32)
      group = np.zeros(Nb, np.int32)
      limit = np.full(Nb, -1, np.int32)
      for n, (i, r, b, path, on, anc) in enumerate(rows):
        for j, a in enumerate(anc):                        # right-aligned before the new token's slot
          slot = S1 - len(anc) + j
          k_own[:, n, :, slot], v_own[:, n, :, slot] = self.kv[a]
          pos_own[n, slot] = self.P[r] + b + on + j
        tok[n, 0], pos[n, 0] = path[-1], self.P[r] + b + len(path) - 1
        group[n], limit[n] = r, self.P[r] + b + on - 1
      h, k_new, v_new = _branch_pass(teacher.params, self.prefix, tuple(k_own), tuple(v_own), pos_own, tok, pos,
                                     group, limit, graphdef=teacher.graphdef)
      h = np.asarray(h)
      k_new, v_new = np.stack([np.asarray(x) for x in k_new]), np.stack([np.asarray(x) for x in v_new])
      for n, (i, r, b, path, _, _) in enumerate(rows):
        hs[i] = h[n]
        self.kv[(r, b, path)] = (k_new[:, n], v_new[:, n])
      self.counts["branch_rows"] += len(chunk)
      self.counts["branch_tokens"] += Nb
      self.counts["teacher_calls"] += 1
    for start in range(0, len(todo), self.batch_rows):
      chunk = todo[start:start + self.batch_rows]
      hb = np.zeros((_bucket(len(chunk), _ROWS), D), hs.dtype)
      hb[:len(chunk)] = hs[start:start + len(chunk)]
      lq = np.asarray(_log_softmax(teacher.params, hb, graphdef=teacher.graphdef, temperatures=self.temperatures))
      self.counts["head_calls"] += 1
      for j, s in enumerate(chunk):
        keys = self._keys(*s)
        per_t = [cross_tree.reduce(lq[i, j], keys, self.tv.order) for i in range(len(self.temperatures))]
        self.values[s] = {key: np.array([d[key] for d in per_t]) for key in keys}
