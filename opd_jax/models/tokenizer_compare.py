"""Whether two tokenizers give the same token ids (a teacher that does reads the student's ids; one that does not
reads text: `opd_jax/teachers/cross_view.py`): vocabularies, merges, normalisation, probe texts and the chat
template's rendering compared, with the differences named (`tokenizer_differences`, `check_same_tokenizer`)."""
from __future__ import annotations

import json
from typing import Any

from opd_jax.models import tokenizer


# Probe strings: every kind of text the normaliser, the pre-tokeniser and the merges treat differently.
PROBE_TEXTS = (
    "Hello, world! The quick brown fox jumps over the lazy dog.",
    "I'm sure they'll say it's John's, isn't it? WE'RE HERE. camelCase snake_case kebab-case",
    "0 7 42 123 1234567 3.14159 -2.5e-3 1,000,000 2024-06-01 0x1F 10^9 12+30=42",
    "a  b   c    d\t\te\n\nf\r\ng \n   \n    h   ",
    "    indented\n\tdef\n        deeper\n",
    "naïve café Straße Ελληνικά русский язык 中文字符 日本語のテキスト 한국어 العربية हिन्दी",
    "e\u0301 A\u030a \ufb01 \uff21\uff22\uff23\uff11\uff12 \u2460 \u00bd \u212b",           # NFC / NFKC differ here
    "🙂👍🏽 👨‍👩‍👧‍👦 🇫🇷 ✨ ❤️ \u200b\u200d \ufffd \x00\x07",
    "def f(x: int) -> int:\n    return x ** 2  # square\n\nprint(f(3))\n",
    "for (int i = 0; i < n; ++i) { a[i] += b[i] >> 1; }  // C\n<div class=\"x\">&amp;</div>",
    '{"key": [1, 2.5, null, true], "k2": "v\\n"}  https://example.com/a?b=c&d=e#f  user@host.org',
    "$\\frac{a}{b} = \\sqrt{2}$, \\boxed{42}; ∑ ∫ ≤ ≥ ≠ → ∞ π² ½",
)


# The probe conversation: the roles a chat template renders (the study's prompts are one user turn).
PROBE_CHAT = (
    {"role": "system", "content": "You are a careful assistant."},
    {"role": "user", "content": "What is 12 + 30? Answer in one line."},
    {"role": "assistant", "content": "12 + 30 = 42."},
    {"role": "user", "content": "Now in Python:\n```python\nprint(12 + 30)\n```"},
)


_RENDERINGS = (("the probe conversation (system, user, assistant, user) with the generation prompt", PROBE_CHAT, True),
               ("the probe conversation without its system turn and generation prompt", PROBE_CHAT[1:], False),
               ("one user turn with the generation prompt (a study prompt)", PROBE_CHAT[1:2], True))


# Fix appended to a mismatch (`check_same_tokenizer`).
SAME_TOKENIZER_FIX = (
    "If the teacher was trained with the student's tokenizer, give it the student's tokenizer files: "
    "opd_jax.models.checkpoints.peek(STUDENT)[1].save_pretrained(TEACHER_FOLDER) (writes tokenizer.json, "
    "tokenizer_config.json, chat_template.jinja); otherwise per-token distillation needs a teacher of the "
    "student's tokenizer family")


_SHOW = 3                                                    # examples shown per kind of difference


def _real_vocab(tok) -> dict[str, int]:
  return {t: i for t, i in tok.get_vocab().items() if not tokenizer.is_filler(t, i)}


def _backend(tok) -> dict[str, Any] | None:
  """The `tokenizers` JSON of a fast tokenizer (None for a slow one)."""
  backend = getattr(tok, "backend_tokenizer", None)
  return None if backend is None else json.loads(backend.to_str())


def _merge_pairs(model: dict[str, Any]) -> list[tuple[str, ...]]:
  return [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model.get("merges") or []]


# BPE options whose unset forms (None, "", False, 0) tokenize alike: transformers' Qwen2Tokenizer writes "" where
# tokenizer.json has null.
_UNSET_ALIKE = ("continuing_subword_prefix", "end_of_word_suffix", "byte_fallback", "ignore_merges", "dropout")


