"""When a response's reward is known: the one definition that the grader and the answer stop share.

A task with an answer span (`base.Task.answer_span`, reasoning-gym's `<answer>`, `</answer>`) is graded on its
*deciding span*: the first closed span whose content holds anything but whitespace. Spans are found as
reasoning-gym's `extract_answer` finds them (its regex `<answer>\\s?(.*?)\\s?</answer>` with re.DOTALL, matches
taken left to right: the leftmost `open`, then the first `close` that starts at or after its end, then the next
`open` after that `close`). An empty span (`<answer></answer>`, `<answer> \\n</answer>`: the template's format
echoed before or after the answer) decides nothing and is passed over. The text after the deciding span is never
read, so its reward is known the moment the span closes: `answer_end`, the cut a continuation may stop at
(`opd_jax.decode.stops`), is where the deciding span ends, and the text cut there gets the reward of the full
text whatever followed (a second answer included: the first stated answer counts, where reasoning-gym's own
`extract_answer` reads the last match, even an empty one; issue 49, item 2).

The definition is a byte automaton (`automaton`), the one the decode stop compiles over token ids; `deciding_span`
runs the same automaton over the UTF-8 bytes of a text. "Whitespace" is what Python's `str.strip()` removes
(`WHITESPACE`: ASCII's six, U+001C..U+001F, U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029, U+202F,
U+205F, U+3000), read byte by byte: a content is empty exactly when its bytes are a sequence of these characters'
UTF-8 encodings. Any other byte sequence decodes (errors="replace", as tokenizers decode) to some other character,
U+FFFD for invalid bytes, so the automaton over a response's raw token bytes and the same automaton over its
decoded text find the same span: the span strings must be ASCII, and ASCII bytes decode to themselves next to
any invalid sequence.
"""
import functools

import numpy as np

ANSWER_SPAN = ("<answer>", "</answer>")
WHITESPACE = "".join(c for c in map(chr, range(0x3001)) if not c.strip())   # str.strip's set (all below U+3001)
_WS_CODES = tuple(c.encode() for c in WHITESPACE)
# The content of an open span, as far as emptiness goes: NONEMPTY, EMPTY (only whitespace so far), or a proper
# prefix of a multi-byte whitespace character's encoding (e.g. b"\xe2\x80", the start of U+2003).
_PREFIXES = tuple(sorted({code[:k] for code in _WS_CODES for k in range(1, len(code))}))
_NONEMPTY, _EMPTY = 0, 1
_W = 2 + len(_PREFIXES)


def _content_after(w: int, data: bytes) -> int:
  """The emptiness state after content bytes `data` from state `w` (NONEMPTY, EMPTY or 2 + a prefix's index)."""
  for byte in data:
    if w == _NONEMPTY:
      return w
    seen = (b"" if w == _EMPTY else _PREFIXES[w - 2]) + bytes([byte])
    w = _EMPTY if seen in _WS_CODES else 2 + _PREFIXES.index(seen) if seen in _PREFIXES else _NONEMPTY
  return w


def _advance(pattern: bytes, i: int, byte: int) -> int:
  """Bytes of `pattern` matched after `i` matched and then `byte` (KMP by brute force: patterns are short)."""
  seen = pattern[:i] + bytes([byte])
  return next(k for k in range(min(len(seen), len(pattern)), -1, -1) if seen.endswith(pattern[:k]))


@functools.lru_cache(maxsize=16)
def automaton(span: tuple[str, str]) -> np.ndarray:
  """The automaton over bytes: int32 [S, 256], row = state, column = byte, entry = the next state.

  Built with states 0 .. len(open) - 1 (that many bytes of `open` matched; 0 is the start); then, inside a span,
  len(open) + j * W + w for j bytes of `close` matched (j < len(close)) and w the emptiness of the content before
  them (`_content_after`; W = 2 + the number of whitespace prefixes); and DONE, the last state (the deciding span
  closed; absorbing). A close that ends an empty content goes back to state 0 (the span is passed over). Returned
  minimal (`_minimal`: after the close's first byte only "empty so far or not" matters): 0 the start, 1 ..
  len(open) - 1 the open partly matched, then the states inside a span, DONE last (S - 1); for ("<answer>",
  "</answer>"), S = 34 (99 before minimising).

  Raises:
    ValueError: an empty or non-ASCII open or close string.
  """
  open_, close = (s.encode() for s in span)
  if not open_ or not close or not all(s.isascii() for s in span):
    raise ValueError(f"an answer span needs non-empty ASCII open and close strings, got {span!r}")
  n_open, n_close = len(open_), len(close)
  done = n_open + n_close * _W
  table = np.full((done + 1, 256), done, np.int32)
  for c in range(256):
    for i in range(n_open):
      k = _advance(open_, i, c)
      table[i, c] = n_open + _EMPTY if k == n_open else k          # open matched: an empty span starts
    for j in range(n_close):
      k = _advance(close, j, c)
      for w in range(_W):
        if k == n_close:                                           # the span closes on its content so far
          table[n_open + j * _W + w, c] = 0 if w == _EMPTY else done
        else:                                                      # bytes that left the close's window: content
          left = (close[:j] + bytes([c]))[:j + 1 - k]
          table[n_open + j * _W + w, c] = n_open + k * _W + _content_after(w, left)
  return _minimal(table, n_open)


