"""The alignment estimators' bias at few continuations, on the exact toys (issue 48, item 1).

  python benchmarks/crossfit.py                               # toys 0 and 1, r = 2, 3, 4, 8, 64; ~20 s
  python benchmarks/crossfit.py --toy_seeds=0 --r=2 --draws=4000

The toy and its nodes are benchmarks/weighted.py's (V = 4, H = 6, reward sum = 0 mod 3; every prefix with a
nonzero exact g*; two reverse-KL teachers: "informed", q ∝ p exp(4 (P_succ - V)), and "other", another random
toy's next-token distribution), with exact P_succ by enumeration. Per r and draw, each candidate's r continuations
are two independent halves, s_a ~ Binomial(ceil(r/2), P_succ), s_b ~ Binomial(floor(r/2), P_succ) (in law the
study's `success.halves` of r rewards). Per teacher and r, over draws:
  - "mean alignment": the mean over defined nodes of cos(g*^, g_D) (`success.node_estimates`, the verdict's
    estimand: degenerate nodes drop out), against the exact mean cosine over all nodes;
  - "alignment ratio": sum_u <g*^_u, g_D> / |g_D| / sqrt(N sum_u <g*^_a, g*^_b>) (report.common.with_estimand's
    "alignment_ratio", `success.crossfit_norm2`), against its exact value, mean(|g*| cos) / sqrt(mean |g*|^2);
and the paired difference informed - other of each. Bias = mean over draws - exact, with the Monte Carlo standard
error of that mean. Ends with one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import weighted  # pylint: disable=g-import-not-at-top,wrong-import-position
from opd_jax.estimators import gradients  # pylint: disable=g-import-not-at-top,wrong-import-position
from opd_jax.estimators import success  # pylint: disable=g-import-not-at-top,wrong-import-position


def statistics(p, qs, s_a, n_a, s_b, n_b) -> dict:
  """{"mean_alignment": [C], "alignment_ratio": [C]} of one draw's counts [M, K] (n_b may be 0: r = 1)."""
  out = {"mean_alignment": [], "alignment_ratio": []}
  s, n = s_a + s_b, n_a + n_b
  norm2 = success.crossfit_norm2(p, s_a, n_a, s_b, n_b)
  for q in qs:
    est = success.node_estimates(p, q, s, n, divergence="reverse_kl")
    out["mean_alignment"].append(np.nanmean(est.alignment) if np.isfinite(est.alignment).any() else np.nan)
    g = est.g_distill
    proj = np.sum(est.g_ideal * g, -1) / np.linalg.norm(g, axis=-1)
    m2 = np.nanmean(norm2)
    out["alignment_ratio"].append(np.mean(proj) / np.sqrt(m2) if m2 > 0 else np.nan)
  return {k: np.asarray(v) for k, v in out.items()}


def exact(setup) -> dict:
  p, qs, ps = setup["p"], setup["qs"], setup["ps"]
  g_star = p * (ps - np.sum(p * ps, -1, keepdims=True))
  out = {"mean_alignment": [], "alignment_ratio": []}
  for q in qs:
    g = np.asarray(gradients.distillation_gradient("reverse_kl", p, q))
    cos = np.sum(g_star * g, -1) / (np.linalg.norm(g_star, axis=-1) * np.linalg.norm(g, axis=-1))
    proj = np.sum(g_star * g, -1) / np.linalg.norm(g, axis=-1)
    out["mean_alignment"].append(cos.mean())
    out["alignment_ratio"].append(proj.mean() / np.sqrt(np.mean(np.sum(g_star ** 2, -1))))
  return {k: np.asarray(v) for k, v in out.items()}


def run(toy_seed: int, rs, draws: int, seed: int) -> list[dict]:
  setup = weighted.toy_setup(toy_seed)
  p, qs, ps = setup["p"], setup["qs"], setup["ps"]
  truth = exact(setup)
  rng = np.random.default_rng(seed)
  rows = []
  for r in rs:
    n_a = np.full(ps.shape, (r + 1) // 2, np.int64)
    n_b = np.full(ps.shape, r // 2, np.int64)
    got = {k: [] for k in truth}
    for _ in range(draws):
      st = statistics(p, qs, rng.binomial(n_a, ps), n_a, rng.binomial(n_b, ps), n_b)
      for k in got:
        got[k].append(st[k])
    for k, v in got.items():
      v = np.asarray(v)                                   # [draws, C]
      for name, x, t in (("informed", v[:, 0], truth[k][0]), ("other", v[:, 1], truth[k][1]),
                         ("informed - other", v[:, 0] - v[:, 1], truth[k][0] - truth[k][1])):
        ok = np.isfinite(x)
        rows.append(dict(toy=toy_seed, r=r, estimator=k, teacher=name, exact=float(t), mean=float(x[ok].mean()),
                         bias=float(x[ok].mean() - t), mc_se=float(x[ok].std(ddof=1) / np.sqrt(ok.sum())),
                         sd=float(x[ok].std(ddof=1)), defined=float(ok.mean())))
  return rows


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--toy_seeds", default="0,1")
  ap.add_argument("--r", default="2,3,4,8,64")
  ap.add_argument("--draws", type=int, default=1000)
  ap.add_argument("--seed", type=int, default=0)
  args = ap.parse_args(argv)
  t0 = time.time()
  rows = [row for t in map(int, args.toy_seeds.split(",")) for row in
          run(t, [int(x) for x in args.r.split(",")], args.draws, args.seed + t)]
  print(f"{'toy':>3} {'r':>3} {'estimator':<16} {'teacher':<17} {'exact':>8} {'bias':>8} {'mc_se':>7} {'sd':>7}")
  for x in rows:
    print(f"{x['toy']:>3} {x['r']:>3} {x['estimator']:<16} {x['teacher']:<17} {x['exact']:>+8.4f} {x['bias']:>+8.4f} "
          f"{x['mc_se']:>7.4f} {x['sd']:>7.4f}")
  print(json.dumps({"rows": rows, "draws": args.draws, "seconds": round(time.time() - t0, 1)}))
  return 0


if __name__ == "__main__":
  sys.exit(main())