def _option(model: dict[str, Any], key: str):
  """A tokenization model's option, its unset forms read as None for the `_UNSET_ALIKE` keys."""
  value = model.get(key)
  return None if key in _UNSET_ALIKE and value in (None, "", False, 0) else value


def _emits_unk(tok, backend: dict[str, Any] | None, vocab: dict[str, int]) -> bool:
  """Whether the model can emit its unk token: unless it is byte-level (a ByteLevel pre-tokenizer and all 256
  byte spellings in the vocabulary), which spells any text, or has byte fallback."""
  if backend is None:
    return tok.unk_token_id is not None
  model = backend["model"]
  if model.get("byte_fallback"):
    return False
  byte_level = '"ByteLevel"' in json.dumps(backend.get("pre_tokenizer"))
  return not (byte_level and set(tokenizer.byte_alphabet()) <= vocab.keys())


def _show(tok, ids: list[int], start: int, n: int = 4) -> str:
  """ids[start:start + n] with their tokens, e.g. `[279 'Ġthe', 1103 'Ġcat', ...]`; `[] (the end)` past the end."""
  if start >= len(ids):
    return "[] (the end)"
  part = ids[start:start + n]
  words = [f"{i} {t!r}" for i, t in zip(part, tok.convert_ids_to_tokens(part))]
  return "[" + ", ".join(words) + (", ..." if start + n < len(ids) else "") + "]"


def _first_difference(x: list[int], y: list[int]) -> int | None:
  if x == y:
    return None
  return next((k for k, (i, j) in enumerate(zip(x, y)) if i != j), min(len(x), len(y)))


def _short(text: str, n: int = 40) -> str:
  return repr(text if len(text) <= n else text[:n] + "...")


def _more(n: int) -> str:
  return f" (and {n:,} more)" if n > 0 else ""


def _encode(tok, texts: list[str], add_special_tokens: bool = False) -> list[list[int]]:
  return [list(ids) for ids in tok(texts, add_special_tokens=add_special_tokens)["input_ids"]]


def _render(tok, messages, add_generation_prompt: bool) -> list[int] | str:
  """The ids `tokenizer.chat_ids` renders, or a sentence saying why the template failed (no template, a raise)."""
  if not getattr(tok, "chat_template", None):
    return "has no chat template"
  try:
    return tokenizer.chat_ids(tok, list(messages), add_generation_prompt=add_generation_prompt)
  except Exception as e:  # pylint: disable=broad-exception-caught  (a template's own raise_exception)
    return f"fails to render it ({type(e).__name__}: {str(e)[:80]})"


