"""XLA:CPU flags as a lever on matmul speed: `estimate.measure_cpu` under each XLA_FLAGS setting, beside PyTorch.

  python benchmarks/xla_flags.py                    # default, oneDNN, XNNPACK, fusion types; 3 rounds (~3 min)
  python benchmarks/xla_flags.py --flags="--xla_cpu_use_xnnpack=true" --rounds=5

The 0.5B student's MLP matmul [M, 896] x [896, 4864] fp32 at every M of `estimate.CPU_MATMUL_GFLOPS` (decode
batches to scoring chunks), GFLOP/s, median of 15 calls per round. Each setting runs in a fresh interpreter
(XLA reads XLA_FLAGS once); the rounds interleave the settings and PyTorch (`torch.matmul`, the threads JAX
uses), and the table shows each setting's median over rounds, so host noise hits every side alike. The answer
is a ratio per M against the default in the same run; ends with one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLAGS = ["", "--xla_cpu_use_onednn=true", "--xla_cpu_use_xnnpack=true",
         "--xla_cpu_experimental_xnn_fusion_type=dot", "--xla_cpu_experimental_ynn_fusion_type=dot",
         "--xla_cpu_experimental_onednn_fusion_type=dot"]
JAX_SIDE = "import json; from opd_jax import costs; print(json.dumps(estimate.measure_cpu()))"
TORCH_SIDE = """
import json, os, statistics, time, torch
from opd_jax.cost import estimate
torch.set_num_threads(os.cpu_count())
out = {}
for m in estimate.CPU_MATMUL_GFLOPS:
  x, w = torch.ones(m, 896), torch.full((896, 4864), 0.01)
  torch.matmul(x, w)
  ts = []
  for _ in range(15):
    t = time.perf_counter(); torch.matmul(x, w); ts.append(time.perf_counter() - t)
  out[str(m)] = round(2 * m * 896 * 4864 / statistics.median(ts) / 1e9, 1)
print(json.dumps(out))
"""


def _side(code: str, flags: str | None) -> dict:
  env = dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS="cpu")
  if flags is not None:
    env["XLA_FLAGS"] = flags
  out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
  return {str(k): v for k, v in json.loads(out.stdout.strip().splitlines()[-1]).items()}


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--flags", action="append", help="an XLA_FLAGS setting to compare with the default (repeat "
                  "it); default: oneDNN, XNNPACK and the dot fusion types")
  ap.add_argument("--rounds", type=int, default=3)
  ap.add_argument("--torch", default="auto", choices=["auto", "no"], help="also PyTorch when it is installed")
  args = ap.parse_args(argv)
  settings = [""] + [f for f in (args.flags or FLAGS) if f]
  import importlib.util  # pylint: disable=g-import-not-at-top
  with_torch = args.torch == "auto" and importlib.util.find_spec("torch") is not None
  runs = {name: [] for name in settings + (["torch"] if with_torch else [])}
  for _ in range(args.rounds):
    for f in settings:
      runs[f].append(_side(JAX_SIDE, f))
    if with_torch:
      runs["torch"].append(_side(TORCH_SIDE, None))
  cols = [k for k in runs[""][0] if k != "bw_gb_s"]
  med = {name: {c: statistics.median(r[c] for r in rs) for c in cols} for name, rs in runs.items()}
  print(f"{'setting':50s}" + "".join(f"{'M=' + c:>14s}" for c in cols) + "   (GFLOP/s, x default)")
  for name, m in med.items():
    print(f"{name or 'default':50s}" + "".join(f"{m[c]:8.1f} {m[c] / med[''][c]:4.2f}x" for c in cols))
  print(json.dumps({"gflops": {k or "default": v for k, v in med.items()}, "rounds": args.rounds}))


if __name__ == "__main__":
  main()