def _minimal(table: np.ndarray, n_open: int) -> np.ndarray:
  """The equivalent automaton with fewest states (unreachable states dropped, equivalent ones merged by Moore's
  partition refinement), numbered by their first state in `table`: the start and the `n_open` states of a partly
  matched open keep their numbers (no two of them are equivalent, and no inside state equals one), DONE is last."""
  S = table.shape[0]
  reach, stack = {0}, [0]
  while stack:
    for t in set(table[stack.pop()].tolist()) - reach:
      reach.add(t)
      stack.append(t)
  states = sorted(reach)
  block = {s: int(s == S - 1) for s in states}
  while True:
    signature = {s: (block[s], *(block[t] for t in table[s].tolist())) for s in states}
    ids = {}
    new = {s: ids.setdefault(signature[s], len(ids)) for s in states}
    if len(ids) == len(set(block.values())):
      break
    block = new
  order = {}
  for s in states:                                             # number blocks by their first state; DONE last
    if s != S - 1:
      order.setdefault(block[s], len(order))
  order[block[S - 1]] = len(order)
  out = np.array([[order[block[t]] for t in table[s].tolist()] for s in sorted({min(
      x for x in states if block[x] == b) for b in set(block.values())})], np.int32)
  if any(order[block[i]] != i for i in range(n_open)) or out.shape[0] - 1 != order[block[S - 1]]:
    raise AssertionError("answer span automaton: the open states or DONE moved in minimisation")
  return out


@functools.lru_cache(maxsize=16)
def _rows(span: tuple[str, str]) -> list[list[int]]:
  """`automaton(span)` as nested lists (a Python loop indexes them fastest)."""
  return automaton(span).tolist()


def _inside(span: tuple[str, str], state: int) -> bool:
  """Whether `state` is inside a span: after the open string, before DONE (`automaton`'s numbering)."""
  return len(span[0]) <= state < len(_rows(span)) - 1


def deciding_span(text: str, span: tuple[str, str] = ANSWER_SPAN) -> tuple[int, int, int] | None:
  """The deciding span of `text` (module docstring), by `automaton` over its UTF-8 bytes.

  Returns:
    (content start, content end, end) as character offsets of `text`: the content is text[start:content_end],
    and text[:end] (ending with the close string) is the text whose reward equals the full text's; None when no
    closed span holds anything but whitespace.
  """
  if span[0] not in text:
    return None
  rows = _rows(span)
  data = text.encode("utf-8", "surrogatepass")
  done = len(rows) - 1
  state, start = 0, 0
  for i in range(data.find(span[0].encode()), len(data)):    # before the first open the start state holds
    new = rows[state][data[i]]
    if new == done:
      end = i + 1
      chars = lambda b: len(data[:b].decode("utf-8", "surrogatepass"))   # ASCII boundaries: whole characters
      return chars(start), chars(end - len(span[1])), chars(end)
    if _inside(span, new) and not _inside(span, state):
      start = i + 1                                             # the open string ends here
    state = new
  return None


def answer_end(text: str, span: tuple[str, str] = ANSWER_SPAN) -> int | None:
  """Where the reward of `text` is known: the end of its deciding span (a character offset), or None (module
  docstring). The answer stop cuts a continuation exactly there (`opd_jax.decode.stops`)."""
  found = deciding_span(text, span)
  return None if found is None else found[2]


def answer_content(text: str, span: tuple[str, str] = ANSWER_SPAN) -> str | None:
  """The stripped content of the deciding span of `text` (what the grader reads), or None when it has none."""
  found = deciding_span(text, span)
  return None if found is None else text[found[0]:found[1]].strip()
