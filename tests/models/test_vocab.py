"""Which ids exist, and one way to render prompts (issue 10): GGUF files without a pre-tokenizer are refused
(llama.cpp #7476), embeddings padded past the tokenizer are masked and student / teacher padded differently
score on the shared ids (microsoft/LMOps #331), and chat prompts carry one BOS (OpenRLHF #393)."""
import dataclasses

import jax
import numpy as np
import pytest

from opd_jax.teachers import contexts
from opd_jax.decode import sampling
from opd_jax.decode import scoring
from opd_jax.models import checkpoints
from opd_jax.models import decoder
from opd_jax.models import param_init
from opd_jax.models import tokenizer as tok_lib
from opd_jax import models

gguf = pytest.importorskip("gguf")

N_REAL = 259                                     # byte_tokenizer(): 256 bytes + 3 specials
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
PROMPT, RESPONSE = [1, 2, 3], [72, 105, 33]


def gguf_meta(size: int, **extra) -> dict:
  """GGUF tokenizer metadata of byte_tokenizer() as llama.cpp writes it for an embedding of `size` rows: the 259
  real tokens, then fillers "[PAD<id>]" of token type 5 up to `size`."""
  tokens = list(tok_lib.byte_alphabet()) + SPECIALS + [f"[PAD{i}]" for i in range(N_REAL, size)]
  return {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt2", "tokenizer.ggml.tokens": tokens,
          "tokenizer.ggml.token_type": [1] * 256 + [3] * 3 + [5] * (size - N_REAL),
          "tokenizer.ggml.eos_token_id": 258, "tokenizer.ggml.padding_token_id": 256,
          "tokenizer.chat_template": tok_lib.CHATML_TEMPLATE, **extra}


def config(vocab_size: int, n_real_ids: int | None = N_REAL, **kw) -> decoder.Config:
  return decoder.Config(arch="qwen2", vocab_size=vocab_size, n_real_ids=n_real_ids, d_model=16, n_layers=1,
                        n_heads=2, n_kv_heads=1, head_dim=8, d_ff=32, qkv_bias=True, **kw)


def random_params(cfg: decoder.Config, seed: int) -> dict:
  """param_init.init_params' layout drawn with numpy (eager jax.random would compile one program per leaf)."""
  rng = np.random.default_rng(seed)
  shapes = jax.eval_shape(lambda: param_init.init_params(jax.random.key(0), cfg))
  return jax.tree_util.tree_map_with_path(
      lambda path, s: np.ones(s.shape, np.float32) if "norm" in jax.tree_util.keystr(path)
      else (0.02 * rng.standard_normal(s.shape)).astype(np.float32), shapes)


def padded_model(vocab_size: int, seed: int) -> models.Model:
  """A random model over the GGUF-style tokenizer padded to `vocab_size`, whose padded head columns (ids >= 259)
  would win every softmax if they were not masked: +-100 along one direction, against real logits ~0.1."""
  params = random_params(config(vocab_size), seed)
  u = np.random.default_rng(seed + 100).standard_normal(16)
  signs = np.where(np.arange(vocab_size - N_REAL) % 2 == 0, 100.0, -100.0)
  params["lm_head"][:, N_REAL:] = (u / np.linalg.norm(u))[:, None] * signs[None, :]
  tok = tok_lib.from_gguf_metadata(gguf_meta(vocab_size))
  return models.Model(config=config(vocab_size), params=jax.device_put(params), tokenizer=tok, stop_ids=(258,),
                      name=f"padded-{vocab_size}", sha256=None, source="random")


def log_softmax(x):
  x = x - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


# ---------------------------------------------------------------------------------- item 3: no pre-tokenizer

