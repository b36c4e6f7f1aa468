"""Adaptive vs uniform targeted continuations on the exact toy: continuations needed for the same mean cos(ĝ, g*).

  python benchmarks/adaptive.py                                    # V = 4, H = 6, 64 rollouts, 8 seeds (~1 min)
  python benchmarks/adaptive.py --rollouts=32 --seeds=4 --means=4,6,8

Nodes: every prefix (t = 0..H-1) of --rollouts student rollouts of the seed-0 toy (`opd_jax.toy`, V = 4, H = 6,
reward: sum = 0 mod 3), de-duplicated (the study's node_strategy "all" on the toy), all V tokens as candidates.
Exact g* = p (P_succ - V) from `ToyPolicy.exact_p_succ` (enumeration); nodes with |g*| < 1e-9 (degenerate) are
left out of the mean. Both sides run `targeted.estimate_successes` (uniform: R = --uniform at every candidate;
adaptive: R = --r0 in round 0, then `allocation.allocate` up to --means x candidates in total, r_max = --r_max)
and `targeted.node_estimates`; cos(ĝ, g*) = 0 where ĝ = 0. Per side and budget: mean cos over nodes and seeds,
continuations spent, mean split-half noise ceiling (NaN nodes left out). The matched budget interpolates the
adaptive curve (linear in log continuations) at the uniform side's mean cos; "ratio" = its continuations /
uniform's (target <= 0.25). Ends with one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def toy_nodes(n_rollouts: int = 0, *, seed: int = 0):
  """(student, rollouts for estimate_successes, per-rollout p [M, V], exact g* per rollout [M, V]).

  n_rollouts = 0: every node of the toy's tree (all (V^H - 1) / (V - 1) prefixes of length 0..H-1, one base
  rollout per node); else the de-duplicated prefixes of n_rollouts student rollouts (the study's "all" nodes).
  """
  import itertools  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  from opd_jax import toy  # pylint: disable=g-import-not-at-top
  student = toy.ToyPolicy.random(vocab=4, horizon=6, scale=2.5, seed=seed)
  V, H = student.vocab, student.horizon
  verify = toy.sum_mod_verifier(3)
  if n_rollouts:
    seen, groups = set(), []
    for seq in student.sample(n_rollouts, key=jax.random.key(seed)).tolist():
      pos = [t for t in range(H) if tuple(seq[:t]) not in seen]
      seen.update(tuple(seq[:t]) for t in pos)
      groups.append((seq, pos))
  else:
    groups = [(list(pre) + [0] * (H - t), [t]) for t in range(H) for pre in itertools.product(range(V), repeat=t)]
  rollouts, probs, exact = [], [], []
  for i, (seq, pos) in enumerate(g for g in groups if g[1]):
    p = np.stack([student.probs(seq[:t]) for t in pos])
    ps = np.stack([student.exact_p_succ(seq[:t], verify) for t in pos])
    rollouts.append((i, seq, pos, np.tile(np.arange(V), (len(pos), 1))))
    probs.append(p)
    exact.append(p * (ps - np.sum(p * ps, -1, keepdims=True)))
  return student, rollouts, probs, exact


def cosines(g_hat: np.ndarray, g: np.ndarray) -> np.ndarray:
  """cos per row, 0 where either side is 0."""
  na, nb = np.linalg.norm(g_hat, axis=-1), np.linalg.norm(g, axis=-1)
  ok = (na > 1e-12) & (nb > 1e-12)
  return np.where(ok, np.sum(g_hat * g, -1) / np.where(ok, na * nb, 1.0), 0.0)


def run_side(setup, *, key, R: int, adaptive=None) -> dict:
  """One estimate over every node: mean cos(ĝ, g*), continuations spent, mean noise ceiling, per-node cos."""
  from opd_jax import targeted, toy  # pylint: disable=g-import-not-at-top
  student, rollouts, probs, exact = setup
  outs = targeted.estimate_successes(student, toy.task_verifier(toy.sum_mod_verifier(3)), [], rollouts, R=R,
                                     key=key, max_response_len=student.horizon, adaptive=adaptive, probs=probs)
  cos, ceil, spent = [], [], 0
  for out, p, g in zip(outs, probs, exact):
    ne = targeted.node_estimates(p, p, out.successes, out.n, divergence="reverse_kl")
    keep = np.linalg.norm(g, axis=-1) >= 1e-9
    cos.append(cosines(ne.g_ideal, g)[keep])
    ceil.append(targeted.split_half_noise_ceiling(p, out)[keep])
    spent += int(out.n.sum())
  cos, ceil = np.concatenate(cos), np.concatenate(ceil)
  return {"cos": float(cos.mean()), "spent": spent, "ceiling": float(np.nanmean(ceil)), "per_node": cos}


def compare(setup, *, seeds: int, uniform: int, r0: int, means, r_max: int, tolerance: float = 0.0,
            prior: float = 0.5, spread: float = 1.0,
            growth: float = 0.5) -> dict:
  """Uniform R = `uniform` vs adaptive at each mean budget, averaged over `seeds` keys; the matched ratio."""
  import jax  # pylint: disable=g-import-not-at-top
  from opd_jax import targeted  # pylint: disable=g-import-not-at-top
  keys = [jax.random.key(1000 + s) for s in range(seeds)]
  side = lambda runs: {k: float(np.mean([r[k] for r in runs])) for k in ("cos", "spent", "ceiling")}
  uni = side([run_side(setup, key=k, R=uniform) for k in keys])
  ada = {}
  for mean in means:
    a = targeted.Adaptive(r_max=r_max, mean=mean, tolerance=tolerance, prior=prior, spread=spread,
                        growth=growth)
    ada[mean] = side([run_side(setup, key=k, R=r0, adaptive=a) for k in keys])
  curve = sorted((v["spent"], v["cos"]) for v in ada.values())
  spent, cos = np.array([c[0] for c in curve]), np.maximum.accumulate([c[1] for c in curve])
  if cos[-1] < uni["cos"]:
    matched = float("nan")
  elif cos[0] >= uni["cos"]:
    matched = spent[0]      # an upper bound: the smallest budget tried already matches
  else:
    j = int(np.argmax(cos >= uni["cos"]))
    f = (uni["cos"] - cos[j - 1]) / max(cos[j] - cos[j - 1], 1e-12)
    matched = float(np.exp(np.log(spent[j - 1]) + f * (np.log(spent[j]) - np.log(spent[j - 1]))))
  return {"uniform": uni, "adaptive": ada, "matched_spent": matched, "ratio": matched / uni["spent"]}


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--rollouts", type=int, default=0, help="0: every node of the tree; else the prefixes of "
                  "this many student rollouts")
  ap.add_argument("--seeds", type=int, default=8)
  ap.add_argument("--uniform", type=int, default=32)
  ap.add_argument("--r0", type=int, default=2)
  ap.add_argument("--r_max", type=int, default=128)
  ap.add_argument("--means", default="6,8,10,12,16")
  ap.add_argument("--tolerance", type=float, default=0.0)
  ap.add_argument("--prior", type=float, default=0.5)
  ap.add_argument("--spread", type=float, default=1.0)
  ap.add_argument("--growth", type=float, default=0.5)
  args = ap.parse_args(argv)
  t0 = time.time()
  setup = toy_nodes(args.rollouts)
  n_nodes = sum(len(r[2]) for r in setup[1])
  means = [float(m) for m in args.means.split(",")]
  res = compare(setup, seeds=args.seeds, uniform=args.uniform, r0=args.r0, means=means, r_max=args.r_max,
                tolerance=args.tolerance, prior=args.prior, spread=args.spread,
                growth=args.growth)
  u = res["uniform"]
  print(f"{n_nodes} nodes x 4 candidates, {args.seeds} seeds")
  print(f"uniform R={args.uniform}: mean cos {u['cos']:.4f}, {u['spent']:.0f} continuations, "
        f"noise ceiling {u['ceiling']:.4f}")
  for m, a in res["adaptive"].items():
    print(f"adaptive mean={m:g} (R0={args.r0}): mean cos {a['cos']:.4f}, {a['spent']:.0f} continuations "
          f"({a['spent'] / u['spent']:.3f}x), noise ceiling {a['ceiling']:.4f}")
  print(f"matched: {res['matched_spent']:.0f} continuations = {res['ratio']:.3f}x uniform (target <= 0.25); "
        f"{time.time() - t0:.0f} s")
  print(json.dumps({"nodes": n_nodes, "uniform": u, "adaptive": {str(k): v for k, v in res["adaptive"].items()},
                    "matched_spent": res["matched_spent"], "ratio": res["ratio"]}))


if __name__ == "__main__":
  main()
