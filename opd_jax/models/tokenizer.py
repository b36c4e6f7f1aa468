"""Tokenizers without torch: byte-level BPE from GGUF metadata, a tiny byte tokenizer, and the same-ids check.

Every loaded model carries a transformers `PreTrainedTokenizerFast` (in transformers v5 an alias of
`TokenizersBackend`), whatever its source, so `apply_chat_template` behaves the same for HF folders and GGUF
files. For a GGUF file the tokenizer is rebuilt from the metadata llama.cpp writes:

  tokenizer.ggml.model        "gpt2" (byte-level BPE; the only model supported here)
  tokenizer.ggml.pre          the pre-tokenizer (how text is split before BPE): see `PRE_TOKENIZERS`; required
  tokenizer.ggml.tokens       [V] token strings, spelled in the GPT-2 byte alphabet
  tokenizer.ggml.token_type   [V] 1 normal, 3 control (special), 4 user-defined, 5 unused (fillers), ...
  tokenizer.ggml.merges       BPE merges "a b", best first
  tokenizer.ggml.{bos,eos,padding,unknown}_token_id, tokenizer.ggml.add_{bos,eos}_token
  tokenizer.chat_template     the Jinja chat template

Ids that exist: llama.cpp's converter pads the token list to the embedding size with fillers `[PAD<id>]`
(token type 5; Qwen2.5: ids 151665..151935 of the 0.5B and 1.5B files, ..152063 of the 7B and larger). They are
no tokens of the model: `real_vocab_size` counts the ids before them, `tokenizer_differences` ignores them, and
the decoder masks their logits (decoder.Config.n_real_ids). `chat_ids` is the one way prompts are rendered.

Same tokenizer: `tokenizer_differences(student, teacher)` lists what makes a model read or write other ids
through one than through the other ([] = the same; its docstring has the rule): the vocabulary, the merges, the
normalisation and split (on probe texts), added tokens, eos and the chat template's rendering, not the
tokenizer class or attributes that change no id. `check_same_tokenizer` raises with all of them; it needs the
tokenizers only (`checkpoints.peek`), so it runs before any weights load.

A preset's tokenizer as a folder, e.g. for your own HF teacher trained with the student's tokenizer (writes
tokenizer.json, tokenizer_config.json and chat_template.jinja; a teacher folder keeps its config.json and
weights):

  >>> from opd_jax.models import checkpoints
  >>> _, tok = checkpoints.peek("qwen2.5-coder-0.5b-instruct")  # config and tokenizer, no weights read
  >>> tok.save_pretrained("my_teacher")                         # the HF teacher's folder (or an empty one)
"""
from __future__ import annotations

import functools
import json
import re
from typing import Any

import transformers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

PreTrainedTokenizerFast = transformers.PreTrainedTokenizerFast

CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

# llama.cpp token types (gguf.TokenType).
_CONTROL, _USER_DEFINED = 3, 4

# Split patterns of the pre-tokenizers llama.cpp names in `tokenizer.ggml.pre` (the original tokenizer.json's).
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def _split_then_bytes(pattern: str):
  return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
                                  pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


# tokenizer.ggml.pre -> (normalizer or None, pre-tokenizer) factories, as in the models' own tokenizer.json.
PRE_TOKENIZERS = {
    "qwen2": lambda: (normalizers.NFC(), _split_then_bytes(_QWEN2_SPLIT)),
    "deepseek-r1-qwen": lambda: (normalizers.NFC(), _split_then_bytes(_QWEN2_SPLIT)),
    "llama-bpe": lambda: (None, _split_then_bytes(_LLAMA3_SPLIT)),
    "llama3": lambda: (None, _split_then_bytes(_LLAMA3_SPLIT)),
    "smollm": lambda: (None, pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])),
    "gpt2": lambda: (None, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)),
}
# No entry for a missing tokenizer.ggml.pre or llama.cpp's "default": either means the converter did not know
# the model's split, and guessing one gives other ids on ordinary text (llama.cpp #7476); see from_gguf_metadata.
_NO_PRE = ("tokenizer.ggml.pre is {what}: the file does not say how the model splits text before BPE, and any "
           "guess (llama.cpp falls back to a default split) gives other token ids than the model's own tokenizer "
           "(llama.cpp #7476). Pass the model's original tokenizer folder (tokenizer.json): "
           "models.load(gguf_path, tokenizer=folder), or reconvert the file with a current llama.cpp "
           "convert_hf_to_gguf.py, which writes the field.")


@functools.cache
def byte_alphabet() -> tuple[str, ...]:
  """GPT-2's printable spelling of each byte: `byte_alphabet()[b]` is the character standing for byte b."""
  printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
  spelling, extra = {}, 0
  for b in range(256):
    if b in printable:
      spelling[b] = chr(b)
    else:
      spelling[b] = chr(256 + extra)
      extra += 1
  return tuple(spelling[b] for b in range(256))


