"""Closed-form gradients: autodiff of their losses, numpy transcriptions, restriction, pins, degeneracy."""
import fractions

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from opd_jax.estimators import gradients

DIVERGENCE_CASES = [("reverse_kl", {}), ("forward_kl", {}), ("jsd", {"beta": 0.1}), ("jsd", {"beta": 0.5}),
                    ("jsd", {"beta": 0.9}), ("clipped_reverse_kl", {"clip": 10.0}),
                    ("clipped_reverse_kl", {"clip": 0.05})]


@pytest.fixture(params=["float32", "float64"])
def precision(request):
  """(dtype, atol) for autodiff comparisons; float64 runs inside a scoped jax.enable_x64 that cannot leak."""
  if request.param == "float32":
    yield jnp.float32, 1e-5
  else:
    with jax.enable_x64(True):
      yield jnp.float64, 1e-10


def random_logits(seed, shape, scale=1.0, dtype=np.float32):
  return jnp.asarray(np.random.default_rng(seed).normal(size=shape) * scale, dtype)


def loss_fn(divergence, kwargs):
  """The loss each direction descends, as a function of (p, q)."""
  if divergence == "reverse_kl":
    return gradients.reverse_kl
  if divergence == "forward_kl":
    return gradients.forward_kl
  if divergence == "jsd":
    return lambda p, q: gradients.jsd(p, q, kwargs["beta"])
  return lambda p, q: gradients.clipped_reverse_kl(p, q, kwargs["clip"])


def numpy_direction(divergence, p, q, beta=0.5, clip=None):
  """Independent float64 transcription of paper.md's table."""
  p, q = np.asarray(p, np.float64), np.asarray(q, np.float64)
  kl = (p * np.log(p / q)).sum(-1, keepdims=True)
  if divergence == "forward_kl":
    return q - p
  if divergence == "jsd":
    m = beta * q + (1 - beta) * p
    return (1 - beta) * p * (np.log(m / p) + (p * np.log(p / m)).sum(-1, keepdims=True))
  g = p * (np.log(q) - np.log(p) + kl)
  return np.where(kl < clip, g, 0.0) if divergence == "clipped_reverse_kl" else g


def np_cos(a, b):
  return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


def closed_form_and_objective(name, kwargs, q, p_succ, y, advantage):
  """(closed-form direction of p, objective of p that it ascends) for every row of paper.md's table."""
  if name == "ideal":
    return (lambda p: gradients.ideal_gradient(p, p_succ)), (lambda p: gradients.node_value(p, p_succ))
  if name == "sampled_token":   # the policy-gradient surrogate -A log p_y, A held fixed
    closed_form = lambda p: gradients.distillation_gradient(name, p, q, sampled_token=y, advantage=advantage)
    rows = jnp.arange(y.shape[0])
    def objective(p):
      a = advantage if advantage is not None else jnp.log(q[rows, y]) - jnp.log(jax.lax.stop_gradient(p)[rows, y])
      return a * jnp.log(p[rows, y])
    return closed_form, objective
  closed_form = lambda p: gradients.distillation_gradient(name, p, q, **kwargs)
  return closed_form, lambda p: -loss_fn(name, kwargs)(p, q)


ALL_CASES = DIVERGENCE_CASES + [("sampled_token", {}), ("sampled_token", {"advantage": True}), ("ideal", {})]