def tokenizer_differences(a, b, *, names: tuple[str, str] = ("student", "teacher")) -> list[str]:
  """What makes two tokenizers give a model other token ids, as sentences; [] when they give the same ids.

  The rule: two tokenizers are the same when a model reads and writes the same ids through either. Compared:
    1. the vocabulary: token -> id, added tokens included; llama.cpp's `[PAD<id>]` fillers are left out (a GGUF
       padded to its embedding size has the ids of the HF tokenizer: Qwen2.5 0.5B and 7B files share one
       tokenizer despite 151,936 vs 152,064 entries);
    2. the model: its type, the BPE merges in rank order and the options that change ids (byte_fallback,
       ignore_merges, dropout, subword prefix / suffix; None, "" and False alike); the unk token only where
       the model can emit it (not a byte-level BPE, which spells every text in its 256 byte tokens);
    3. normalisation, pre-tokenisation and added tokens, by their effect: the ids of `PROBE_TEXTS` (ASCII,
       contractions, digits, whitespace runs, unicode incl. NFC/NFKC cases, emoji, code, maths) and of every
       added token of either tokenizer alone, inside a word and between spaces (add_special_tokens=False, as
       `tokenizer.chat_ids`); and the ids either adds itself (add_special_tokens=True: a BOS it prepends, an EOS);
    4. eos_token_id: responses end on it (the models' stop ids);
    5. the chat template, by the ids `tokenizer.chat_ids` renders for the `PROBE_CHAT` conversations.
  Not compared, as they change no id: the tokenizer class (transformers picks Qwen2Tokenizer for a qwen2
  config.json and TokenizersBackend for a llama one from the same files), the unk id of a byte-level BPE (never
  emitted), bos_token_id apart from its use (a BOS the tokenizer adds or the template writes is compared by 3
  and 5), pad_token_id (opd_jax pads with masked positions the model never reads), model_max_length, padding
  and truncation sides, decoding options. Normalisation and pre-tokenisation are compared on the probes only:
  two splits that differ on no probe count as the same.

  Args:
    a, b: transformers tokenizers (fast ones are compared on their `tokenizers` model too).
    names: what to call a and b in the sentences ("token 'Ġthe' is id 279 in the student's and 1103 in the
      teacher's").
  Returns:
    One sentence per kind of difference, most basic first (a vocabulary difference also changes every later
    comparison; vocabularies differing on over 10% of their tokens end the list there), each with up to three
    concrete examples; [] for the same ids. Pure: reads both tokenizers only.
  """
  na, nb = names
  out: list[str] = []
  if a is b:
    return out
  va, vb = _real_vocab(a), _real_vocab(b)
  if va != vb:
    if len(va) != len(vb):
      out.append(f"vocabulary sizes differ: {len(va):,} real ids in the {na}'s, {len(vb):,} in the {nb}'s")
    for mine, theirs, who, other in ((va, vb, na, nb), (vb, va, nb, na)):
      only = sorted((i, t) for t, i in mine.items() if t not in theirs)
      if only:
        shown = ", ".join(f"{t!r} (id {i})" for i, t in only[:_SHOW])
        out.append(f"{len(only):,} tokens are only in the {who}'s vocabulary, not the {other}'s: {shown}"
                   f"{_more(len(only) - _SHOW)}")
    moved = sorted((i, t) for t, i in va.items() if t in vb and vb[t] != i)
    if moved:
      shown = "; ".join(f"token {t!r} is id {i} in the {na}'s and {vb[t]} in the {nb}'s" for i, t in moved[:_SHOW])
      out.append(shown + (f" ({len(moved):,} tokens with other ids in all)" if len(moved) > 1 else ""))
    if len(va.items() ^ vb.items()) > max(len(va), len(vb)) // 10:     # another tokenizer: the rest differs too
      out.append("the vocabularies differ on over 10% of their tokens: another tokenizer (merges, probe texts "
                 "and the chat template not compared)")
      return out

  ja, jb = _backend(a), _backend(b)
  if ja is not None and jb is not None:
    ma, mb = ja["model"], jb["model"]
    skip = ("vocab", "merges", "unk_token", "fuse_unk")
    opts = sorted({k for k in (*ma, *mb) if k not in skip and _option(ma, k) != _option(mb, k)})
    if opts:
      out.append("the tokenization model differs: " + ", ".join(
          f"{k} is {ma.get(k)!r} in the {na}'s and {mb.get(k)!r} in the {nb}'s" for k in opts))
    if ma.get("type") == mb.get("type") == "Unigram":
      sa, sb = (dict(map(tuple, m["vocab"])) for m in (ma, mb))
      moved = sorted(t for t in sa.keys() & sb.keys() if sa[t] != sb[t])
      if moved:
        out.append(f"Unigram scores differ for {len(moved):,} pieces, e.g. " + ", ".join(
            f"{t!r}: {sa[t]} in the {na}'s, {sb[t]} in the {nb}'s" for t in moved[:_SHOW]))
    pa, pb = _merge_pairs(ma), _merge_pairs(mb)
    if pa != pb:
      r = _first_difference(pa, pb)
      ra, rb = (p[r] if r < len(p) else None for p in (pa, pb))
      out.append(f"BPE merges differ at rank {r}: {ra} in the {na}'s, {rb} in the {nb}'s ({len(pa):,} vs "
                 f"{len(pb):,} merges)")
    ua, ub = _emits_unk(a, ja, va), _emits_unk(b, jb, vb)
    ia, ib = (va.get(m.get("unk_token")) if e else None for m, e in ((ma, ua), (mb, ub)))
    if (ua or ub) and ia != ib:
      out.append(f"the unk id (emitted for text the vocabulary cannot spell) is {ia} in the {na}'s and {ib} in "
                 f"the {nb}'s")

  added = sorted({t for tok in (a, b) for t, i in tok.get_added_vocab().items() if not tokenizer.is_filler(t, i)})
  probes = list(PROBE_TEXTS) + [p for t in added for p in (t, f"x{t}y", f"a {t} b\n")]
  diffs = []
  for text, x, y in zip(probes, _encode(a, probes), _encode(b, probes)):
    k = _first_difference(x, y)
    if k is not None:
      diffs.append(f"{_short(text)} encodes from token {k} on as {_show(a, x, k)} in the {na}'s and "
                   f"{_show(b, y, k)} in the {nb}'s")
  if diffs:
    out.append(f"{len(diffs)} of {len(probes)} probe texts encode differently: " + "; ".join(diffs[:_SHOW])
               + _more(len(diffs) - _SHOW))
  text = PROBE_TEXTS[0]
  ((x,), (y,)) = (_encode(tok, [text], add_special_tokens=True) for tok in (a, b))
  bare = _encode(a, [text])[0]
  if x != y and bare == _encode(b, [text])[0]:
    k = _first_difference(x, y)
    out.append(f"the ids a tokenizer adds itself differ (add_special_tokens=True, e.g. a BOS it prepends): "
               f"{_short(text)} encodes from token {k} on as {_show(a, x, k)} in the {na}'s and {_show(b, y, k)} in "
               f"the {nb}'s")

  if a.eos_token_id != b.eos_token_id:
    out.append(f"eos_token_id differs: {a.eos_token_id} ({a.eos_token!r}) in the {na}'s, {b.eos_token_id} "
               f"({b.eos_token!r}) in the {nb}'s (responses end on it)")

  for what, messages, gen in _RENDERINGS:
    x, y = _render(a, messages, gen), _render(b, messages, gen)
    if x == y:
      continue
    if isinstance(x, str) or isinstance(y, str):
      said = [f"the {n}'s {r}" for n, r in ((na, x), (nb, y)) if isinstance(r, str)]
      out.append(f"the chat templates differ on {what}: " + " and ".join(said)
                 + ("" if len(said) == 2 else f", the {nb if isinstance(x, str) else na}'s renders it"))
    else:
      k = _first_difference(x, y)
      out.append(f"the chat template renders {what} differently from token {k} on: {_show(a, x, k)} in the "
                 f"{na}'s, {_show(b, y, k)} in the {nb}'s")
    break                                              # one rendering says it; the others mostly repeat it
  return out


