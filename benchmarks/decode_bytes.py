"""Bytes per decode step of the compiled decode loop against the ideal, at real shapes, compile only (CPU).

  python benchmarks/decode_bytes.py                                   # Qwen3-0.6B, batch 128, 320 and 2048 slots
  python benchmarks/decode_bytes.py --tree=/tmp/opd_old --layouts=stacked,layered     # another commit's tree
  python benchmarks/decode_bytes.py --sampler                         # passes over the logits, each policy
  python benchmarks/decode_bytes.py --branch --model=qwen3-1.7b --rows=512 --slots=6144 --suffix=2048,811 \
      --prefix=1024 --groups=2                                         # :paper's branch batch

`sampling.decode` is lowered for abstract weights and cache (`jax.ShapeDtypeStruct`: nothing is allocated) and
compiled for the CPU; `opd_jax.cost.hlo_bytes` meters its HLO: operand + output bytes of every op, loop bodies x their
trip counts (XLA's `cost_analysis()` counts a loop body once). A decode step is one iteration of the decode
loop (draw + forward of [rows, 1]). The ideal step reads the weights once and the whole KV cache once
(`flops.decode_bytes_per_step`). Also printed: the largest copy-like op inside the loop (a cache-sized copy
means the cache is copied every step) and XLA's temporary memory against the cache.
--branch: a targeted-continuation batch (`branching.branch`): each row holds only its suffix, --suffix slots (the
cache grows with the continuation: 2048 at :paper's cap, 811 its mean per step in the cost model), and the
G = --groups node prefixes of --prefix slots (the window of the batch's longest node prefix) are held once
(shared-prefix attention); --slots is the per-branch width S_base + N + 1 of a branch that copies its base row,
for the comparison. Prints the KV bytes held and read per step by both. With --tree, the other tree's decode is
metered (it must have `sampling.decode`; branching is ours).
--sampler: the draw alone (`sampling._draw` on fp32 logits [--rows, V]) for each sampling policy: its metered
bytes over B x V x 4 = passes over the logits, and whether the program holds a sort.
fp32 throughout (the CPU compiles); bf16 halves every figure. Ends with one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def meter(compiled, steps: int):
  """(report, bytes per step) of a compiled decode program whose loop runs `steps` times (a data-dependent exit,
  the old loop's, is metered at `steps`)."""
  from opd_jax.cost import hlo_bytes  # pylint: disable=g-import-not-at-top
  report = hlo_bytes.analyze(compiled, unknown_trips=steps)
  outer = max(report.loops, key=lambda l: l.bytes_per_iter * l.trips)
  return report, outer.bytes_per_iter


def main():
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--model", default="qwen3-0.6b", help="a name of opd_jax.study.model_specs.ARCHITECTURES")
  ap.add_argument("--rows", type=int, default=128)
  ap.add_argument("--slots", default="320,2048", help="cache slots per row (comma-separated)")
  ap.add_argument("--layouts", default="layered", help="stacked and / or layered")
  ap.add_argument("--steps", type=int, default=4, help="decode steps the compiled loop runs")
  ap.add_argument("--branch", action="store_true", help="a branch batch with shared node prefixes")
  ap.add_argument("--prefix", type=int, default=1024, help="--branch: slots of each node's prefix window")
  ap.add_argument("--suffix", default="2048", help="--branch: suffix slots per branch (comma-separated)")
  ap.add_argument("--groups", type=int, default=2, help="--branch: node prefixes in the batch")
  ap.add_argument("--sampler", action="store_true", help="passes over the logits of each sampling policy")
  ap.add_argument("--tree", default=HERE, help="the opd_jax tree to meter (default: this one)")
  ap.add_argument("--json_out", default=None)
  args = ap.parse_args()
  sys.path.insert(0, os.path.abspath(args.tree))
  sys.path.insert(1, HERE)
  import inspect  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  try:
    from opd_jax import flops  # pylint: disable=g-import-not-at-top
    from opd_jax.study.model_specs import ARCHITECTURES  # pylint: disable=g-import-not-at-top
  except ImportError:        # a --tree from before issue 49, item 9: opd_jax/cost/flops.py, estimate.ARCHITECTURES
    from opd_jax.cost import flops  # pylint: disable=g-import-not-at-top
    from opd_jax.cost.estimate import ARCHITECTURES  # pylint: disable=g-import-not-at-top
  from opd_jax.decode import sampling  # pylint: disable=g-import-not-at-top
  from opd_jax.models import decoder  # pylint: disable=g-import-not-at-top
  cpu = jax.sharding.SingleDeviceSharding(jax.devices("cpu")[0])
  sds = lambda shape, dtype: jax.ShapeDtypeStruct(shape, dtype, sharding=cpu)
  cfg = ARCHITECTURES[args.model]
  B = args.rows
  out = {"benchmark": "decode_bytes", "model": args.model, "rows": B, "tree": args.tree}
  rows = []
  new_loop = "early_exit" in inspect.signature(sampling.decode.fun).parameters
  if args.sampler:
    from opd_jax.cost import hlo_bytes  # pylint: disable=g-import-not-at-top
    V = cfg.vocab_size
    out["sampler"] = []
    for t, k, p in ((1.0, 0, 1.0), (0.7, 0, 1.0), (1.0, 20, 1.0), (1.0, 0, 0.9), (0.7, 50, 0.9)):
      spar = sampling.SamplingParams(temperature=t, top_k=k, top_p=p)
      keys = jax.eval_shape(lambda: jax.random.split(jax.random.key(0), B))
      compiled = jax.jit(lambda l, ks, spar=spar: sampling._draw(l, ks, spar)).lower(
          sds((B, V), jnp.float32), jax.tree.map(lambda x: sds(x.shape, x.dtype), keys)).compile()
      row = {"temperature": t, "top_k": k, "top_p": p,
             "passes": round(hlo_bytes.analyze(compiled).bytes / (B * V * 4), 2),
             "sort": bool(re.search(r"\b(sort|topk)\(", compiled.as_text()))}
      out["sampler"].append(row)
      print(json.dumps(row), flush=True)
    print(json.dumps(out))
    return
  shapes = [(S, int(x)) for S in map(int, args.slots.split(",")) for x in args.suffix.split(",")] if args.branch \
      else [(S, S) for S in map(int, args.slots.split(","))]
  for layout in args.layouts.split(","):
    for S, suffix in shapes:
      g, p = decoder.abstract(cfg, layout == "layered")
      p = jax.tree.map(lambda x: sds(x.shape, x.dtype), p)
      kw = dict(layered=layout == "layered") if "layered" in inspect.signature(decoder.init_cache).parameters else {}
      cache = jax.eval_shape(lambda: decoder.init_cache(cfg, B, suffix, jnp.float32, **kw))
      if args.branch:
        pre = jax.eval_shape(lambda: decoder.init_cache(cfg, args.groups, args.prefix, jnp.float32))
        cache = jax.eval_shape(lambda c, q: decoder.with_prefix(c, q, jnp.zeros((B,), jnp.int32)), cache, pre)
      cache = jax.tree.map(lambda x: sds(x.shape, x.dtype), cache)
      extra = dict(early_exit=False) if new_loop else {}
      fn = lambda p, c, lg, pos, k, d, caps: sampling.decode.fun(
          p, c, lg, pos, k, d, caps, 0, graphdef=g, sp=sampling.SamplingParams(), max_new_tokens=args.steps,
          stop_ids=(0,), **extra)
      keys = jax.eval_shape(lambda: jax.random.split(jax.random.key(0), B))
      compiled = jax.jit(fn).lower(p, cache, sds((B, cfg.vocab_size), jnp.float32), sds((B,), jnp.int32),
                                   jax.tree.map(lambda x: sds(x.shape, x.dtype), keys), sds((B,), jnp.bool_),
                                   sds((B,), jnp.int32)).compile()
      report, step = meter(compiled, args.steps)
      kv = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(cache) if x.ndim >= 4)
      weights = flops.matmul_params(cfg) * 4
      ideal = weights + kv
      today_kv = 2 * cfg.n_layers * B * S * cfg.n_kv_heads * cfg.head_dim * 4
      temp = compiled.memory_analysis().temp_size_in_bytes
      row = {"layout": layout, "slots": suffix, "bytes_per_step": step, "ideal": ideal, "over_ideal": step / ideal,
             "largest_copy_in_loop": report.largest_copy_in_loop, "kv_cache": kv, "temp_bytes": temp,
             "temp_over_cache": temp / kv}
      if args.branch:
        row.update(per_branch_kv=today_kv, kv_over_per_branch=kv / today_kv,
                   step_over_per_branch_ideal=step / (weights + today_kv))
      rows.append(row)
      print(json.dumps({k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in row.items()}), flush=True)
  out["rows"] = rows
  print(json.dumps(out))
  if args.json_out:
    with open(args.json_out, "w") as f:
      json.dump(out, f)


if __name__ == "__main__":
  main()
