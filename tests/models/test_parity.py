"""Parity with HF transformers (PyTorch, CPU, fp32) on tiny Llama / Qwen2 / Qwen3 checkpoints, and KV-cache
consistency of the decoder (incremental decode and left padding against one full forward)."""
import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from opd_jax import models
from opd_jax.models import decoder
from opd_jax.models import param_init
from tests.tolerance import fp32_atol

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

V = 288  # > the byte tokenizer's 259 ids: the embedding is padded, as Qwen's is
N_REAL = 259  # ids that exist: the padded rows' logits are -inf (decoder.head), HF's are compared on these
TINY = dict(vocab_size=V, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-6)
ARCHS = {
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM, dict(rope_theta=5000.0)),
    "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM, dict(rope_theta=20000.0)),
    "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM, dict(rope_theta=1e6, head_dim=32)),
}


def make_hf_folder(path, arch, *, tie, seed=0, shard=False, stray_head=False, **overrides):
  """save_pretrained of a random-init tiny HF model (all weights, norms and biases random) + byte tokenizer."""
  config_cls, model_cls, extra = ARCHS[arch]
  config = config_cls(**{**TINY, **extra, **overrides}, tie_word_embeddings=tie)
  torch.manual_seed(seed)
  model = model_cls(config).eval()
  with torch.no_grad():
    for name, p in model.named_parameters():
      p.copy_(1 + 0.2 * torch.randn_like(p) if "norm" in name else 0.2 * torch.randn_like(p))
  model.save_pretrained(path, max_shard_size="40KB" if shard else "50GB")
  models.byte_tokenizer().save_pretrained(path)
  if stray_head:   # a tied checkpoint that still carries a (bogus) lm_head.weight
    tensors = safetensors_torch.load_file(path / "model.safetensors")
    tensors["lm_head.weight"] = 5 * torch.randn(config.vocab_size, config.hidden_size)
    safetensors_torch.save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
  return model


def hf_logits(model, tokens):
  with torch.no_grad():
    return model(torch.as_tensor(np.asarray(tokens))).logits.numpy()


TOKENS = np.random.default_rng(0).integers(0, N_REAL, size=(2, 13))


@pytest.mark.parametrize("arch,tie,shard,stray_head", [
    ("llama", True, False, False),      # tied, no head stored
    ("llama", False, False, False),     # untied
    ("qwen2", False, True, False),      # sharded (index + several safetensors files), qkv bias
    ("qwen2", True, False, True),       # tied with a stray lm_head in the file: must be ignored
    ("qwen3", False, False, False),     # q/k norm, head_dim != hidden / heads
    ("qwen3", True, True, False),
])
def test_logits_match_transformers(tmp_path, arch, tie, shard, stray_head):
  ref = make_hf_folder(tmp_path, arch, tie=tie, shard=shard, stray_head=stray_head)
  if shard:
    assert (tmp_path / "model.safetensors.index.json").is_file()
    assert len(list(tmp_path.glob("model-*.safetensors"))) > 1
  model = models.load(tmp_path, dtype="float32")
  assert model.config.arch == arch and model.config.tie_embeddings == tie
  assert ("lm_head" in model.params) == (not tie)
  got = np.asarray(models.logits(model, TOKENS))
  want = hf_logits(ref, TOKENS)
  assert got.shape == want.shape == (2, 13, V) and got.dtype == np.float32
  assert model.config.real_vocab_size == N_REAL and np.all(got[..., N_REAL:] == -np.inf)
  np.testing.assert_allclose(got[..., :N_REAL], want[..., :N_REAL], atol=1e-4, rtol=0)


def test_rope_theta_from_v4_top_level_field(tmp_path):
  """transformers v4 wrote rope_theta at the top level; v5 writes rope_parameters: both give the same model."""
  ref = make_hf_folder(tmp_path, "qwen2", tie=False)
  cfg = json.loads((tmp_path / "config.json").read_text())
  assert cfg["rope_parameters"]["rope_theta"] == 20000.0
  cfg["rope_theta"] = cfg.pop("rope_parameters")["rope_theta"]
  cfg["rope_scaling"] = None
  (tmp_path / "config.json").write_text(json.dumps(cfg))
  model = models.load(tmp_path, dtype="float32")
  assert model.config.rope_theta == 20000.0
  got = np.asarray(models.logits(model, TOKENS))[..., :N_REAL]
  np.testing.assert_allclose(got, hf_logits(ref, TOKENS)[..., :N_REAL], atol=1e-4, rtol=0)


