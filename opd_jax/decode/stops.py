"""Where a response's reward is known: a byte automaton over token ids that finds a task's deciding answer span.

A task whose extractor reads an answer span (`Task.answer_span`, e.g. reasoning-gym's `<answer>`, `</answer>`) is
graded on its deciding span, the first closed span that holds anything but whitespace, and reads nothing after it
(`opd_jax.tasks.spans`, the one definition the grader and this stop share): once it closes, the reward is known.
`span_table` compiles that definition's byte automaton (`spans.automaton`) into a table over token ids, once per
tokenizer: state s, token v -> the state after v's bytes. A decode loop then follows it with one gather per row
and step (`sampling.decode`'s `table`) and stops a row the step its deciding span closes, so the text cut there
is graded as the full text would have been, whatever followed. An empty span (`<answer></answer>`, the template's
format echoed before the answer) does not stop it.

States: those of `spans.automaton` (0 is the start; the last, DONE, absorbing: the deciding span closed). Special
tokens write no bytes (`tokenizer.decode(..., skip_special_tokens=True)`): they keep the state, as do ids past the
tokenizer's (the model's padded vocabulary). The automaton reads bytes, the text the grader reads is their UTF-8
decoding: the span strings are ASCII and ASCII bytes decode to themselves next to invalid sequences, which decode
to U+FFFD, never to whitespace, so the deciding span is found at the same place (`spans` module docstring).
"""
from __future__ import annotations

from typing import Sequence

import jax
import numpy as np

from opd_jax.tasks import spans

# Continuation tokens saved on the default study (configs/teacher_sweep.py, 2026-12-03: 6004 generated against 6878
# without the stop, benchmarks/stop_at_answer.py; docs/performance.md). A measurement of one task, not a constant.
MEASURED_SAVING = 0.127

_CACHE: dict = {}   # id(tokenizer) -> (tokenizer, {(span, vocab_size): (host table, device table)})


def byte_table(open_: bytes, close: bytes) -> np.ndarray:
  """The automaton over bytes: int32 [S, 256] (`spans.automaton` of the span `open_ ... close`)."""
  return spans.automaton((open_.decode(), close.decode())).copy()


def span_table(pieces: Sequence[bytes | None], span: tuple[str, str], vocab_size: int) -> np.ndarray:
  """The automaton over token ids: int8 [S, vocab_size]; row s, column v: the state after v's bytes from s.

  Args:
    pieces: the bytes each id writes (`token_bytes.byte_vocab(tokenizer).pieces`; None: a special token).
    span: (open, close) strings, e.g. ("<answer>", "</answer>") (`Task.answer_span`).
    vocab_size: V, the model's vocabulary (>= len(pieces)); ids past the pieces keep the state.
  Returns:
    The table; its last state (S - 1) is DONE, the deciding span closed. S <= 127.
  Raises:
    ValueError: an empty or non-ASCII open or close, a span too long for int8 states, or vocab_size < len(pieces).
  """
  by_byte = spans.automaton(tuple(span))
  S = by_byte.shape[0]
  if S > 127 or vocab_size < len(pieces):
    raise ValueError(f"answer span {span!r} ({S} states, at most 127) or vocab_size {vocab_size} < "
                     f"{len(pieces)} tokens")
  table = np.tile(np.arange(S, dtype=np.int32)[:, None], (1, vocab_size))
  ids = np.array([i for i, p in enumerate(pieces) if p], np.int64)
  lengths = np.array([len(pieces[i]) for i in ids], np.int64)
  data = np.zeros((len(ids), int(lengths.max(initial=0))), np.uint8)
  for row, i in enumerate(ids):
    data[row, :lengths[row]] = np.frombuffer(pieces[i], np.uint8)
  order = np.argsort(-lengths, kind="stable")                        # longest first: step j runs the rows longer
  ids, lengths, data = ids[order], lengths[order], data[order]       # than j, a prefix of them
  state = np.tile(np.arange(S, dtype=np.int32)[:, None], (1, len(ids)))
  for j in range(data.shape[1]):
    n = int(np.sum(lengths > j))
    state[:, :n] = by_byte[state[:, :n], data[:n, j][None, :]]
  table[:, ids] = state
  return table.astype(np.int8)


def states(table: np.ndarray, tokens: Sequence[int]) -> np.ndarray:
  """int32 [len(tokens) + 1]: the state before any token (0) and after each of `tokens` (host side)."""
  out = np.zeros(len(tokens) + 1, np.int32)
  for i, t in enumerate(tokens):
    out[i + 1] = table[out[i], t]
  return out


def tokenizer_table(tokenizer, span: tuple[str, str], vocab_size: int) -> tuple[np.ndarray, jax.Array]:
  """`span_table` of a byte-level tokenizer (`token_bytes.byte_vocab`), on the host and on the default device,
  cached per tokenizer object, span and vocab_size."""
  hit = _CACHE.get(id(tokenizer))
  if hit is None or hit[0] is not tokenizer:
    hit = _CACHE[id(tokenizer)] = (tokenizer, {})
  key = (tuple(span), int(vocab_size))
  if key not in hit[1]:
    from opd_jax.models import token_bytes  # pylint: disable=g-import-not-at-top
    host = span_table(token_bytes.byte_vocab(tokenizer).pieces, key[0], key[1])
    hit[1][key] = (host, jax.device_put(host))
  return hit[1][key]
