"""Experiment 1 of issue 13, exact: does training-free alignment predict what on-policy distillation does?

The toy of `opd_jax.validation.exact_toys` (vocabulary V, horizon H, a verifier on the full sequence, default
"sum = 0 mod 3") made trainable: the student is a tabular softmax policy with ONE LOGIT ROW PER PREFIX, a table [N, V]
over the prefix tree, N = (V^H - 1) / (V - 1). Everything is exact (float64, no sampling): the success probability J,
and at every node u (a prefix of length t < H) the reach probability reach(u) = Pr[the policy writes u], the
next-token distribution p(u), P_succ(k | u) and the node value V(u) = sum_k p_k(u) P_succ(k | u). One
vectorised pass per depth (H array operations, no loop over sequences).

Node layout: depth t holds the V^t prefixes in lexicographic order (token 1 most significant); node
(t, c) has flat index (V^t - 1) / (V - 1) + c and children (t + 1, c V + k).

Why the first-order gain is (b) = sum_u reach(u)^2 <g*(u), g_D(u)>:
  - J = sum_y pi(y) r(y) = [sequences not through u] + reach(u) V(u). reach(u) depends only on u's ancestors'
    rows, P_succ(k | u) only on u's descendants' rows, and row z(u) only enters p(u). Hence
    dJ/dz(u) = reach(u) dV(u)/dz(u) = reach(u) g*(u), g* = p (P_succ - V) (`gradients.ideal_gradient`).
  - On-policy OPD: rollouts y ~ pi, per-rollout loss sum_t D(p(u_t), q(u_t)) (a SUM over the H positions,
    teacher stop-gradient, rollouts are data: no gradient through the sampling). Its expectation is
    L = sum_u sg(reach(u)) D(p(u), q(u)) (`opd_loss`), and -dL/dz(u) = reach(u) g_D(u) with g_D the
    divergence's direction (`gradients.distillation_gradient`). A batch of rollouts averaged gives an unbiased
    estimate of the same gradient; the toy takes its expectation exactly.
  - One SGD step z <- z + eta reach g_D: dJ = <dJ/dz, dz> + O(eta^2) = eta sum_u reach(u)^2 <g*(u), g_D(u)>
    + O(eta^2). Normalisation: with a per-rollout MEAN over the H positions instead of the sum, (b) is divided
    by H (the same ranking). tests/validation/test_toy_training.py checks dJ / eta -> (b) as eta -> 0.
(a), the paper's quantity, is the mean alignment cos(g*, g_D) over the nodes of student rollouts, i.e. over
nodes weighted by reach(u) (the expected per-rollout mean), excluding nodes where it is undefined (g* = 0 or
g_D = 0, `gradients.nan_reason`). It ignores the magnitudes that (b) weights by reach^2 |g*| |g_D|.

Teachers (`Teacher`), defined per prefix from the student at the START and then held FIXED during training
(a teacher is a fixed model; the success-conditioned teacher is not recomputed from the moving student):
  - success, tau: q ∝ p (P_succ + eps)^tau (tau = 1 is the student conditioned on success); failure, tau:
    q ∝ p (1 - P_succ + eps)^tau. eps = SMOOTH = 0.01: the verifier makes P_succ exactly 0 or 1 at the last
    depth, and q = 0 on a token would give the reverse KL the clamped push log(tiny) (`gradients`).
  - random: an unrelated `exact_toys.ToyPolicy.random` (its own seed), expanded to the prefix tree.
  - mix, w: w * success(tau) + (1 - w) * random.
Divergences: those of `gradients.DIVERGENCES` except "sampled_token", whose expectation over y ~ p (with
A = log q_y - log p_y) is exactly the reverse-KL direction, so in this exact experiment it would repeat the
reverse-KL rows (tested).

Finite R (`estimated_predictors`): P_succ(k | u) estimated from R Bernoulli continuations per candidate,
successes ~ Binomial(R, P_succ(k | u)), one draw per (student, R) shared by every configuration (as a study
shares its continuations); degenerate nodes (equal counts) are excluded from (a).
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pandas as pd
from scipy import special

from opd_jax.estimators import gradients
from opd_jax.validation import exact_toys

SMOOTH = 0.01                                      # eps of the success/failure-conditioned teachers
DIVERGENCES = ("reverse_kl", "forward_kl", "jsd", "clipped_reverse_kl")
OPTIMIZERS = ("sgd", "adam")


def num_nodes(vocab: int, horizon: int) -> int:
  """N = 1 + V + ... + V^(H-1), the number of prefixes (decision nodes) of the tree."""
  return sum(vocab ** t for t in range(horizon))


def _offsets(vocab: int, horizon: int) -> list[int]:
  return [num_nodes(vocab, t) for t in range(horizon + 1)]


def _horizon_of(table_shape: tuple[int, ...]) -> tuple[int, int]:
  """(V, H) of a table [N, V]; ValueError if N is not a tree size."""
  if len(table_shape) != 2 or table_shape[1] < 2:
    raise ValueError(f"table must have shape [N, V] with V >= 2, got {table_shape}")
  n, vocab = table_shape
  for horizon in range(1, 64):
    if num_nodes(vocab, horizon) == n:
      return vocab, horizon
    if num_nodes(vocab, horizon) > n:
      break
  raise ValueError(f"table has {n} rows, not (V^H - 1) / (V - 1) for V={vocab}: build it with from_toy")


def from_toy(policy: exact_toys.ToyPolicy) -> np.ndarray:
  """The per-prefix table [N, V] float64 of a `exact_toys.ToyPolicy` (row u = the policy's logits at (t, last
  token))."""
  vocab, horizon = policy.vocab, policy.horizon
  rows = [policy.logits[0, vocab][None]]
  for t in range(1, horizon):
    last = np.arange(vocab ** t) % vocab                     # the last token of each depth-t prefix
    rows.append(policy.logits[t, last])
  return np.concatenate(rows).astype(np.float64)


def sequences(vocab: int, horizon: int) -> np.ndarray:
  """Every sequence, int [V^H, H], in the tree's lexicographic order."""
  return np.stack(np.unravel_index(np.arange(vocab ** horizon), (vocab,) * horizon), -1)


