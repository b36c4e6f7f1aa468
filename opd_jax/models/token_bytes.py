"""The bytes of every token of a byte-level BPE tokenizer, and text <-> tokens at the byte level.

A teacher with another tokenizer than the student's (`cross.py`) is compared on bytes: a student candidate k is
the bytes it writes, and the teacher's probability of k sums over the teacher tokens that write those bytes.
That needs, per tokenizer, the bytes of each id (`ByteVocab.pieces`), the ids whose bytes start with a given
string (one contiguous range of the pieces sorted bytewise: `ByteVocab.covering`), the ids whose bytes equal
it (`ByteVocab.exact`), the canonical tokenization of any bytes (`ByteVocab.encode`), where the text's tokens
can no longer change whatever follows (`ByteVocab.stable_start`), and whether the tokenizer reads a text as it
is (`ByteVocab.reads_as_is`: a normalizer such as Qwen2.5's NFC changes some texts before the tokens).

Normalizers: the teacher writes bytes through its tokens, never through its normalizer, so any bytes have a
probability under it; but text its normalizer changes (an Angstrom or Ohm sign, a decomposed "é" under NFC)
has no tokens of the tokenizer's own. `encode` then gives the tokenizer's pre-tokens and merges without its
normalizer (`ByteVocab.raw`: the same ids wherever the normalizer changes nothing), and `cross.py` does not
condition the teacher on such text (its nodes after it are skipped with a reason).

Supported: byte-level BPE tokenizers whose tokens are spelled in GPT-2's byte alphabet (Qwen2/2.5/3, Llama 3,
SmolLM2, GPT-2 and the random models' byte tokenizer); `byte_vocab` raises for others (SentencePiece's "▁"
spelling, e.g. Llama 2 and Gemma). Special tokens (added tokens marked special) write no bytes: piece None.
Non-special added tokens write their text.
"""
from __future__ import annotations

import bisect
import dataclasses
import json
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from opd_jax.models import tokenizer as tokenizer_lib