def wrap(tokenizer: Tokenizer, *, bos: str | None, eos: str | None, pad: str | None, unk: str | None,
         chat_template: str | None, add_bos: bool = False, add_eos: bool = False,
         model_max_length: int | None = None) -> PreTrainedTokenizerFast:
  """A transformers `PreTrainedTokenizerFast` around a `tokenizers.Tokenizer`, with its special tokens."""
  kwargs: dict[str, Any] = dict(tokenizer_object=tokenizer, bos_token=bos, eos_token=eos, pad_token=pad,
                                unk_token=unk, chat_template=chat_template, add_bos_token=add_bos,
                                add_eos_token=add_eos)
  if model_max_length:
    kwargs["model_max_length"] = model_max_length
  return PreTrainedTokenizerFast(**{k: v for k, v in kwargs.items() if v is not None})


def from_gguf_metadata(meta: dict[str, Any], *, model_max_length: int | None = None) -> PreTrainedTokenizerFast:
  """Byte-level BPE tokenizer from GGUF tokenizer metadata (keys as in the module docstring).

  Args:
    meta: GGUF metadata: key -> value (lists for the array keys); only the tokenizer.* keys are read.
    model_max_length: the checkpoint's context length, recorded on the tokenizer.
  Returns:
    A PreTrainedTokenizerFast with the GGUF's vocabulary, merges, control tokens as special added tokens,
    user-defined tokens as added tokens, bos/eos/pad/unk tokens and chat template.
  Raises:
    ValueError: tokenizer.ggml.model is not "gpt2"; tokenizer.ggml.pre missing or "default" (never guessed: pass
      a tokenizer folder instead, see `_NO_PRE`) or not in PRE_TOKENIZERS.
  """
  kind = meta.get("tokenizer.ggml.model")
  if kind != "gpt2":
    raise ValueError(f"GGUF tokenizer.ggml.model={kind!r} is not supported; only byte-level BPE ('gpt2') "
                     "tokenizers are (Llama / Qwen2 / Qwen3 / SmolLM vocabularies). Load an HF folder instead.")
  pre = meta.get("tokenizer.ggml.pre")
  if pre is None or pre == "default":
    raise ValueError(_NO_PRE.format(what="missing" if pre is None else "'default'"))
  if pre not in PRE_TOKENIZERS:
    raise ValueError(f"GGUF tokenizer.ggml.pre={pre!r} is not supported; known: {sorted(PRE_TOKENIZERS)}. "
                     "Add its split pattern to opd_jax.models.tokenizer.PRE_TOKENIZERS.")
  tokens = list(meta["tokenizer.ggml.tokens"])
  types = list(meta.get("tokenizer.ggml.token_type") or [1] * len(tokens))
  alphabet = byte_alphabet()
  in_alphabet = set(alphabet)

  def spell(token: str) -> str:  # a token outside the byte alphabet is spelled byte by byte
    return token if set(token) <= in_alphabet else "".join(alphabet[b] for b in token.encode("utf-8"))

  vocab = {spell(t): i for i, t in enumerate(tokens)}
  merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges", [])]
  tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
  normalizer, pre_tokenizer = PRE_TOKENIZERS[pre]()
  if normalizer is not None:
    tok.normalizer = normalizer
  tok.pre_tokenizer = pre_tokenizer
  tok.decoder = decoders.ByteLevel()
  # Control tokens spelled outside the byte alphabet are llama.cpp mislabels: adding them would grow V.
  special = [AddedToken(t, normalized=False, special=True) for t, k in zip(tokens, types)
             if k == _CONTROL and set(t) <= in_alphabet]
  tok.add_special_tokens(special)
  tok.add_tokens([AddedToken(t, normalized=False, special=False) for t, k in zip(tokens, types)
                  if k == _USER_DEFINED and set(t) <= in_alphabet])

  def token(key):
    i = meta.get(f"tokenizer.ggml.{key}")
    return None if i is None else tokens[int(i)]

  return wrap(tok, bos=token("bos_token_id"), eos=token("eos_token_id"), pad=token("padding_token_id"),
              unk=token("unknown_token_id"), chat_template=meta.get("tokenizer.chat_template"),
              add_bos=bool(meta.get("tokenizer.ggml.add_bos_token", False)),
              add_eos=bool(meta.get("tokenizer.ggml.add_eos_token", False)), model_max_length=model_max_length)


def byte_tokenizer(chat_template: str = CHATML_TEMPLATE) -> PreTrainedTokenizerFast:
  """A tiny byte-level tokenizer for random test models: ids 0..255 are the bytes, no merges, then
  <|endoftext|> (256, pad), <|im_start|> (257) and <|im_end|> (258, eos); ChatML chat template. V = 259."""
  specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
  vocab = {c: b for b, c in enumerate(byte_alphabet())} | {s: 256 + i for i, s in enumerate(specials)}
  tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
  tok.decoder = decoders.ByteLevel()
  tok.add_special_tokens([AddedToken(s, normalized=False, special=True) for s in specials])
  return wrap(tok, bos=None, eos="<|im_end|>", pad="<|endoftext|>", unk=None, chat_template=chat_template)


def is_filler(token: str, i: int) -> bool:
  """Whether token `token` at id i is one of llama.cpp's fillers `[PAD<i>]` (GGUF token type 5, written for the
  embedding rows past the tokenizer's last token): not a token of the model."""
  return token.startswith("[PAD") and token == f"[PAD{i}]"