def rewards(vocab: int, horizon: int, verify: Callable[[Sequence[int]], float] | None = None) -> np.ndarray:
  """r(y) for every sequence, float64 [V^H] (`sequences` order); default verifier: sum = 0 mod 3."""
  verify = verify or exact_toys.sum_mod_verifier(3)
  return np.array([verify(seq) for seq in sequences(vocab, horizon).tolist()], np.float64)


def _reach(p: jax.Array, vocab: int, horizon: int) -> jax.Array:
  offsets, out = _offsets(vocab, horizon), [jnp.ones((1,), p.dtype)]
  for t in range(horizon - 1):
    out.append((out[-1][:, None] * p[offsets[t]:offsets[t + 1]]).reshape(-1))
  return jnp.concatenate(out)


class Exact(NamedTuple):
  """The exact state of a tabular policy (arrays over the N nodes; float64 under jax.enable_x64)."""
  probs: jax.Array    # [N, V] p(u)
  reach: jax.Array    # [N]    Pr[the policy writes prefix u]; sums to 1 over each depth
  p_succ: jax.Array   # [N, V] P_succ(k | u)
  value: jax.Array    # [N]    V(u) = sum_k p_k P_succ(k | u)
  success: jax.Array  # []     J = V(root)


@jax.jit
def exact(table: jax.Array, reward: jax.Array) -> Exact:
  """Exact p, reach, P_succ, V and J of the per-prefix table (module docstring). Jitted, differentiable.

  Args:
    table: [N, V] float logits, one row per prefix (`from_toy`).
    reward: [V^H] float r(y) per sequence (`rewards`).
  Returns:
    `Exact`.
  Raises:
    ValueError: if N is not a tree size or reward has the wrong length.
  """
  vocab, horizon = _horizon_of(jnp.shape(table))
  if jnp.shape(reward) != (vocab ** horizon,):
    raise ValueError(f"reward must have shape ({vocab ** horizon},) = V^H, got {jnp.shape(reward)}")
  p = jax.nn.softmax(table, axis=-1)
  offsets = _offsets(vocab, horizon)
  succ, values, below = [None] * horizon, [None] * horizon, jnp.asarray(reward, p.dtype)
  for t in reversed(range(horizon)):
    succ[t] = below.reshape(vocab ** t, vocab)
    values[t] = gradients.node_value(p[offsets[t]:offsets[t + 1]], succ[t])
    below = values[t]
  return Exact(p, _reach(p, vocab, horizon), jnp.concatenate(succ), jnp.concatenate(values), values[0][0])


