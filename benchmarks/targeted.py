"""Targeted continuations: branching from one cached prefix vs re-prefilling the prefix for every branch.

  python benchmarks/targeted.py                                     # 0.5B preset, 32 branches, prefix 512, 64 new
  python benchmarks/targeted.py --branches=8 --prefix=64 --continuation=8 --reps=3
  python benchmarks/targeted.py --model=random:qwen3-0.6b --dtype=bfloat16 --branches=128   # GPU

Both sides are ours (the sampler of `opd_jax.decode.sampling`), on the same model, tokens, keys and row ids:
  reuse      `branching.prefill_sequences` once on the shared context, then `branching.branch` for the branches
             (--batch per call): the study's path (`targeted.ModelPolicy`).
  reprefill  `sampling.sample` with prompts = context + forced token, --batch branches per call: every branch
             prefills the whole prefix again.
The prefix P counts the forced token: the shared context is P - 1 tokens of GSM8K text and branch j forces
token j of the text that follows it, at position P - 1; both sides then pad prompts to the same bucket. Pure
sampling, no stop tokens (stop_ids=()): every branch generates exactly --continuation tokens. With the same key
and row id a branch samples the same tokens either way (up to float round-off): "identical" reports the
fraction of continuations that match exactly. Each side runs in its own subprocess; the first call (compile)
is excluded, then --reps interleaved repetitions and medians. GFLOP/s = 2 x N x tokens the side feeds through
the model (reuse: P - 1 + branches x (continuation + 1); reprefill: branches x (P + continuation)).
Ends with one JSON line: continuations/s of both and "speedup" (reuse / reprefill).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import harness  # pylint: disable=g-import-not-at-top


def worker(args):
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from opd_jax.decode import branching  # pylint: disable=g-import-not-at-top
  from opd_jax.decode import sampling  # pylint: disable=g-import-not-at-top
  model = harness.ours_model(args.model, args.dtype)
  P, N, M, bs = args.prefix, args.branches, args.continuation, args.batch
  (text,) = harness.token_rows(model.tokenizer, harness.gsm8k_text(args.data), 1, P - 1 + N,
                               model.config.vocab_size)
  context, forced = text[:P - 1], text[P - 1:]
  counter = harness.CompileCounter()
  mem0 = harness.jax_device_memory_mb()

  def run(key):
    outs = []
    if args.side == "reuse":
      cache = branching.prefill_sequences(model, [context])
      for s in range(0, N, bs):
        n = len(forced[s:s + bs])
        outs.append(branching.branch(model, cache, base_rows=[0] * n, prefix_lens=[P - 1] * n,
                                    forced_tokens=forced[s:s + bs], key=key, max_new_tokens=M,
                                    row_ids=list(range(s, s + n)), stop_ids=(), pad_to=bs))
    else:
      for s in range(0, N, bs):
        outs.append(sampling.sample(model, [context + [f] for f in forced[s:s + bs]], key=key, max_new_tokens=M,
                                    stop_ids=(), row_ids=list(range(s, s + len(forced[s:s + bs])))))
    return np.concatenate([o.tokens for o in outs]), np.concatenate([o.lengths for o in outs])

  def handle(cmd):
    n = counter.count
    t0 = time.perf_counter()
    tokens, lengths = run(jax.random.key(cmd["seed"]))
    dt = time.perf_counter() - t0
    if not (lengths == M).all():
      raise RuntimeError(f"every branch must generate {M} tokens (no stop ids), got lengths {sorted(set(lengths))}")
    fed = P - 1 + N * (M + 1) if args.side == "reuse" else N * (P + M)
    result = {"seconds": dt, "tokens": tokens.tolist(), "fed_tokens": fed, "compiles": counter.count - n,
              "n_params": harness.matmul_params(model.config), "dtype": args.dtype, "threads": os.cpu_count(),
              "device": jax.default_backend()}
    mem = harness.jax_device_memory_mb()
    if mem is not None and mem0 is not None:
      result["device_peak_above_load_mb"] = mem[1] - mem0[0]
    return result

  harness.serve(handle)


def main():
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--model", default="qwen2.5-coder-0.5b-instruct", help="preset, HF folder, random:<name>[@seed]")
  ap.add_argument("--data", default=None, help="GSM8K JSONL (default: /work/shared/data/gsm8k_test.jsonl)")
  ap.add_argument("--branches", type=int, default=32, help="continuations from the prefix")
  ap.add_argument("--prefix", type=int, default=512, help="P: tokens before the first sampled one, forced included")
  ap.add_argument("--continuation", type=int, default=64, help="sampled tokens per branch after the forced one")
  ap.add_argument("--batch", type=int, default=0, help="branches per call, both sides (0 = all)")
  ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
  ap.add_argument("--reps", type=int, default=3)
  ap.add_argument("--json_out", default=None, help="also write the final JSON line to this file")
  ap.add_argument("--side", choices=["reuse", "reprefill"], help=argparse.SUPPRESS)
  args = ap.parse_args()
  args.batch = args.batch or args.branches
  for name in ("branches", "prefix", "continuation", "reps"):
    if getattr(args, name) < (2 if name == "prefix" else 1):
      raise ValueError(f"--{name} must be >= {2 if name == 'prefix' else 1}, got {getattr(args, name)}")
  if args.side:
    return worker(args)
  argv = [sys.executable, os.path.abspath(__file__)] + [f"--{k}={v}" for k, v in vars(args).items()
                                                        if v is not None and k not in ("side", "json_out")]
  env = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
  sides = {s: harness.Worker(argv + [f"--side={s}"], env) for s in ("reuse", "reprefill")}
  first = {s: w(seed=0) for s, w in sides.items()}                 # compile: not in the medians
  runs = {s: [] for s in sides}
  for rep in range(args.reps):
    for s, w in sides.items():
      runs[s].append(w(seed=rep + 1))
  for w in sides.values():
    w.close()

  on_device = all("device_peak_above_load_mb" in rs[0] for rs in runs.values())
  mem_key = "device_peak_above_load_mb" if on_device else "peak_above_load_mb"
  same = [sum(a == b for a, b in zip(x["tokens"], y["tokens"])) for x, y in zip(runs["reuse"], runs["reprefill"])]
  rows, figures = [], {}
  for s, rs in runs.items():
    sec = harness.median([r["seconds"] for r in rs])
    r0 = rs[0]
    rows.append({"side": s, "device": r0["device"], "dtype": r0["dtype"], "threads": r0["threads"],
                 "branches": args.branches, "prefix": args.prefix, "new": args.continuation, "batch": args.batch,
                 "fed_tokens": r0["fed_tokens"], "cont/s": args.branches / sec,
                 "GFLOP/s": 2 * r0["n_params"] * r0["fed_tokens"] / sec / 1e9, "first_call_s": first[s]["seconds"],
                 "median_s": sec, "mem_above_load_MB": harness.median([r[mem_key] for r in rs]),
                 "compiles/rep": max(r["compiles"] for r in rs)})
    figures[f"{s}_continuations_per_s"] = round(args.branches / sec, 3)
    figures[f"{s}_seconds"] = round(sec, 4)
  print(harness.table(rows, list(rows[0])))
  print(f"GFLOP/s = 2 x N x fed_tokens / s, N = {runs['reuse'][0]['n_params']:,} matmul weights "
        "(harness.matmul_params); cont/s = branches / median seconds; memory: " + mem_key)
  print(f"identical continuations (same key and row ids): {same} of {args.branches} per repetition")
  figures.update(speedup=round(figures["reuse_continuations_per_s"] / figures["reprefill_continuations_per_s"], 3),
                 benchmark="targeted", model=args.model, dtype=args.dtype, branches=args.branches,
                 prefix=args.prefix, continuation=args.continuation, batch=args.batch, reps=args.reps,
                 identical_fraction=round(sum(same) / (len(same) * args.branches), 3),
                 compiles_steady_state=sum(r["compiles"] for rs in runs.values() for r in rs),
                 first_call_s={s: round(f["seconds"], 2) for s, f in first.items()},
                 load_seconds={s: round(w.ready["load_seconds"], 1) for s, w in sides.items()})
  harness.final_json(figures, args.json_out)


if __name__ == "__main__":
  main()