def test_every_closed_form_is_autodiff_of_its_objective(precision):
  """g = -dLoss/dz (distillation) and g* = +dV/dz (ideal) with p = softmax(z), in fp32 and fp64."""
  dtype, atol = precision
  z = random_logits(0, (3, 7), dtype=dtype)
  q = jax.nn.softmax(random_logits(1, (3, 7), dtype=dtype))
  p_succ = jnp.asarray(np.random.default_rng(5).integers(0, 9, size=(3, 7)) / 8, dtype)
  y, advantage = jnp.array([0, 6, 2]), jnp.asarray([0.3, -1.2, 2.0], dtype)

  @jax.jit
  def run(z):
    out = []
    for name, kwargs in ALL_CASES:
      closed_form, objective = closed_form_and_objective(name, kwargs, q, p_succ, y,
                                                         advantage if kwargs.get("advantage") else None)
      out.append((closed_form(jax.nn.softmax(z)), jax.grad(lambda z: jnp.sum(objective(jax.nn.softmax(z))))(z)))
    return out

  p = np.asarray(jax.nn.softmax(z), np.float64)
  for (name, kwargs), (got, by_autodiff) in zip(ALL_CASES, run(z)):
    assert got.dtype == dtype
    np.testing.assert_allclose(got, by_autodiff, atol=atol, rtol=0, err_msg=f"{name} {kwargs}")
    if name == "ideal":
      want = p * (p_succ - (p * p_succ).sum(-1, keepdims=True))
    elif name == "sampled_token":
      a = np.asarray(advantage) if kwargs else np.log(np.asarray(q)[range(3), y]) - np.log(p[range(3), y])
      want = a[:, None] * (np.eye(7)[np.asarray(y)] - p)
    else:
      want = numpy_direction(name, p, q, **kwargs)
    np.testing.assert_allclose(got, want, atol=atol, rtol=0, err_msg=f"{name} {kwargs}")
    if kwargs.get("clip") == 0.05:   # these rows all have KL > 0.05: the clip binds everywhere
      assert np.all(np.asarray(gradients.reverse_kl(p, q)) > 0.05) and np.all(np.asarray(got) == 0)


def test_restricted_gradient_is_closed_form_on_renormalised_candidates(precision):
  """For p_c = restrict(log_softmax(z), C), d objective(p_c) / dz is the closed form at C and 0 elsewhere."""
  dtype, atol = precision
  vocab = 12
  z = random_logits(6, (2, vocab), dtype=dtype)
  logq = jax.nn.log_softmax(random_logits(7, (2, vocab), dtype=dtype))
  candidates = jnp.array([[3, 0, 7, 11, -1, -1], [5, 2, 9, 1, 4, -1]])
  q_c, _ = gradients.restrict(logq, candidates)
  p_succ = jnp.asarray([[1, 0, 0.5, 0.25, 0, 0], [0, 1, 1, 0.75, 0.5, 0]], dtype)
  y, advantage = jnp.array([1, 4]), jnp.asarray([0.7, -0.4], dtype)
  restricted = lambda z: gradients.restrict(jax.nn.log_softmax(z), candidates)[0]

  @jax.jit
  def run(z):
    out = []
    for name, kwargs in ALL_CASES:
      closed_form, objective = closed_form_and_objective(name, kwargs, q_c, p_succ, y,
                                                         advantage if kwargs.get("advantage") else None)
      out.append((closed_form(restricted(z)), jax.grad(lambda z: jnp.sum(objective(restricted(z))))(z)))
    return out

  for (name, kwargs), (g_c, by_autodiff) in zip(ALL_CASES, run(z)):
    g_c, want = np.asarray(g_c), np.zeros((2, vocab))
    for row in range(2):
      for slot, token in enumerate(np.asarray(candidates[row])):
        if token >= 0:
          want[row, token] = g_c[row, slot]
        else:
          assert g_c[row, slot] == 0, name   # padding carries nothing
    assert np.all(np.isfinite(by_autodiff)), name
    np.testing.assert_allclose(by_autodiff, want, atol=atol, rtol=0, err_msg=f"{name} {kwargs}")


def test_restrict_matches_numpy():
  logp = jax.nn.log_softmax(random_logits(8, (2, 10)))
  candidates = np.array([[4, 1, -1], [9, -1, -1]])
  p_c, mass = gradients.restrict(logp, candidates)
  p = np.exp(np.asarray(logp, np.float64))
  np.testing.assert_allclose(mass, [p[0, 4] + p[0, 1], p[1, 9]], rtol=1e-6)
  np.testing.assert_allclose(p_c, [[p[0, 4] / mass[0], p[0, 1] / mass[0], 0], [1, 0, 0]], rtol=1e-6)
  assert np.asarray(p_c)[1, 1] == 0 and np.asarray(p_c)[1, 2] == 0
  p_c, mass = gradients.restrict(logp, np.full((2, 3), -1))   # no valid candidate: zeros, not NaN
  assert np.all(np.asarray(p_c) == 0) and np.all(np.asarray(mass) == 0)


