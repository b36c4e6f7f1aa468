"""The trainable exact toy (issue 13, experiment 1): enumeration against brute force, the first-order identity
dJ / eta -> sum_u reach^2 <g*, g_D> under a real optax SGD step, and a reduced experiment."""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from scipy import stats as stats_scipy

from opd_jax.estimators import gradients
from opd_jax.validation import exact_toys
from opd_jax.validation import toy_training as ttoy
from opd_jax.validation import toy_analysis

V, H = 3, 4
VERIFY = exact_toys.sum_mod_verifier(3)


def brute_force(table):
  """J, reach per prefix and P_succ per (prefix, token) by Python loops over every sequence, with this test's own
  prefix indexing (rows: depth by depth, lexicographic), independent of opd_jax.validation.toy_training."""
  row = {}
  for t in range(H):
    for prefix in itertools.product(range(V), repeat=t):
      row[prefix] = len(row)
  probs = {u: np.exp(table[i]) / np.exp(table[i]).sum() for u, i in row.items()}
  reach, J = {u: 0.0 for u in row}, 0.0
  through = {(u, k): 0.0 for u in row for k in range(V)}    # Pr[y passes u then k and succeeds]
  for seq in itertools.product(range(V), repeat=H):
    prob = np.prod([probs[seq[:t]][seq[t]] for t in range(H)])
    J += prob * VERIFY(seq)
    for t in range(H):
      reach[seq[:t]] += prob                                 # marginal: every sequence through the prefix
      through[(seq[:t], seq[t])] += prob * VERIFY(seq)
  p_succ = np.zeros((len(row), V))
  for (u, k), mass in through.items():
    p_succ[row[u], k] = mass / (reach[u] * probs[u][k])
  return J, np.array([reach[u] for u in row]), p_succ


@pytest.fixture(scope="module")
def setup():
  student = exact_toys.ToyPolicy.random(vocab=V, horizon=H, scale=1.5, seed=0)
  table = ttoy.from_toy(student)
  reward = ttoy.rewards(V, H)
  with jax.enable_x64(True):
    state = jax.tree.map(np.asarray, ttoy.exact(jnp.asarray(table), jnp.asarray(reward)))
  return student, table, reward, state


def test_exact_enumeration_matches_brute_force_on_an_untied_table():
  table = np.random.default_rng(3).normal(0, 1.5, (ttoy.num_nodes(V, H), V))
  J, reach, p_succ = brute_force(table)
  with jax.enable_x64(True):
    state = ttoy.exact(jnp.asarray(table), jnp.asarray(ttoy.rewards(V, H)))
  np.testing.assert_allclose(state.success, J, rtol=1e-12)
  np.testing.assert_allclose(state.reach, reach, rtol=1e-12)
  np.testing.assert_allclose(state.p_succ, p_succ, rtol=1e-10, atol=1e-12)
  np.testing.assert_allclose(state.value[0], J, rtol=1e-12)


def test_from_toy_matches_toy_policy_exact_p_succ(setup):
  student, table, reward, state = setup
  for prefix, index in (((), 0), ((2,), 3), ((1, 0), 1 + V + 1 * V + 0)):
    np.testing.assert_allclose(state.p_succ[index], student.exact_p_succ(list(prefix), VERIFY), rtol=1e-10)
    np.testing.assert_allclose(state.probs[index], student.probs(list(prefix)), rtol=1e-12)


