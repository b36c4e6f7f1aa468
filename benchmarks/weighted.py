"""Weighted vs uniform targeted continuations on the exact toy: bias, RMSE and the continuations each needs.

  python benchmarks/weighted.py                        # toys 0 and 1, 400 draws per design (~1 min)
  python benchmarks/weighted.py --toy_seeds=0 --draws=100 --policy_check=0

Nodes: every prefix of length 0..H-2 of the toy's tree (`benchmarks/adaptive.py`'s toy, V = 4, H = 6, reward
sum = 0 mod 3; the last position is left out: its branches are fixed, exact under any design), all V tokens as
candidates, nodes whose exact g* is 0 left out. Two teacher configurations, reverse KL: "informed",
q ∝ p exp(4 (P_succ - V)) (it knows the answer), and "other", the next-token distribution of another random toy
(seed + 100). Exact P_succ by enumeration (`ToyPolicy.exact_p_succ`); exact V, g*, alignment cos(g*, g_D) and
teacher advantage from it.

Designs: uniform R (every candidate R times) and weighted at a mean budget (`allocation.weighted_counts` from p
and both q, r_max 64, minimum 2, --min_mass). Outcomes: `draws` binomial draws s_k ~ Binomial(n_k, P_succ(k))
per node (what `targeted.estimate_successes` returns in law: each continuation is an independent draw of the
forced branch); estimates by `success.node_estimates` (a degenerate node's alignment, NaN in the records, counts
as 0 here, as cos(ĝ, g*) does in benchmarks/adaptive.py). With --policy_check=S the toy policy itself runs both
designs through `targeted.estimate_successes` for S keys and their mean P^ is compared with the binomial one.

Per design: continuations per draw (nominal n; a node's fixed branches are none here), bias (mean over nodes of
E estimate - exact) and RMSE of P_succ (over the candidates run), V, alignment and teacher advantage (mean over
the two configurations), the share of defined alignments. "saving" = continuations uniform R needs / those
weighted needs for uniform R's alignment RMSE (weighted's RMSE curve interpolated, linear in log continuations).
"dropped" = the largest p and q mass a node leaves out, and the bias the imputation puts into V (exact P_succ).
Ends with one JSON line.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def toy_setup(seed: int = 0):
  """dict of p [M, V], qs (informed, other) [M, V] each, exact P_succ [M, V], prefixes; exact-g* = 0 left out."""
  from opd_jax.validation import exact_toys  # pylint: disable=g-import-not-at-top
  student = exact_toys.ToyPolicy.random(vocab=4, horizon=6, scale=2.5, seed=seed)
  other = exact_toys.ToyPolicy.random(vocab=4, horizon=6, scale=2.5, seed=seed + 100)
  verify = exact_toys.sum_mod_verifier(3)
  V, H = student.vocab, student.horizon
  pre = [list(x) for t in range(H - 1) for x in itertools.product(range(V), repeat=t)]
  p = np.stack([student.probs(x) for x in pre])
  ps = np.stack([student.exact_p_succ(x, verify) for x in pre])
  g = p * (ps - np.sum(p * ps, -1, keepdims=True))
  keep = np.linalg.norm(g, axis=-1) >= 1e-9
  informed = p * np.exp(4 * (ps - np.sum(p * ps, -1, keepdims=True)))
  informed /= informed.sum(-1, keepdims=True)
  qs = [informed, np.stack([other.probs(x) for x in pre])]
  return {"p": p[keep], "qs": [q[keep] for q in qs], "ps": ps[keep], "prefixes": [x for x, k in zip(pre, keep) if k],
          "student": student}


def estimates(p, qs, s, n):
  """V [.., M], alignment [C, .., M] (NaN -> 0), defined [C, .., M], teacher advantage [C, .., M], P_succ."""
  from opd_jax.estimators import success  # pylint: disable=g-import-not-at-top
  shape = s.shape
  flat = lambda a: np.broadcast_to(a, shape).reshape(-1, shape[-1])
  out = [success.node_estimates(flat(p), flat(q), flat(s), flat(n), divergence="reverse_kl") for q in qs]
  lead = shape[:-1]
  al = np.stack([o.alignment.reshape(lead) for o in out])
  return {"value": out[0].value.reshape(lead), "alignment": np.nan_to_num(al), "defined": np.isfinite(al),
          "advantage": np.stack([o.teacher_advantage.reshape(lead) for o in out]),
          "p_succ": out[0].p_succ.reshape(shape)}


def score(setup, counts, *, draws: int, seed: int) -> dict:
  """Bias and RMSE of every statistic over `draws` binomial draws of the counts [M, K] (0: not run)."""
  p, qs, ps = setup["p"], setup["qs"], setup["ps"]
  rng = np.random.default_rng(seed)
  s = rng.binomial(counts[None], ps[None], size=(draws,) + ps.shape)
  est = estimates(p, qs, s, np.broadcast_to(counts, s.shape))
  ex = estimates(p, qs, np.round(ps * 1e9).astype(np.int64)[None], np.full((1,) + ps.shape, 10 ** 9, np.int64))
  run = counts > 0
  err = lambda k: est[k] - ex[k]
  stat = lambda e: {"bias": float(e.mean()), "rmse": float(np.sqrt((e ** 2).mean()))}
  ps_err = (est["p_succ"] - ps[None])[:, run]
  z = ps_err.mean(0) / np.sqrt(ps[run] * (1 - ps[run]) / counts[run] / draws + 1e-12)
  return {"continuations": int(counts.sum()), "p_succ": {**stat(ps_err), "max_abs_z": float(np.abs(z).max())},
          "value": stat(err("value")), "alignment": stat(err("alignment")), "advantage": stat(err("advantage")),
          "defined": float(est["defined"].mean()), "exact_defined": float(ex["defined"].mean())}


def policy_check(setup, counts_of, *, keys: int) -> dict:
  """Mean P^ from the toy policy (`targeted.estimate_successes`, uniform R = 4 and weighted mean 2) against the
  exact P_succ: max |z| over the candidates run (a code-path check of the binomial model)."""
  from opd_jax.estimators import success  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  from opd_jax.study import targeted  # pylint: disable=g-import-not-at-top
  from opd_jax.validation import exact_toys
  student, p, qs, ps = setup["student"], setup["p"], setup["qs"], setup["ps"]
  rollouts = [(i, x + [0] * (student.horizon - len(x)), [len(x)], np.arange(4)[None])
              for i, x in enumerate(setup["prefixes"])]
  out = {}
  for name, kw in (("uniform4", {}), ("weighted2", {"weighted": counts_of(2.0)})):
    acc, n = 0.0, None
    for k in range(keys):
      got = targeted.estimate_successes(student, exact_toys.task_verifier(exact_toys.sum_mod_verifier(3)), [], rollouts, R=4,
                                        key=jax.random.key(2000 + k), max_response_len=student.horizon,
                                        probs=[p[i:i + 1] for i in range(len(p))],
                                        teacher_probs=[[q[i:i + 1] for q in qs] for i in range(len(p))], **kw)
      n = np.concatenate([o.n for o in got])
      acc = acc + np.concatenate([success.p_succ(o.successes, o.n) for o in got]) / keys
    run = n > 0
    z = (acc - ps)[run] / np.sqrt(ps[run] * (1 - ps[run]) / n[run] / keys + 1e-12)
    out[name] = {"continuations": int(n.sum()), "max_abs_z": float(np.abs(z).max()),
                 "mean_bias": float((acc - ps)[run].mean())}
  return out


def compare(setup, *, uniform, means, draws: int, min_mass: float, r_max: int = 64, minimum: int = 2) -> dict:
  from opd_jax.estimators import success  # pylint: disable=g-import-not-at-top
  from opd_jax.study import allocation  # pylint: disable=g-import-not-at-top
  p, qs, ps = setup["p"], setup["qs"], setup["ps"]
  valid = np.ones(p.shape, bool)
  counts_of = lambda m: allocation.weighted_counts(p, qs, valid, mean=m, minimum=minimum, r_max=r_max,
                                                   min_mass=min_mass)
  uni = {R: score(setup, np.full(p.shape, R), draws=draws, seed=R) for R in uniform}
  wei = {m: score(setup, counts_of(m), draws=draws, seed=int(10 * m)) for m in means}
  curve = sorted((v["continuations"], v["alignment"]["rmse"]) for v in wei.values())
  spent, rmse = np.array([c[0] for c in curve], float), np.minimum.accumulate([c[1] for c in curve])
  saving = {}
  for R, u in uni.items():
    target = u["alignment"]["rmse"]
    if rmse[-1] > target:
      saving[R] = None
    elif rmse[0] <= target:
      saving[R] = {"at_least": u["continuations"] / spent[0]}
    else:
      j = int(np.argmax(rmse <= target))
      f = (rmse[j - 1] - target) / max(rmse[j - 1] - rmse[j], 1e-12)
      need = float(np.exp(np.log(spent[j - 1]) + f * (np.log(spent[j]) - np.log(spent[j - 1]))))
      saving[R] = {"factor": u["continuations"] / need, "continuations": need}
  # What leaving candidates out costs at exact P_succ: V over the candidates run against the exact V.
  n2 = counts_of(min(means))
  mass = lambda x: np.where(n2 > 0, 0.0, x).sum(-1)
  v_run = success.estimator_p_succ(p, np.round(ps * 1e9).astype(np.int64) * (n2 > 0), np.where(n2 > 0, 10 ** 9, 0))
  dropped = {"candidates": int((n2 == 0).sum()), "of": int(n2.size), "max_p_mass": float(mass(p).max()),
             "max_q_mass": float(max(mass(q).max() for q in qs)),
             "value_bias_max": float(np.abs(np.sum(p * (v_run - ps), -1)).max())}
  return {"nodes": int(p.shape[0]), "uniform": uni, "weighted": wei, "saving": saving, "dropped": dropped,
          "counts_of": counts_of}


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                               formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  ap.add_argument("--toy_seeds", default="0,1", help="toys (ToyPolicy.random seeds), comma-separated")
  ap.add_argument("--draws", type=int, default=400, help="binomial draws per design")
  ap.add_argument("--uniform", default="4,8", help="R of the uniform designs")
  ap.add_argument("--means", default="2,3,4,6,8", help="budgets of the weighted designs (continuations_mean)")
  ap.add_argument("--min_mass", type=float, default=0.01, help="budget.allocation_min_mass")
  ap.add_argument("--policy_check", type=int, default=4, help="keys of the toy-policy check (0: skip)")
  args = ap.parse_args(argv)
  from opd_jax.study import targeted  # pylint: disable=g-import-not-at-top
  t0 = time.time()
  result = {}
  for seed in [int(x) for x in args.toy_seeds.split(",")]:
    setup = toy_setup(seed)
    res = compare(setup, uniform=[int(x) for x in args.uniform.split(",")],
                  means=[float(x) for x in args.means.split(",")], draws=args.draws, min_mass=args.min_mass)
    res.pop("counts_of")
    print(f"toy {seed}: {res['nodes']} nodes x 4 candidates, {args.draws} draws; dropped at mean "
          f"{min(float(x) for x in args.means.split(','))}: {res['dropped']}")
    print(f"  {'design':12s} {'cont.':>6s}  {'P bias':>8s} {'P rmse':>7s} {'max|z|':>6s}  {'V bias':>8s} "
          f"{'V rmse':>7s}  {'al bias':>8s} {'al rmse':>7s} {'defined':>7s}  {'A bias':>8s} {'A rmse':>7s}")
    rows = [(f"uniform {R}", v) for R, v in res["uniform"].items()] + [
        (f"weighted {m:g}", v) for m, v in res["weighted"].items()]
    for name, v in rows:
      print(f"  {name:12s} {v['continuations']:6d}  {v['p_succ']['bias']:+.5f} {v['p_succ']['rmse']:.4f} "
            f"{v['p_succ']['max_abs_z']:6.2f}  {v['value']['bias']:+.5f} {v['value']['rmse']:.4f}  "
            f"{v['alignment']['bias']:+.5f} {v['alignment']['rmse']:.4f} {v['defined']:7.3f}  "
            f"{v['advantage']['bias']:+.5f} {v['advantage']['rmse']:.4f}")
    print(f"  exact alignment defined on {res['uniform'][next(iter(res['uniform']))]['exact_defined']:.3f}; "
          f"saving (uniform R's alignment RMSE): {res['saving']}")
    if args.policy_check:
      res["policy_check"] = policy_check(setup, lambda m: targeted.Weighted(r_max=64, mean=m, min_mass=args.min_mass),
                                         keys=args.policy_check)
      print(f"  toy policy through estimate_successes ({args.policy_check} keys): {res['policy_check']}")
    result[seed] = res
  print(f"{time.time() - t0:.0f} s")
  print(json.dumps({str(k): v for k, v in result.items()}))


if __name__ == "__main__":
  main()
