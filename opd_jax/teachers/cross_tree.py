"""The teacher's probability of a byte string, over its own tokens: what a teacher of another tokenizer says of a
student candidate (`cross.py` runs the teacher; this module is the enumeration, model-free).

At a node u the student's candidate k writes bytes(k) after the node's text x. The teacher is conditioned on
its own tokens of x up to a boundary (`cross.py`: the last token end at or before `ByteVocab.stable_start` of
x, so that no continuation can change the tokens before it) and the bytes between the boundary and u, the
tail, are part of the string asked about. With s = tail + bytes(k):

  exact (default)   P(s) = P(the teacher's continuation from the boundary begins with s)
                         = sum_{w : bytes(w) starts with s} q(w)                       (tokens covering the rest)
                         + sum_{w : bytes(w) a proper prefix of s} q(w) P(s[|w|:] | w)  (and recursing)
                    (every tokenization of s, and every token that runs past its end), over at most
                    `max_nodes` teacher states (a state per sequence of whole tokens inside s);
  canonical         P(s) = prod_i q(w_i | w_<i) over the teacher's canonical tokens w of s: the probability that
                    the continuation begins with that one token path (a lower bound of the exact value).
A candidate that is a special token (the student's stop token, or a control token the teacher has too) asks,
per teacher id i for it, for s = tail followed by i (`then` = (i,)): the recursion's paths must end exactly at
the end of s, then write i.

These are events of the teacher's continuation, and a node's events nest: "begins with '>'" contains "begins
with '></'", a token path contains its extensions. `exclusive` takes each event less the ones inside it, so
that a node's candidates hold disjoint events (`cross.py` documents the contract). Then q(k | u) = P(k's
disjoint event) / P(tail), P(tail) the exact sum in both modes: every path writing the tail, a canonical path
of tail + bytes(k) among them, so q <= 1; P(tail) is common to the node's candidates (it cancels in the
renormalisation over C(u)) and is kept so that the mass covered is a probability.

The exact sum is written once (`step`: what one teacher state reads and its children; `log_prob` walks it):
`needed` runs it with a recorder (which teacher states and which sums over their next-token distribution a
string needs), `cross.py` walks it level by level with pruning, then `log_prob` sums the values it computed.
A key is ("ids", ids) (logsumexp of log q over the ids) or ("span", lo, hi) (over `ByteVocab.order[lo:hi]`,
the ids whose bytes start with a given string).
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from opd_jax.models.token_bytes import ByteVocab

Path = tuple[int, ...]                       # teacher ids after the boundary: one teacher state
Key = tuple                                  # ("ids", (id, ...)) or ("span", lo, hi)
Lookup = Callable[[Path, Key], float]        # log of the summed probability at a state (float64)
MODES = ("exact", "canonical")


class TooManyStates(Exception):
  """More than max_nodes teacher states for one string (the exact mode's bound)."""


def step(vocab: ByteVocab, rest: bytes, then: tuple[int, ...] | None) -> tuple[list[Key], list[tuple[int, int]]]:
  """The exact sum at one teacher state with `rest` bytes of the string left: the keys it reads there and its
  children (w, n): the whole tokens w writing rest[:n] (n < len(rest), or <= with `then`)."""
  if not rest:
    return ([("ids", tuple(then))] if then is not None else []), []
  keys, children = [], []
  if then is None:
    lo, hi = vocab.covering(rest)
    if hi > lo:
      keys.append(("span", lo, hi))
  for n in range(1, len(rest) + int(then is not None)):
    for w in vocab.exact(rest[:n]):
      keys.append(("ids", (w,)))
      children.append((w, n))
  return keys, children


def log_prob(vocab: ByteVocab, data: bytes, then: tuple[int, ...] | None, lookup: Lookup, *,
             mode: str = "exact", max_nodes: int = 512, known: set | None = None) -> float:
  """log P(data [then one of `then`]) under the teacher from the boundary state (), in nats (module docstring).

  Args:
    vocab: the teacher's `ByteVocab`; data: the bytes after the boundary; then: None, or teacher ids (special
      tokens) one of which must follow `data` exactly; lookup(path, key): log q summed over the key's ids at
      state `path`.
    mode: "exact" or "canonical"; max_nodes: the exact mode's bound on states.
    known: exact mode: the states to sum over (the others count 0: pruned, `cross.py`); None: every state.
  Returns:
    A float (-inf when no teacher tokens write `data`).
  Raises:
    TooManyStates: the exact walk needs more than max_nodes states.
    ValueError: an unknown mode.
  """
  if mode == "canonical":
    ids = vocab.encode(data) if data else []
    total = math.fsum(lookup(tuple(ids[:i]), ("ids", (ids[i],))) for i in range(len(ids)))
    return total if then is None else total + lookup(tuple(ids), ("ids", tuple(then)))
  if mode != "exact":
    raise ValueError(f"unknown mode {mode!r}: one of {MODES}")
  seen = 0

  def walk(path: Path, rest: bytes) -> float:
    nonlocal seen
    if known is not None and path not in known:
      return -math.inf
    seen += 1
    if seen > max_nodes:
      raise TooManyStates(f"more than {max_nodes} teacher states for {data[:40]!r}")
    keys, children = step(vocab, rest, then)
    if not rest:
      return lookup(path, keys[0]) if keys else 0.0
    terms = [lookup(path, k) for k in keys if k[0] == "span"]
    terms += [lookup(path, ("ids", (w,))) + walk(path + (w,), rest[n:]) for w, n in children]
    return logsumexp(terms)

  return walk((), data)


def needed(vocab: ByteVocab, data: bytes, then: tuple[int, ...] | None, *, mode: str,
           max_nodes: int) -> dict[Path, set[Key]]:
  """The states and sums `log_prob` will look up for this string (its first run, with a recorder).

  Raises: as `log_prob`."""
  out: dict[Path, set[Key]] = {}

  def record(path, key):
    out.setdefault(path, set()).add(key)
    return 0.0

  log_prob(vocab, data, then, record, mode=mode, max_nodes=max_nodes)
  return out


def reduce(logq: np.ndarray, keys, order: np.ndarray) -> dict[Key, float]:
  """The value of each key at one state: logq float [V] the teacher's log-probs there (any float dtype)."""
  out = {}
  sorted_logq = None
  for key in keys:
    if key[0] == "ids":
      vals = logq[np.asarray(key[1], np.int64)] if key[1] else np.zeros(0)
    else:
      if sorted_logq is None:
        sorted_logq = logq[order]
      vals = sorted_logq[key[1]:key[2]]
    out[key] = logsumexp(vals)
  return out


def exclusive(keys: list, logq: np.ndarray, contains: Callable[[Any, Any], bool]) -> tuple[np.ndarray, float]:
  """Disjoint events from nested ones: each key's probability less that of the keys it contains, in logs.

  A node's candidate events nest (exact mode: the continuation begins with ">" contains it beginning with "></";
  canonical mode: a token path contains its extensions), so their probabilities overlap. Key a keeps
  B_a = A_a minus the union of the A_b it contains (b != a): that union is the disjoint union of the minimal
  ones (contained in no other contained key: neither of two minimal keys contains the other, so their events
  are disjoint: two byte strings that do not begin one another, two token paths that part), hence
      P(B_a) = P(A_a) - sum over minimal b of P(A_b),
  and the B_a are pairwise disjoint: sum_a P(B_a) <= 1 when every P(A_a) <= 1 and nested keys' events nest.

  Args:
    keys: M distinct hashable keys; logq: float64 [M, ...] log P(A_a) (inclusive), NaN allowed.
    contains: contains(a, b) true when key b's event lies inside key a's and b != a.
  Returns:
    (float64 [M, ...] log P(B_a): log P(A_a) exactly where a contains no key, -inf where the contained mass
    reaches P(A_a) (clipped: only where the inputs are not exact, e.g. pruned sums), NaN where an input is;
    the largest amount clipped, as a probability).
  """
  logq = np.asarray(logq, np.float64)
  out, clipped = logq.copy(), 0.0
  for i, a in enumerate(keys):
    inner = [j for j, b in enumerate(keys) if j != i and contains(a, b)]
    minimal = [j for j in inner if not any(k != j and contains(keys[k], keys[j]) for k in inner)]
    if not minimal:
      continue
    inside = np.logaddexp.reduce(logq[minimal], axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
      gap = np.where(logq[i] == -np.inf, 0.0, inside - logq[i])            # log of (contained / own) mass
      out[i] = np.where(gap >= 0, -np.inf, logq[i] + np.log1p(-np.exp(np.minimum(gap, 0.0))))
    over = np.where(gap >= 0, np.exp(inside) - np.exp(logq[i]), 0.0)
    clipped = max(clipped, float(np.nanmax(over, initial=0.0)))
    out[i] = np.where(np.isnan(logq[i]) | np.isnan(inside), np.nan, out[i])
  return out, clipped


def logsumexp(values) -> float:
  """log(sum(exp(values))) in float64; -inf for none (or all -inf)."""
  return float(np.logaddexp.reduce(np.asarray(values, np.float64)))