def test_gradient_identities_for_every_divergence(setup):
  """dJ/dz(u) = reach(u) g*(u) (autodiff of J), and -dL/dz(u) = reach(u) g_D(u) (autodiff of the OPD loss)
  against numpy transcriptions of paper.md's formulas."""
  student, table, reward, state = setup
  p, ps, reach = state.probs, state.p_succ, state.reach
  q = ttoy.teacher_table(ttoy.Teacher("mix", 1.0, 0.5), state, seed=7)
  with jax.enable_x64(True):
    dj = np.asarray(jax.grad(ttoy.success_probability)(jnp.asarray(table), jnp.asarray(reward)))
    np.testing.assert_allclose(dj, reach[:, None] * p * (ps - (p * ps).sum(-1, keepdims=True)), atol=1e-13)
    grad_fn = jax.jit(jax.grad(ttoy.opd_loss), static_argnames=("divergence", "clip"))
    for divergence in ttoy.DIVERGENCES:
      grad = np.asarray(grad_fn(jnp.asarray(table), jnp.asarray(q), divergence=divergence, clip=0.1))
      kl = (p * np.log(p / q)).sum(-1, keepdims=True)
      m = 0.5 * q + 0.5 * p
      want = {"reverse_kl": p * (np.log(q / p) + kl), "forward_kl": q - p,
              "jsd": 0.5 * p * (np.log(m / p) + (p * np.log(p / m)).sum(-1, keepdims=True)),
              "clipped_reverse_kl": np.where(kl < 0.1, p * (np.log(q / p) + kl), 0.0)}[divergence]
      np.testing.assert_allclose(-grad, reach[:, None] * want, atol=1e-12, err_msg=divergence)


def test_first_order_identity_with_optax_sgd(setup):
  """dJ / eta after one optax.sgd step equals (b) = sum_u reach^2 <g*, g_D>, with an error that shrinks ~eta."""
  student, table, reward, state = setup
  q = ttoy.teacher_table(ttoy.Teacher("mix", 1.0, 0.5), state, seed=7)
  b = ttoy.predictors(state.reach, state.probs, q, state.p_succ, divergence="reverse_kl")["first_order"]
  assert abs(b) > 1e-3
  errors = []
  for eta in (1e-2, 1e-3, 1e-4):
    js = ttoy.train(table[None], q[None], reward, divergence="reverse_kl", optimizer="sgd", learning_rate=eta,
                    steps=1)
    errors.append(abs((js[0, 1] - js[0, 0]) / eta - b) / abs(b))
  assert errors[-1] < 1e-5, errors                         # measured 1.7e-6
  assert errors[1] < 0.2 * errors[0] and errors[2] < 0.2 * errors[1], errors


def test_predictors_against_numpy_and_large_r(setup):
  """(a) is the reach-weighted mean of numpy cosines; the finite-R predictors converge to the exact ones."""
  student, table, reward, state = setup
  p, ps, reach = state.probs, state.p_succ, state.reach
  q = ttoy.teacher_table(ttoy.Teacher("random"), state, seed=7)
  got = ttoy.predictors(reach, p, q, ps, divergence="forward_kl")
  g_star, g = p * (ps - (p * ps).sum(-1, keepdims=True)), q - p
  norm = np.linalg.norm(g_star, axis=-1) * np.linalg.norm(g, axis=-1)
  ok = norm > 0
  cos = (g_star * g).sum(-1)[ok] / norm[ok]
  np.testing.assert_allclose(got["align"], reach[ok] @ cos / reach[ok].sum(), rtol=1e-10)
  np.testing.assert_allclose(got["align_filled"], reach[ok] @ cos / reach.sum(), rtol=1e-10)
  np.testing.assert_allclose(got["first_order"], np.sum(reach[:, None] ** 2 * g_star * g), rtol=1e-10)
  est_ps, degenerate = ttoy.estimated_p_succ(ps, 10 ** 6, seed=0)
  est = ttoy.predictors(reach, p, q, est_ps, divergence="forward_kl", degenerate=degenerate)
  assert abs(est["align"] - got["align"]) < 0.02 and abs(est["first_order"] / got["first_order"] - 1) < 0.02
  noisy = ttoy.predictors(reach, p, q, *ttoy.estimated_p_succ(ps, 2, seed=0)[:1], divergence="forward_kl")
  assert abs(noisy["align"] - got["align"]) > 0.02                       # R = 2 is visibly noisy


