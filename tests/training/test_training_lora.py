"""LoRA adapters on a param pytree (opd_jax.training.lora), and the bf16 forward they stand for."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from opd_jax import models
from opd_jax.decode import sampling
from opd_jax.models import param_init
from opd_jax.models import model as model_lib
from opd_jax.training import lora
from opd_jax.training import state as state_lib
from opd_jax.training import step as step_lib


def _params():
  ks = jax.random.split(jax.random.key(0), 3)
  return {"embed": jax.random.normal(ks[0], (11, 8)),
          "layers": {"wq": jax.random.normal(ks[1], (2, 8, 6)), "attn_norm": jnp.ones((2, 8))},
          "lm_head": jax.random.normal(ks[2], (8, 11))}


def test_merge_is_w_plus_scaled_ab_and_starts_at_the_base():
  params = _params()
  ad = lora.init(params, jax.random.key(1), rank=3)
  assert set(ad) == {"layers/wq"} and ad["layers/wq"]["a"].shape == (2, 8, 3) and lora.count(ad) == 2 * (8 + 6) * 3
  jax.tree.map(np.testing.assert_array_equal, lora.merge(params, ad, scale=2.0), params)   # b = 0
  ad["layers/wq"]["b"] = jax.random.normal(jax.random.key(2), (2, 3, 6))
  got = lora.merge(params, ad, scale=2.0)["layers"]["wq"]
  a, b = np.asarray(ad["layers/wq"]["a"]), np.asarray(ad["layers/wq"]["b"])
  want = np.asarray(params["layers"]["wq"]) + 2.0 * np.einsum("lir,lro->lio", a, b)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  # Only the adapters get gradients through the merge; d/dB of sum(x W') = scale * A^T x^T 1.
  x = jax.random.normal(jax.random.key(3), (2, 4, 8))
  g = jax.grad(lambda ad: jnp.sum(jnp.einsum("lti,lio->lto", x, lora.merge(params, ad, scale=2.0)["layers"]["wq"])))(ad)
  want_b = 2.0 * np.einsum("lir,lti->lr", a, np.asarray(x))[:, :, None] * np.ones((1, 1, 6))
  np.testing.assert_allclose(g["layers/wq"]["b"], want_b, rtol=1e-5, atol=1e-5)


def test_bad_rank_and_foreign_adapters_are_refused():
  params = _params()
  with pytest.raises(ValueError, match="config.train.lora.rank must be > 0"):
    lora.init(params, jax.random.key(0), rank=0)
  with pytest.raises(ValueError, match="exceeds layers/wq"):
    lora.init(params, jax.random.key(0), rank=7)
  with pytest.raises(ValueError, match="matches no matrix"):
    lora.init(params, jax.random.key(0), rank=2, pattern="w_nothing")
  with pytest.raises(ValueError, match="another base model"):
    lora.merge(params, {"layers/wk": {}}, scale=1.0)
  with pytest.raises(ValueError, match="another base model"):
    lora.adapt(params, {"layers/wk": {}}, scale=1.0)
  # bf16 targets that decoder.Block does not read as h @ w would be merged, their update rounded away.
  half = jax.tree.map(lambda x: x.astype(jnp.bfloat16), params)
  with pytest.raises(ValueError, match="lm_head is bfloat16"):
    lora.adapt(half, lora.init(half, jax.random.key(0), rank=2, pattern="wq|lm_head"), scale=1.0)
  with pytest.raises(TypeError, match=r"only \[...\]"):
    lora.adapt(half, lora.init(half, jax.random.key(0), rank=2), scale=1.0)["layers"]["wq"][0]


# ----------------------------------------------------------------------------------------------------------
# bf16 (issue 26, item 5): the forward the trainer differentiates and samples from is the adapted model. A bf16
# merge rounds an update below half an ulp of W away; these adapters are below it in every entry, so the old
# forward (`lora.merge` in bf16) was exactly the base model. Per logit such an update is below bf16's own
# rounding noise, so forwards are compared on aggregate: the regression slope of (model - base) on the fp32
# reference's (reference - base) over thousands of logits, and the loss move of an optimizer step.

CFG = models.Config(arch="qwen3", vocab_size=64, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16,
                    d_ff=128, qk_norm=True)
HALF_ULP = 2.0 ** -12     # half an ulp of every adapted weight of `_student` (|W| in [1.02, 1.12] x 2^-4)
SCALE = 2.0
TOKENS = np.random.default_rng(0).integers(0, CFG.vocab_size, (128, 14)).astype(np.int32)


def _student(seed: int = 0, *, layout: str = "layered", wide_matrices: bool = True):
  """(bf16 model, the same weights in fp32), random, drawn in numpy (no op compiles). With wide_matrices the Block
  matrices have |W| in [1.02, 1.12] x 2^-4 (random signs): bf16's ulp there is 2^-11, so a merged update of
  |s A B| < HALF_ULP leaves every entry as it is; else normal(0, 0.02) as param_init.init_params."""
  rng = np.random.default_rng(seed)

  def leaf(path, x):
    name = path[-1].key
    if "norm" in name:
      return np.ones(x.shape)
    if wide_matrices and name in lora.BLOCK_MATMULS:
      return rng.choice([-1.0, 1.0], x.shape) * (1.02 + 0.1 * rng.random(x.shape)) * 2.0 ** -4
    return 0.02 * rng.normal(size=x.shape)

  shapes = jax.eval_shape(lambda: param_init.init_params(jax.random.key(0), CFG))   # the stacked layout
  arrays = jax.tree_util.tree_map_with_path(lambda p, x: np.asarray(leaf(p, x), jnp.bfloat16), shapes)

  def read(key, i, shape, dtype):
    x = arrays["layers"][key[len("layers/"):]] if key.startswith("layers/") else arrays[key]
    return (x if i is None else x[i]).astype(dtype)

  def model(dtype):
    graphdef, params = model_lib.build(CFG, read, layout=layout, dtype=dtype)
    return models.Model(config=CFG, params=params, tokenizer=None, stop_ids=(), name=f"random{seed}", sha256=None,
                        source="test", graphdef=graphdef)
  return model("bfloat16"), model("float32")


def _adapters(params, size: float, *, pattern: str = lora.DEFAULT_TARGETS, seed: int = 1):
  """Rank-4 adapters, a ~ normal(0, 1 / Din) as `lora.init`; b = 0 when size is 0, else random, scaled so that
  max |SCALE a b| = size * HALF_ULP in each matrix (numpy float32: no op compiles)."""
  rng = np.random.default_rng(seed)
  out = {}
  for path, shape in sorted(lora.targets(params, pattern).items()):
    *lead, d_in, d_out = shape
    a = rng.normal(size=(*lead, d_in, 4)) / np.sqrt(d_in)
    b = rng.normal(size=(*lead, 4, d_out))
    b *= size * HALF_ULP / np.max(np.abs(SCALE * a @ b))
    out[path] = {"a": a.astype(np.float32), "b": b.astype(np.float32)}
  return out


# lora.merge, jitted (one compile per param structure instead of one per eager op): the old forward's weights.
_merge = jax.jit(lambda params, adapters: lora.merge(params, adapters, scale=SCALE))


def _slope(got, want) -> float:
  """Least-squares slope of got on want (float64 arrays of one shape)."""
  return float(np.sum(got * want) / np.sum(want * want))


def _rms(x) -> float:
  return float(np.sqrt(np.mean(np.square(x))))


def _logits(model, params, tokens) -> np.ndarray:
  """models.logits of `model` with `params` (the forward without a cache): float64 [B, T, V]."""
  return np.asarray(models.logits(dataclasses.replace(model, params=params), tokens), np.float64)


def test_unmerged_matmul_is_w_plus_sab_rounded_once_with_its_gradients():
  rng = np.random.default_rng(0)
  x, w, a, b = rng.normal(size=(5, 16)), rng.normal(size=(16, 12)), rng.normal(size=(16, 3)), rng.normal(size=(3, 12))
  f32 = lambda v: jnp.asarray(v, jnp.float32)
  np.testing.assert_allclose(f32(x) @ lora.Adapted(f32(w), f32(a), f32(b), SCALE), x @ (w + SCALE * a @ b),
                             rtol=1e-5, atol=1e-5)
  ga, gb = jax.grad(lambda a, b: jnp.sum(jnp.sin(f32(x) @ lora.Adapted(f32(w), a, b, SCALE))), (0, 1))(f32(a), f32(b))
  dy = np.cos(x @ (w + SCALE * a @ b))                    # d sum(sin(y)) / dy
  np.testing.assert_allclose(ga, SCALE * x.T @ dy @ b.T, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(gb, SCALE * (x @ a).T @ dy, rtol=1e-4, atol=1e-4)
  # bf16 x and W: the fp32 sum x W + s (x A) B rounded once to bf16.
  xb, wb = np.asarray(x, jnp.bfloat16), np.asarray(w, jnp.bfloat16)
  got = jnp.asarray(xb) @ lora.Adapted(jnp.asarray(wb), f32(a), f32(b), SCALE)
  x64 = xb.astype(np.float64)
  want = np.asarray(x64 @ wb.astype(np.float64) + SCALE * x64 @ a @ b, jnp.bfloat16)
  assert got.dtype == jnp.bfloat16 and np.mean(np.asarray(got) == want) > 0.95   # ties of fp32 round-off aside
  np.testing.assert_allclose(np.asarray(got, np.float64), want.astype(np.float64), rtol=2 ** -8)


def test_bf16_train_forward_is_the_adapted_model_where_a_bf16_merge_was_the_base():
  s16, s32 = _student()
  ad, zero = _adapters(s16.params, 0.9), _adapters(s16.params, 0.0)
  jax.tree.map(np.testing.assert_array_equal, _merge(s16.params, ad), s16.params)      # the old: the base
  new16 = _logits(s16, lora.adapt(s16.params, ad, scale=SCALE), TOKENS)     # what step.loss_fn and the sampler run
  base16 = _logits(s16, lora.adapt(s16.params, zero, scale=SCALE), TOKENS)  # the same forward with b = 0
  base32 = _logits(s32, s32.params, TOKENS)
  ref32 = _logits(s32, _merge(s32.params, ad), TOKENS)                      # fp32 model, fp32-merged weights
  assert 0.85 < _slope(new16 - base16, ref32 - base32) < 1.15             # the old forward: exactly 0
  assert _rms(new16 - ref32) < 1.1 * _rms(base16 - base32)                # bf16's own error, no more


def test_one_bf16_optimizer_step_moves_the_loss_as_the_fp32_reference_and_gradients_match_it():
  """The trainer's loss (step.loss_fn; layered, remat) and default optimizer (AdamW, lr 1e-4): the first update
  is below half an ulp of every adapted W. Adapters on layer 0's matrices and layer 1's MLP (`lora.adapt` gives
  layer 1's attention zero adapters: one structure for the remat scan over the layers)."""
  (s16, s32), (t16, t32) = _student(), _student(1, wide_matrices=False)
  rng = np.random.default_rng(0)
  ids = lambda n: rng.integers(0, CFG.vocab_size, n).tolist()
  batch = step_lib.make_batch([ids(8) for _ in range(16)], [ids(12) for _ in range(16)], [ids(32) for _ in range(16)])

  def value_and_grad(student, teacher, remat):
    return jax.jit(jax.value_and_grad(lambda ad: step_lib.loss_fn(
        ad, student.params, teacher.params, batch, s_graph=student.graphdef, t_graph=teacher.graphdef,
        lora_scale=SCALE, divergence="reverse_kl", chunk=64, vocab_size=None, remat=remat)))

  vg16, vg32 = value_and_grad(s16, t16, True), value_and_grad(s32, t32, False)   # the reference: fp32
  ad0 = _adapters(s16.params, 0.0, pattern=r"layers/0/w|layers/1/w_")
  tx = state_lib.optimizer(state_lib.OptimConfig())
  loss0, g0 = vg16(ad0)
  ad1 = jax.jit(lambda g: optax.apply_updates(ad0, tx.update(g, tx.init(ad0), ad0)[0]))(g0)
  jax.tree.map(np.testing.assert_array_equal, _merge(s16.params, ad1), s16.params)     # the old: the base
  loss1, g16 = vg16(ad1)
  ref0, (ref1, g32) = vg32(ad0)[0], vg32(ad1)
  # The loss move of the step (0.91-1.06x the reference over 10 draws of models and batch; the old: exactly 0).
  assert 0.8 < (float(loss1) - float(loss0)) / (float(ref1) - float(ref0)) < 1.2
  # d loss / d (A, B) at ad1 (B != 0) through the unmerged bf16 forward: the fp32 reference's to bf16 precision.
  for path in ad1:
    for k in ("a", "b"):
      got, want = np.asarray(g16[path][k], np.float64), np.asarray(g32[path][k], np.float64)
      assert np.linalg.norm(got - want) < 0.05 * np.linalg.norm(want), (path, k)


def test_the_trainers_bf16_student_samples_from_the_adapted_model():
  """The sampler's jitted prefill and decode on `training.loop`'s current() student (stacked layout here)."""
  s16, s32 = _student(layout="stacked")
  adapted = jax.jit(lambda b, a: lora.adapt(b, a, scale=SCALE))         # loop.current()'s params
  ad = _adapters(s16.params, 0.9)
  positions = np.broadcast_to(np.arange(14, dtype=np.int32), TOKENS.shape)
  first = lambda params: np.asarray(sampling.prefill(params, TOKENS, positions, graphdef=s16.graphdef,
                                                     cache_size=14)[0], np.float64)
  got, base = first(adapted(s16.params, ad)), first(adapted(s16.params, _adapters(s16.params, 0.0)))  # b = 0
  ref = lambda params: _logits(s32, params, TOKENS)[:, -1]
  assert 0.85 < _slope(got - base, ref(_merge(s32.params, ad)) - ref(s32.params)) < 1.15
  # A whole sample: log-probs of the sampled tokens are the fp32 reference's, far from the base model's.
  big = _adapters(s16.params, 200.0, seed=2)
  out = sampling.sample(dataclasses.replace(s16, params=adapted(s16.params, big)), TOKENS[:, :8].tolist(),
                        key=jax.random.key(0), max_new_tokens=6)
  seq = np.concatenate([TOKENS[:, :8], out.tokens], axis=1)
  lp = lambda params: np.take_along_axis(np.asarray(jax.nn.log_softmax(_logits(s32, params, seq)[:, 7:-1])),
                                         out.tokens[..., None], -1)[..., 0]
  want, base = lp(_merge(s32.params, big)), lp(s32.params)
  assert np.max(np.abs(out.logprobs - want)) < 0.02 < np.mean(np.abs(base - want))


def test_fp32_adapters_kept_apart_are_the_merged_model_in_value_and_gradient():
  """The trainer's fp32 forward (`keep_apart`: x W + s (x A) B, no merged copy of the weights) against `merge`'s
  W + s A B: logits to fp32 round-off, with an update large enough that ignoring it would fail (the gradients
  through an `Adapted` matmul: test_unmerged_matmul_is_w_plus_sab_rounded_once_with_its_gradients)."""
  _, s32 = _student()
  ad = _adapters(s32.params, 100.0)                        # max |s A B| = 0.024, ~40% of |W|
  apart = lora.adapt(s32.params, ad, scale=SCALE, keep_apart=True)
  is_adapted = lambda x: isinstance(x, lora.Adapted)
  assert sum(map(is_adapted, jax.tree.leaves(apart, is_leaf=is_adapted))) == len(ad)   # nothing merged
  merged = _merge(s32.params, ad)
  got, want, base = (_logits(s32, apart, TOKENS[:16]), _logits(s32, merged, TOKENS[:16]),
                     _logits(s32, s32.params, TOKENS[:16]))
  assert _rms(want - base) > 1e3 * _rms(got - want)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
