"""Full-vocabulary OPD losses (opd_jax/training/losses.py): -grad at a position is the registry's direction,
chunked equals unchunked and numpy, no [B, T, V] array, exact zeros for a teacher equal to the student, one
clear error for an unknown divergence."""
import contextlib
import io
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import ad_checkpoint

from opd_jax.estimators import divergences
from opd_jax.estimators import gradients
from opd_jax.decode import sampling
from opd_jax.training import losses
from tests.estimators.test_divergences import EXAMPLE_PARAMS

B, T, V = 2, 5, 11
ident = lambda x: x


def spec(name):
  return f"{name}@{EXAMPLE_PARAMS[name]}" if name in EXAMPLE_PARAMS else name


def test_minus_grad_at_a_position_is_distillation_gradient():
  """Identity heads (hidden states = logits), every registered divergence, fp64, one chunk:
  -d l_bt / dz is distillation_gradient on the full vocabulary at (b, t) and 0 at every other position; and the
  JSD's value changes along a random direction v by <grad, v> (central difference: the backward pass is the
  registry's direction, tests/estimators/test_divergences.py checks it against -jax.grad of each loss on C(u))."""
  rng = np.random.default_rng(0)
  b, t, eps = 1, 4, 1e-5
  names = divergences.DIVERGENCES
  with jax.enable_x64(True):
    z, zq = jnp.asarray(rng.normal(size=(B, T, V)) * 2), jnp.asarray(rng.normal(size=(B, T, V)) * 2)
    y, v = jnp.asarray(rng.integers(0, V, (B, T))), jnp.asarray(rng.normal(size=(B, T, V)))
    token_loss = lambda name, z: losses.token_losses(z, ident, zq, ident, y, divergence=spec(name))[b, t]

    def want(name):
      extra = {"sampled_token": y[b, t]} if divergences.REGISTRY[name].sampled else {}
      return gradients.distillation_gradient(name, jax.nn.softmax(z[b, t]), jax.nn.softmax(zq[b, t]), **extra,
                                             **divergences.parse(spec(name))[1])

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


# ---- issue 26, item 6: losses from log-probabilities, exact at any logit gap ---------------------------------

def _np_logsoftmax(z):
  z = np.asarray(z, np.float64)
  m = z.max(-1, keepdims=True)
  return z - m - np.log(np.exp(z - m).sum(-1, keepdims=True))


def _np_policy(z, temperature=1.0, top_k=0, top_p=1.0):
  """float64 log-probs of softmax(z / T), then the top-k, then the nucleus (sorted, independent of sampling.py)."""
  lp = _np_logsoftmax(np.asarray(z, np.float64) / temperature)
  out = np.full_like(lp, -np.inf)
  for i, row in enumerate(lp.reshape(-1, lp.shape[-1])):
    order = np.argsort(-row, kind="stable")[:top_k or None]
    mass = np.cumsum(np.exp(row[order]))
    keep = order[:int(np.searchsorted(mass, top_p * mass[-1] - 1e-12)) + 1] if top_p < 1 else order
    kept = np.full_like(row, -np.inf)
    kept[keep] = row[keep]
    out.reshape(-1, lp.shape[-1])[i] = _np_logsoftmax(kept)
  return out


def _np_loss_and_direction(name, lp, lq, y, param):
  """float64 value and direction g = -dLoss/du (u = log p) of each registered divergence, by hand; None for one
  without a reference here (a fork's new entry: the registry tests still run it)."""
  p, q = np.exp(lp), np.exp(lq)
  xlogy = lambda w, x: np.where(w > 0, w * np.where(w > 0, x, 0), 0.0)
  centred = lambda f: p * (np.where(p > 0, f, 0) - (xlogy(p, f)).sum(-1, keepdims=True))
  if name in ("reverse_kl", "clipped_reverse_kl"):
    kl = xlogy(p, lp - lq).sum(-1)
    g = centred(lq - lp)
    if name == "clipped_reverse_kl":
      return np.minimum(kl, param), np.where((kl < param)[..., None], g, 0.0)
    return kl, g
  if name == "forward_kl":
    return xlogy(q, lq - lp).sum(-1), q - p
  if name == "jsd":
    lm = np.logaddexp(np.log(param) + lq, np.log1p(-param) + lp)
    return param * xlogy(q, lq - lm).sum(-1) + (1 - param) * xlogy(p, lp - lm).sum(-1), (1 - param) * centred(lm - lp)
  at = lambda x: np.take_along_axis(x, y[..., None], -1)[..., 0]
  if name == "sampled_token":
    a = at(lq) - at(lp)
    return -a * at(lp), a[..., None] * (np.eye(p.shape[-1])[y] - p)
  if name == "topk_reverse_kl":
    top = np.argsort(-lp, -1, kind="stable")[..., :param]
    on = np.zeros(lp.shape, bool)
    np.put_along_axis(on, top, True, -1)
    renorm = lambda l: np.where(on, l - np.log(np.where(on, np.exp(l - l.max(-1, keepdims=True)), 0).sum(-1,
                                keepdims=True)) - l.max(-1, keepdims=True), -np.inf)
    ls, lqs = renorm(lp), renorm(lq)
    ps, d = np.exp(ls), np.where(on, lqs, 0) - np.where(on, ls, 0)
    kl = xlogy(ps, -d).sum(-1)
    return kl, np.where(on, ps * (d + kl[..., None]), 0.0)
  return None