def test_sampled_token_expectation_is_reverse_kl():
  """Why the exact experiment leaves out "sampled_token": E_{y ~ p} of its direction is the reverse-KL one."""
  rng = np.random.default_rng(0)
  p, q = rng.dirichlet(np.ones(5)), rng.dirichlet(np.ones(5))
  with jax.enable_x64(True):
    expected = sum(p[y] * np.asarray(gradients.distillation_gradient("sampled_token", p, q, sampled_token=y))
                   for y in range(5))
    np.testing.assert_allclose(expected, gradients.distillation_gradient("reverse_kl", p, q), atol=1e-14)


def test_reduced_experiment_first_order_ranks_one_step_gains():
  teachers = (ttoy.Teacher("success", 1.0), ttoy.Teacher("success", 4.0), ttoy.Teacher("failure", 1.0),
              ttoy.Teacher("random"), ttoy.Teacher("mix", 1.0, 0.25), ttoy.Teacher("mix", 1.0, 0.75))
  config = ttoy.ExperimentConfig(vocab=V, horizon=H, seeds=(0, 1), teachers=teachers,
                                 divergences=("reverse_kl", "forward_kl"), steps=(1, 10),
                                 learning_rates=(("sgd", 0.05),), rs=(4,))
  df = ttoy.run_experiment(config)
  assert len(df) == 24 and df["defined"].between(0, 1).all() and df["align_S4_d0"].between(-1, 1).all()
  table = toy_analysis.spearman_table(df, ["first_order", "align"], ["dJ_sgd_1"], n_boot=200)
  rho_b = table.set_index("predictor").loc["first_order"]
  assert rho_b.rho > 0.97 and rho_b.lo - 1e-12 <= rho_b.rho <= rho_b.hi + 1e-12, table
  # dJ after one small step is (b) * eta to first order: the values themselves, not just the ranks.
  np.testing.assert_allclose(df["dJ_sgd_1"], 0.05 * df["first_order"], rtol=0.1, atol=1e-5)


def test_bad_inputs():
  table = np.zeros((ttoy.num_nodes(V, H), V))
  with pytest.raises(ValueError, match="sampled_token"):
    ttoy.opd_loss(table, table, divergence="sampled_token")
  with pytest.raises(ValueError, match="divergence must be one of"):
    ttoy.train(table[None], table[None], ttoy.rewards(V, H), divergence="kl", optimizer="sgd", learning_rate=1.0,
               steps=1)
  with pytest.raises(ValueError, match="rows"):
    ttoy.exact(np.zeros((7, V)), ttoy.rewards(V, H))
  with pytest.raises(ValueError, match="Teacher.kind"):
    with jax.enable_x64(True):
      state = ttoy.exact(jnp.asarray(table), jnp.asarray(ttoy.rewards(V, H)))
    ttoy.teacher_table(ttoy.Teacher("oracle"), state, seed=0)
  with pytest.raises(ValueError, match="optimizer"):
    ttoy.make_optimizer("lion", 1e-3)


def test_sample_nodes_visits_nodes_by_reach_and_sampled_alignment_converges(setup):
  """Rollouts drawn by `sample_nodes` pass each node with frequency reach(u); the mean cosine over their nodes
  (a study's estimate) converges to the reach-weighted alignment (a)."""
  student, table, reward, state = setup
  nodes = ttoy.sample_nodes(state.probs, 20000, seed=0).reshape(20000, H)
  assert np.all(nodes[:, 0] == 0)
  parent = (nodes[:, 1:] - 1) // V                        # the tree's layout: children of node i are V i + 1 + k
  np.testing.assert_array_equal(parent, nodes[:, :-1])
  freq = np.bincount(nodes.reshape(-1), minlength=ttoy.num_nodes(V, H)) / 20000
  np.testing.assert_allclose(freq, state.reach, atol=0.012)
  q = ttoy.teacher_table(ttoy.Teacher("mix", 1.0, 0.5), state, seed=7)
  got = ttoy.predictors(state.reach, state.probs, q, state.p_succ, divergence="forward_kl", nodes=nodes.reshape(-1))
  assert abs(got["align_sampled"] - got["align"]) < 0.01, got
  adv = np.sum((q - state.probs) * state.p_succ, -1)
  np.testing.assert_allclose(got["teacher_advantage"], state.reach @ adv / state.reach.sum(), rtol=1e-10)