def test_gguf_without_pre_tokenizer_is_refused_not_guessed():
  """A missing (or "default") tokenizer.ggml.pre is refused with the fix; the guess would change ids: a vocabulary
  with the token "48" gives ["4", "8"] under Qwen2's split (one digit at a time) but ["48"] under GPT-2's."""
  meta = {**gguf_meta(N_REAL), "tokenizer.ggml.tokens": [*gguf_meta(N_REAL)["tokenizer.ggml.tokens"], "48"],
          "tokenizer.ggml.token_type": [1] * 256 + [3] * 3 + [1], "tokenizer.ggml.merges": ["4 8"]}
  del meta["tokenizer.ggml.pre"]
  with pytest.raises(ValueError, match=r"tokenizer.ggml.pre is missing.*tokenizer=folder"):
    tok_lib.from_gguf_metadata(meta)
  with pytest.raises(ValueError, match="tokenizer.ggml.pre is 'default'"):
    tok_lib.from_gguf_metadata({**meta, "tokenizer.ggml.pre": "default"})
  qwen2 = tok_lib.from_gguf_metadata({**meta, "tokenizer.ggml.pre": "qwen2"})
  gpt2 = tok_lib.from_gguf_metadata({**meta, "tokenizer.ggml.pre": "gpt2"})
  assert qwen2("x48")["input_ids"] == [ord("x"), ord("4"), ord("8")]
  assert gpt2("x48")["input_ids"] == [ord("x"), N_REAL]


def write_gguf(path, params, cfg: decoder.Config, meta: dict):
  """A tiny F32 qwen2 GGUF of our params (stacked layout), tokenizer metadata `meta` written as given."""
  w = gguf.GGUFWriter(str(path), "qwen2")
  w.add_block_count(cfg.n_layers)
  w.add_context_length(cfg.max_seq_len)
  w.add_embedding_length(cfg.d_model)
  w.add_feed_forward_length(cfg.d_ff)
  w.add_head_count(cfg.n_heads)
  w.add_head_count_kv(cfg.n_kv_heads)
  w.add_rope_freq_base(cfg.rope_theta)
  w.add_layer_norm_rms_eps(cfg.norm_eps)
  w.add_tokenizer_model(meta["tokenizer.ggml.model"])
  if "tokenizer.ggml.pre" in meta:
    w.add_tokenizer_pre(meta["tokenizer.ggml.pre"])
  w.add_token_list(meta["tokenizer.ggml.tokens"])
  w.add_token_types(meta["tokenizer.ggml.token_type"])
  w.add_eos_token_id(meta["tokenizer.ggml.eos_token_id"])
  w.add_pad_token_id(meta["tokenizer.ggml.padding_token_id"])
  w.add_chat_template(meta["tokenizer.chat_template"])
  flat = {k: v for k, v in params.items() if k != "layers"} | {f"layers/{k}": v for k, v in params["layers"].items()}
  for ours, _, name, linear in checkpoints.TABLE:
    if ours not in flat:
      continue
    x = np.asarray(flat[ours], np.float32)
    for i, xi in enumerate(x if ours.startswith("layers/") else [x]):
      w.add_tensor(name.format(i=i), np.ascontiguousarray(xi.T if linear else xi))
  w.write_header_to_file()
  w.write_kv_data_to_file()
  w.write_tensors_to_file()
  w.close()


def test_gguf_without_pre_tokenizer_loads_with_the_tokenizer_folder(tmp_path, monkeypatch):
  """load refuses the file, naming the key; with tokenizer=<folder> it loads, and the 29 padded rows past the
  folder tokenizer's 259 tokens are masked (logits -inf; the real ones equal decoder.forward's)."""
  monkeypatch.setenv(checkpoints.CACHE_ENV, str(tmp_path / "cache"))
  cfg = config(288, n_real_ids=None, tie_embeddings=True)
  params = random_params(cfg, 0)
  meta = gguf_meta(288)
  del meta["tokenizer.ggml.pre"]
  write_gguf(tmp_path / "m.gguf", params, cfg, meta)
  with pytest.raises(ValueError, match=r"m.gguf: tokenizer.ggml.pre is missing"):
    models.load(tmp_path / "m.gguf", dtype="float32")
  tok_lib.byte_tokenizer().save_pretrained(tmp_path / "tok")
  model = models.load(tmp_path / "m.gguf", dtype="float32", tokenizer=tmp_path / "tok")
  assert (model.config.vocab_size, model.config.n_real_ids, model.stop_ids) == (288, N_REAL, (256, 258))
  assert models.tokenizer_difference(model.tokenizer, tok_lib.byte_tokenizer()) is None
  tokens = np.array([PROMPT + RESPONSE])
  got = np.asarray(models.logits(model, tokens))
  want, _ = jax.jit(decoder.forward, static_argnames="config")(params, tokens, np.arange(6)[None], config=cfg)
  np.testing.assert_allclose(got[..., :N_REAL], np.asarray(want)[..., :N_REAL], atol=1e-5)
  assert np.all(got[..., N_REAL:] == -np.inf)
  with pytest.raises(ValueError, match="applies to GGUF files only"):
    models.load(tmp_path / "tok", tokenizer=tmp_path / "tok")