def test_losses_match_numpy_with_padding():
  p = np.array([[0.5, 0.3, 0.2, 0.0], [0.1, 0.1, 0.8, 0.0]])
  q = np.array([[0.2, 0.2, 0.6, 0.0], [0.3, 0.6, 0.1, 0.0]])   # last slot is padding (p = q = 0)
  a, b = p[:, :3], q[:, :3]
  np.testing.assert_allclose(gradients.reverse_kl(p, q), (a * np.log(a / b)).sum(-1), rtol=1e-6)
  np.testing.assert_allclose(gradients.forward_kl(p, q), (b * np.log(b / a)).sum(-1), rtol=1e-6)
  for beta in (0.1, 0.5, 0.9):
    m = beta * b + (1 - beta) * a
    want = beta * (b * np.log(b / m)).sum(-1) + (1 - beta) * (a * np.log(a / m)).sum(-1)
    np.testing.assert_allclose(gradients.jsd(p, q, beta), want, rtol=1e-5)
  for name in ("reverse_kl", "forward_kl", "jsd", "clipped_reverse_kl"):
    g = np.asarray(gradients.distillation_gradient(name, p, q, clip=1.0))
    assert np.all(g[:, 3] == 0) and np.all(np.isfinite(g)), name


def test_jsd_limits_against_numpy_transcription():
  """Small beta points like forward KL, beta near 1 like reverse KL (moderate log-ratios: logit scale 0.5)."""
  p = jax.nn.softmax(random_logits(9, (50, 7), scale=0.5))
  q = jax.nn.softmax(random_logits(10, (50, 7), scale=0.5))
  for beta in (0.01, 0.99):
    got = gradients.distillation_gradient("jsd", p, q, beta=beta)
    np.testing.assert_allclose(got, numpy_direction("jsd", p, q, beta=beta), atol=1e-7)
  small = numpy_direction("jsd", p, q, beta=0.01)
  large = numpy_direction("jsd", p, q, beta=0.99)
  assert np.all(np_cos(small, np.asarray(q, np.float64) - np.asarray(p, np.float64)) > 0.999)
  assert np.all(np_cos(large, numpy_direction("reverse_kl", p, q)) > 0.999)
  assert np.all(np_cos(np.asarray(gradients.distillation_gradient("jsd", p, q, beta=0.01)), q - p) > 0.999)


def test_small_step_along_each_direction_lowers_its_loss_and_raises_value():
  z = random_logits(11, (8, 6))
  q = jax.nn.softmax(random_logits(12, (8, 6)))
  p_succ = jnp.asarray(np.random.default_rng(13).integers(0, 5, size=(8, 6)) / 4, jnp.float32)
  y, a = jnp.array([0, 1, 2, 3, 4, 5, 0, 1]), jnp.array([1.0, -1.0, 0.5, -0.5, 2.0, 1.0, -2.0, 0.3])
  # the binding clip has g = 0 (nothing to descend); the candidate-advantage surrogate moves A with p
  cases = [case for case in ALL_CASES if case not in (("clipped_reverse_kl", {"clip": 0.05}), ("sampled_token", {}))]

  @jax.jit
  def run(z):
    out = []
    for name, kwargs in cases:
      closed_form, objective = closed_form_and_objective(name, kwargs, q, p_succ, y, a)
      g = closed_form(jax.nn.softmax(z))
      out.append((objective(jax.nn.softmax(z)), objective(jax.nn.softmax(z + 1e-2 * g))))
    return out

  for (name, kwargs), (before, after) in zip(cases, run(z)):
    assert np.all(np.asarray(after) > np.asarray(before)), (name, kwargs)   # objective = -loss, or V for g*