def tokenizer_difference(a, b, *, names: tuple[str, str] = ("student", "teacher")) -> str | None:
  """The differences of `tokenizer_differences` joined in one sentence, or None when the ids are the same."""
  diffs = tokenizer_differences(a, b, names=names)
  return "; ".join(diffs) if diffs else None


def same_tokenizer(a, b) -> bool:
  """Whether a model reads and writes the same ids through both tokenizers (rule: `tokenizer_differences`)."""
  return not tokenizer_differences(a, b)


def check_same_tokenizer(student, teacher, *, where: str = "the teacher") -> None:
  """Raises ValueError unless the teacher's tokenizer gives the student's ids (`tokenizer_differences`).

  Cheap (no weights: tokenizers from `checkpoints.peek`), so callers check it before loading either model.
  Args:
    student, teacher: transformers tokenizers.
    where: how the message names the teacher, e.g. "config.configurations['b']: teacher '/m/qwen'".
  Raises:
    ValueError: naming every difference concretely and the fix (`SAME_TOKENIZER_FIX`).
  """
  diffs = tokenizer_differences(student, teacher)
  if diffs:
    raise ValueError(f"{where} does not share the student's tokenizer (a model reads and writes other ids through "
                     "it): " + "; ".join(diffs) + ". " + SAME_TOKENIZER_FIX)