# ------------------------------------------------------------------------------- item 4: padded vocabularies

def test_filler_tokens_are_not_ids_that_exist():
  """GGUF tokenizers padded with llama.cpp fillers to 288 and 320 entries: 259 real ids each, the same tokenizer
  as each other and as byte_tokenizer() (built another way); a real difference is still found."""
  a, b = tok_lib.from_gguf_metadata(gguf_meta(288)), tok_lib.from_gguf_metadata(gguf_meta(320))
  assert (len(a), len(b)) == (288, 320)
  assert tok_lib.real_vocab_size(a) == tok_lib.real_vocab_size(b) == tok_lib.real_vocab_size(
      tok_lib.byte_tokenizer()) == N_REAL
  assert models.tokenizer_difference(a, b) is None
  assert models.tokenizer_difference(a, tok_lib.byte_tokenizer()) is None
  other = tok_lib.from_gguf_metadata(gguf_meta(320, **{"tokenizer.ggml.eos_token_id": 256}))
  assert models.tokenizer_difference(a, other) == ("eos_token_id differs: 258 ('<|im_end|>') in the student's, 256 "
                                                  "('<|endoftext|>') in the teacher's (responses end on it)")
  tokens = gguf_meta(288)["tokenizer.ggml.tokens"]
  middle = {**gguf_meta(288), "tokenizer.ggml.tokens": tokens[:100] + ["[PAD100]"] + tokens[101:]}
  with pytest.raises(ValueError, match="id 100 is a filler"):
    tok_lib.real_vocab_size(tok_lib.from_gguf_metadata(middle))


def test_student_288_teacher_320_score_on_the_259_shared_ids():
  """Student V = 288 and teacher V = 320, one 259-id tokenizer: scoring runs, and log p, log q, the predictors
  and the top-k equal numpy over each model's full logits (models.logits) restricted to the 259 real ids."""
  student, teacher = padded_model(288, seed=0), padded_model(320, seed=1)
  got = scoring.score(student, teacher, [PROMPT], [PROMPT], [RESPONSE], top_k=4, return_hidden=True)
  cands = np.array([[72, 0, 258]] * 3)
  p_nodes = scoring.head_logprobs(student, got["h_p"][0], cands, top_k=4)       # the study's node path
  q_nodes = scoring.head_logprobs(teacher, got["h_q"][0], cands, top_k=4)
  seq = np.array([PROMPT + RESPONSE])
  lp = log_softmax(np.asarray(models.logits(student, seq))[0, 2:5, :N_REAL])     # rows predicting y_0..y_2
  lq = log_softmax(np.asarray(models.logits(teacher, seq))[0, 2:5, :N_REAL])
  p, q = np.exp(lp), np.exp(lq)
  t = np.arange(3)
  want = {"logp": lp[t, RESPONSE], "logq": lq[t, RESPONSE], "kl_pq": (p * (lp - lq)).sum(-1),
          "kl_qp": (q * (lq - lp)).sum(-1), "tv": 0.5 * np.abs(p - q).sum(-1), "entropy_p": -(p * lp).sum(-1),
          "entropy_q": -(q * lq).sum(-1)}
  for k, v in want.items():
    np.testing.assert_allclose(got[k][0], v, atol=2e-5, err_msg=k)
  np.testing.assert_allclose(p_nodes["logp"], lp[:, [72, 0, 258]], atol=2e-5)
  np.testing.assert_allclose(q_nodes["logp"], lq[:, [72, 0, 258]], atol=2e-5)
  np.testing.assert_array_equal(p_nodes["topk_ids"], np.argsort(-lp, axis=-1, kind="stable")[:, :4])
  np.testing.assert_array_equal(q_nodes["topk_ids"], np.argsort(-lq, axis=-1, kind="stable")[:, :4])
  unmasked = dataclasses.replace(student, config=dataclasses.replace(student.config, n_real_ids=None))
  with pytest.raises(ValueError, match="real vocabularies differ: student 288 ids, teacher 259"):
    scoring.score(unmasked, teacher, [PROMPT], [PROMPT], [RESPONSE])
  with pytest.raises(ValueError, match=r"outside \[0, V = 259\)"):
    scoring.score(student, teacher, [PROMPT], [PROMPT], [[72, 300]])


