"""Same tokenizer = same token ids (issue 27, item 2): `tokenizer_differences` compares what changes the ids a
model reads and writes (vocabulary, merges, normalisation / pre-tokenisation on probe texts, added tokens, eos,
the chat template's rendering), not what does not (the tokenizer class, a byte-level BPE's unk id, pad,
model_max_length). Tiny BPE tokenizers built here, saved to tmp folders and loaded back by transformers."""
import json

import pytest
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from opd_jax.models import checkpoints
from opd_jax.models import presets
from opd_jax.models import tokenizer as tok_lib
from opd_jax.models import tokenizer_compare

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = ["The quick brown fox jumps over the lazy dog, and the cat sat on the mat.",
          "def add(a, b):\n    return a + b\n", "In 2024, 123 people paid 123 dollars; 12 + 30 = 42; 1234567 123 123.",
          "Café au lait, s'il vous plaît! naïve Straße"] * 20
DIGITS = tokenizer_compare.PROBE_TEXTS[2]
QWEN2_SPLIT, LLAMA3_SPLIT = tok_lib._QWEN2_SPLIT, tok_lib._LLAMA3_SPLIT  # pylint: disable=protected-access
# A template with Qwen2.5's default system turn: renders a conversation without one differently from ChatML.
DEFAULT_SYSTEM = ("{% if messages[0]['role'] != 'system' %}<|im_start|>system\nYou are helpful.<|im_end|>\n"
                  "{% endif %}" + tok_lib.CHATML_TEMPLATE)
TOOL_TEMPLATE = tok_lib.CHATML_TEMPLATE.replace("<|im_start|>{{ message['role'] }}",
                                                "<|im_start|>{{ message['role'] }}<|tool|>")


@pytest.fixture(scope="module")
def trained() -> tuple[dict[str, int], list[tuple[str, str]]]:
  """(vocab, merges) of a byte-level BPE trained here on CORPUS with Llama 3's split (digit runs of up to 3): the
  256 bytes, then merges (digits included)."""
  tok = Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.Sequence([
      pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated"),
      pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
  tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=400, show_progress=False,
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
  model = json.loads(tok.to_str())["model"]
  merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model["merges"]]
  assert {"Ġthe", "12", "123"} <= model["vocab"].keys() and len(merges) > 100
  return model["vocab"], merges


def make(trained, *, vocab=None, merges=None, split=QWEN2_SPLIT, nfc=True, specials=SPECIALS,
         added=(), eos="<|im_end|>", bos="<|endoftext|>", template=tok_lib.CHATML_TEMPLATE, **kw):
  """A Qwen2.5-like tokenizer (NFC, Qwen's split, byte-level BPE; specials after the vocabulary; ChatML) over the
  trained vocabulary, or the given one; `added`: extra added tokens (AddedToken or str = special)."""
  vocab = dict(trained[0] if vocab is None else vocab)
  for s in specials:
    vocab.setdefault(s, max(vocab.values()) + 1)
  tok = Tokenizer(models.BPE(vocab=vocab, merges=list(trained[1] if merges is None else merges)))
  if nfc:
    tok.normalizer = normalizers.NFC()
  tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(split), behavior="isolated"),
                                               pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
  tok.decoder = decoders.ByteLevel()
  tok.add_special_tokens([AddedToken(s, normalized=False, special=True) for s in specials])
  tok.add_tokens([a if isinstance(a, AddedToken) else AddedToken(a, normalized=False, special=True) for a in added])
  return tok_lib.wrap(tok, bos=bos, eos=eos, pad="<|endoftext|>", unk=None, chat_template=template, **kw)


def both_ways(a, b) -> tuple[list[str], list[str]]:
  """The differences a -> b and b -> a (student / teacher swapped)."""
  return tokenizer_compare.tokenizer_differences(a, b), tokenizer_compare.tokenizer_differences(b, a)


def saved(tok, folder, model_type: str | None = None, **config_edits):
  """`tok` saved as a folder (as `checkpoints.peek(name)[1].save_pretrained(folder)`), with a config.json of
  `model_type` and tokenizer_config.json edits; loaded back through `checkpoints.hf_tokenizer` (AutoTokenizer)."""
  tok.save_pretrained(folder)
  if model_type:
    (folder / "config.json").write_text(json.dumps({"model_type": model_type}))
  if config_edits:
    path = folder / "tokenizer_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **config_edits}))
  return checkpoints.hf_tokenizer(folder)


# ----------------------------------------------------------------------------- the reported case: not a mismatch