def test_chat_template_rendering_matches_transformers(tmp_path):
  make_hf_folder(tmp_path, "llama", tie=True)
  ours = models.load(tmp_path, dtype="float32").tokenizer
  ref = transformers.AutoTokenizer.from_pretrained(tmp_path)
  messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2 + 2 = ? é"}]
  text = ours.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
  assert text == ref.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
  assert text == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2 + 2 = ? é<|im_end|>\n"
                  "<|im_start|>assistant\n")
  # Byte tokenizer: every byte is its own id, the chat markers are single special ids (257, 258).
  by_hand = [257, *b"system\nBe brief.", 258, 10, 257, *b"user\n2 + 2 = ? ", *"é".encode(), 258, 10,
             257, *b"assistant\n"]
  assert ours(text)["input_ids"] == by_hand


# ---------------------------------------------------------------------------------------- KV cache (fp32)

CONFIG = decoder.Config(arch="qwen3", vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16,
                        d_ff=48, rope_theta=100.0, qk_norm=True, qkv_bias=True)


def _params():
  """Random params of param_init.init_params' layout: every weight, norm scale and bias random (numpy RNG)."""
  rng = np.random.default_rng(1)
  shapes = jax.eval_shape(lambda: param_init.init_params(jax.random.key(0), CONFIG))
  return jax.tree.map(lambda s: jnp.asarray(0.3 * rng.standard_normal(s.shape), jnp.float32), shapes)


@jax.jit
def _full(params, tokens):
  pos = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
  return decoder.forward(params, tokens, pos, config=CONFIG)[0]


_step = jax.jit(lambda params, tokens, positions, cache: decoder.forward(params, tokens, positions, cache,
                                                                         config=CONFIG))


def test_incremental_decode_with_cache_matches_full_forward():
  params = _params()
  tokens = jax.random.randint(jax.random.key(3), (2, 11), 0, CONFIG.vocab_size)
  want = _full(params, tokens)
  cache = decoder.init_cache(CONFIG, batch=2, size=16)
  got, cache = _step(params, tokens[:, :5], jnp.broadcast_to(jnp.arange(5), (2, 5)), cache)
  outs = [got]
  for t in range(5, 11):
    logits, cache = _step(params, tokens[:, t:t + 1], jnp.full((2, 1), t), cache)
    outs.append(logits)
  np.testing.assert_allclose(np.concatenate(outs, axis=1), want, atol=1e-5, rtol=0)
  assert int(cache["end"]) == 11 and np.all(np.asarray(cache["pos"][:, 11:]) == -1)


def test_left_padded_row_matches_the_prompt_alone():
  params = _params()
  rng = np.random.default_rng(4)
  long, short, nxt = (jnp.asarray(rng.integers(0, CONFIG.vocab_size, size=n)) for n in ((1, 10), (1, 6), (2, 2)))
  pad = 4
  tokens = jnp.concatenate([long, jnp.concatenate([jnp.zeros((1, pad), long.dtype), short], axis=1)])
  positions = jnp.stack([jnp.arange(10), jnp.concatenate([jnp.full((pad,), -1), jnp.arange(6)])])
  # Each prompt alone, continued by its two next tokens, in one unpadded forward (causal: a prefix's logits
  # do not depend on what follows).
  alone_long = _full(params, jnp.concatenate([long, nxt[:1]], axis=1))[0]     # [12, V]
  alone_short = _full(params, jnp.concatenate([short, nxt[1:]], axis=1))[0]   # [8, V]
  logits, _ = _step(params, tokens, positions, None)
  np.testing.assert_allclose(logits[0], alone_long[:10], atol=1e-5, rtol=0)
  np.testing.assert_allclose(logits[1, pad:], alone_short[:6], atol=1e-5, rtol=0)
  # The same padded batch prefilled into a cache, then two decode steps per row.
  cache = decoder.init_cache(CONFIG, batch=2, size=16)
  prefill, cache = _step(params, tokens, positions, cache)
  np.testing.assert_allclose(prefill[0], alone_long[:10], atol=1e-5, rtol=0)     # pad slots: meaningless
  np.testing.assert_allclose(prefill[1, pad:], alone_short[:6], atol=1e-5, rtol=0)
  for t in range(2):
    step_logits, cache = _step(params, nxt[:, t:t + 1], jnp.array([[10 + t], [6 + t]]), cache)
    np.testing.assert_allclose(step_logits[0, 0], alone_long[10 + t], atol=1e-5, rtol=0)
    np.testing.assert_allclose(step_logits[1, 0], alone_short[6 + t], atol=1e-5, rtol=0)