def test_sampler_never_emits_padded_ids():
  """The padded columns would win (the unmasked twin's most likely next id is one of them); the masked model
  never emits them, greedy or sampled, and its sampled log-probs are numpy's over the 259 real ids."""
  model = padded_model(288, seed=0)
  unmasked = dataclasses.replace(model, config=dataclasses.replace(model.config, n_real_ids=None))
  assert np.all(np.asarray(models.logits(unmasked, np.array([PROMPT]))).argmax(-1) >= N_REAL)
  key = jax.random.key(0)
  prompts = [PROMPT, [5, 6]]
  greedy = sampling.sample(model, prompts, key=key, max_new_tokens=6, temperature=0.0, stop_ids=())
  drawn = sampling.sample(model, prompts, key=key, max_new_tokens=6, stop_ids=())
  assert greedy.tokens.max() < N_REAL and drawn.tokens.max() < N_REAL
  seq = np.array([PROMPT + list(drawn.tokens[0])])
  lp = log_softmax(np.asarray(models.logits(model, seq))[0, 2:-1, :N_REAL])
  np.testing.assert_allclose(drawn.logprobs[0], lp[np.arange(6), drawn.tokens[0]], atol=2e-5)


def test_study_setup_accepts_a_padded_pair_and_refuses_another_tokenizer(monkeypatch):
  """environment.setup with student V = 288 and teacher V = 320 over one GGUF-style tokenizer (the Qwen2.5 0.5B / 7B
  case) passes as a teacher of the student's tokenizer; one whose tokenizer differs in one special id reads text
  (a cross-tokenizer teacher, `cross_view.cross_teacher`)."""
  from opd_jax.study import environment  # pylint: disable=g-import-not-at-top
  from configs import smoke as smoke_config
  teacher_meta = {}

  def load(spec, cfg):
    if spec == "random:0":
      return padded_model(288, seed=0)
    model = padded_model(320, seed=1)
    return dataclasses.replace(model, tokenizer=tok_lib.from_gguf_metadata(gguf_meta(320, **teacher_meta)))

  monkeypatch.setattr(environment, "load_model", load)
  env = environment.setup(smoke_config.get_config())
  assert env.teachers["random:1"].config.vocab_size == 320 and not env.cross
  teacher_meta["tokenizer.ggml.eos_token_id"] = 256
  assert environment.setup(smoke_config.get_config()).cross == {"random:1"}


# ---------------------------------------------------------------------------------------- item 5: one BOS

def test_chat_prompt_has_one_bos():
  """A tokenizer that adds a BOS and whose template writes it: chat_ids (and the study's render_chat, which calls
  it) give [BOS] + the rendered bytes; tokenizing the rendered text with defaults would give two BOS."""
  template = "{{ bos_token }}" + tok_lib.CHATML_TEMPLATE
  meta = {**gguf_meta(N_REAL), "tokenizer.ggml.tokens": [*gguf_meta(N_REAL)["tokenizer.ggml.tokens"], "<s>"],
          "tokenizer.ggml.token_type": [1] * 256 + [3] * 4, "tokenizer.ggml.bos_token_id": N_REAL,
          "tokenizer.ggml.add_bos_token": True, "tokenizer.chat_template": template}
  tok = tok_lib.from_gguf_metadata(meta)
  messages = [{"role": "user", "content": "hi"}]
  ids = models.chat_ids(tok, messages)
  want = [N_REAL, 257, *b"user\nhi", 258, *b"\n", 257, *b"assistant\n"]
  assert ids == want
  assert contexts.render_chat(tok, "hi") == want
  text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
  assert tok(text)["input_ids"][:2] == [N_REAL, N_REAL]                    # the bug chat_ids avoids
  assert "models.chat_ids(model.tokenizer, messages)" in models.__doc__
