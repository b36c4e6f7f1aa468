"""Our decode and branching against another commit of opd_jax (a git worktree), side by side in one run.

  git worktree add /tmp/opd_old <commit>
  python benchmarks/old_vs_new.py --old=/tmp/opd_old                       # 0.5B preset, ~15 min on 2 cores
  python benchmarks/old_vs_new.py --old=/tmp/opd_old --model=random:qwen3-tiny --reps=2   # seconds

Each side is a worker subprocess that imports `opd_jax` from its own tree (this one's, or --old's) and runs the
same calls with the same model weights, tokens, keys and row ids; the first call of each kind (its compile) is
excluded, then --reps interleaved repetitions, medians. Workloads (the public API both trees share):
  decode     `sampling.sample` of --batch rows of one prompt, exactly --new tokens each (stop_ids=()).
  rollouts   the same with the model's stop ids (rows stop where the model stops, as base rollouts do).
  targeted   `branching.prefill_sequences` of a context of P - 1 tokens (P in --prefixes; not timed), then
             `branching.branch` of --branches continuations forcing the next tokens at position P - 1, exactly
             --new tokens each: the study's targeted continuations.
Prints a table and one JSON line: per workload seconds of both sides, `new_over_old` speed ratio (old seconds /
new seconds; > 1: the new tree is faster), the fraction of rows whose tokens are identical, and where the other
rows first differ (fp32 round-off moving a draw across a CDF boundary; the row diverges from there).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import harness  # pylint: disable=g-import-not-at-top

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def worker(args):
  sys.path.insert(0, args.tree)                       # this side's opd_jax, ahead of everything
  for name in [m for m in sys.modules if m == "opd_jax" or m.startswith("opd_jax.")]:
    del sys.modules[name]                             # (harness imported this tree's opd_jax.flops)
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from opd_jax.decode import branching  # pylint: disable=g-import-not-at-top
  from opd_jax.decode import sampling  # pylint: disable=g-import-not-at-top
  assert os.path.dirname(os.path.dirname(sampling.__file__)) == os.path.abspath(args.tree), sampling.__file__
  model = harness.ours_model(args.model, args.dtype)
  longest = max(args.prefixes) + args.branches
  (text,) = harness.token_rows(model.tokenizer, harness.gsm8k_text(args.data), 1, longest, model.config.vocab_size)
  prompt = text[:64]
  caches = {}

  def handle(cmd):
    kind, key = cmd["kind"], jax.random.key(cmd["seed"])
    t0 = time.perf_counter()
    if kind in ("decode", "rollouts"):
      out = sampling.sample(model, [prompt] * args.batch, key=key, max_new_tokens=args.new,
                            stop_ids=() if kind == "decode" else None)
    else:
      P = cmd["prefix"]
      if P not in caches:
        caches[P] = branching.prefill_sequences(model, [text[:P - 1]])
      t0 = time.perf_counter()
      out = branching.branch(model, caches[P], base_rows=[0] * args.branches, prefix_lens=[P - 1] * args.branches,
                            forced_tokens=text[P - 1:P - 1 + args.branches], key=key, max_new_tokens=args.new,
                            row_ids=list(range(args.branches)), stop_ids=(), pad_to=args.branches)
    jax.block_until_ready(out.tokens)
    return {"seconds": time.perf_counter() - t0, "tokens": np.asarray(out.tokens).tolist(),
            "generated": int(np.asarray(out.lengths).sum()), "device": jax.default_backend()}

  harness.serve(handle)


def main():
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--old", required=True, help="root of the other opd_jax tree (a git worktree)")
  ap.add_argument("--model", default="qwen2.5-coder-0.5b-instruct", help="preset, HF folder, random:<name>[@seed]")
  ap.add_argument("--data", default=None, help="GSM8K JSONL (default: /work/shared/data/gsm8k_test.jsonl)")
  ap.add_argument("--batch", type=int, default=32, help="rows of the decode and rollouts workloads")
  ap.add_argument("--branches", type=int, default=32, help="continuations per targeted call")
  ap.add_argument("--prefixes", default="512,2048", help="targeted prefixes P (forced token included)")
  ap.add_argument("--new", type=int, default=32, help="tokens sampled per row")
  ap.add_argument("--kinds", default="decode,rollouts,targeted", help="workloads to run")
  ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
  ap.add_argument("--reps", type=int, default=3)
  ap.add_argument("--json_out", default=None, help="also write the final JSON line to this file")
  ap.add_argument("--tree", help=argparse.SUPPRESS)
  args = ap.parse_args()
  args.prefixes = [int(p) for p in str(args.prefixes).split(",")]
  if args.tree:
    return worker(args)
  argv = [sys.executable, os.path.abspath(__file__)] + [
      f"--{k}={','.join(map(str, v)) if isinstance(v, list) else v}" for k, v in vars(args).items()
      if v is not None and k not in ("tree", "json_out")]
  sides = {"new": harness.Worker(argv + [f"--tree={HERE}"]),
           "old": harness.Worker(argv + [f"--tree={os.path.abspath(args.old)}"])}
  jobs = [{"kind": k} for k in args.kinds.split(",") if k != "targeted"]
  jobs += [{"kind": "targeted", "prefix": p} for p in args.prefixes] if "targeted" in args.kinds else []
  rows, figures = [], {"benchmark": "old_vs_new", "model": args.model, "old": os.path.abspath(args.old)}
  for job in jobs:
    name = job["kind"] + (f"_p{job['prefix']}" if "prefix" in job else "")
    first = {s: w(seed=0, **job)["seconds"] for s, w in sides.items()}      # compile: not in the medians
    runs = {s: [] for s in sides}
    for rep in range(args.reps):
      for s, w in sides.items():
        runs[s].append(w(seed=rep + 1, **job))
    sec = {s: harness.median([r["seconds"] for r in rs]) for s, rs in runs.items()}
    pairs = [(x, y) for a, b in zip(runs["new"], runs["old"]) for x, y in zip(a["tokens"], b["tokens"])]
    same = sum(x == y for x, y in pairs) / len(pairs)          # rows whose tokens are all equal
    diverge = [next((i for i, (u, w) in enumerate(zip(x, y)) if u != w), None) for x, y in pairs]
    rows.append({"workload": name, "new_s": sec["new"], "old_s": sec["old"], "new_over_old": sec["old"] / sec["new"],
                 "tokens/s new": runs["new"][0]["generated"] / sec["new"],
                 "tokens/s old": runs["old"][0]["generated"] / sec["old"], "identical_rows": same,
                 "first_difference_at": sorted(i for i in diverge if i is not None),
                 "first_new_s": first["new"], "first_old_s": first["old"]})
    figures[name] = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in rows[-1].items() if k != "workload"}
  for w in sides.values():
    w.close()
  print(harness.table(rows, [k for k in rows[0] if k != "first_difference_at"]))
  for r in rows:
    if r["first_difference_at"]:
      print(f"{r['workload']}: rows differing first at token {r['first_difference_at']}")
  print("new_over_old = old seconds / new seconds (medians of --reps interleaved calls; compiles excluded)")
  harness.final_json(figures, args.json_out)


if __name__ == "__main__":
  main()
