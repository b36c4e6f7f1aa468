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