def success_probability(table: jax.Array, reward: jax.Array) -> jax.Array:
  """J = Pr[r(y) = 1], y ~ the table's policy, exact; a scalar."""
  return exact(table, reward).success


def _check_divergence(divergence: str) -> None:
  if divergence == "sampled_token":
    raise ValueError("divergence 'sampled_token' is not trained in the exact toy: its expected direction is the "
                     "reverse-KL one; use 'reverse_kl'")
  if divergence not in DIVERGENCES:
    raise ValueError(f"divergence must be one of {DIVERGENCES}, got {divergence!r}")


def opd_loss(table: jax.Array, q: jax.Array, *, divergence: str, beta: float = 0.5,
             clip: float | None = None) -> jax.Array:
  """Expected on-policy OPD loss L = sum_u sg(reach(u)) D(p(u), q(u)) (module docstring).

  -dL/dz(u) = reach(u) g_D(u), g_D = `gradients.distillation_gradient(divergence, p(u), q(u))`.

  Args:
    table: [N, V] float student logits.
    q: [N, V] float teacher distributions per prefix (fixed).
    divergence: one of DIVERGENCES; beta for "jsd", clip for "clipped_reverse_kl" (as in `gradients`).
  Returns:
    [] float.
  Raises:
    ValueError: on an unknown divergence (or "sampled_token") or a bad table shape.
  """
  _check_divergence(divergence)
  vocab, horizon = _horizon_of(jnp.shape(table))
  p = jax.nn.softmax(table, axis=-1)
  reach = jax.lax.stop_gradient(_reach(p, vocab, horizon))
  return jnp.sum(reach * _divergence(divergence, p, q, beta, clip))


def _divergence(divergence, p, q, beta, clip):
  """D(p(u), q(u)) per node [N] (`gradients`' divergences)."""
  if divergence == "reverse_kl":
    return gradients.reverse_kl(p, q)
  if divergence == "forward_kl":
    return gradients.forward_kl(p, q)
  if divergence == "jsd":
    return gradients.jsd(p, q, beta)
  return gradients.clipped_reverse_kl(p, q, clip)


@dataclasses.dataclass(frozen=True)
class Teacher:
  """One teacher of the family (module docstring): kind in TEACHER_KINDS; tau for success/failure/mix; weight w
  of the success-conditioned teacher for mix."""
  kind: str
  tau: float = 1.0
  weight: float = 1.0

  @property
  def name(self) -> str:
    if self.kind == "random":
      return "random"
    if self.kind == "mix":
      return f"mix(success@{self.tau:g},w={self.weight:g})"
    return f"{self.kind}@{self.tau:g}"


TEACHER_KINDS = ("success", "failure", "random", "mix")
TEACHERS = (*(Teacher("success", tau) for tau in (0.5, 1.0, 2.0, 4.0)),
            *(Teacher("failure", tau) for tau in (1.0, 2.0)),
            Teacher("random"),
            *(Teacher("mix", 1.0, w) for w in (0.25, 0.5, 0.75)))


def _conditioned(p: np.ndarray, score: np.ndarray, tau: float) -> np.ndarray:
  q = p * (score + SMOOTH) ** tau
  return q / q.sum(-1, keepdims=True)


