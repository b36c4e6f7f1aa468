"""The bytes of every token of a byte-level BPE tokenizer, and text <-> tokens at the byte level.

A teacher with another tokenizer than the student's (`cross.py`) is compared on bytes: a student candidate k is
the bytes it writes, and the teacher's probability of k sums over the teacher tokens that write those bytes.
That needs, per tokenizer, the bytes of each id (`ByteVocab.pieces`), the ids whose bytes start with a given
string (one contiguous range of the pieces sorted bytewise: `ByteVocab.covering`), the ids whose bytes equal
it (`ByteVocab.exact`), the canonical tokenization of any bytes (`ByteVocab.encode`) and where the last
pre-token of a text starts (`ByteVocab.last_pretoken_start`: merges never cross pre-tokens, so a text's
tokenization before that point is the same whatever follows).

Supported: byte-level BPE tokenizers whose tokens are spelled in GPT-2's byte alphabet (Qwen2/2.5/3, Llama 3,
SmolLM2, GPT-2 and the random models' byte tokenizer); `byte_vocab` raises for others (SentencePiece's "▁"
spelling, e.g. Llama 2 and Gemma). Special tokens (added tokens marked special) write no bytes: piece None.
Non-special added tokens write their text.
"""
from __future__ import annotations

import bisect
import dataclasses
from typing import Any

import numpy as np

from opd_jax.models import tokenizer as tokenizer_lib


@dataclasses.dataclass(frozen=True, kw_only=True)
class ByteVocab:
  """A tokenizer's ids as bytes (`byte_vocab`)."""
  tokenizer: Any
  pieces: tuple[bytes | None, ...]        # [N] the bytes of each real id; None: a special token
  order: np.ndarray                       # int64 [M]: the non-special ids sorted by their bytes
  sorted_pieces: tuple[bytes, ...]        # [M] their bytes, sorted
  special: frozenset[int]                 # ids that write no bytes

  def covering(self, prefix: bytes) -> tuple[int, int]:
    """The range [lo, hi) of `order` whose ids' bytes start with `prefix` (all of them for b"")."""
    lo = bisect.bisect_left(self.sorted_pieces, prefix)
    hi = len(self.sorted_pieces) if not prefix else bisect.bisect_left(self.sorted_pieces, _successor(prefix))
    return lo, hi

  def exact(self, piece: bytes) -> tuple[int, ...]:
    """The ids whose bytes are `piece` (usually one; () if none)."""
    lo = bisect.bisect_left(self.sorted_pieces, piece)
    hi = bisect.bisect_right(self.sorted_pieces, piece)
    return tuple(int(i) for i in self.order[lo:hi])

  def encode(self, data: bytes) -> list[int]:
    """The canonical tokenization of `data` (no special tokens added or parsed): the tokenizer's encoding of its
    longest valid UTF-8 prefix, then one single-byte token per remaining byte (a cut multi-byte character).

    Raises:
      ValueError: the ids do not write `data` back (a normalizer that changes the text), naming the text.
    """
    text, rest = _utf8_prefix(data)
    ids = self.tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"] if text else []
    for b in rest:
      one = self.exact(bytes([b]))
      if not one:
        raise ValueError(f"the tokenizer has no token for byte {b:#04x}: it is not byte-level")
      ids.append(one[0])
    if self.decode(ids) != data:
      raise ValueError(f"the tokenizer does not write {data[:40]!r} back byte for byte (its normalizer changes "
                       "the text); cross-tokenizer scoring needs a lossless byte-level tokenizer")
    return [int(i) for i in ids]

  def decode(self, ids) -> bytes:
    """The bytes written by `ids` (special tokens write none)."""
    return b"".join(self.pieces[int(i)] or b"" for i in ids)

  def last_pretoken_start(self, data: bytes) -> int:
    """The byte offset where the last pre-token of `data` starts (0 if it has one or none): bytes appended to
    `data` can change its tokenization from there on, never before. A cut multi-byte character at the end
    starts a pre-token of its own, or joins the last one (the earlier of the two)."""
    text, _ = _utf8_prefix(data)
    pre = self.tokenizer.backend_tokenizer.pre_tokenizer
    if not text or pre is None:
      return 0
    pieces = pre.pre_tokenize_str(text)
    if len(pieces) <= 1:
      return 0
    return len(text[:pieces[-1][1][0]].encode("utf-8"))


def _utf8_prefix(data: bytes) -> tuple[str, bytes]:
  """(the longest valid UTF-8 prefix of data, decoded; the bytes after it)."""
  try:
    return data.decode("utf-8"), b""
  except UnicodeDecodeError as e:
    return data[:e.start].decode("utf-8"), data[e.start:]


def _successor(prefix: bytes) -> bytes:
  """The smallest byte string greater than every string starting with `prefix` (b"\\xff" * n has none: b"\\xff" * 9
  bytes past any token is enough)."""
  p = prefix.rstrip(b"\xff")
  if not p:
    return prefix + b"\xff" * 64
  return p[:-1] + bytes([p[-1] + 1])


_CACHE: dict[int, tuple[Any, ByteVocab]] = {}


def byte_vocab(tokenizer) -> ByteVocab:
  """The `ByteVocab` of a transformers tokenizer (cached per tokenizer object).

  Raises:
    ValueError: a real non-special token is not spelled in GPT-2's byte alphabet (not a byte-level BPE
      tokenizer), naming it.
  """
  hit = _CACHE.get(id(tokenizer))
  if hit is not None and hit[0] is tokenizer:
    return hit[1]
  alphabet = {c: b for b, c in enumerate(tokenizer_lib.byte_alphabet())}
  n = tokenizer_lib.real_vocab_size(tokenizer)
  added = tokenizer.added_tokens_decoder
  pieces: list[bytes | None] = [None] * n
  for tok, i in tokenizer.get_vocab().items():
    if i >= n:
      continue
    if i in added:
      pieces[i] = None if added[i].special else added[i].content.encode("utf-8")
      continue
    try:
      pieces[i] = bytes(alphabet[c] for c in tok)
    except KeyError:
      raise ValueError(f"token {i} {tok!r} is not spelled in GPT-2's byte alphabet: the tokenizer is not "
                       "byte-level BPE, which a teacher of another tokenizer needs (Qwen, Llama 3, SmolLM2 "
                       "are; SentencePiece ones such as Llama 2 and Gemma are not)") from None
  special = frozenset(i for i, p in enumerate(pieces) if p is None)
  ids = [i for i in range(n) if pieces[i] is not None]
  ids.sort(key=lambda i: pieces[i])
  vocab = ByteVocab(tokenizer=tokenizer, pieces=tuple(pieces), order=np.asarray(ids, np.int64),
                    sorted_pieces=tuple(pieces[i] for i in ids), special=special)
  _CACHE[id(tokenizer)] = (tokenizer, vocab)
  return vocab
