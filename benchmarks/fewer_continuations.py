"""How many continuations per candidate a study needs: its own records, subsampled to fewer (issue 33, item 1).

  python benchmarks/fewer_continuations.py --workdir=/work/runs/hour_seq --r=1,2,4,8 --draws=30   # ~15 min
  python benchmarks/fewer_continuations.py --workdir=W --r=2,3,4,6,8 --draws=40 --target=incorrect
  python benchmarks/fewer_continuations.py --records='docs/data/validation_v2/study_records_[1234].parquet' \\
      --r=2,4,12 --draws=20 --target=incorrect --out=docs/data/crossfit/v2_blocks1234_subsampled.json

`--records` reads committed node records with rewards instead of a workdir: a glob of parquet files (validate_v2's
study_records_<b>.parquet), blocks pooled (benchmarks/variance_split.read_node_records: the same reader, the same
refusals), the same numbers as a workdir holding the same rows.

A study at R continuations per candidate holds, for every node, each candidate's R rewards (node records,
`rewards`). Keeping r < R of them, drawn without replacement, gives in law the study that had run r: the same
nodes, candidates, p and q, and r exchangeable draws of each forced branch. Per r and draw the script recomputes
every configuration's alignment (`success.node_estimates`, the study's estimator) and the verdict's paired
comparisons (`report.decision.compare_arrays`, the fixed design: CR2 standard errors by question), and reports,
averaged over draws:
  - each configuration's mean alignment on the target group, and its shift from the full-R records (the bias
    fewer continuations put into what the verdict reads, relative to R; degenerate nodes drop out as in a study);
  - every pair's difference and its squared standard error se^2(r), which holds both the questions' spread and the
    continuations' noise at r. A two-stage sample's variance is a + b / r (Cochran 1977, ch. 10): the fit over r
    gives the variance at any R, and the questions a design needs for a given precision scale with it, so the
    continuations it needs per unit of precision scale with r * (a + b / r). "cost(r) / cost(R')" is that product
    at r over the same at R' (--compare, default the records' R and 64, the paper's).
Ends with one JSON line. What it shows is about the study whose records it reads (its task, model and nodes).
"""
from __future__ import annotations

import argparse
import glob
import json
import math
import os
import shlex
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from opd_jax import records  # pylint: disable=g-import-not-at-top,wrong-import-position


def load(workdir: str = "", records_glob: str = ""):
  """Node rows of a study and the rewards of its nodes: (rows DataFrame, {node key: [K] list of reward arrays}),
  from a workdir's node records or from the parquet files matching `records_glob`, pooled.

  Raises:
    ValueError: (`records_glob`) no file matches, one has no rewards, or two share a node
      (variance_split.read_node_records).
  """
  if records_glob:
    from benchmarks import variance_split  # pylint: disable=g-import-not-at-top
    rows, _ = variance_split.read_node_records(records_glob)
  else:
    from opd_jax.report import build  # pylint: disable=g-import-not-at-top
    rows = build.read_records(workdir)
  key = list(zip(rows["question_id"], rows["rollout_id"], rows["position"]))
  rewards = {}
  for k, rw in zip(key, rows["rewards"]):
    rewards.setdefault(k, [np.asarray(x, np.float64) for x in rw])
  return rows, rewards


def subsample(rewards: dict, r: int | None, rng) -> dict:
  """{node: K reward arrays} with r rewards per candidate kept, drawn without replacement in a random order (all,
  in their order, when r is None or >= its count). The estimator counts > 0.5 as a success (0/1 rewards)."""
  return {k: [x if r is None or r >= x.size else rng.choice(x, size=r, replace=False) for x in rw]
          for k, rw in rewards.items()}


ESTIMANDS = ("alignment", "teacher_advantage", "projection", "alignment_ratio")


