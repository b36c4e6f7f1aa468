"""LoRA adapters on a param pytree (opd_jax.training.lora)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from opd_jax.training import lora


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