def test_same_files_loaded_as_two_classes_are_the_same(trained, tmp_path):
  """The reported case: one tokenizer's files under a qwen2 config.json load as Qwen2Tokenizer (unk id 151643 in
  the real preset, here that of <|endoftext|>), under a llama one as TokenizersBackend (unk None): the old check
  refused 'unk_token_id differs'; the ids are the same, so the new one accepts every pair, both ways."""
  ref = make(trained)
  qwen2 = saved(ref, tmp_path / "qwen2", "qwen2")
  llama = saved(ref, tmp_path / "llama", "llama")
  unk_null = saved(ref, tmp_path / "unk_null", "qwen2", unk_token=None)
  other_attrs = saved(ref, tmp_path / "attrs", "qwen2", model_max_length=128, padding_side="left",
                      pad_token="<|im_start|>", bos_token=None)
  assert type(qwen2).__name__ == "Qwen2Tokenizer" and type(llama).__name__ != "Qwen2Tokenizer"
  assert (qwen2.unk_token_id, llama.unk_token_id) == (ref.convert_tokens_to_ids("<|endoftext|>"), None)
  assert (other_attrs.pad_token_id, other_attrs.model_max_length) != (ref.pad_token_id, ref.model_max_length)
  for a, b in [(ref, qwen2), (qwen2, llama), (llama, unk_null), (unk_null, other_attrs), (other_attrs, ref)]:
    assert both_ways(a, b) == ([], []), (type(a).__name__, type(b).__name__)
    assert tokenizer_compare.same_tokenizer(a, b) and tokenizer_compare.tokenizer_difference(a, b) is None
  tokenizer_compare.check_same_tokenizer(ref, qwen2)                        # does not raise


def test_qwen2_class_replaces_the_files_split(trained, tmp_path):
  """The other side of the class: transformers' Qwen2Tokenizer builds Qwen's own normaliser and split, whatever
  tokenizer.json says. Files with Llama 3's split (digits in runs of 3) read as a llama model and as a qwen2 one
  are two tokenizers: found on the digit probes, with the ids."""
  llama3 = make(trained, split=LLAMA3_SPLIT)
  as_llama = saved(llama3, tmp_path / "llama", "llama")
  as_qwen2 = saved(llama3, tmp_path / "qwen2", "qwen2")
  assert tokenizer_compare.same_tokenizer(llama3, as_llama)
  for diffs in both_ways(as_llama, as_qwen2):
    assert "probe texts encode differently" in diffs[0] and repr(DIGITS[:40] + "...") in diffs[0]
    assert "'123'" in diffs[0]                                    # one token in Llama 3's split, three in Qwen's
    assert len(diffs) == 2 and "renders the probe conversation" in diffs[1]      # its "12 + 30", too


# ------------------------------------------------------------------------------------------------- vocabulary

@pytest.mark.parametrize("pair", [("Ġthe", "Ġand"), ("a", "b"), ("123", "<|im_end|>"), ("Ġquick", "<|endoftext|>")])
def test_a_swapped_id_names_the_tokens(trained, pair):
  a = make(trained)
  va = a.get_vocab()
  x, y = pair
  vb = {**va, x: va[y], y: va[x]}
  b = make(trained, vocab=vb)
  for diffs, (na, nb), (ia, ib) in zip(both_ways(a, b), [("student", "teacher")] * 2, [(va, vb), (vb, va)]):
    assert diffs, pair
    for t in pair:
      assert f"token {t!r} is id {ia[t]} in the {na}'s and {ib[t]} in the {nb}'s" in diffs[0]
    assert "(2 tokens with other ids in all)" in diffs[0]


def test_a_token_missing_or_another_vocabulary(trained):
  a = make(trained)
  missing = dict(trained[0])
  del missing["Ġquick"]
  b = make(trained, vocab=missing, merges=[m for m in trained[1] if "".join(m) != "Ġquick"])
  ab, ba = both_ways(a, b)
  assert ab[0].startswith("vocabulary sizes differ: ")
  assert "1 tokens are only in the student's vocabulary, not the teacher's: 'Ġquick'" in ab[1]
  assert "1 tokens are only in the teacher's vocabulary, not the student's: 'Ġquick'" in ba[1]
  byte = tok_lib.byte_tokenizer()
  for diffs in both_ways(a, byte):
    assert diffs[0].startswith("vocabulary sizes differ")
    assert diffs[-1].startswith("the vocabularies differ on over 10% of their tokens: another tokenizer")