def test_pins_clip_binds():
  p, q = jnp.array([0.6, 0.4]), jnp.array([0.9, 0.1])   # KL(p || q) = 0.311 > 0.05
  assert gradients.clipped_reverse_kl(p, q, 0.05) == np.float32(0.05)
  g = gradients.distillation_gradient("clipped_reverse_kl", p, q, clip=0.05)
  assert np.all(np.asarray(g) == 0)
  g_star = gradients.ideal_gradient(p, jnp.array([1.0, 0.0]))
  assert np.linalg.norm(g_star) > 0.1
  assert np.isnan(gradients.alignment(g_star, g))
  assert gradients.NAN_REASONS[int(gradients.nan_reason(False, g_star, g))] == "zero_distillation_gradient"
  # below the clip: the reverse-KL direction and value
  np.testing.assert_allclose(gradients.distillation_gradient("clipped_reverse_kl", p, q, clip=0.5),
                             gradients.distillation_gradient("reverse_kl", p, q), rtol=0, atol=0)
  np.testing.assert_allclose(gradients.clipped_reverse_kl(p, q, 0.5), 0.6 * np.log(2 / 3) + 0.4 * np.log(4),
                             rtol=1e-6)


def test_clipped_reverse_kl_is_never_negative():
  p = jax.nn.softmax(random_logits(14, (200, 9), scale=3.0))
  q_far = jax.nn.softmax(random_logits(15, (200, 9), scale=3.0))
  q_near = p * (1 + 1e-6 * random_logits(16, (200, 9)))          # KL at rounding level
  for q in (q_far, q_near, p):
    value = np.asarray(gradients.clipped_reverse_kl(p, q / q.sum(-1, keepdims=True), 0.05))
    assert np.all(value >= 0) and np.all(value <= np.float32(0.05))
  assert np.any(np.asarray(gradients.reverse_kl(p, q_near / q_near.sum(-1, keepdims=True))) < 0)  # lifted


def test_pins_top1_truncation_is_degenerate():
  p_c, mass = gradients.restrict(jnp.log(jnp.array([0.6, 0.4])), jnp.array([0]))
  np.testing.assert_allclose(mass, 0.6, rtol=1e-6)
  assert np.asarray(p_c).tolist() == [1.0]
  assert bool(gradients.is_degenerate(jnp.array([3]), jnp.array([8])))
  assert np.all(np.asarray(gradients.ideal_gradient(p_c, jnp.array([0.375]))) == 0)


def test_pins_sampled_token_expectation():
  p = jnp.array([0.5, 0.25, 0.125, 0.125])   # dyadic: every sum below is exact
  q = jnp.array([0.125, 0.25, 0.5, 0.125])
  per_token = lambda y, a: gradients.distillation_gradient("sampled_token", p, q, sampled_token=jnp.array(y),
                                                          advantage=a)
  expected = sum(p[y] * per_token(y, jnp.float32(0.75)) for y in range(4))   # token-independent advantage
  assert np.all(np.asarray(expected) == 0)
  expected = sum(p[y] * per_token(y, None) for y in range(4))                 # A = log q_y - log p_y
  np.testing.assert_allclose(expected, gradients.distillation_gradient("reverse_kl", p, q), atol=1e-7)
  np.testing.assert_allclose(expected, numpy_direction("reverse_kl", p, q), atol=1e-7)