def _clustered(seed=0, teachers=10, per=20):
  """Configurations that cluster by teacher: x and y are a teacher effect plus small noise."""
  rng = np.random.default_rng(seed)
  tx, ty = rng.normal(size=teachers), rng.normal(size=teachers)
  ty = 0.5 * tx + ty
  t = np.repeat(np.arange(teachers), per)
  return pd.DataFrame(dict(teacher=[f"t{i}" for i in t], seed=np.tile(np.arange(per) % 5, teachers),
                           x=tx[t] + 0.05 * rng.normal(size=t.size), y=ty[t] + 0.05 * rng.normal(size=t.size)))


def test_teacher_resampled_interval_is_wider_when_teachers_cluster_and_replicates_are_concatenations():
  df = _clustered()
  naive = toy_analysis.spearman_table(df, ["x"], ["y"], n_boot=300).iloc[0]
  clustered = toy_analysis.spearman_table(df, ["x"], ["y"], n_boot=300, by=("teacher",)).iloc[0]
  assert naive.rho == clustered.rho
  assert clustered.hi - clustered.lo > 2.5 * (naive.hi - naive.lo), (naive, clustered)
  w = toy_analysis.bootstrap_weights(df, ("teacher",), n_boot=5)
  np.testing.assert_array_equal(w.sum(1), len(df))
  assert all(len(set(w[b, df.teacher == t])) == 1 for b in range(5) for t in df.teacher.unique())
  x, y = df.x.to_numpy(), df.y.to_numpy()
  for b in range(5):                                       # a replicate = the concatenated resample, by scipy
    reps = np.repeat(np.arange(len(df)), w[b].astype(int))
    want = stats_scipy.spearmanr(x[reps], y[reps]).statistic
    np.testing.assert_allclose(toy_analysis.stats.weighted_spearman(x, y, w[b:b + 1])[0], want, atol=1e-12)


def test_beyond_sign_against_scipy():
  df = _clustered(seed=1)
  df["dJ"] = df.y - 0.3                                    # some helpful, some harmful
  res = toy_analysis.beyond_sign(df, "dJ", ["x"], n_boot=200)
  y, x = df.dJ.to_numpy(), df.x.to_numpy()
  np.testing.assert_allclose(res["sign_only"][0], stats_scipy.spearmanr(np.sign(y), y).statistic, atol=1e-12)
  helpful = y > 0
  assert res["n_helpful"] == helpful.sum() and 0 < helpful.sum() < len(df)
  np.testing.assert_allclose(res["x"]["helpful"][0], stats_scipy.spearmanr(x[helpful], y[helpful]).statistic,
                             atol=1e-12)
  np.testing.assert_allclose(res["x"]["rho"][0], stats_scipy.spearmanr(x, y).statistic, atol=1e-12)
  for key in ("rho", "helpful", "sign_then", "gain"):
    assert res["x"][key][1] - 1e-9 <= res["x"][key][0] <= res["x"][key][2] + 1e-9, (key, res["x"][key])
  # Ordering within the signs by y itself is perfect: Spearman 1, a gain of 1 - sign_only.
  df["oracle"] = y
  res = toy_analysis.beyond_sign(df, "dJ", ["oracle"], n_boot=50)
  np.testing.assert_allclose(res["oracle"]["sign_then"][0], 1.0)
  np.testing.assert_allclose(res["oracle"]["gain"][0], 1.0 - res["sign_only"][0])
