"""Simulated node tables of the alignment ratio at a design (questions, nodes per question, r), with a known truth:
the sequential calibration's cells for report.estimand=alignment_ratio (benchmarks/verdict_calibration.py
--estimand=alignment_ratio; issue 48).

Model (ours; every quantity the study estimates is estimated as the study does, from simulated 0/1 rewards):
  - a node of question g has K candidates, student probabilities p ~ Dirichlet(0.5), and success probabilities
    P_k = sigmoid(a_g + b_gi + c_gik), a_g ~ N(0, 1.5^2) (question), b_gi ~ N(0, 1) (node), c_gik ~ N(0, 1.5^2);
    g* = p (P - V), V = sum_k p_k P_k (gradients.ideal_gradient's formula);
  - configuration c's distillation direction at the node is the unit vector d = cos(t) g*/|g*| + sin(t) e, e a
    random unit vector orthogonal to g* and to 1 (its own per configuration and node), t = theta_c + eta_cg +
    eps_cgi, eta ~ N(0, s_q^2) per (configuration, question), eps ~ N(0, s_n^2) per (configuration, node); so
    <g*, d> = |g*| cos(t), and the true value of configuration c, E <g*, d> / sqrt(E |g*|^2), is
    E|g*| cos(theta_c) exp(-(s_q^2 + s_n^2) / 2) / sqrt(E |g*|^2);
  - a study runs r continuations per candidate: the two halves' successes are Binomial(ceil(r / 2), P) and
    Binomial(floor(r / 2), P); the node's projection is <g*^, d> with g*^ from all r (linear in P^: unbiased), and
    its cross-fitted |g*|^2 is `success.crossfit_norm2` of the halves (the study's function); at a look, the values
    are the projections over S = sqrt(mean of the cross-fitted |g*|^2 over the nodes so far), one S for every
    configuration, as `report.common.with_estimand` computes them.
The cells name true values in the ratio's units (differences between configurations are what is judged): theta_c
is solved from them around cos(theta) = 0.5, with E|g*| and E |g*|^2 from 400,000 exact nodes.
"""
from __future__ import annotations

import math

import numpy as np

from opd_jax.estimators import success

K = 6                 # candidates per node
COS0 = 0.5            # cos(theta) of a configuration whose true value is 0 in the cells' units


def _nodes(rng, questions: int, m: int):
  """p, P [N, K] and question codes [N] of `questions` x m nodes."""
  n = questions * m
  q = np.repeat(np.arange(questions), m)
  p = rng.dirichlet(np.full(K, 0.5), n)
  logit = rng.normal(0, 1.5, questions)[q, None] + rng.normal(0, 1.0, n)[:, None] + rng.normal(0, 1.5, (n, K))
  return p, 1 / (1 + np.exp(-logit)), q


def _ideal(p, ps):
  return p * (ps - np.sum(p * ps, -1, keepdims=True))


class RatioModel:
  """The model above with question and node spreads s_q, s_n (radians) of the configurations' angles."""

  def __init__(self, s_q: float = 0.6, s_n: float = 1.0, seed: int = 12345):
    self.s_q, self.s_n = s_q, s_n
    p, ps, _ = _nodes(np.random.default_rng(seed), 100_000, 4)
    g = np.linalg.norm(_ideal(p, ps), axis=-1)
    # true value = scale * cos(theta): the cells' values are set around cos(theta) = COS0
    self.scale = g.mean() * math.exp(-(s_q ** 2 + s_n ** 2) / 2) / math.sqrt(np.mean(g ** 2))

  def cos_theta(self, mu) -> np.ndarray:
    """cos(theta_c) of configurations with true values mu (their differences; the first value sits at COS0)."""
    c = COS0 + (np.asarray(mu, float) - mu[0]) / self.scale
    if np.any(np.abs(c) >= 1):
      raise ValueError(f"true values {mu} are out of this model's range (|cos theta| < 1); use smaller differences")
    return c

  def tables(self, mu, questions: int, m: int, r: int):
    """A maker rng -> at, at(n) -> ([N, C] alignment ratio, [N] question codes) of the first n questions."""
    theta = np.arccos(self.cos_theta(mu))
    c = theta.size

    def make(rng):
      p, ps, q = _nodes(rng, questions, m)
      g = _ideal(p, ps)
      norm = np.linalg.norm(g, axis=-1, keepdims=True)
      unit = np.where(norm > 0, g / np.where(norm > 0, norm, 1), 0.0)
      e = rng.normal(size=(c,) + p.shape)                          # orthogonal to 1 and to g*, unit
      e -= e.mean(-1, keepdims=True)
      e -= np.sum(e * unit, -1, keepdims=True) * unit
      e /= np.linalg.norm(e, axis=-1, keepdims=True)
      t = theta[:, None] + rng.normal(0, self.s_q, (c, questions))[:, q] + rng.normal(0, self.s_n, (c, q.size))
      d = np.cos(t)[..., None] * unit + np.sin(t)[..., None] * e   # [C, N, K]
      na, nb = -(-r // 2), r // 2
      sa, sb = rng.binomial(na, ps), rng.binomial(nb, ps)
      proj = np.sum(_ideal(p, (sa + sb) / r)[None] * d, -1).T      # [N, C]
      full = lambda x, v: np.full(x.shape, v, np.int64)
      norm2 = success.crossfit_norm2(p, sa, full(sa, na), sb, full(sb, nb))

      def at(n):
        keep = q < n
        s = math.sqrt(np.mean(norm2[keep]))
        return proj[keep] / s, q[keep]
      return at
    return make
