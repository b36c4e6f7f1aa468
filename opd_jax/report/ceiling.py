"""The noise ceiling of g*: how well the estimated ideal direction points at the true one, per node.

The records' `noise_ceiling` is the split-half cosine cos(g*_A, g*_B) of two disjoint halves of each
candidate's replicates: it measures the reliability of an R/2 estimate, not of the full-R g* (on the exact toy
at R = 8 its mean is ~0.57 while E cos(g*_R, g*) is ~0.80). `expected_cosine` is a direct estimate of
E cos(g*_R, g*) instead: a parametric bootstrap from the node's counts, with P_succ shrunk towards 1/2 by the
Jeffreys prior (posterior mean (s + 1/2) / (n + 1)), which undoes most of the optimism of plugging in the
noisy P_succ. A node where every replicate of every candidate agrees (s_k in {0, n_k}: a forced stop token, the
token cap, or P_succ near 0 or 1) is not shrunk: the draws then repeat the counts and the estimate is 1 (the
shrinkage would invent noise the continuations never showed; at a fixed-outcome node the truth is 1).

Measured error (benchmarks/ceiling_check.py: mean estimate - mean exact E cos(g*_R, g*) over a toy's nodes, at
R = 4 / 8 / 16): project toy -0.022 / -0.027 / -0.035, peaked +0.000 / -0.012 / -0.009, parity (V = 3, mod 2)
-0.108 / -0.094 / -0.050, flat (scale 1) +0.183 / +0.150 / +0.107; fixed-outcome nodes 0 (-0.002 to -0.179
before the unanimous rule). Within 0.05 on the project's toy (tests/estimators/test_stats.py), not in general: the
sign and size depend on the toy (the prior shrinks P_succ toward 1/2, not the spread of P_succ over C(u); flat
toys, where |g*| is small, come out too high).
An alignment averaged over nodes cannot exceed roughly this ceiling even for a perfect distillation direction.
"""
import jax
import numpy as np
import pandas as pd

from opd_jax.estimators import gradients

PRIOR = 0.5   # Jeffreys: Beta(1/2, 1/2)


def expected_cosine(p: np.ndarray, successes: np.ndarray, n: np.ndarray, *, n_sim: int = 200,
                    seed: int = 0, unanimous: bool = True) -> np.ndarray:
  """Direct noise ceiling: estimated E cos(g*_R, g*) at each of M nodes, float64 [M].

  For node m: P~_k = (s_k + 1/2) / (n_k + 1), or P~_k = s_k / n_k where every candidate run has s_k in
  {0, n_k} and `unanimous` (no shrinkage-invented noise: the estimate is then 1 wherever g~ != 0; candidates
  with n_k = 0, padding or not run, have no say: p is taken over the candidates run, as
  `success.estimator_p_succ` does); g~ = ideal_gradient(p, P~); n_sim draws s'_k ~ Binomial(n_k, P~_k)
  give g' = ideal_gradient(p, s' / n); the estimate is the mean of cos(g', g~) over the draws where g' != 0
  (a degenerate draw has no alignment, as in the records). gradients.ideal_gradient and gradients.alignment do
  the vector work (float64).

  Args:
    p: float [M, K] student probabilities on C(u) (0 on padding).
    successes, n: int [M, K] counts per candidate (n = 0 on padding).
    n_sim: parametric bootstrap draws per node.
    seed: numpy seed of the draws.
    unanimous: False: shrink every node (the estimator before issue 25, for benchmarks/ceiling_check.py).
  Returns:
    float64 [M]; NaN where p is all 0 (unavailable) or every draw is degenerate.
  """
  p, s, n = (np.asarray(a, np.float64) for a in (p, successes, n))
  if np.any((n == 0) & (p > 0)):                   # candidates left out by weighted allocation: p over the run
    p = np.where(n > 0, p, 0.0)
    p = p / np.where(p.sum(-1, keepdims=True) > 0, p.sum(-1, keepdims=True), 1.0)
  rng = np.random.default_rng(seed)
  shrunk = (s + PRIOR) / (n + 2 * PRIOR)
  if unanimous:
    agree = np.all((n == 0) | (s == 0) | (s == n), axis=-1, keepdims=True)
    shrunk = np.where(agree, s / np.maximum(n, 1), shrunk)
  draws = rng.binomial(n.astype(np.int64)[None], shrunk[None], size=(n_sim, *p.shape)) / np.maximum(n, 1)[None]
  with jax.enable_x64(True):
    g_true = gradients.ideal_gradient(p, shrunk)
    g_sim = gradients.ideal_gradient(np.broadcast_to(p, draws.shape), draws)
    cos = np.asarray(gradients.alignment(g_sim, np.broadcast_to(g_true, draws.shape)), np.float64)
  finite = np.isfinite(cos)
  count = finite.sum(0)
  out = np.where(count > 0, np.where(finite, cos, 0.0).sum(0) / np.maximum(count, 1), np.nan)
  return np.where(p.sum(-1) > 0, out, np.nan)


def node_ceilings(nodes: pd.DataFrame, *, n_sim: int = 200, seed: int = 0) -> pd.Series:
  """`expected_cosine` of every distinct node (question_id, rollout_id, position) of the records, as a Series
  indexed like `nodes` (the ceiling depends on p and the counts only, which every configuration shares; the
  first row with a non-empty p is used). Needs the columns p, successes, n; NaN where p is empty everywhere."""
  key = ["question_id", "rollout_id", "position"]
  have_p = nodes["p"].map(len) > 0
  first = nodes[have_p].drop_duplicates(key)
  if first.empty:
    return pd.Series(np.nan, index=nodes.index)
  width = int(first["p"].map(len).max())
  pad = lambda col, dtype: np.stack([np.pad(np.asarray(v, dtype), (0, width - len(v))) for v in first[col]])
  values = expected_cosine(pad("p", np.float64), pad("successes", np.int64), pad("n", np.int64), n_sim=n_sim,
                           seed=seed)
  lookup = pd.Series(values, index=pd.MultiIndex.from_frame(first[key]))
  return pd.Series(lookup.reindex(pd.MultiIndex.from_frame(nodes[key])).to_numpy(), index=nodes.index)