@pytest.mark.parametrize("gap", [0.0, 30.0, 90.0, 120.0, 200.0])
def test_every_loss_and_direction_is_exact_in_fp32_at_any_logit_gap(gap):
  """fp32 token losses and -grad (identity heads) of every registered divergence against float64 numpy, with the
  teacher `gap` nats below the student on the student's likeliest tokens and the student `gap` nats below on the
  teacher's: <= 1e-5 relative (the probability-space losses stopped at log tiny = -87.3: 42.683 for 58.912)."""
  rng = np.random.default_rng(int(gap))
  z, zq = rng.normal(size=(2, 3, V)) * 2, rng.normal(size=(2, 3, V)) * 2
  z[..., :3] += 4.0
  zq[..., :3] -= gap                      # the teacher far below the student's mass
  zq[..., 5:7] += 4.0
  z[..., 5:7] -= gap                      # and the student far below the teacher's
  y = rng.integers(0, 3, (2, 3))
  lp, lq = _np_logsoftmax(z), _np_logsoftmax(zq)
  assert {"reverse_kl", "forward_kl", "jsd", "sampled_token", "clipped_reverse_kl", "topk_reverse_kl"} <= set(
      divergences.DIVERGENCES)
  for name in divergences.DIVERGENCES:
    param = EXAMPLE_PARAMS.get(name)
    if _np_loss_and_direction(name, lp, lq, y, param) is None:
      continue
    want, g_want = _np_loss_and_direction(name, lp, lq, y, param)
    fn = lambda z: losses.token_losses(z, ident, jnp.asarray(zq, jnp.float32), ident, jnp.asarray(y),
                                       divergence=spec(name))
    got, vjp = jax.vjp(fn, jnp.asarray(z, jnp.float32))
    (g_got,) = vjp(jnp.ones_like(got))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * max(1.0, np.abs(want).max()), err_msg=name)
    g_got = -np.asarray(g_got, np.float64)
    err = np.linalg.norm(g_got - g_want, axis=-1) / np.maximum(np.linalg.norm(g_want, axis=-1), 1e-30)
    assert err.max() <= 1e-5 or np.abs(g_got - g_want).max() <= 1e-6, (name, err.max())
    if gap >= 90 and name in ("reverse_kl", "forward_kl"):
      assert want.max() > 80, (name, want)          # the case the clamp at log tiny got wrong


# ---- issue 26, item 4: the trainer's p and q are the study's (temperature, top-k, top-p; T_q) -----------------

# Top-p alone (the threshold search) and top-k then top-p; temperature alone: tests/training/test_training_loop.py.
POLICIES = [sampling.SamplingParams(temperature=1.3, top_p=0.8),
            sampling.SamplingParams(temperature=0.6, top_k=5, top_p=0.9)]