def teacher_table(teacher: Teacher, state: Exact, *, seed: int, scale: float = 1.5) -> np.ndarray:
  """The teacher's q per prefix, float64 [N, V], defined from the student's exact `state` at the start.

  Args:
    teacher: a `Teacher`.
    state: the student's `Exact` state.
    seed: the random teacher is exact_toys.ToyPolicy.random(seed=seed, scale=scale) expanded to the tree.
    scale: its logit scale.
  Raises:
    ValueError: on an unknown kind, tau <= 0, or a weight outside [0, 1].
  """
  if teacher.kind not in TEACHER_KINDS:
    raise ValueError(f"Teacher.kind must be one of {TEACHER_KINDS}, got {teacher.kind!r}")
  if not teacher.tau > 0 or not 0.0 <= teacher.weight <= 1.0:
    raise ValueError(f"Teacher needs tau > 0 and weight in [0, 1], got {teacher}")
  p, ps = np.asarray(state.probs, np.float64), np.asarray(state.p_succ, np.float64)
  vocab, horizon = _horizon_of(p.shape)
  random = special.softmax(from_toy(exact_toys.ToyPolicy.random(vocab=vocab, horizon=horizon, scale=scale, seed=seed)),
                           axis=-1)                          # float64: forward KL's q - p needs sum q = 1
  if teacher.kind == "success":
    return _conditioned(p, ps, teacher.tau)
  if teacher.kind == "failure":
    return _conditioned(p, 1.0 - ps, teacher.tau)
  if teacher.kind == "random":
    return random
  return teacher.weight * _conditioned(p, ps, teacher.tau) + (1.0 - teacher.weight) * random


def predictors(reach, p, q, p_succ, *, divergence: str, beta: float = 0.5, clip: float | None = None,
               degenerate=None, nodes=None) -> dict[str, float]:
  """(a), its variants, (b), the teacher advantage and divergence predictors of one configuration, in float64.

  Args:
    reach: [N] reach probabilities; p, q: [N, V] student / teacher; p_succ: [N, V] exact or estimated P_succ.
    divergence, beta, clip: as in `gradients.distillation_gradient`.
    degenerate: optional [N] bool (estimated P_succ: `gradients.is_degenerate` on the counts); default: P_succ
      equal on every token.
    nodes: optional int [M] node indices of sampled rollouts (`sample_nodes`, repeats allowed): adds
      "align_sampled", the plain mean of cos(g*, g_D) over those node instances where it is defined (a study's
      estimate: the mean over the nodes of its rollouts).
  Returns:
    {"align": reach-weighted mean of cos(g*, g_D) over defined nodes (NaN if none; the paper's rule),
     "align_filled": the reach-weighted mean over all nodes with undefined ones counted as 0 (= align * defined:
     a node where the clip binds or q = p gets no update), "align_uniform": the plain mean over defined nodes,
     "first_order": sum_u reach^2 <g*, g_D>, "defined": the fraction of reach mass (over all depths) where the
     alignment is defined, "teacher_advantage": the reach-weighted mean over all nodes of
     sum_k (q_k - p_k) P_succ(k) (`gradients.teacher_advantage`), "loss0": the OPD loss at the start,
     sum_u reach D(p, q) (the configuration's divergence), "kl_pq" / "kl_qp": reach-weighted mean KL(p || q) /
     KL(q || p) (the same for every divergence of a teacher)}.
  """
  _check_divergence(divergence)
  reach, p, q, p_succ = (np.asarray(x, np.float64) for x in (reach, p, q, p_succ))
  if degenerate is None:
    degenerate = np.all(p_succ == p_succ[:, :1], axis=-1)
  with jax.enable_x64(True):
    g_star = np.asarray(gradients.ideal_gradient(p, p_succ))
    g = np.asarray(gradients.distillation_gradient(divergence, p, q, beta=beta, clip=clip))
    code = np.asarray(gradients.nan_reason(np.asarray(degenerate), g_star, g, p))
    cos = np.asarray(gradients.alignment(g_star, g))
    adv = np.asarray(gradients.teacher_advantage(p, q, p_succ))
    loss = np.asarray(_divergence(divergence, p, q, beta, clip))
    kl_pq, kl_qp = np.asarray(gradients.reverse_kl(p, q)), np.asarray(gradients.reverse_kl(q, p))
  ok = code == 0
  mass, total = reach[ok].sum(), reach.sum()
  out = dict(align=float(reach[ok] @ cos[ok] / mass) if mass > 0 else float("nan"),
             align_filled=float(reach[ok] @ cos[ok] / total),
             align_uniform=float(cos[ok].mean()) if ok.any() else float("nan"),
             first_order=float(np.sum(reach ** 2 * np.sum(g_star * g, axis=-1))),
             defined=float(mass / total), teacher_advantage=float(reach @ adv / total), loss0=float(reach @ loss),
             kl_pq=float(reach @ kl_pq / total), kl_qp=float(reach @ kl_qp / total))
  if nodes is not None:
    keep = np.asarray(nodes)[ok[np.asarray(nodes)]]
    out["align_sampled"] = float(cos[keep].mean()) if keep.size else float("nan")
  return out