def test_degenerate_counts_give_exact_zero_ideal_gradient_and_nan_alignment():
  assert not jax.config.jax_enable_x64   # the exactness claim is for fp32
  successes, n = jnp.array([3, 3, 3, 3]), jnp.array([8, 8, 8, 8])
  assert bool(gradients.is_degenerate(successes, n))
  p = jax.nn.softmax(random_logits(17, (4,)))
  q = jax.nn.softmax(random_logits(18, (4,)))
  g_star = gradients.ideal_gradient(p, successes / n)
  assert g_star.dtype == jnp.float32 and np.all(np.asarray(g_star) == 0)
  g = gradients.distillation_gradient("reverse_kl", p, q)
  assert np.isnan(gradients.alignment(g_star, g))
  assert gradients.NAN_REASONS[int(gradients.nan_reason(gradients.is_degenerate(successes, n), g_star, g))] \
      == "degenerate"
  # equal ratios with different counts, padding (n = 0) and p = 0 slots are still exactly 0
  successes, n = jnp.array([3, 6, 0, 3]), jnp.array([8, 16, 0, 8])
  p = jnp.array([0.5, 0.3, 0.0, 0.2])
  assert bool(gradients.is_degenerate(successes, n))
  p_succ = jnp.where(n > 0, successes / jnp.maximum(n, 1), 0.0)
  assert np.all(np.asarray(gradients.ideal_gradient(p, p_succ)) == 0)


def test_self_teacher_gives_zero_gradients_and_nan_alignment():
  p = jax.nn.softmax(random_logits(19, (3, 5)))
  p = p.at[:, -1].set(0.0)   # a padded slot too
  g_star = gradients.ideal_gradient(p, jnp.asarray([[1, 0, 0.5, 0.25, 0]] * 3, jnp.float32))
  cases = DIVERGENCE_CASES + [("sampled_token", {"sampled_token": jnp.array([0, 1, 2])})]
  run = jax.jit(lambda p: [gradients.distillation_gradient(name, p, p, **kwargs) for name, kwargs in cases])
  for (name, _), g in zip(cases, run(p)):
    assert np.all(np.asarray(g) == 0), name
    assert np.all(np.isnan(gradients.alignment(g_star, g))), name
    assert np.all(np.asarray(gradients.nan_reason(jnp.zeros(3, bool), g_star, g)) == 2), name
  assert np.all(np.asarray(gradients.teacher_advantage(p, p, jnp.ones_like(p))) == 0)


def test_is_degenerate_decides_on_integers():
  # 1/3 and 11184811/2**25 are the same float32 but different ratios
  assert np.float32(1 / 3) == np.float32(11184811 / 2**25)
  assert not bool(gradients.is_degenerate(jnp.array([1, 11184811]), jnp.array([3, 2**25])))
  assert bool(gradients.is_degenerate(jnp.array([0, 5, 0]), jnp.array([0, 8, 0])))   # one valid candidate
  assert bool(gradients.is_degenerate(jnp.array([0, 0]), jnp.array([0, 0])))         # none valid
  rng = np.random.default_rng(20)
  n = rng.choice([0, 2, 4, 8], size=(300, 4))
  successes = np.minimum(rng.choice([0, 1, 2, 4], size=(300, 4)), n)
  got = np.asarray(gradients.is_degenerate(jnp.asarray(successes), jnp.asarray(n)))
  want = [len({fractions.Fraction(int(s), int(c)) for s, c in zip(row_s, row_n) if c > 0}) < 2
          for row_s, row_n in zip(successes, n)]
  np.testing.assert_array_equal(got, want)
  assert 0 < np.sum(want) < len(want)
  with pytest.raises(ValueError, match="integer"):
    gradients.is_degenerate(jnp.array([0.5, 0.5]), jnp.array([2, 2]))


