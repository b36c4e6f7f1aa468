"""Bytes per call of a compiled program, loop bodies x their trip counts, and copies in loop bodies (opd_jax.cost.hlo_bytes).

  python benchmarks/hlo_bytes.py                              # our sampler's decode loop, tiny random model, CPU
  python benchmarks/hlo_bytes.py --early_exit --new_tokens=64 --max_copy_bytes=65536
  python benchmarks/hlo_bytes.py --hlo=module.txt --trip_count=while.76=64    # HLO text (compiled.as_text())

The decode program is `sampling.decode` compiled on abstract weights (`programs._params`: nothing is initialised)
for --rows rows and a cache of --slots slots; its loop runs --new_tokens steps (with --early_exit the loop's
count is data-dependent: metered at the cap). Beside the report: XLA's cost_analysis (loop bodies once) and
the formula `flops.decode_bytes_per_step` (weights + the whole KV cache per step). Exits 1 when a copy in a
loop body writes >= --max_copy_bytes.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def decode_program(args):
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from opd_jax.cost import programs
  from opd_jax.decode import sampling
  from opd_jax.models import decoder  # pylint: disable=g-import-not-at-top
  cfg = decoder.Config(arch="qwen3", vocab_size=args.vocab, d_model=args.d_model, n_layers=args.layers, n_heads=4,
                       n_kv_heads=2, head_dim=args.d_model // 4, d_ff=4 * args.d_model, qk_norm=True,
                       tie_embeddings=True, max_seq_len=args.slots)
  g, p = programs._params(cfg)  # pylint: disable=protected-access
  fn = lambda p, c, lg, pos, k, d, caps: sampling.decode.fun(
      p, c, lg, pos, k, d, caps, 0, graphdef=g, sp=sampling.SamplingParams(), max_new_tokens=args.new_tokens,
      stop_ids=(0,), early_exit=args.early_exit)
  B, i32 = args.rows, lambda: jax.ShapeDtypeStruct((args.rows,), jnp.int32)
  cache = programs._cache(cfg, B, args.slots)  # pylint: disable=protected-access
  abstract = (p, cache, jax.ShapeDtypeStruct((B, cfg.vocab_size), jnp.float32), i32(),
              jax.eval_shape(lambda: jax.random.split(jax.random.key(0), B)), jax.ShapeDtypeStruct((B,), jnp.bool_),
              i32())
  return cfg, jax.jit(fn).lower(*abstract).compile()


def main():
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--hlo", help="HLO module text file (default: compile the decode program)")
  ap.add_argument("--trip_count", action="append", default=[], help="WHILE_OP_NAME=N, repeatable")
  ap.add_argument("--rows", type=int, default=8)
  ap.add_argument("--slots", type=int, default=256)
  ap.add_argument("--new_tokens", type=int, default=32)
  ap.add_argument("--vocab", type=int, default=4096)
  ap.add_argument("--d_model", type=int, default=256)
  ap.add_argument("--layers", type=int, default=2)
  ap.add_argument("--early_exit", action="store_true", help="the data-dependent while loop (else fori_loop)")
  ap.add_argument("--max_copy_bytes", type=int, default=0, help="exit 1 if a copy in a loop writes this many")
  ap.add_argument("--top", type=int, default=10)
  args = ap.parse_args()
  from opd_jax import flops  # pylint: disable=g-import-not-at-top
  from opd_jax.cost import hlo_bytes  # pylint: disable=g-import-not-at-top
  trips = {k: int(v) for k, v in (t.rsplit("=", 1) for t in args.trip_count)}
  if args.hlo:
    with open(args.hlo) as f:
      text, cfg, compiled = f.read(), None, None
  else:
    cfg, compiled = decode_program(args)
    text = compiled.as_text()
  # The early-exit decode loop (a data-dependent count) is metered at the token cap; HLO text needs --trip_count.
  report = hlo_bytes.analyze(text, trips, unknown_trips=None if args.hlo else args.new_tokens)
  print(report.summary(args.top))
  if compiled is not None:
    print(f"XLA cost_analysis bytes accessed (loop bodies once): {flops.xla_cost(compiled)['bytes accessed']:,.0f}")
    print(f"per decode step: {report.bytes / args.new_tokens:,.0f} B metered; formula (weights + KV cache, fp32): "
          f"{flops.decode_bytes_per_step(cfg, args.rows, args.slots, 4):,}")
  if args.max_copy_bytes and report.largest_copy_in_loop >= args.max_copy_bytes:
    print(f"FAIL: a copy in a loop body writes {report.largest_copy_in_loop:,} B >= {args.max_copy_bytes:,}")
    sys.exit(1)


if __name__ == "__main__":
  main()
