"""Full-vocabulary OPD losses (opd_jax/training/losses.py): -grad at a position is the registry's direction,
chunked equals unchunked and numpy, no [B, T, V] array, exact zeros for a teacher equal to the student, one
clear error for an unknown divergence."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from opd_jax import distillation
from opd_jax import gradients
from opd_jax.training import losses
from tests.test_distillation import EXAMPLE_PARAMS

B, T, V = 2, 5, 11
ident = lambda x: x


def spec(name):
  return f"{name}@{EXAMPLE_PARAMS[name]}" if name in EXAMPLE_PARAMS else name


def test_minus_grad_at_a_position_is_distillation_gradient():
  """Identity heads (hidden states = logits), every registered divergence, fp64, one chunk:
  -d l_bt / dz is distillation_gradient on the full vocabulary at (b, t) and 0 at every other position; and the
  JSD's value changes along a random direction v by <grad, v> (central difference: the backward pass is the
  registry's direction, tests/test_distillation.py checks it against -jax.grad of each loss on C(u))."""
  rng = np.random.default_rng(0)
  b, t, eps = 1, 4, 1e-5
  names = distillation.DIVERGENCES
  with jax.enable_x64(True):
    z, zq = jnp.asarray(rng.normal(size=(B, T, V)) * 2), jnp.asarray(rng.normal(size=(B, T, V)) * 2)
    y, v = jnp.asarray(rng.integers(0, V, (B, T))), jnp.asarray(rng.normal(size=(B, T, V)))
    token_loss = lambda name, z: losses.token_losses(z, ident, zq, ident, y, divergence=spec(name))[b, t]

    def want(name):
      extra = {"sampled_token": y[b, t]} if distillation.REGISTRY[name].sampled else {}
      return gradients.distillation_gradient(name, jax.nn.softmax(z[b, t]), jax.nn.softmax(zq[b, t]), **extra,
                                             **distillation.parse(spec(name))[1])

    @jax.jit
    def run(z):
      diff = token_loss("jsd", z + eps * v) - token_loss("jsd", z - eps * v)
      return [(-jax.grad(lambda z: token_loss(n, z))(z), want(n)) for n in names], diff

    out, diff = run(z)
    for name, (got, want_bt) in zip(names, out):
      got = np.array(got)
      np.testing.assert_allclose(got[b, t], want_bt, atol=1e-6, rtol=0, err_msg=name)
      if name == "jsd":
        np.testing.assert_allclose(diff / (2 * eps), -np.sum(got * np.asarray(v)), atol=1e-6, err_msg=name)
      got[b, t] = 0
      assert np.all(got == 0) and np.abs(want_bt).max() > 1e-3, name


def test_chunked_equals_unchunked_and_numpy():
  """Linear heads, masked mean per sequence then over the sequences with response tokens: value against numpy
  reverse KL; value and gradients (hidden states and head weight) equal for chunk 3 (T = 7 padded to 9) and one
  chunk; no [B, T, V]-sized array outside the chunk loop."""
  rng = np.random.default_rng(1)
  b, t, d, dt, v = 3, 7, 4, 3, 13
  h, ht = jnp.asarray(rng.normal(size=(b, t, d)), jnp.float32), jnp.asarray(rng.normal(size=(b, t, dt)), jnp.float32)
  w, wt = jnp.asarray(rng.normal(size=(d, v + 2)), jnp.float32), jnp.asarray(rng.normal(size=(dt, v)), jnp.float32)
  y = jnp.asarray(rng.integers(0, v, (b, t)))
  mask = np.zeros((b, t), bool)
  mask[0, 2:6] = mask[2, 1:] = True      # sequence 1 has no response token: left out of the mean

  def loss(h, w, chunk):    # the student head has v + 2 outputs (a padded embedding): vocab_size cuts them
    return losses.opd_loss(h, lambda x: x @ w, ht, wt, y, mask, divergence="reverse_kl", chunk=chunk, vocab_size=v)

  (a, ga), (c, gc) = jax.jit(lambda h, w: [jax.value_and_grad(loss, argnums=(0, 1))(h, w, n) for n in (3, 7)])(h, w)
  zp, zq = np.asarray(h, np.float64) @ np.asarray(w, np.float64)[:, :v], np.asarray(ht @ wt, np.float64)
  logp = zp - np.log(np.exp(zp).sum(-1, keepdims=True))
  logq = zq - np.log(np.exp(zq).sum(-1, keepdims=True))
  kl = (np.exp(logp) * (logp - logq)).sum(-1)
  np.testing.assert_allclose(a, np.mean([kl[0][mask[0]].mean(), kl[2][mask[2]].mean()]), rtol=1e-5)
  np.testing.assert_allclose(a, c, rtol=1e-6)
  for x, x_ref in zip(ga, gc):
    np.testing.assert_allclose(x, x_ref, rtol=1e-5, atol=1e-7)
  assert np.all(np.asarray(ga[0])[1] == 0) and np.abs(np.asarray(ga[0])[2]).max() > 1e-3
  jaxpr = jax.make_jaxpr(jax.grad(lambda h: loss(h, w, 3)))(h)
  assert max(np.prod(var.aval.shape) for eqn in jaxpr.eqns for var in eqn.outvars) < b * t * v


def test_self_teacher_gives_exact_zeros_and_bad_inputs_name_the_field():
  """A teacher equal to the student: exactly zero loss and gradient (chunked); an unknown divergence or a bad
  parameter names the config field and the registered names."""
  rng = np.random.default_rng(2)
  h, y = jnp.asarray(rng.normal(size=(B, T, V)), jnp.float32), jnp.zeros((B, T), jnp.int32)
  mask = np.ones((B, T), bool)
  self_loss, self_grad = jax.jit(jax.value_and_grad(
      lambda h: losses.opd_loss(h, ident, h, ident, y, mask, divergence="jsd@0.5", chunk=2)))(h)
  assert float(self_loss) == 0.0 and np.all(np.asarray(self_grad) == 0)
  with pytest.raises(ValueError, match=r"config.train.divergence: unknown divergence 'kl': .*'topk_reverse_kl'"):
    losses.opd_loss(h, ident, h, ident, y, mask, divergence="kl", field="config.train.divergence")
  with pytest.raises(ValueError, match=r"config.train.divergence: beta must lie"):
    losses.token_losses(h, ident, h, ident, y, divergence="jsd@1", field="config.train.divergence")
  with pytest.raises(ValueError, match="vocab_size"):
    losses.token_losses(h, ident, h[..., :-1], ident, y, divergence="reverse_kl")
  with pytest.raises(ValueError, match="mask must"):
    losses.opd_loss(h, ident, h, ident, y, mask[:, :2], divergence="reverse_kl")
