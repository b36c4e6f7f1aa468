"""The noise ceiling of g*: how well the estimated ideal direction points at the true one, per node.

The records' `noise_ceiling` is the split-half cosine cos(g*_A, g*_B) of two disjoint halves of each
candidate's replicates: it measures the reliability of an R/2 estimate, not of the full-R g* (on the exact toy
at R = 8 its mean is ~0.57 while E cos(g*_R, g*) is ~0.80). `expected_cosine` is a direct estimate of
E cos(g*_R, g*) instead: a parametric bootstrap from the node's counts, with P_succ shrunk towards 1/2 by the
Jeffreys prior (posterior mean (s + 1/2) / (n + 1)), which undoes most of the optimism of plugging in the
noisy P_succ (tests/test_report_stats.py checks it within 0.05 of the truth on the exact toy at R = 4, 8, 16).
An alignment averaged over nodes cannot exceed roughly this ceiling even for a perfect distillation direction.
"""
import jax
import numpy as np
import pandas as pd

from opd_jax import gradients

PRIOR = 0.5   # Jeffreys: Beta(1/2, 1/2)


def expected_cosine(p: np.ndarray, successes: np.ndarray, n: np.ndarray, *, n_sim: int = 200,
                    seed: int = 0) -> np.ndarray:
  """Direct noise ceiling: estimated E cos(g*_R, g*) at each of M nodes, float64 [M].

  For node m: P~_k = (s_k + 1/2) / (n_k + 1); g~ = ideal_gradient(p, P~); n_sim draws s'_k ~ Binomial(n_k, P~_k)
  give g' = ideal_gradient(p, s' / n); the estimate is the mean of cos(g', g~) over the draws where g' != 0
  (a degenerate draw has no alignment, as in the records). gradients.ideal_gradient and gradients.alignment do
  the vector work (float64).

  Args:
    p: float [M, K] student probabilities on C(u) (0 on padding).
    successes, n: int [M, K] counts per candidate (n = 0 on padding).
    n_sim: parametric bootstrap draws per node.
    seed: numpy seed of the draws.
  Returns:
    float64 [M]; NaN where p is all 0 (unavailable) or every draw is degenerate.
  """
  p, s, n = (np.asarray(a, np.float64) for a in (p, successes, n))
  rng = np.random.default_rng(seed)
  shrunk = (s + PRIOR) / (n + 2 * PRIOR)
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