# ---------------------------------------------------------------------- merges, normalisation, pre-tokenisation

@pytest.mark.parametrize("edit", ["drop", "swap", "replace"])
def test_a_different_merge(trained, edit):
  merges = list(trained[1])
  # A merge whose token another pair of tokens also spells: ("Ġ", "the") vs ("Ġt", "he") for "Ġthe".
  rank, pair = next((r, (w[:k], w[k:])) for r, w in ((r, "".join(m)) for r, m in enumerate(merges) if r >= 20)
                    for k in range(1, len(w)) if (w[:k], w[k:]) not in merges and {w[:k], w[k:]} <= trained[0].keys())
  if edit == "drop":
    other = merges[:rank] + merges[rank + 1:]
  elif edit == "swap":
    other = merges[:rank] + [merges[rank + 1], merges[rank]] + merges[rank + 2:]
  else:                                      # its token built from the other pair
    other = merges[:rank] + [pair] + merges[rank + 1:]
  a, b = make(trained), make(trained, merges=other)
  for diffs, (x, y) in zip(both_ways(a, b), [(merges, other), (other, merges)]):
    assert diffs[0].startswith(f"BPE merges differ at rank {rank}: {x[rank]} in the student's, {y[rank]} in the "
                               "teacher's")
    if edit != "swap":                       # a word of the probes is spelled otherwise
      assert len(diffs) >= 2 and "probe texts encode differently" in diffs[1]


@pytest.mark.parametrize("kind,probe", [("split", DIGITS), ("nfc", tokenizer_compare.PROBE_TEXTS[6])])
def test_another_split_or_normaliser(trained, kind, probe):
  """Same vocabulary and merges, another pre-tokenizer (Llama 3's digit runs) or no NFC: the probes show it."""
  a = make(trained)
  b = make(trained, split=LLAMA3_SPLIT) if kind == "split" else make(trained, nfc=False)
  for diffs in both_ways(a, b):
    assert diffs[0].startswith("1 of " if kind == "nfc" else "2 of ") and "probe texts encode differently" in diffs[0]
    assert repr(probe if len(probe) <= 40 else probe[:40] + "...") + " encodes from token" in diffs[0]
    assert len(diffs) == (1 if kind == "nfc" else 2)                  # the split changes the chat's "12 + 30"


# ----------------------------------------------------------------------------------------- special ids, adds

@pytest.mark.parametrize("eos", ["<|endoftext|>", "<|im_start|>", None])
def test_a_different_eos(trained, eos):
  a, b = make(trained), make(trained, eos=eos)
  ia, ib = a.eos_token_id, b.eos_token_id
  ab, ba = both_ways(a, b)
  assert ab == [f"eos_token_id differs: {ia} ('<|im_end|>') in the student's, {ib} ({eos!r}) in the teacher's "
                "(responses end on it)"]
  assert ba == [f"eos_token_id differs: {ib} ({eos!r}) in the student's, {ia} ('<|im_end|>') in the teacher's "
                "(responses end on it)"]


def test_bos_counts_where_it_is_used(trained):
  """bos_token_id changes no id unless the tokenizer prepends it (or the template writes it: the chat check)."""
  a = make(trained)
  assert both_ways(a, make(trained, bos=None)) == ([], [])
  assert both_ways(a, make(trained, bos="<|im_start|>")) == ([], [])
  prepends = make(trained, add_bos=True)
  assert prepends("hi")["input_ids"][0] == a.bos_token_id
  for diffs in both_ways(a, prepends):
    assert len(diffs) == 1 and diffs[0].startswith("the ids a tokenizer adds itself differ")


def test_unk_counts_only_where_it_can_be_emitted():
  """A BPE without all 256 bytes can emit its unk: another unk id is then a difference."""
  vocab = {c: i for i, c in enumerate("abcdefgh ")} | {"<unk>": 9, "<s>": 10}

  def word(unk):
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=unk))
    tok.add_special_tokens([AddedToken(s, special=True) for s in ("<unk>", "<s>")])
    return tok_lib.wrap(tok, bos=None, eos="<s>", pad=None, unk=unk, chat_template=None)
  for diffs in both_ways(word("<unk>"), word("<s>")):
    assert diffs[0].startswith("the unk id (emitted for text the vocabulary cannot spell) is ")
    assert "probe texts encode differently" in diffs[1]
  assert both_ways(word("<unk>"), word("<unk>")) == ([], [])


# ---------------------------------------------------------------------------------------------- chat template