def sample_nodes(probs, rollouts: int, *, seed) -> np.ndarray:
  """The nodes a study scores: every prefix of `rollouts` rollouts y ~ the policy, int [rollouts * H] node
  indices (depth-major within a rollout; repeats kept), drawn with np.random.default_rng(seed).

  Args:
    probs: [N, V] the policy's p(u) (`Exact.probs`).
  Raises:
    ValueError: if rollouts < 1.
  """
  if rollouts < 1:
    raise ValueError(f"rollouts must be >= 1, got {rollouts}")
  probs = np.asarray(probs, np.float64)
  vocab, horizon = _horizon_of(probs.shape)
  offsets, rng = _offsets(vocab, horizon), np.random.default_rng(seed)
  c, out = np.zeros(rollouts, np.int64), []
  for t in range(horizon):
    node = offsets[t] + c
    out.append(node)
    cum = np.cumsum(probs[node], axis=-1)
    k = np.minimum((rng.random(rollouts)[:, None] > cum).sum(-1), vocab - 1)   # inverse-CDF draw
    c = c * vocab + k
  return np.stack(out, -1).reshape(-1)


def estimated_p_succ(p_succ: np.ndarray, R: int, *, seed) -> tuple[np.ndarray, np.ndarray]:
  """(P_hat = successes / R float64 [N, V], degenerate bool [N]) from R Bernoulli continuations per candidate,
  successes ~ Binomial(R, P_succ) drawn with np.random.default_rng(seed) (an int or a tuple of ints).

  Raises:
    ValueError: if R < 1.
  """
  if R < 1:
    raise ValueError(f"R (continuations per candidate) must be >= 1, got {R}")
  successes = np.random.default_rng(seed).binomial(R, np.clip(p_succ, 0.0, 1.0))
  degenerate = np.asarray(gradients.is_degenerate(successes.astype(np.int32), np.full_like(successes, R, np.int32)))
  return successes / R, degenerate


def make_optimizer(name: str, learning_rate: float) -> optax.GradientTransformation:
  """optax.sgd or optax.adam at a constant learning rate."""
  if name not in OPTIMIZERS:
    raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {name!r}")
  if not learning_rate > 0:
    raise ValueError(f"learning_rate must be > 0, got {learning_rate}")
  return optax.sgd(learning_rate) if name == "sgd" else optax.adam(learning_rate)


@functools.partial(jax.jit, static_argnames=("divergence", "beta", "clip", "optimizer", "steps"))
def _train(tables, qs, reward, learning_rate, *, divergence, beta, clip, optimizer, steps):
  opt = (optax.sgd if optimizer == "sgd" else optax.adam)(learning_rate)   # a traced rate: one compile
  loss = functools.partial(opd_loss, divergence=divergence, beta=beta, clip=clip)

  def one(table, q):
    def step(carry, _):
      table, state = carry
      updates, state = opt.update(jax.grad(loss)(table, q), state, table)
      table = optax.apply_updates(table, updates)
      return (table, state), success_probability(table, reward)
    _, js = jax.lax.scan(step, (table, opt.init(table)), None, length=steps)
    return jnp.concatenate([success_probability(table, reward)[None], js])

  return jax.vmap(one)(tables, qs)


def train(tables, qs, reward, *, divergence: str, optimizer: str, learning_rate: float, steps: int,
          beta: float = 0.5, clip: float | None = None) -> np.ndarray:
  """Exact J along `steps` optax steps on `opd_loss`, for a batch of (student, teacher) pairs, in float64.

  Args:
    tables: [C, N, V] student logit tables; qs: [C, N, V] fixed teachers; reward: [V^H].
    divergence, beta, clip: the OPD loss; optimizer: "sgd" or "adam"; learning_rate: constant; steps >= 1.
  Returns:
    [C, steps + 1] float64: J before and after each step.
  """
  _check_divergence(divergence)
  make_optimizer(optimizer, learning_rate)
  if steps < 1:
    raise ValueError(f"steps must be >= 1, got {steps}")
  with jax.enable_x64(True):
    return np.asarray(_train(jnp.asarray(tables, jnp.float64), jnp.asarray(qs, jnp.float64),
                             jnp.asarray(reward, jnp.float64), jnp.asarray(learning_rate, jnp.float64),
                             divergence=divergence, beta=float(beta), clip=None if clip is None else float(clip),
                             optimizer=optimizer, steps=int(steps)))