def realign(rows, rewards: dict, target: str) -> dict:
  """{estimand: [rows] float} from the subsampled `rewards`: the study's estimator (records.estimates_from_rows).
  "projection" is <g*, g_D> / |g_D| (gradients.projection), linear in P_succ: unbiased at any r; "alignment_ratio"
  is it over the target group's cross-fitted RMS |g*| (report.common.with_estimand)."""
  from opd_jax.report import common  # pylint: disable=g-import-not-at-top
  est = records.estimates_from_rows(rows, rewards=rewards)
  est["alignment_ratio"] = est["projection"] / common.ratio_scale(rows, est["g_ideal_norm2"], target)
  return est


def verdict_numbers(rows, values, target: str):
  """(configs, per-configuration mean [K], paired diff [K, K], se^2 [K, K], (best, could-be-best set)) of one
  estimand's `values` [rows] on the target group's nodes where it is defined: the verdict's computation
  (decision.compare_arrays, the fixed design) on those values."""
  from opd_jax.report import common, decision  # pylint: disable=g-import-not-at-top
  t = rows.assign(alignment=values)             # the column node_matrix reads
  t = t[common.group_mask(t, target)]
  t = t[t["alignment"].notna().to_numpy()]
  configs = list(dict.fromkeys(rows["config_id"]))
  a, questions, _ = decision.node_matrix(t, configs)
  res = decision.compare_arrays(a, questions)
  return (configs, np.nanmean(a, 0), np.asarray(res["diff"]), np.asarray(res["se"]) ** 2,
          (int(res["best"]), tuple(np.flatnonzero(res["could_be_best"]))))