@pytest.mark.parametrize("template,says", [
    (DEFAULT_SYSTEM, "the chat template renders the probe conversation without its system turn"),
    (tok_lib.CHATML_TEMPLATE.replace("<|im_end|>\n", "<|im_end|>"), "with the generation prompt differently from"),
    (tok_lib.CHATML_TEMPLATE.replace("assistant\n{% endif %}", "assistant\n<think>\n\n</think>\n\n{% endif %}"),
     "with the generation prompt differently from token 158 on: "),
    (None, "has no chat template"),
    ("{{ raise_exception('no system role') if messages[0]['role'] == 'system' }}" + tok_lib.CHATML_TEMPLATE,
     "fails to render it (TemplateError: no system role)")])
def test_a_template_that_renders_differently(trained, template, says):
  a, b = make(trained), make(trained, template=template)
  for diffs in both_ways(a, b):
    assert len(diffs) == 1 and diffs[0].startswith("the chat template") and says in diffs[0]
  if template and "<think>" in template:
    assert "[] (the end) in the student's, [27 '<', " in tokenizer_compare.tokenizer_differences(a, b)[0]


def test_a_template_written_differently_that_renders_alike(trained):
  same = tok_lib.CHATML_TEMPLATE.replace("{% for message in messages %}", "{%- for message in messages %}")
  assert both_ways(make(trained), make(trained, template=same)) == ([], [])


def test_an_added_token_the_template_uses(trained):
  """The template writes <|tool|>: missing in one vocabulary, in both but added (matched whole) in one only,
  or added as special in one and as a plain added token in the other (the same ids: same)."""
  a = make(trained, added=["<|tool|>"], template=TOOL_TEMPLATE)
  tool = a.convert_tokens_to_ids("<|tool|>")
  missing = make(trained, template=TOOL_TEMPLATE)
  for diffs in both_ways(a, missing):
    assert diffs[0].startswith("vocabulary sizes differ") and "'<|tool|>' (id %d)" % tool in diffs[1]
    assert diffs[-1].startswith("the chat template renders")
  not_added = make(trained, vocab={**a.get_vocab()}, template=TOOL_TEMPLATE)
  assert not_added.get_vocab() == a.get_vocab() and "<|tool|>" not in not_added.get_added_vocab()
  for diffs, who in zip(both_ways(a, not_added), ("student", "teacher")):     # who has it as an added token
    assert len(diffs) == 2 and diffs[0].startswith("3 of 24 probe texts encode differently: '<|tool|>' encodes")
    assert f"[{tool} '<|tool|>'] in the {who}'s" in diffs[0]
    assert diffs[1].startswith("the chat template renders")
  plain = make(trained, added=[AddedToken("<|tool|>", normalized=False, special=False)], template=TOOL_TEMPLATE)
  assert both_ways(a, plain) == ([], [])


# ---------------------------------------------------------------------------------------- the error, the how-to

def test_check_raises_with_the_differences_and_the_fix(trained, tmp_path):
  a = make(trained)
  with pytest.raises(ValueError, match=r"teacher 'm' does not share the student's tokenizer \(a model reads and "
                                       r"writes other ids through it\): eos_token_id differs: .*"
                                       r"save_pretrained\(TEACHER_FOLDER\)"):
    tokenizer_compare.check_same_tokenizer(a, make(trained, eos="<|endoftext|>"), where="teacher 'm'")
  # The fix it names: the student's tokenizer saved as a folder into the teacher's makes them the same.
  folder = tmp_path / "teacher"
  saved(make(trained, eos="<|endoftext|>"), folder, "qwen2")
  a.save_pretrained(folder)
  tokenizer_compare.check_same_tokenizer(a, checkpoints.hf_tokenizer(folder))


@pytest.mark.skipif(not presets.installed("qwen2.5-coder-0.5b-instruct"),
                    reason="the 0.5B preset's weight packages are not installed: "
                    + checkpoints.PRESETS["qwen2.5-coder-0.5b-instruct"].install)
def test_the_reported_case_on_the_preset(tmp_path):
  """The report itself: the 0.5B preset's tokenizer saved as a folder (the module docstring's how-to) under a
  qwen2 config.json loads as Qwen2Tokenizer with unk id 151643: the same tokenizer."""
  _, preset = checkpoints.peek("qwen2.5-coder-0.5b-instruct")
  teacher = saved(preset, tmp_path / "teacher", "qwen2")
  assert (preset.unk_token_id, teacher.unk_token_id) == (None, 151643)
  assert tokenizer_compare.tokenizer_differences(preset, teacher) == []