@dataclasses.dataclass(frozen=True)
class ExperimentConfig:
  """Sizes and settings of the exact experiment (defaults: the full run, 5 seeds x 10 teachers x 4 divergences)."""
  vocab: int = 4
  horizon: int = 5
  seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
  teachers: tuple[Teacher, ...] = TEACHERS
  divergences: tuple[str, ...] = DIVERGENCES
  student_scale: float = 1.5
  teacher_scale: float = 1.5
  beta: float = 0.5
  clip: float = 0.1
  steps: tuple[int, ...] = (1, 10, 50)
  learning_rates: tuple[tuple[str, float], ...] = (("sgd", 1.0), ("adam", 0.05))
  rs: tuple[int, ...] = (4, 16, 64)
  r_draws: int = 1                                 # independent finite-R estimates per (student, R)
  sample_rollouts: int = 16                        # rollouts whose H nodes the sampled estimate (align_S) scores


def run_experiment(config: ExperimentConfig = ExperimentConfig()) -> pd.DataFrame:
  """Every (seed, teacher, divergence): predictors at the start (exact and finite-R) and dJ after each step count.

  Returns:
    One row per configuration: seed, teacher, divergence, J0, and the keys of `predictors`,
    dJ_<opt>_<steps> for each optimizer and step count, align_R<R>_d<i> / first_order_R<R>_d<i> for each R
    and draw i < r_draws (finite R at every node, reach-weighted), align_S<R>_d<i> (a study's estimate: finite R
    at the nodes of `sample_rollouts` sampled rollouts, `sample_nodes`, drawn anew per (seed, R, i)).
  """
  for d in config.divergences:
    _check_divergence(d)
  reward = rewards(config.vocab, config.horizon)
  rows, tables, qs = [], [], []
  for seed in config.seeds:
    table = from_toy(exact_toys.ToyPolicy.random(vocab=config.vocab, horizon=config.horizon, scale=config.student_scale,
                                          seed=seed))
    with jax.enable_x64(True):
      state = jax.tree.map(np.asarray, exact(jnp.asarray(table), jnp.asarray(reward)))
    estimates = {(R, i): estimated_p_succ(state.p_succ, R, seed=(R, seed, i))
                 for R in config.rs for i in range(config.r_draws)}
    sampled = {(R, i): sample_nodes(state.probs, config.sample_rollouts, seed=(7, R, seed, i))
               for R in config.rs for i in range(config.r_draws)}
    for teacher in config.teachers:
      q = teacher_table(teacher, state, seed=1000 + seed, scale=config.teacher_scale)
      for d in config.divergences:
        kw = dict(divergence=d, beta=config.beta, clip=config.clip)
        row = dict(seed=seed, teacher=teacher.name, divergence=d, J0=float(state.success),
                   **predictors(state.reach, state.probs, q, state.p_succ, **kw))
        for (R, i), (ps, degenerate) in estimates.items():
          est = predictors(state.reach, state.probs, q, ps, degenerate=degenerate, nodes=sampled[(R, i)], **kw)
          row[f"align_R{R}_d{i}"], row[f"first_order_R{R}_d{i}"] = est["align"], est["first_order"]
          row[f"align_S{R}_d{i}"] = est["align_sampled"]
        rows.append(row)
        tables.append(table)
        qs.append(q)
  df = pd.DataFrame(rows)
  tables, qs = np.stack(tables), np.stack(qs)
  for optimizer, lr in config.learning_rates:
    for d in config.divergences:
      sel = (df.divergence == d).to_numpy()
      js = train(tables[sel], qs[sel], reward, divergence=d, optimizer=optimizer, learning_rate=lr,
                 steps=max(config.steps), beta=config.beta, clip=config.clip)
      for s in config.steps:
        df.loc[sel, f"dJ_{optimizer}_{s}"] = js[:, s] - js[:, 0]
  return df