def report(name: str, configs, per_r: dict, full_r: int, compare: int) -> dict:
  """Prints one estimand's tables; returns its summary."""
  grid, k, full = sorted(per_r), len(configs), per_r[full_r]
  print(f"\n## {name}: mean per configuration at r (shift from R = {full_r}, mean over draws; sd over draws)")
  print("| r | " + " | ".join(configs) + " |")
  print("|---|" + "---|" * k)
  for r in grid:
    m = per_r[r]
    print(f"| {r} | " + " | ".join(f"{m['mean'][c]:+.4f} ({m['mean'][c] - full['mean'][c]:+.4f}, sd "
                                   f"{m['mean_sd'][c]:.4f})" for c in range(k)) + " |")
  # Variance model se^2(r) = a + b / r per pair (least squares in 1 / r), and the continuations per precision.
  x, pairs = np.asarray([1.0 / r for r in grid]), []
  for i in range(k):
    for j in range(i + 1, k):
      y = np.asarray([per_r[r]["se2"][i, j] for r in grid])
      b, a = np.polyfit(x, y, 1)
      a, b = max(a, 0.0), max(b, 0.0)       # a variance component below 0 is estimation error: read it as 0
      cost = lambda r, a=a, b=b: r * max(a + b / r, 1e-30)
      pairs.append({"pair": f"{configs[i]} - {configs[j]}", "diff_full": float(full["diff"][i, j]),
                    "diff_shift": {r: float(per_r[r]["diff"][i, j] - full["diff"][i, j]) for r in grid},
                    "se2_by_r": {r: float(per_r[r]["se2"][i, j]) for r in grid}, "a": float(a), "b": float(b),
                    "share_at_R": float(b / full_r / (a + b / full_r)) if a + b > 0 else math.nan,
                    "cost_ratio": {r: float(cost(r) / cost(compare)) if a + b > 0 else math.nan for r in grid}})
  print(f"\npaired differences (config - config), se^2(r) = a + b / r over r = {grid}; cost(r) / cost({compare}) = "
        f"r (a + b / r) / ({compare} (a + b / {compare})): the continuations for equal precision")
  print(f"| pair | diff at R | shift at r = {grid[0]} | a | b | continuations' share of se^2 at R | "
        + " | ".join(f"cost r={r}" for r in grid) + " |")
  print("|---|---|---|---|---|---|" + "---|" * len(grid))
  for p in pairs:
    print(f"| {p['pair']} | {p['diff_full']:+.4f} | {p['diff_shift'][grid[0]]:+.4f} | {p['a']:.2e} | {p['b']:.2e} | "
          f"{p['share_at_R']:.2f} | " + " | ".join(f"{p['cost_ratio'][r]:.3f}" for r in grid) + " |")
  ref = full["verdicts"][0]
  same_best = {r: float(np.mean([v[0] == ref[0] for v in per_r[r]["verdicts"]])) for r in grid}
  same_set = {r: float(np.mean([v[1] == ref[1] for v in per_r[r]["verdicts"]])) for r in grid}
  print(f"the verdict at R = {full_r}: best {configs[ref[0]] if ref[0] >= 0 else None}, could be best "
        f"{[configs[i] for i in ref[1]]}; share of draws with the same best / the same could-be-best set: "
        + ", ".join(f"r={r}: {same_best[r]:.2f} / {same_set[r]:.2f}" for r in grid if r != full_r))
  # (configurations with no defined value, e.g. a self view reading its own prompt, are left out: nanmax)
  shift = {r: float(np.nanmax(np.abs(per_r[r]["mean"] - full["mean"]))) for r in grid}
  dshift = {r: float(np.nanmax(np.abs([p["diff_shift"][r] for p in pairs]))) for r in grid}
  se_shift = {r: float(np.nanmax(per_r[r]["mean_sd"]) / np.sqrt(max(per_r[r]["draws"], 1))) for r in grid}
  # Monte Carlo standard errors (sd over draws / sqrt(draws)) of the configuration and the pair whose shift is the
  # largest, and the largest |shift| / its own MC SE over configurations and pairs (a shift with MC SE 0 left out).
  iu = np.triu_indices(k, 1)
  mc = {}
  for r in grid:
    n = np.sqrt(max(per_r[r]["draws"], 1))
    ms, mse = np.abs(per_r[r]["mean"] - full["mean"]), per_r[r]["mean_sd"] / n
    ds, dse = np.abs(per_r[r]["diff"] - full["diff"])[iu], per_r[r]["diff_sd"][iu] / n
    with np.errstate(invalid="ignore", divide="ignore"):
      mz, dz = np.where(mse > 0, ms / mse, np.nan), np.where(dse > 0, ds / dse, np.nan)
    fin = lambda x: float(np.nanmax(x)) if np.isfinite(x).any() else 0.0
    mc[r] = {"max_mean_shift_se": float(mse[np.nanargmax(ms)]) if np.isfinite(ms).any() else 0.0,
             "max_diff_shift_se": float(dse[np.nanargmax(ds)]) if np.isfinite(ds).any() else 0.0,
             "diff_shift_se": fin(dse), "max_mean_shift_z": fin(mz), "max_diff_shift_z": fin(dz)}
  out = {"same_best": same_best, "same_could_be_best": same_set, "max_mean_shift": shift, "max_diff_shift": dshift,
         "shift_se": se_shift, **{f: {r: mc[r][f] for r in grid} for f in mc[grid[0]]},
         "could_be_best_at_R": [configs[i] for i in ref[1]],
         "median_cost_ratio": {r: float(np.nanmedian([p["cost_ratio"][r] for p in pairs])) for r in grid},
         "max_cost_ratio": {r: float(np.nanmax([p["cost_ratio"][r] for p in pairs])) for r in grid},
         "max_share_at_R": float(np.nanmax([p["share_at_R"] for p in pairs] + [-np.inf])), "pairs": pairs}
  print(f"largest shift from R = {full_r} of a configuration's mean (of a paired difference): "
        + ", ".join(f"r={r}: {shift[r]:.4f} (MC se {mc[r]['max_mean_shift_se']:.4f}), {dshift[r]:.4f} (MC se "
                    f"{mc[r]['max_diff_shift_se']:.4f}); largest |shift| / MC se {mc[r]['max_mean_shift_z']:.2f} "
                    f"({mc[r]['max_diff_shift_z']:.2f})" for r in grid if r != full_r))
  print("cost ratio over pairs, median (largest): " + ", ".join(
      f"r={r}: {out['median_cost_ratio'][r]:.3f} ({out['max_cost_ratio'][r]:.3f})" for r in grid))
  return out


