"""Tokenizers without torch: byte-level BPE from GGUF metadata, a tiny byte tokenizer, and equality checks.

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
no tokens of the model: `real_vocab_size` counts the ids before them, `tokenizer_difference` ignores them, and
the decoder masks their logits (decoder.Config.n_real_ids). `chat_ids` is the one way prompts are rendered.
"""
from __future__ import annotations

import functools
import json
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


def _merges(tok: PreTrainedTokenizerFast) -> list[tuple[str, str]]:
  model = json.loads(tok.backend_tokenizer.to_str())["model"]
  return [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model.get("merges", [])]


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
  """
  text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt,
                                       **chat_kwargs)
  return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def tokenizer_difference(a, b) -> str | None:
  """The first difference between two tokenizers as a sentence, or None when they are the same.

  Compared: the real vocabulary (token -> id, added tokens included, llama.cpp's `[PAD<id>]` fillers left out:
  a GGUF padded to its embedding size reads and writes the same ids as the HF tokenizer, and Qwen2.5 0.5B and
  7B files share one tokenizer despite 151,936 vs 152,064 entries), the BPE merges in order, and the ids of the
  bos, eos, pad and unk tokens. Two models whose tokenizers agree on these read and write the same ids.
  """
  va, vb = ({t: i for t, i in tok.get_vocab().items() if not is_filler(t, i)} for tok in (a, b))
  if va != vb:
    only_a, only_b = sorted(va.keys() - vb.keys()), sorted(vb.keys() - va.keys())
    if len(va) != len(vb):
      return f"vocabulary sizes differ: {len(va)} vs {len(vb)} (first only in one: {(only_a or only_b)[:3]})"
    if only_a or only_b:
      return f"vocabularies differ: tokens {only_a[:3]} vs {only_b[:3]}"
    tok = min((t for t in va if va[t] != vb[t]), key=lambda t: va[t])
    return f"token {tok!r} has id {va[tok]} vs {vb[tok]}"
  ma, mb = _merges(a), _merges(b)
  if ma != mb:
    i = next((i for i, (x, y) in enumerate(zip(ma, mb)) if x != y), min(len(ma), len(mb)))
    return (f"BPE merges differ at rank {i}: {ma[i] if i < len(ma) else None} vs "
            f"{mb[i] if i < len(mb) else None} ({len(ma)} vs {len(mb)} merges)")
  for name in ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id"):
    if getattr(a, name) != getattr(b, name):
      return f"{name} differs: {getattr(a, name)} vs {getattr(b, name)}"
  return None


def same_tokenizer(a, b) -> bool:
  """Whether two tokenizers have the same real vocabulary, merges and special ids (see `tokenizer_difference`)."""
  return tokenizer_difference(a, b) is None