def test_alignment_teacher_advantage_and_node_value_match_numpy():
  a, b = np.array(random_logits(21, (6, 5))), np.array(random_logits(22, (6, 5)))
  b[0] = -3 * a[0]
  got = np.asarray(gradients.alignment(a, b))
  np.testing.assert_allclose(got, np_cos(a.astype(np.float64), b), atol=1e-6)
  assert abs(got[0] + 1) < 1e-6 and np.all(np.abs(got) <= 1)
  assert np.isnan(gradients.alignment(a[1], 1e-13 * b[1])) and np.isnan(gradients.alignment(0 * a[1], b[1]))
  assert not np.isnan(gradients.alignment(a[1], 1e-11 * b[1]))
  assert int(gradients.nan_reason(False, 0 * a[1], b[1])) == 3 and int(gradients.nan_reason(False, a[1], b[1])) == 0
  p, q = jax.nn.softmax(a), jax.nn.softmax(b)
  p_succ = np.random.default_rng(23).integers(0, 5, size=(6, 5)) / 4
  pn, qn = np.asarray(p, np.float64), np.asarray(q, np.float64)
  np.testing.assert_allclose(gradients.node_value(p, p_succ), (pn * p_succ).sum(-1), rtol=1e-6)
  np.testing.assert_allclose(gradients.teacher_advantage(p, q, p_succ),
                             (qn * p_succ).sum(-1) - (pn * p_succ).sum(-1), atol=1e-6)


def test_jit_and_errors():
  p = jax.nn.softmax(random_logits(24, (2, 4)))
  q = jax.nn.softmax(random_logits(25, (2, 4)))
  jitted = jax.jit(gradients.distillation_gradient, static_argnames=("divergence", "beta", "clip"))
  np.testing.assert_allclose(jitted("jsd", p, q, beta=0.3), gradients.distillation_gradient("jsd", p, q, beta=0.3),
                             atol=1e-7)
  with pytest.raises(ValueError, match="divergence must be one of"):
    gradients.distillation_gradient("kl", p, q)
  for beta in (0.0, 1.0, -0.5):
    with pytest.raises(ValueError, match="beta"):
      gradients.distillation_gradient("jsd", p, q, beta=beta)
  with pytest.raises(ValueError, match="traced"):
    jax.jit(lambda b: gradients.distillation_gradient("jsd", p, q, beta=b))(0.5)
  with pytest.raises(ValueError, match="clip is required"):
    gradients.distillation_gradient("clipped_reverse_kl", p, q)
  with pytest.raises(ValueError, match="clip must be > 0"):
    gradients.distillation_gradient("clipped_reverse_kl", p, q, clip=0.0)
  with pytest.raises(ValueError, match="sampled_token"):
    gradients.distillation_gradient("sampled_token", p, q)
  with pytest.raises(ValueError, match="sampled_token must be"):
    gradients.distillation_gradient("sampled_token", p, q, sampled_token=jnp.array([0, 1, 2]))
  with pytest.raises(ValueError, match="same shape"):
    gradients.distillation_gradient("reverse_kl", p, q[:, :3])
  with pytest.raises(ValueError, match="candidates"):
    gradients.restrict(jnp.log(p), jnp.array([0, 1]))


def test_projection_is_the_directional_derivative_of_the_node_value():
  """gradients.projection = d/ds V(softmax(z + s g / |g|)) at s = 0, by jax.jvp of V (independent of g*'s closed
  form); alignment * |g*|; NaN without a direction; 0 where g* is 0."""
  z, zq = random_logits(31, (7, 5)), random_logits(32, (7, 5))
  p, q = jax.nn.softmax(z), jax.nn.softmax(zq)
  p_succ = jnp.asarray(np.random.default_rng(33).integers(0, 5, size=(7, 5)) / 4, jnp.float32)
  g = gradients.distillation_gradient("reverse_kl", p, q)
  unit = g / jnp.linalg.norm(g, axis=-1, keepdims=True)
  value = lambda z: jnp.sum(jax.nn.softmax(z) * p_succ, -1)
  _, slope = jax.jvp(value, (z,), (unit,))
  got = gradients.projection(gradients.ideal_gradient(p, p_succ), g)
  np.testing.assert_allclose(got, slope, atol=1e-6)
  g_ideal = gradients.ideal_gradient(p, p_succ)
  np.testing.assert_allclose(got, gradients.alignment(g_ideal, g) * jnp.linalg.norm(g_ideal, axis=-1), atol=1e-6)
  assert np.isnan(gradients.projection(g_ideal[0], 0 * g[0])) and float(gradients.projection(0 * g_ideal[0], g[0])) == 0
