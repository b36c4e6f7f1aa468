"""The divergence registry: every closed form is -jax.grad of its registered loss; top-k reverse KL (autodiff
default) against numpy; names and '@' parameters parsed in one place."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from opd_jax.teachers import contexts
from opd_jax.estimators import divergences
from opd_jax.estimators import gradients

# The registry's example parameter of each divergence that declares one (`Divergence.example`).
EXAMPLE_PARAMS = {d.name: d.example for d in divergences.REGISTRY.values() if d.example is not None}


def example_options(name):
  div = divergences.REGISTRY[name]
  if div.param is not None and div.default is None:
    assert div.example is not None, f"give {name!r} an `example` parameter value in its registry entry"
  return divergences.options(name, EXAMPLE_PARAMS.get(name))


def random_inputs(seed, shape=(3, 7)):
  """p, q [rows, K] with row 0 padded on its last two slots (p = q = 0), sampled indices on valid slots."""
  rng = np.random.default_rng(seed)
  z, zq = rng.normal(size=shape) * 1.5, rng.normal(size=shape) * 1.5
  z[0, -2:] = zq[0, -2:] = -np.inf
  p = np.exp(z - z.max(-1, keepdims=True))
  q = np.exp(zq - zq.max(-1, keepdims=True))
  return p / p.sum(-1, keepdims=True), q / q.sum(-1, keepdims=True), rng.integers(0, shape[1] - 2, shape[0])


def test_registered_direction_is_minus_grad_of_registered_loss():
  """For every registered divergence: distillation_gradient (the closed form where registered) equals
  -d loss(softmax(z), q) / dz, fp64, <= 1e-6; padded slots (p = q = 0) get exactly 0."""
  with jax.enable_x64(True):
    p, q, y = random_inputs(0)
    valid = p > 0

    def both(name):
      div, opts = divergences.REGISTRY[name], example_options(name)
      kwargs = {"sampled_token": jnp.asarray(y)} if div.sampled else {}
      loss = lambda z: jnp.sum(div.loss(jax.nn.softmax(jnp.where(valid, z, -jnp.inf)), q, **kwargs, **opts))
      return (gradients.distillation_gradient(name, p, q, **kwargs, **opts),
              -jax.grad(loss)(jnp.log(jnp.where(valid, p, 1.0))))

    out = jax.jit(lambda: [both(name) for name in divergences.DIVERGENCES])()
    for name, (got, by_autodiff) in zip(divergences.DIVERGENCES, out):
      got = np.asarray(got)
      assert got.dtype == np.float64
      np.testing.assert_allclose(got, np.where(valid, by_autodiff, 0.0), atol=1e-6, rtol=0, err_msg=name)
      assert np.all(got[~valid] == 0) and np.abs(got).max() > 1e-3, name


def test_topk_reverse_kl_matches_numpy():
  """Registered without a closed form: loss and autodiff direction against a numpy transcription."""
  with jax.enable_x64(True):
    p, q, _ = random_inputs(1, (4, 9))
    k = 3
    top = np.argsort(-p, axis=-1, kind="stable")[:, :k]
    on = np.zeros_like(p, bool)
    np.put_along_axis(on, top, True, axis=-1)
    ps = np.where(on, p, 0) / np.where(on, p, 0).sum(-1, keepdims=True)
    qs = np.where(on, q, 0) / np.where(on, q, 0).sum(-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
      kl = np.where(on, ps * (np.log(ps) - np.log(qs)), 0.0).sum(-1)
      want = np.where(on, ps * (np.log(qs) - np.log(ps) + kl[:, None]), 0.0)
    value, got, got_all, reverse = jax.jit(lambda p, q: (
        divergences.topk_reverse_kl(p, q, k), gradients.distillation_gradient("topk_reverse_kl", p, q, k=k),
        gradients.distillation_gradient("topk_reverse_kl", p, q, k=9),                       # k >= K
        gradients.distillation_gradient("reverse_kl", p, q)))(p, q)
    np.testing.assert_allclose(value, kl, atol=1e-12)
    np.testing.assert_allclose(got, want, atol=1e-9)
    np.testing.assert_allclose(got_all, reverse, atol=1e-12)


def test_names_and_parameters_are_parsed_by_the_registry():
  assert divergences.parse("jsd") == ("jsd", {"beta": 0.5})
  assert divergences.parse("jsd@0.3") == ("jsd", {"beta": 0.3})
  assert divergences.parse("clipped_reverse_kl@0.5") == ("clipped_reverse_kl", {"clip": 0.5})
  assert divergences.parse("topk_reverse_kl@8") == ("topk_reverse_kl", {"k": 8})
  assert divergences.parse("sampled_token") == ("sampled_token", {})
  conf = contexts.parse("x", "self:solution:topk_reverse_kl@4")
  assert (conf.divergence, conf.options, np.isnan(conf.beta), np.isnan(conf.clip)) == (
      "topk_reverse_kl", (("k", 4),), True, True)
  assert contexts.parse("x", "t:plain:jsd@0.2").beta == 0.2
  names = "'reverse_kl', 'forward_kl', 'jsd', 'sampled_token', 'clipped_reverse_kl', 'topk_reverse_kl'"
  for spec, match in [("kl", f"field: unknown divergence 'kl': .*{names}"),
                      ("kl@abc", "unknown divergence 'kl'"), ("reverse_kl@1", "takes no '@' parameter"),
                      ("jsd@1.5", "beta must lie strictly inside"), ("jsd@nan", "finite number"),
                      ("clipped_reverse_kl", "clip is required .*'clipped_reverse_kl@<clip>'"),
                      ("topk_reverse_kl@2.5", "k must be a whole number"), ("topk_reverse_kl", "k is required")]:
    with pytest.raises(ValueError, match=match):
      divergences.parse(spec, where="field")
  with pytest.raises(ValueError, match=r"config.configurations\['x'\].*unknown divergence 'nope'"):
    contexts.parse("x", "self:plain:nope")