@dataclasses.dataclass(frozen=True, kw_only=True)
class ByteVocab:
  """A tokenizer's ids as bytes (`byte_vocab`)."""
  tokenizer: Any
  pieces: tuple[bytes | None, ...]        # [N] the bytes of each real id; None: a special token
  order: np.ndarray                       # int64 [M]: the non-special ids sorted by their bytes
  sorted_pieces: tuple[bytes, ...]        # [M] their bytes, sorted
  special: frozenset[int]                 # ids that write no bytes
  raw: Any = None                         # tokenizers.Tokenizer without the normalizer (None: it has none)
  added: tuple[str, ...] = ()             # the text of the non-special added tokens (matched before the split)

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
    longest valid UTF-8 prefix, then one single-byte token per remaining byte (a cut multi-byte character). Where
    the tokenizer's normalizer changes the text (`reads_as_is` False), its pre-tokens and merges without the
    normalizer (`raw`), which write the bytes back.

    Raises:
      ValueError: the ids do not write `data` back byte for byte even without the normalizer (not a byte-level
        tokenizer), naming the text.
    """
    text, rest = _utf8_prefix(data)
    ids = self.tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"] if text else []
    if self.raw is not None and self.decode(ids) != data[:len(data) - len(rest)]:
      ids = self.raw.encode(text, add_special_tokens=False).ids
    for b in rest:
      one = self.exact(bytes([b]))
      if not one:
        raise ValueError(f"the tokenizer has no token for byte {b:#04x}: it is not byte-level")
      ids.append(one[0])
    if self.decode(ids) != data:
      raise ValueError(f"the tokenizer does not write {data[:40]!r} back byte for byte, even without its "
                       "normalizer; cross-tokenizer scoring needs a lossless byte-level tokenizer")
    return [int(i) for i in ids]

  def reads_as_is(self, data: bytes) -> bool:
    """Whether the tokenizer's normalizer leaves the text of `data` unchanged (always without a normalizer); a
    cut multi-byte character at the end is left out."""
    if self.raw is None:
      return True
    text, _ = _utf8_prefix(data)
    return self.tokenizer.backend_tokenizer.normalizer.normalize_str(text) == text

  def decode(self, ids) -> bytes:
    """The bytes written by `ids` (special tokens write none)."""
    return b"".join(self.pieces[int(i)] or b"" for i in ids)

  def stable_start(self, data: bytes) -> int:
    """The byte offset s of the latest pre-token start of `data` before which no continuation changes the
    teacher's tokens (0 if none): for every c, the tokens of data + c before s are those of data, and a token of
    data + c ends at s.

    Usually the start of the last pre-token (merges never cross one), but not always:
    - a regex split reads past a match's end (greedy runs, lookahead), so a continuation can rewrite pre-tokens
      further back: Qwen2.5's `\\s*[\\r\\n]+` pulls a run of whitespace into one pre-token once a newline
      follows it ("x \\n   " splits into "x", " \\n", "   "; "x \\n   \\n" into "x", " \\n   \\n"). The rule
      is checked against the tokenizer's own pre-tokenizer: the text is split with each of `PROBES` appended
      (every class of character a split pattern tells apart, alone and in pairs), and s is the start of the
      first pre-token any of them changes, or of the last one. For regex splits without lookbehind (Qwen2,
      Llama 3, GPT-2, SmolLM2), a continuation changes only pre-tokens whose match ran into the end of the
      text, and its first character (its first two for the contractions) decides whether it does: tested on
      random texts and continuations against the real tokenizers (tests/teachers/test_cross_bytes.py);
    - a non-special added token (Qwen2.5's "<tool_call>") is matched in the text before the split: when the text
      ends with the beginning of one, s is at most the stable start of the text before it; pre-tokens start
      after the last whole one.
    A cut multi-byte character at the end is a continuation of the valid text before it.
    """
    text, _ = _utf8_prefix(data)
    lo, cut = 0, len(text)
    for a in self.added:
      at = text.rfind(a)
      if at >= 0:
        lo = max(lo, at + len(a))
    for a in self.added:
      for k in range(min(len(a) - 1, len(text) - lo), 0, -1):
        if text.endswith(a[:k]):
          cut = min(cut, len(text) - k)
          break
    return len(text[:lo].encode("utf-8")) + self._stable(text[lo:cut])

  def _stable(self, text: str) -> int:
    """`stable_start` of a text without added tokens, by the pre-tokenizer and `PROBES` (bytes)."""
    pre = self.tokenizer.backend_tokenizer.pre_tokenizer
    if not text or pre is None:
      return 0
    spans = [off for _, off in pre.pre_tokenize_str(text)]
    if len(spans) <= 1:
      return 0
    first = len(spans) - 4                          # the probes split a window from a pre-token start on
    while True:
      first = max(first, 0)
      lo = spans[first][0]
      window = [(a - lo, b - lo) for a, b in spans[first:]]
      keep = len(window) - 1                        # window pre-tokens every probe leaves as they are
      for probe in PROBES:
        got = pre.pre_tokenize_str(text[lo:] + probe)
        same = 0
        while same < keep and same < len(got) and got[same][1] == window[same]:
          same += 1
        keep = same
        if keep == 0:
          break
      if keep > 0 or first == 0:
        return len(text[:spans[first + keep][0]].encode("utf-8"))
      first -= 8                                    # the change may reach further back: a wider window


# Continuations `ByteVocab.stable_start` tries: every character class of the pre-tokenizers' split patterns
# (letters of both cases and scripts, the contraction letters, digits, punctuation and symbols, a combining mark,
# whitespace of each kind with the newlines), then the contractions and pairs that patterns join into runs.
PROBES: tuple[str, ...] = (
    "a", "Z", "s", "t", "m", "d", "é", "中", "Ω", "5", "٣", ".", "'", "(", "_", "-", "€", "\u0301", "😀",
    " ", "\t", "\n", "\r", "\x0b", "\x0c", "\x85", "\u00a0", "\u2028", "\u3000",
    "'re", "'ve", "'ll", " a", " .", " 5", " \n", "\t\n", "\u00a0\n", "\r\n", "\n\n", "\n ", ".\n")


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
      tokenizer), naming it; or the tokenizer without its normalizer does not write `_LOSSLESS` back.
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
                    sorted_pieces=tuple(pieces[i] for i in ids), special=special, raw=_without_normalizer(tokenizer),
                    added=tuple(t.content for i, t in added.items() if i < n and not t.special and t.content))
  if vocab.raw is not None and vocab.decode(vocab.raw.encode(_LOSSLESS, add_special_tokens=False).ids) != \
      _LOSSLESS.encode("utf-8"):
    normalizer = json.loads(tokenizer.backend_tokenizer.to_str())["normalizer"]
    raise ValueError(f"the tokenizer without its normalizer ({normalizer}) does not write {_LOSSLESS!r} back "
                     "byte for byte: text its normalizer changes cannot be read by bytes (cross-tokenizer scoring "
                     "needs a byte-level BPE)")
  _CACHE[id(tokenizer)] = (tokenizer, vocab)
  return vocab


# Text a normalizer changes (NFC: the Angstrom and Ohm signs, a decomposed "é"), with whitespace and a special
# token's text: a tokenizer without its normalizer must write it back byte for byte (`byte_vocab`).
_LOSSLESS = "5 \u2126, \u212b, e\u0301 \t\n  <|im_end|> x"


def _without_normalizer(tokenizer):
  """The tokenizer's `tokenizers.Tokenizer` without its normalizer, special tokens' text encoded as text (None
  when it has no normalizer)."""
  backend = tokenizer.backend_tokenizer
  if backend.normalizer is None:
    return None
  raw = Tokenizer.from_str(backend.to_str())
  raw.normalizer = None
  raw.encode_special_tokens = True
  return raw