def test_layered_layout_equals_stacked():
  """The two param layouts (lax.scan over stacked layers; a loop over per-layer dicts) compute the same."""
  params = _params()
  layered = param_init.unstack_layers(params)
  assert decoder.is_layered(layered) and len(layered["layers"]) == CONFIG.n_layers
  tokens = jax.random.randint(jax.random.key(5), (2, 9), 0, CONFIG.vocab_size)
  want = _full(params, tokens)
  np.testing.assert_allclose(_full(layered, tokens), want, rtol=0,
                             atol=fp32_atol(want, terms=CONFIG.n_layers * (CONFIG.d_model + CONFIG.d_ff)))
  for p in (params, layered):                        # incremental decode with each layout's cache
    cache = decoder.init_cache(CONFIG, batch=2, size=12)
    got, cache = _step(p, tokens[:, :6], jnp.broadcast_to(jnp.arange(6), (2, 6)), cache)
    step, _ = _step(p, tokens[:, 6:7], jnp.full((2, 1), 6), cache)
    np.testing.assert_allclose(step[:, 0], _full(params, tokens)[:, 6], atol=1e-5, rtol=0)
  back = param_init.stack_layers(layered)
  jax.tree.map(lambda a, b: np.testing.assert_array_equal(a, b), back, params)


def test_training_forward_with_remat_and_query_blocks_computes_the_same():
  """hidden_states(remat=True, q_block=...) (the train step's forward) gives the plain forward's values and
  gradients in both layouts, on a left-padded batch whose length is no multiple of the block; and remat does save
  memory in the layered layout (an unrolled checkpoint per layer once saved nothing on XLA:CPU)."""
  tokens = jax.random.randint(jax.random.key(7), (2, 10), 0, CONFIG.vocab_size)
  positions = jnp.stack([jnp.arange(10), jnp.concatenate([jnp.full((3,), -1), jnp.arange(7)])])
  w = jax.random.normal(jax.random.key(8), (2, 10, CONFIG.d_model))
  for layout in ("stacked", "layered"):
    model = models.random_model(CONFIG, seed=2, layout=layout)

    def loss(params, remat, q_block):
      h, _ = decoder.merge(model.graphdef, params).hidden_states(tokens, positions, remat=remat, q_block=q_block)
      return jnp.sum(jnp.where(positions[..., None] >= 0, h * w, 0.0)), h

    vg = jax.jit(jax.value_and_grad(loss, has_aux=True), static_argnums=(1, 2))
    (l0, h0), g0 = vg(model.params, False, None)
    (l1, h1), g1 = vg(model.params, True, 3)
    np.testing.assert_allclose(np.where(positions[..., None] >= 0, h1, 0), np.where(positions[..., None] >= 0, h0, 0),
                               atol=1e-5, rtol=0)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-4 * float(np.abs(b).max()), rtol=1e-4), g1, g0)
  config = dataclasses.replace(CONFIG, n_layers=6)
  model = models.random_model(config, seed=2, layout="layered")
  long = jnp.zeros((2, 256), jnp.int32), jnp.broadcast_to(jnp.arange(256), (2, 256))
  temp = {}
  for remat in (False, True):
    f = jax.grad(lambda p: jnp.sum(decoder.merge(model.graphdef, p).hidden_states(*long, remat=remat)[0] ** 2))
    temp[remat] = jax.jit(f).lower(model.params).compile().memory_analysis().temp_size_in_bytes
  assert temp[True] < 0.6 * temp[False], temp


def test_init_params_are_one_normal_draw_per_matrix():
  """param_init.init_params draws every matrix in one compiled program; bitwise the draws of one
  jax.random.normal per matrix (its documented meaning, and the smoke records' weights), for matrices of several
  sizes (each a prefix of one long draw), scaled then cast (bf16)."""
  config = decoder.Config(arch="qwen2", vocab_size=16, d_model=8, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=4,
                          d_ff=12, qkv_bias=True)
  got = param_init.init_params(jax.random.key(3), config, dtype=jnp.bfloat16, scale=0.3)
  names = ["wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down", "bq", "bk", "bv"]
  keys = jax.random.split(jax.random.key(3), len(names) + 2)
  drawn = [got["layers"][n] for n in names] + [got["embed"], got["lm_head"]]
  for k, x, n in zip(keys, drawn, names + ["embed", "lm_head"]):
    ref = np.asarray((0.3 * jax.random.normal(k, x.shape)).astype(jnp.bfloat16))
    assert x.dtype == jnp.bfloat16 and len(np.unique(np.asarray(x, np.float32))) > x.size // 2, n
    np.testing.assert_array_equal(np.asarray(x), ref, err_msg=n)
  assert got["layers"]["wk"].shape == (2, 8, 4) and got["lm_head"].shape == (8, 16)
  np.testing.assert_array_equal(got["layers"]["attn_norm"], np.ones((2, 8)))
