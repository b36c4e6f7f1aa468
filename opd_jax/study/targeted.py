"""Targeted rollouts: node selection, candidate sets, forced-token continuations -> P_succ, node estimates.

paper.md, "Targeted rollouts -> P_succ": at a node u (a prefix of a student rollout) force each candidate
token k, let the student finish R times, verify: P_succ(k | u) = successes / R. This module is shared by the
study (real models, `ModelPolicy`) and the exactly solvable toy (`opd_jax.validation.exact_toys.ToyPolicy`): both
implement the `Policy` protocol, and `estimate_successes` / `node_estimates` are the one code path for both.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Protocol, Sequence

import jax
import numpy as np

from opd_jax.decode import branching
from opd_jax.decode import sampling
from opd_jax.decode import stops
from opd_jax.estimators import gradients
from opd_jax.estimators import success
from opd_jax.study import allocation

STRATEGIES = ("exponential", "uniform", "entropy", "all")


# ----------------------------------------------------------------------------------------------------------
# Node selection and candidate sets.

def select_nodes(length: int, n: int, strategy: str = "exponential", *,
                 entropy: Sequence[float] | None = None) -> np.ndarray:
  """0-based response positions of the nodes of one rollout (paper.md, "Node selection" [ours]).

  Args:
    length: L, the response length in tokens (stop token included).
    n: nodes wanted per rollout (ignored by "all").
    strategy: "exponential": t_i = round(L^(i/(n-1))) - 1, i = 0..n-1, de-duplicated (dense early, sparse
      late); "uniform": n evenly spaced positions over [0, L-1]; "entropy": the n positions of highest student
      entropy (ties: earlier first); "all": every position.
    entropy: float [L] student entropy per position (required by "entropy").
  Returns:
    int64 sorted unique positions in [0, L-1] (fewer than n when L is short).
  Raises:
    ValueError: unknown strategy, n <= 0, missing entropy.
  """
  if strategy not in STRATEGIES:
    raise ValueError(f"unknown node strategy {strategy!r}; use one of {STRATEGIES}")
  if length <= 0:
    return np.zeros((0,), np.int64)
  if strategy == "all":
    return np.arange(length)
  if n <= 0:
    raise ValueError(f"budget.nodes_per_rollout must be > 0, got {n}")
  if strategy == "exponential":
    if n == 1:
      return np.zeros((1,), np.int64)
    t = np.round(np.power(float(length), np.arange(n) / (n - 1))).astype(np.int64) - 1
  elif strategy == "uniform":
    t = np.round(np.linspace(0, length - 1, n)).astype(np.int64)
  else:
    if entropy is None or len(entropy) < length:
      raise ValueError("strategy 'entropy' needs the student entropy at every response position")
    t = np.argsort(-np.asarray(entropy[:length]), kind="stable")[:n]
  return np.unique(np.clip(t, 0, length - 1))


def candidate_set(sampled: int, student_top: Sequence[int], teacher_tops: Sequence[Sequence[int]],
                  size: int) -> np.ndarray:
  """C(u) [ours]: the sampled token, then the student's top-k_s, then each teacher's top-k_t (order kept,
  duplicates dropped), padded with -1 to `size` (int64 [size]). Raises ValueError if it does not fit."""
  ids = [int(sampled)]
  for tok in list(student_top) + [t for top in teacher_tops for t in top]:
    if int(tok) not in ids:
      ids.append(int(tok))
  if len(ids) > size:
    raise ValueError(f"candidate set of {len(ids)} tokens exceeds size {size}")
  return np.array(ids + [-1] * (size - len(ids)), np.int64)


# ----------------------------------------------------------------------------------------------------------
# Policies: what continues a prefix with a forced token.

class Policy(Protocol):
  """Continues base rollouts of one prompt from many (rollout, position, forced token) branches.

  `continue_branches(prompt, responses, bases, positions, forced, *, key, row_ids, max_response_len)` returns,
  for branch j, the new response `responses[bases[j]][:positions[j]] + [forced[j]] + continuation` (at most
  `max_response_len` tokens) and whether it finished (ended with a stop token), as a list of (list, bool).
  Branch j's randomness comes from (key, row_ids[j]) alone.

  Optional attribute `stop_ids` (ids that end a response; default none): a branch whose forced token is one,
  like one forced at the token cap's last position, samples nothing, so its outcome is fixed
  (`fixed_branches`) and `estimate_successes` runs it once.
  """

  def continue_branches(self, prompt: Sequence[int], responses: Sequence[Sequence[int]], bases: Sequence[int],
                        positions: Sequence[int], forced: Sequence[int], *, key: jax.Array,
                        row_ids: Sequence[int], max_response_len: int) -> list[tuple[list[int], bool]]:
    ...


@dataclasses.dataclass
class ModelPolicy:
  """The student model as a `Policy`: one prefill of all base rollouts, branches batched from their KV cache
  (branches of different rollouts share a batch).

  batch_size: branches per decode call (fixed, so one compile serves every call).
  progress: optional callable(n tokens decoded) (`sampling.sample`'s), e.g. a stage bar's update.
  answer_span: optional (open, close) strings (`Task.answer_span`): a continuation stops, finished, at the token
    that closes the first answer span of its response (prefix and forced token included; at once when they
    already close it), found on device (`opd_jax.decode.stops`, one automaton per policy). None: stop tokens and cap.
  """
  model: object
  temperature: float = 1.0
  top_p: float = 1.0
  top_k: int = 0
  batch_size: int = 64
  progress: Any = None
  answer_span: tuple[str, str] | None = None
  _table: Any = dataclasses.field(default=None, init=False, repr=False)

  def span_table(self) -> tuple[np.ndarray, jax.Array] | None:
    """The answer-span automaton of the student's tokenizer (host int8 [S, V], and on device), built once per
    tokenizer and span (`stops.tokenizer_table`; ~3 s for Qwen2.5's 152k ids on a 2-core CPU)."""
    if self.answer_span is None:
      return None
    if self._table is None:
      self._table = stops.tokenizer_table(self.model.tokenizer, tuple(self.answer_span), self.model.config.vocab_size)
    return self._table

  @property
  def stop_ids(self) -> tuple[int, ...]:
    return tuple(self.model.stop_ids)

  def continue_branches(self, prompt, responses, bases, positions, forced, *, key, row_ids, max_response_len):
    cache = branching.prefill_sequences(self.model, [list(prompt) + list(r) for r in responses])
    caps = [max_response_len - int(t) - 1 for t in positions]
    n_new = max(max_response_len - 1, 1)           # one decode shape for every node; rows stop at their caps
    # Continuations stop at very different lengths: look for stopped rows about 4 times per cap (every 4-64
    # steps), so finished rows leave the batch (`branching.branch`'s compaction; 1.16x on the default's stage,
    # benchmarks/continuations.py).
    segment = max(4, min(sampling.SEGMENT, n_new // 4))
    stop_ids = set(self.stop_ids)
    table = self.span_table()
    span = None
    if table is not None:                          # each branch's state after its prefix, then its forced token
      before = {b: stops.states(table[0], responses[b]) for b in set(int(b) for b in bases)}
      span = [int(table[0][before[int(b)][int(t)], int(f)]) for b, t, f in zip(bases, positions, forced)]
    out = []
    for s in range(0, len(positions), self.batch_size):
      sl = slice(s, s + self.batch_size)
      res = branching.branch(
          self.model, cache, base_rows=bases[sl], prefix_lens=[len(prompt) + int(t) for t in positions[sl]],
          forced_tokens=forced[sl], key=key, max_new_tokens=n_new, row_ids=row_ids[sl], caps=caps[sl],
          temperature=self.temperature, top_p=self.top_p, top_k=self.top_k, pad_to=self.batch_size,
          segment=segment, progress=self.progress, span_states=None if span is None else span[sl],
          span_table=None if table is None else table[1])
      for j, (b, t, f) in enumerate(zip(bases[sl], positions[sl], forced[sl])):
        cont = res.tokens[j, :res.lengths[j]].tolist()
        out.append((list(responses[b][:int(t)]) + [int(f)] + cont, bool(res.finished[j]) or int(f) in stop_ids))
    return out


# ----------------------------------------------------------------------------------------------------------
# Estimation.

@dataclasses.dataclass(frozen=True)
class Outcomes:
  """Per-replicate rewards of targeted continuations of one rollout.

  rewards: int8 [M, K, R_max] (0/1) for M nodes, K candidate slots; replicate r of slot (m, k) was run when
    r < counts[m, k] (the rest, and padded slots, are 0).
  valid: bool [M, K] candidate slot is a real candidate (id >= 0).
  counts: int64 [M, K] replicates per candidate (None: R_max on every valid slot). Candidates may have
    different counts (adaptive allocation); a valid slot has >= 1, except one that was not run (0: outside the
    sampled policy's support, `estimate_successes`'s `run`).
  fixed: bool [M, K] or None: slots whose outcome is decided without sampling (`fixed_branches`). One
    continuation was run and its reward copied to every replicate, so estimates and split halves are exact.
  tokens: int64 [M, K] or None: tokens generated by the continuations run at each slot, summed over them (a
    continuation's response length minus its node position minus the forced token; a fixed slot's one run); None
    where not counted.
  """
  rewards: np.ndarray
  valid: np.ndarray
  counts: np.ndarray | None = None
  fixed: np.ndarray | None = None
  tokens: np.ndarray | None = None

  @property
  def continuations(self) -> int:
    """Continuations actually run: n per slot, 1 on a fixed slot."""
    return int(self.runs.sum())

  @property
  def runs(self) -> np.ndarray:        # int64 [M, K]: continuations run per slot (`_run_counts`)
    return _run_counts(self.n, self.fixed)

  @property
  def n(self) -> np.ndarray:           # int64 [M, K]
    if self.counts is None:
      return np.where(self.valid, self.rewards.shape[-1], 0).astype(np.int64)
    return np.where(self.valid, self.counts, 0).astype(np.int64)

  def _sum(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    r = np.arange(self.rewards.shape[-1])
    run = (r >= lo[..., None]) & (r < hi[..., None])
    return np.where(run, self.rewards, 0).sum(-1).astype(np.int64)

  @property
  def successes(self) -> np.ndarray:   # int64 [M, K]
    return self._sum(np.zeros_like(self.n), self.n)

  def replicates(self, m: int, k: int) -> np.ndarray:
    """int8 [n[m, k]]: the rewards of the replicates run at node m, candidate slot k, in order."""
    return self.rewards[m, k, :self.n[m, k]]

  def half(self, which: int) -> tuple[np.ndarray, np.ndarray]:
    """(successes, n) over disjoint halves of each candidate's replicates: the first floor(n_k / 2) (0) or
    the next floor(n_k / 2) (1); an odd last replicate is in neither. Defined for unequal counts."""
    h = self.n // 2
    lo = np.zeros_like(h) if which == 0 else h
    return self._sum(lo, lo + h), h


def _run_counts(n: np.ndarray, fixed: np.ndarray | None) -> np.ndarray:
  """Continuations run for replicate counts n [M, K], per slot: n, at most 1 on a fixed slot."""
  return n if fixed is None else np.where(fixed, np.minimum(n, 1), n)


def _runs(n: np.ndarray, fixed: np.ndarray | None) -> int:
  """Continuations run for replicate counts n [M, K], in total (`_run_counts`)."""
  return int(_run_counts(n, fixed).sum())


def fixed_branches(positions: np.ndarray, candidates: np.ndarray, *, stop_ids: Sequence[int],
                   max_response_len: int) -> np.ndarray:
  """Which (node, candidate) branches sample nothing, so that their outcome is fixed: bool [M, K].

  A branch forcing a stop token ends the response there; one forced at position t = max_response_len - 1 has
  reached the token cap. Either way every replicate is the same response with the same reward [ours].

  Args:
    positions: int [M] node positions (0-based response indices).
    candidates: int [M, K] candidate ids, padded with -1 (padded slots are False).
    stop_ids: ids that end a response (the policy's `stop_ids`).
    max_response_len: the token cap of responses (a position at or past cap - 1 counts as at the cap).
  Raises:
    ValueError: positions and candidates disagree on M.
  """
  c, pos = np.asarray(candidates, np.int64), np.asarray(positions, np.int64).reshape(-1)
  if c.ndim != 2 or pos.shape[0] != c.shape[0]:
    raise ValueError(f"fixed_branches needs positions [M] and candidates [M, K], got {pos.shape} and "
                     f"{c.shape}")
  at_cap = pos[:, None] + 1 >= max_response_len
  return (c >= 0) & (at_cap | np.isin(c, np.asarray(list(stop_ids), np.int64)))


ROLLOUT_STRIDE = 1 << 20   # row ids: rollout_id * ROLLOUT_STRIDE + (m * K + k) * stride + r


@dataclasses.dataclass(frozen=True)
class Adaptive:
  """Adaptive allocation of targeted continuations (`estimate_successes`, `opd_jax.study.allocation`).

  r_max: most replicates per candidate (`budget.continuations_max`); also the row-id stride, so replicate r of
    a candidate is the same draw whatever the allocation (and equal to a uniform run's with R = r_max).
  mean: the call's total budget, in replicates per valid candidate (`budget.continuations_mean`): the call
    spends at most round(mean x valid candidates) continuations, R in round 0 and the rest by the allocator.
  tolerance: per-node precision (`budget.adaptive_tolerance`): a node whose predicted 1 - cos(ĝ, g*) is
    <= tolerance gets no more replicates (0: spend the whole budget).
  unit: replicates per allocation step (2 keeps the split halves of the noise ceiling balanced).
  prior: a of the Beta(a, a) prior that shrinks P^ in the allocator's score (never in the estimates).
  spread: how uncertain the allocator takes |g*|^2 to be, in units of Var(ĝ)'s trace (`allocation.allocate`).
  growth: each round adds at most growth x the continuations spent so far (0.5: about log(mean / R) / log 1.5
    rounds after the first).
  """
  r_max: int
  mean: float
  tolerance: float = 0.0
  unit: int = 2
  prior: float = 0.5
  spread: float = 1.0
  growth: float = 0.5


@dataclasses.dataclass(frozen=True)
class Weighted:
  """Weighted allocation of targeted continuations (`estimate_successes`, `allocation.weighted_counts`): one
  round whose counts per candidate follow from p and q alone, so every P^_k stays exactly unbiased.

  r_max: most replicates per candidate (`budget.continuations_max`); also the row-id stride (as `Adaptive`).
  mean: replicates per valid candidate, the node's budget (`budget.continuations_mean`).
  minimum: replicates of every kept candidate (`budget.allocation_minimum`).
  min_mass: a candidate whose p and every q are below it is not run unless needed (`budget.allocation_min_mass`).
  """
  r_max: int
  mean: float
  minimum: int = 2
  min_mass: float = 0.01


def estimate_successes(policy: Policy, verify: Callable[[list[int], bool], float], prompt: Sequence[int],
                       rollouts: Sequence[tuple[int, Sequence[int], Sequence[int], np.ndarray]], *, R: int,
                       key: jax.Array, max_response_len: int, adaptive: Adaptive | None = None,
                       probs: Sequence[np.ndarray] | None = None,
                       run: Sequence[np.ndarray] | None = None, weighted: Weighted | None = None,
                       teacher_probs: Sequence[Sequence[np.ndarray]] | None = None) -> list[Outcomes]:
  """Targeted continuations: force every candidate at every node of every given rollout, verify each.

  Uniform (adaptive and weighted None): R replicates per candidate. Weighted: one round, the counts of
  `allocation.weighted_counts` from probs and teacher_probs (R unused). Adaptive: R per candidate in round 0, then
  rounds that each add at most adaptive.growth x what was spent so far, placed by
  `allocation.allocate` on the (node, candidate) pairs whose next replicates most lower the predicted
  1 - cos(ĝ, g*) of their node, until round(adaptive.mean x valid candidates) continuations are spent, every
  node meets adaptive.tolerance or every candidate has r_max. Each round's branches (every rollout, node,
  candidate, replicate) go to the policy in one `continue_branches` call, so the student batches them across
  rollouts and reuses each rollout's prefix cache. A fixed branch (`fixed_branches`: a forced stop token or
  the token cap) is run once and its reward copied to its R replicates (uniform records are unchanged); the
  allocator never adds to it.

  What stays unbiased under adaptive allocation: the allocator reads the outcomes, so n_k depends on the
  candidate's own earlier replicates and the pooled P^ = successes / n is not exactly unbiased (a sequential
  design; its bias is measured small in tests/study/test_adaptive.py). Unbiased are: the first R replicates of every
  candidate (round 0, a fixed design: `Outcomes.replicates(m, k)[:R]`), hence g* = p (P^ - V^) and the teacher
  advantage from them (linear in P^), and each later round's batch mean given that the batch was run (its
  draws are fresh). Cosines (alignment, noise ceiling) are nonlinear and biased at any R, uniform or not.
  Weighted allocation reads no outcome (its counts are a function of p and q), so every P^ it returns is exactly
  unbiased; a candidate it does not run has n = 0 (`node_estimates` imputes it, a bias bounded by its mass).

  Args:
    policy: the student (`ModelPolicy`) or the toy; continuations use the student in its own context.
    verify: (response ids, finished) -> reward in {0, 1}; an unfinished continuation (token cap) must get 0.
    prompt: the question's prompt ids (shared by the rollouts).
    rollouts: per rollout, (rollout_id, response ids, node positions int [M] (0-based response indices),
      candidate ids int [M, K] padded with -1).
    R: continuations per candidate (`budget.continuations_per_candidate`); round 0's when adaptive.
    key: PRNG key of the question; branch (rollout_id, m, k, r) uses row id
      rollout_id * ROLLOUT_STRIDE + (m * K + k) * stride + r with stride = R (uniform) or adaptive.r_max, so
      its draws never depend on the other branches.
    max_response_len: the base rollouts' token cap; continuations share it (response length <= cap).
    adaptive: `Adaptive` settings, or None for uniform R.
    probs: per rollout, float [M, K] student probabilities on C(u) (any positive scale; renormalised over the
      valid slots): the allocator's p. Required when adaptive or weighted.
    weighted: `Weighted` settings, or None (not with adaptive).
    teacher_probs: per rollout, a list of float [M, K] teacher probabilities on C(u), one per view (weighted's
      q; None: none).
    run: per rollout, bool [M, K]: the valid slots to continue (None: all). A valid slot left out gets no
      continuation (n = 0, never fixed, never allocated): the study leaves out candidates outside the sampled
      policy's support (p = 0 under top-k / top-p), which cannot move V or g* (`budget.continue_unsupported`).
      The other slots' row ids and draws are unchanged. Adaptive: the budget is mean x the slots run.
  Returns:
    One `Outcomes` per rollout: uniform: rewards [M, K, R], counts None (every valid slot run) or R / 0 per
    slot; adaptive: rewards [M, K, r_max] and the counts per candidate (R on a fixed slot); weighted: rewards
    [M, K, r_max] and its counts (0 on a candidate not run); `fixed` set in all.
  Raises:
    ValueError: R <= 0, bad adaptive or weighted settings, both, missing probs, or too many branches for the
      row-id stride.
  """
  if R <= 0:
    raise ValueError(f"budget.continuations_per_candidate must be > 0, got {R}")
  stride = R
  if weighted is not None:
    stride = weighted.r_max
    if adaptive is not None:
      raise ValueError("estimate_successes takes adaptive or weighted allocation, not both")
    if probs is None or len(probs) != len(rollouts):
      raise ValueError("weighted continuations need probs: the student's p on C(u), one [M, K] per rollout")
  if adaptive is not None:
    stride = adaptive.r_max
    if adaptive.r_max < R or not adaptive.mean >= R or adaptive.unit < 1 or adaptive.tolerance < 0:
      raise ValueError(f"adaptive continuations need continuations_max >= continuations_mean >= "
                       f"continuations_per_candidate (R = {R}), unit >= 1 and tolerance >= 0, got {adaptive}")
    if probs is None or len(probs) != len(rollouts):
      raise ValueError("adaptive continuations need probs: the student's p on C(u), one [M, K] per rollout")
  cands = [np.asarray(c) for _, _, _, c in rollouts]
  for c in cands:
    if c.size * stride >= ROLLOUT_STRIDE:
      raise ValueError(f"{c.shape[0]} nodes x {c.shape[1]} candidates x {stride} replicates exceeds "
                       f"{ROLLOUT_STRIDE} branches per rollout")
  if run is not None and len(run) != len(rollouts):
    raise ValueError(f"run needs one [M, K] mask per rollout, got {len(run)} for {len(rollouts)} rollouts")
  go = [c >= 0 if run is None else (c >= 0) & np.asarray(g, bool).reshape(c.shape) for c, g in
        zip(cands, cands if run is None else run)]
  outs = [np.zeros(c.shape + (stride,), np.int8) for c in cands]
  generated = [np.zeros(c.shape, np.int64) for c in cands]
  stop_ids = tuple(getattr(policy, "stop_ids", ()))
  fixed = [fixed_branches(pos, c, stop_ids=stop_ids, max_response_len=max_response_len) & g
           for (_, _, pos, _), c, g in zip(rollouts, cands, go)]
  if weighted is None:
    counts = [np.where(g, R, 0).astype(np.int64) for g in go]
  else:
    qs = teacher_probs if teacher_probs is not None else [[] for _ in rollouts]
    counts = [allocation.weighted_counts(pr, q, g, mean=weighted.mean, minimum=weighted.minimum, r_max=weighted.r_max,
                                         min_mass=weighted.min_mass, fixed=f)
              for pr, q, g, f in zip(probs, qs, go, fixed)]
    go = [n > 0 for n in counts]
    fixed = [f & g for f, g in zip(fixed, go)]
  todo = [(i, m, k, r) for i, c in enumerate(cands) for m in range(c.shape[0]) for k in range(c.shape[1])
          if go[i][m, k] for r in range(1 if fixed[i][m, k] else counts[i][m, k])]
  _continue(policy, verify, prompt, rollouts, todo, outs, generated, key=key, stride=stride,
            max_response_len=max_response_len)
  for o, f, n in zip(outs, fixed, counts):
    o[f] = np.where(np.arange(stride) < n[f][:, None], o[f][:, :1], 0)
  if adaptive is not None and cands:
    _adaptive_rounds(policy, verify, prompt, rollouts, outs, generated, counts, probs, fixed, adaptive, go, key=key,
                     max_response_len=max_response_len)
  every = all(np.array_equal(g, c >= 0) for g, c in zip(go, cands))
  uniform = adaptive is None and weighted is None
  return [Outcomes(rewards=o, valid=c >= 0, counts=None if uniform and every else n, fixed=f, tokens=t)
          for o, c, n, f, t in zip(outs, cands, counts, fixed, generated)]


def _continue(policy, verify, prompt, rollouts, todo, outs, generated, *, key, stride, max_response_len):
  """Runs branches (rollout index i, node m, slot k, replicate r) in one policy call; writes outs[i][m, k, r] and
  adds each one's generated tokens to generated[i][m, k]."""
  if not todo:
    return
  branches = []
  for i, m, k, r in todo:
    rid, _, positions, candidates = rollouts[i]
    K = np.shape(candidates)[1]
    branches.append((i, int(positions[m]), int(candidates[m][k]), rid * ROLLOUT_STRIDE + (m * K + k) * stride + r))
  res = policy.continue_branches(
      prompt, [r[1] for r in rollouts], [b[0] for b in branches], [b[1] for b in branches],
      [b[2] for b in branches], key=key, row_ids=[b[3] for b in branches], max_response_len=max_response_len)
  for (i, m, k, r), (new_response, finished), (_, t, _, _) in zip(todo, res, branches):
    outs[i][m, k, r] = int(verify(new_response, finished) == 1.0)
    generated[i][m, k] += len(new_response) - t - 1


def _adaptive_rounds(policy, verify, prompt, rollouts, outs, generated, counts, probs, fixed, adaptive, go, *, key,
                     max_response_len):
  """Rounds after the first (`estimate_successes`): allocate over every node of every rollout together; the
  slots not run (go False) stay at 0."""
  K = max(c.shape[1] for c in counts)
  pad = lambda a, fill: np.concatenate([np.pad(x, [(0, 0), (0, K - x.shape[1])] + [(0, 0)] * (x.ndim - 2),
                                               constant_values=fill) for x in a])
  valid = pad(go, False)
  exact = pad(fixed, False)
  p = pad([np.asarray(x, np.float64) for x in probs], 0.0)
  where = [(i, m) for i, c in enumerate(counts) for m in range(c.shape[0])]
  total = int(round(adaptive.mean * valid.sum()))
  spent = sum(_runs(c, f) for c, f in zip(counts, fixed))
  while spent < total:
    n = pad(counts, 0)
    s = pad([o.sum(-1) for o in outs], 0)
    extra = allocation.allocate(p, s, n, valid, budget=min(total - spent, max(int(adaptive.growth * spent), 1)),
                                unit=adaptive.unit,
                                r_max=adaptive.r_max, tolerance=adaptive.tolerance, prior=adaptive.prior,
                                spread=adaptive.spread, fixed=exact)
    if not extra.any():
      break
    todo = [(i, m, k, r) for j, (i, m) in enumerate(where) for k in np.flatnonzero(extra[j])
            for r in range(n[j, k], n[j, k] + extra[j, k])]
    _continue(policy, verify, prompt, rollouts, todo, outs, generated, key=key, stride=adaptive.r_max,
              max_response_len=max_response_len)
    for j, (i, m) in enumerate(where):
      counts[i][m] += extra[j, :counts[i].shape[1]]
    spent += int(extra.sum())


def split_half_noise_ceiling(p: np.ndarray, outcomes: Outcomes) -> np.ndarray:
  """cos(g* from one half of the replicates, g* from the other), per node [M] (paper.md, "Where opd_jax goes
  further"). Each candidate's replicates split into its first and next floor(n_k / 2) (`Outcomes.half`), so
  it is defined for unequal counts too. NaN where either half is degenerate or a candidate that was run has
  n_k = 1 (a slot not run, n_k = 0, is imputed as in `success.estimator_p_succ`).
  Recomputable from a node row: p and the per-candidate `rewards` lists."""
  gs = []
  short = np.any(outcomes.n == 1, axis=-1)
  with jax.enable_x64(True):
    for which in (0, 1):
      s, n = outcomes.half(which)
      g = np.asarray(gradients.ideal_gradient(np.asarray(p, np.float64), success.estimator_p_succ(p, s, n)))
      bad = np.asarray(gradients.is_degenerate(s, n)) | short
      gs.append((g, bad))
    cos = np.asarray(gradients.alignment(gs[0][0], gs[1][0]), np.float64)
  return np.where(gs[0][1] | gs[1][1], np.nan, cos)