def main(argv=None) -> dict:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--workdir", default="", help="a study's workdir (its node records, with rewards)")
  ap.add_argument("--records", default="", help="instead: a glob of node-record parquet files with rewards "
                  "(validate_v2.py's study_records_<b>.parquet), pooled")
  ap.add_argument("--out", default="", help="also write the summary without its per-pair tables to this JSON, with "
                  "the command, date, records and seconds")
  ap.add_argument("--r", default="2,3,4,6,8", help="continuations per candidate to keep, each < the records' R")
  ap.add_argument("--draws", type=int, default=40)
  ap.add_argument("--target", default="incorrect", choices=("incorrect", "correct", "all"))
  ap.add_argument("--compare", type=int, default=64, help="the fixed design's R to price against")
  ap.add_argument("--seed", type=int, default=0)
  args = ap.parse_args(argv)
  if bool(args.workdir) == bool(args.records):
    ap.error("give one of --workdir (a study's) or --records (a glob of node-record parquet files)")
  t0 = time.time()
  try:
    rows, rewards = load(args.workdir, args.records)
  except ValueError as e:
    ap.error(str(e))
  source = args.records or args.workdir
  full_r = int(np.median([x.size for rw in rewards.values() for x in rw]))
  rs = [int(x) for x in args.r.split(",") if int(x) < full_r]
  full = realign(rows, subsample(rewards, None, None), args.target)
  assert np.allclose(full["alignment"], rows["alignment"].to_numpy(np.float64), atol=1e-9, equal_nan=True), (
      "recomputed alignment differs from the records")
  rng = np.random.default_rng(args.seed)
  draws = {r: [realign(rows, subsample(rewards, r, rng), args.target) for _ in range(args.draws)] for r in rs}
  draws[full_r] = [full]
  configs = list(dict.fromkeys(rows["config_id"]))
  print(f"{source}: {rows['question_id'].nunique()} questions, {len(rewards)} nodes, R = {full_r}, "
        f"{len(configs)} configurations, target group {args.target}, {args.draws} draws per r")
  summary = {"records" if args.records else "workdir": source, "R": full_r, "target": args.target,
             "draws": args.draws, "configs": configs}
  for name in ESTIMANDS:
    per_r = {}
    for r, ds in draws.items():
      got = [verdict_numbers(rows, d[name], args.target) for d in ds]
      per_r[r] = {"mean": np.mean([g[1] for g in got], 0), "mean_sd": np.std([g[1] for g in got], 0),
                  "diff": np.mean([g[2] for g in got], 0), "diff_sd": np.std([g[2] for g in got], 0),
                  "se2": np.mean([g[3] for g in got], 0),
                  "draws": len(ds), "verdicts": [g[4] for g in got]}
    summary[name] = report(name, configs, per_r, full_r, args.compare)
  summary["seconds"] = round(time.time() - t0, 1)
  print(json.dumps(summary, default=float))
  if args.out:
    files = sorted(glob.glob(args.records)) if args.records else []
    kept = {"command": "python benchmarks/fewer_continuations.py " + " ".join(
                a.split("=", 1)[0] + "=" + shlex.quote(a.split("=", 1)[1]) if "=" in a else shlex.quote(a)
                for a in (sys.argv[1:] if argv is None else argv)),
            "date": time.strftime("%Y-%m-%d"),
            "records": (f"{source} ({len(files)} files: " + ", ".join(os.path.basename(f) for f in files) + "; "
                        if files else f"{source} (") + f"{rows['question_id'].nunique()} questions, {len(configs)} "
                       f"configurations, R = {full_r})",
            **{k: v for k, v in summary.items() if k not in (*ESTIMANDS, "configs", "workdir", "records")},
            "configs": len(configs)}
    kept.update({name: {k: v for k, v in summary[name].items() if k != "pairs"} for name in ESTIMANDS})
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
      json.dump(kept, f, indent=1, default=float)
    print(f"wrote {args.out}")
  return summary


if __name__ == "__main__":
  main()
