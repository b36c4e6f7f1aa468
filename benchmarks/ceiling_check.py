"""The noise ceiling against the exact E cos(g*_R, g*) on several exact toys (issue 25, item 4).

  PYTHONPATH=$PWD python benchmarks/ceiling_check.py [--R=4,8,16] [--trials=100] [--n_sim=100]   # ~1-2 min, 2 CPUs

Toys (opd_jax.validation.exact_toys.ToyPolicy.random, verifier sum of tokens = 0 mod `mod`): "project" (V = 4, H = 6, scale 2.5,
seed 0, mod 3: tests/estimators/test_stats.py's), "flat" (scale 1), "peaked" (scale 4), "parity" (V = 3, mod 2).
Nodes: distinct prefixes of depth 1-4 of 16 rollouts with g* != 0, C(u) = every token, p the toy's; and the
fixed-outcome nodes: depth H - 1 prefixes, where the forced last token decides the reward (P_succ in {0, 1}).

Truth per node (exact, no sampling): E[cos(g*_R, g*) | g*_R != 0] with g*_R = p (P^ - V^), P^_k = s_k / R,
s_k ~ Binomial(R, P_succ(k)) independent, by enumerating every count vector (the records define an alignment
only where g*_R != 0). Estimators, each averaged over `trials` draws of the counts per node:
  corrected: report.ceiling.expected_cosine (unanimous nodes unshrunk: today's); corrected_before: the same with
  unanimous=False (every node shrunk, before issue 25); split_half: cos(g* of the first R/2, g* of the last R/2),
  the records' noise_ceiling, where defined.
One JSON line per (toy, node kind, R): the error mean_nodes(E est) - mean_nodes(truth) of each estimator, and the
largest |per-node error| of the corrected one.
"""
import argparse
import itertools
import json
import time

import jax
import numpy as np
from scipy import stats as sp_stats

from opd_jax.validation import exact_toys
from opd_jax.report import ceiling

TOYS = {"project": dict(vocab=4, horizon=6, scale=2.5, seed=0, mod=3),
        "flat": dict(vocab=4, horizon=6, scale=1.0, seed=1, mod=3),
        "peaked": dict(vocab=4, horizon=6, scale=4.0, seed=2, mod=3),
        "parity": dict(vocab=3, horizon=6, scale=2.5, seed=3, mod=2)}


def _g(p, ps):
  return p * (ps - (ps @ p)[..., None])


def _cos(a, b):
  na, nb = np.linalg.norm(a, axis=-1), np.linalg.norm(b, axis=-1)
  with np.errstate(invalid="ignore", divide="ignore"):
    return np.where((na < 1e-12) | (nb < 1e-12), np.nan, (a * b).sum(-1) / (na * nb))


def toy_nodes(spec):
  """(normal nodes, fixed-outcome nodes) of a toy: lists of (p [V], exact P_succ [V]) with g* != 0."""
  spec = dict(spec)
  verify = exact_toys.sum_mod_verifier(spec.pop("mod"))
  student = exact_toys.ToyPolicy.random(**spec)
  rollouts = student.sample(16, key=jax.random.key(0))
  out, seen = ([], []), set()
  for seq in rollouts:
    for t in list(range(1, 5)) + [student.horizon - 1]:
      prefix = tuple(int(x) for x in seq[:t])
      if prefix in seen:
        continue
      seen.add(prefix)
      p, ps = student.probs(list(prefix)), student.exact_p_succ(list(prefix), verify)
      if np.linalg.norm(_g(p, ps)) > 1e-6:
        out[t == student.horizon - 1].append((p, ps))
  return out


def exact_expected_cosine(p, ps, R):
  """E[cos(g*_R, g*) | g*_R != 0] by enumerating the (R + 1)^K count vectors."""
  K = len(p)
  s = np.array(list(itertools.product(range(R + 1), repeat=K)), np.float64)
  w = np.prod(sp_stats.binom.pmf(s, R, ps[None]), -1)
  cos = _cos(_g(p, s / R), _g(p, ps)[None])
  ok = np.isfinite(cos) & (w > 0)
  return float((w[ok] * cos[ok]).sum() / w[ok].sum())


def check(nodes, R, *, trials, n_sim, rng):
  truth, est = [], {"corrected": [], "corrected_before": [], "split_half": []}
  for p, ps in nodes:
    K = len(p)
    truth.append(exact_expected_cosine(p, ps, R))
    rewards = rng.random((trials, K, R)) < ps[None, :, None]
    s, n, pp = rewards.sum(-1), np.full((trials, K), R), np.broadcast_to(p, (trials, K))
    for name, unanimous in (("corrected", True), ("corrected_before", False)):
      est[name].append(np.nanmean(ceiling.expected_cosine(pp, s, n, n_sim=n_sim, seed=int(rng.integers(1 << 30)),
                                                          unanimous=unanimous)))
    a, b = rewards[..., :R // 2].mean(-1), rewards[..., R // 2:].mean(-1)
    half = _cos(_g(p, a), _g(p, b))
    est["split_half"].append(np.nanmean(half) if np.isfinite(half).any() else np.nan)
  truth = np.array(truth)
  row = {"truth": round(float(truth.mean()), 4)}
  for name, v in est.items():
    v = np.array(v)
    row[f"err_{name}"] = round(float(np.nanmean(v) - truth.mean()), 4)
  row["max_abs_node_err_corrected"] = round(float(np.nanmax(np.abs(np.array(est["corrected"]) - truth))), 4)
  return row


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--R", default="4,8,16")
  ap.add_argument("--trials", type=int, default=100)
  ap.add_argument("--n_sim", type=int, default=100)
  ap.add_argument("--toys", default=",".join(TOYS))
  args = ap.parse_args()
  rng = np.random.default_rng(0)
  for name in args.toys.split(","):
    normal, fixed = toy_nodes(TOYS[name])
    for kind, nodes in (("nodes", normal), ("fixed_outcome", fixed)):
      for R in (int(r) for r in args.R.split(",")):
        t0 = time.time()
        row = check(nodes, R, trials=args.trials, n_sim=args.n_sim, rng=rng)
        print(json.dumps({"toy": name, "kind": kind, "R": R, "nodes": len(nodes), **row,
                          "seconds": round(time.time() - t0, 1)}), flush=True)


if __name__ == "__main__":
  main()