@pytest.mark.parametrize("sp", POLICIES, ids=lambda sp: f"T{sp.temperature}-k{sp.top_k}-p{sp.top_p}")
def test_losses_use_the_sampled_policy_and_the_teacher_temperature(sp):
  """p = softmax(z / T) truncated by top-k / top-p and renormalised, q = softmax(z_q / T_q): the value against a
  float64 numpy policy (sorted, independent of sampling.policy_logprobs) for reverse KL, JSD and the sampled
  token; the gradient against central differences (fp64); and not the temperature-1 loss."""
  rng = np.random.default_rng(7)
  tq = sampling.SamplingParams(temperature=0.8)
  z, zq = rng.normal(size=(B, T, V)) * 2, rng.normal(size=(B, T, V)) * 2
  lp, lq = _np_policy(z, sp.temperature, sp.top_k, sp.top_p), _np_policy(zq, tq.temperature)
  y = np.argmax(lp, -1)                   # a token the policy can draw
  for name in ("reverse_kl", "jsd", "sampled_token", "topk_reverse_kl"):
    param = EXAMPLE_PARAMS.get(name)
    want = _np_loss_and_direction(name, lp, lq, y, param)[0]
    got = losses.token_losses(jnp.asarray(z, jnp.float32), ident, jnp.asarray(zq, jnp.float32), ident,
                              jnp.asarray(y), divergence=spec(name), policy=sp, teacher_policy=tq)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6, err_msg=name)
    unit = losses.token_losses(jnp.asarray(z, jnp.float32), ident, jnp.asarray(zq, jnp.float32), ident,
                               jnp.asarray(y), divergence=spec(name))
    assert np.abs(np.asarray(unit) - want).max() > 1e-2, name
  with jax.enable_x64(True):
    v = jnp.asarray(rng.normal(size=(B, T, V)))
    for name in ("reverse_kl", "jsd"):
      total = lambda z: jnp.sum(losses.token_losses(z, ident, jnp.asarray(zq), ident, jnp.asarray(y),
                                                    divergence=spec(name), policy=sp, teacher_policy=tq))
      g = jax.grad(total)(jnp.asarray(z))
      eps = 1e-6
      fd = (total(jnp.asarray(z) + eps * v) - total(jnp.asarray(z) - eps * v)) / (2 * eps)
      np.testing.assert_allclose(float(jnp.sum(g * v)), float(fd), rtol=1e-6, err_msg=name)


def test_policies_without_an_objective_are_refused():
  """A greedy policy, a truncated teacher and the forward KL under truncation: one ValueError naming the field."""
  h, y = jnp.zeros((1, 2, V)), jnp.zeros((1, 2), jnp.int32)
  bad = [(sampling.SamplingParams(temperature=0.0), None, "reverse_kl", "temperature=0"),
         (None, sampling.SamplingParams(temperature=1.0, top_k=3), "reverse_kl", "never truncated"),
         (sampling.SamplingParams(top_p=0.9), None, "forward_kl", "forward_kl is infinite under a truncated"),
         (sampling.SamplingParams(top_k=5), None, "forward_kl", "forward_kl is infinite under a truncated")]
  for sp, tq, div, match in bad:
    with pytest.raises(ValueError, match=match):
      losses.token_losses(h, ident, h, ident, y, divergence=div, policy=sp, teacher_policy=tq)
  losses.token_losses(h, ident, h, ident, y, divergence="forward_kl", policy=sampling.SamplingParams(temperature=0.5))


@pytest.mark.parametrize("chunk", [4, 8])
def test_the_backward_keeps_the_p_is_q_mask_and_no_vocabulary_sized_residual(chunk):
  """What the loss saves for its backward (jax.ad_checkpoint.print_saved_residuals): its inputs (chunked), the
  head, and the forward's p == q mask ([chunks, B, C] bool, or [B, T] in one chunk), which keeps the self:plain null
  control exactly 0; no [.., V] logits (the chunked step is rematerialised: the memory bound of the docstring)."""
  B, T, D, V = 2, 8, 16, 40
  k = jax.random.split(jax.random.key(0), 4)
  hs, ht = jax.random.normal(k[0], (B, T, D)), jax.random.normal(k[1], (B, T, D))
  w, y = jax.random.normal(k[2], (D, V)), jax.random.randint(k[3], (B, T), 0, V)
  f = lambda hs, w: losses.token_losses(hs, w, ht, w, y, divergence="reverse_kl", chunk=chunk).sum()
  out = io.StringIO()
  with contextlib.redirect_stdout(out):
    ad_checkpoint.print_saved_residuals(f, hs, w)
  saved = [(m[1], tuple(int(x) for x in m[2].split(",") if x)) for m in
           (re.match(r"(\w+)\[([\d,]*)\]", line) for line in out.getvalue().splitlines()) if m]
  assert saved, out.getvalue()
  masks = [shape for dtype, shape in saved if dtype == "bool"]
  assert masks == [(T // chunk, B, chunk) if chunk < T else (B, T)], out.getvalue()
  assert [s for _, s in saved if s and s[-1] == V] == [(D, V)], out.getvalue()   # the head only