def real_vocab_size(tokenizer) -> int:
  """N, the number of ids that exist: the tokenizer's tokens (added tokens included) less llama.cpp's fillers.

  Qwen2.5: 151,665 for its HF tokenizer and for the GGUF ones alike (which carry 271 fillers up to 151,936).
  Raises:
    ValueError: the real tokens are not exactly the ids 0..N-1 (fillers may only follow them), naming the gap.
  """
  vocab = tokenizer.get_vocab()
  real = sorted(i for t, i in vocab.items() if not is_filler(t, i))
  n = len(real)
  if real and (real[0] != 0 or real[-1] != n - 1):
    gap = next((k for k, i in enumerate(real) if i != k), n)
    raise ValueError(f"the tokenizer's {n} real tokens (llama.cpp fillers '[PAD<id>]' left out) are not the ids "
                     f"0..{n - 1}: id {gap} is {'a filler' if gap in vocab.values() else 'missing'} but id {real[-1]} "
                     "is real; opd_jax masks the ids past the real ones, so fillers may only sit at the end. Load "
                     "the model's original tokenizer folder instead")
  return n


def chat_ids(tokenizer, messages: list[dict[str, str]], *, add_generation_prompt: bool = True,
             **chat_kwargs) -> list[int]:
  """Token ids of a chat, rendered by the tokenizer's chat template: the one way prompts are built.

  The template writes every special token of the prompt, the BOS included where the model has one, and the
  tokenizer adds none (`add_special_tokens=False`, as transformers' `apply_chat_template(tokenize=True)`).
  Tokenizing the rendered text with the default `tokenizer(text)` instead puts a second BOS before the prompt for
  tokenizers that add one (add_bos_token) and whose template writes it too (OpenRLHF #393).

  Args:
    tokenizer: a transformers tokenizer with a chat template.
    messages: [{"role": ..., "content": ...}, ...].
    add_generation_prompt: end with the assistant turn's header (the model answers next).
    chat_kwargs: extra template flags, e.g. enable_thinking=False for Qwen3.

  Message contents are data, never control tokens: text that spells a special token (`<|im_end|>` in a rollout
  shown in a teacher's context) encodes as its characters, and only the template's own special tokens are
  special. Contents without such text render exactly as the template text tokenized whole.

  Raises:
    ValueError: a content spells a special token and the template does not write contents verbatim (then its
      own special tokens cannot be told from the content's).
  """
  render = lambda msgs: tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=add_generation_prompt,
                                                      **chat_kwargs)
  text = render(messages)
  specials = sorted({t.content for t in tokenizer.added_tokens_decoder.values() if t.special}, key=len, reverse=True)
  if not any(sp in str(m.get("content") or "") for m in messages for sp in specials):
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])
  # Render with placeholders to tell the template's special tokens from the contents', then split the text at the
  # template's only (as a tokenizer splits at added tokens) and encode the pieces between them as plain text.
  marks = [f"\ue000{i}\ue001" for i in range(len(messages))]
  shown = render([{**m, "content": k} for m, k in zip(messages, marks)])
  parts = re.split("(" + "|".join(map(re.escape, marks)) + ")", shown)
  contents = {k: str(m.get("content") or "") for m, k in zip(messages, marks)}
  if "".join(contents.get(p, p) for p in parts) != text:
    raise ValueError("the chat template changes message contents, so text in them that spells a special token "
                     f"({', '.join(specials)}) cannot be kept as data; remove it from the message")
  split = re.compile("(" + "|".join(map(re.escape, specials)) + ")")
  items = []                                     # plain-text runs and the template's special tokens, in order
  for p in parts:
    for q in [contents[p]] if p in contents else split.split(p):
      if p not in contents and q in specials:
        items.append((q,))
      elif items and isinstance(items[-1], str):
        items[-1] += q
      else:
        items.append(q)
  ids = []
  for item in items:
    if isinstance(item, tuple):
      ids.append(tokenizer.convert_tokens_to_ids(item[0]))
    elif item:
      ids += tokenizer(item, add_special_tokens=False, split_special_tokens=True)["input_ids"]
  return ids


# ---------------------------------------------------------------------------------------- same token ids or not

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
  return {t: i for t, i in tok.get_vocab().items() if not is_filler(t, i)}


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
  return not (byte_level and set(byte_alphabet()) <= vocab.keys())


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
  """The ids `chat_ids` renders, or a sentence saying why the template failed (no template, a raise)."""
  if not getattr(tok, "chat_template", None):
    return "has no chat template"
  try:
    return chat_ids(tok, list(messages), add_generation_prompt=add_generation_prompt)
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
       `chat_ids`); and the ids either adds itself (add_special_tokens=True: a BOS it prepends, an EOS);
    4. eos_token_id: responses end on it (the models' stop ids);
    5. the chat template, by the ids `chat_ids` renders for the `PROBE_CHAT` conversations.
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

  added = sorted({t for tok in (a, b) for t, i in tok.get_added_vocab().items() if not is_filler(t, i)})
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
