"""End to end: wall time of a whole study by stage (`python -m opd_jax.main`), warm or cold model cache.

  python benchmarks/e2e.py                                       # configs/teacher_sweep.py, warm cache (~15 min CPU)
  python benchmarks/e2e.py --cache=cold                          # + preset assembly and GGUF conversion
  python benchmarks/e2e.py --config=configs/smoke.py --reps=3    # seconds
  python benchmarks/e2e.py --config=configs/smoke.py -- --config.budget.questions=1   # overrides after --

Each repetition runs the study as a subprocess in a fresh work directory (a temporary one unless --workdir),
measures its wall time and reads `<workdir>/manifest.json`'s `timings_s` (the stages the study times itself:
load_s = task and models, rollouts_s, scoring_s, continuations_s); "other" = wall - their sum (interpreter
start, imports, planning, the report). --cache=cold points OPD_JAX_CACHE at an empty temporary directory, so
presets are assembled and converted again (what a first run pays); warm keeps the caller's cache (run once
first to fill it). Prints a table of median seconds per stage and ends with one JSON line; there is no
reference side here, so "speedup" is null.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import harness  # pylint: disable=g-import-not-at-top


def run_once(args, overrides: list[str], rep: int) -> dict:
  """One study run in a fresh workdir: {"wall_s", "timings_s", "returncode", "manifest"}."""
  workdir = os.path.join(args.workdir, f"rep{rep}") if args.workdir else tempfile.mkdtemp(prefix="opd_e2e_")
  cache = tempfile.mkdtemp(prefix="opd_e2e_cache_") if args.cache == "cold" else None
  env = dict(os.environ, PYTHONPATH=harness.REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
  if cache:
    env["OPD_JAX_CACHE"] = cache
  cmd = [sys.executable, "-m", "opd_jax.main", f"--config={args.config}", f"--workdir={workdir}"] + overrides
  print("$", " ".join(cmd) + (f"   (OPD_JAX_CACHE={cache})" if cache else ""), flush=True)
  t0 = time.perf_counter()
  proc = subprocess.run(cmd, cwd=harness.REPO, env=env, stdout=None if args.verbose else subprocess.DEVNULL,
                        stderr=None if args.verbose else subprocess.PIPE, text=True, check=False)
  wall = time.perf_counter() - t0
  try:
    if proc.returncode:
      tail = (proc.stderr or "")[-3000:]
      raise RuntimeError(f"the study exited with {proc.returncode} after {wall:.1f} s:\n{tail}")
    with open(os.path.join(workdir, "manifest.json")) as f:
      manifest = json.load(f)
  finally:
    if cache:
      shutil.rmtree(cache, ignore_errors=True)
    if not args.workdir and not args.keep:
      shutil.rmtree(workdir, ignore_errors=True)
  return {"wall_s": wall, "timings_s": manifest.get("timings_s", {}), "manifest": manifest, "workdir": workdir}


def main():
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--config", default="configs/teacher_sweep.py", help="study config (path[:variant])")
  ap.add_argument("--cache", default="warm", choices=["warm", "cold"], help="cold: empty OPD_JAX_CACHE per run")
  ap.add_argument("--reps", type=int, default=1)
  ap.add_argument("--workdir", default=None, help="keep runs under <workdir>/rep<i> (default: temporary, removed)")
  ap.add_argument("--keep", action="store_true", help="keep the temporary work directories")
  ap.add_argument("--verbose", action="store_true", help="show the study's own output")
  ap.add_argument("--json_out", default=None, help="also write the final JSON line to this file")
  args, overrides = ap.parse_known_args()
  overrides = [o for o in overrides if o != "--"]
  bad = [o for o in overrides if not o.startswith("--config.")]
  if bad:
    raise ValueError(f"unknown arguments {bad}; study overrides look like --config.budget.questions=1")
  if args.reps < 1:
    raise ValueError(f"--reps must be >= 1, got {args.reps}")
  runs = [run_once(args, overrides, rep) for rep in range(args.reps)]
  peak_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024        # KiB on Linux -> MiB
  wall = harness.median([r["wall_s"] for r in runs])
  order = ["load_s", "rollouts_s", "scoring_s", "continuations_s"]          # pipeline order, then any others
  seen = list(dict.fromkeys(k for r in runs for k in r["timings_s"]))
  stages = [k for k in order if k in seen] + [k for k in seen if k not in order]
  med = {k: harness.median([r["timings_s"].get(k, 0.0) for r in runs]) for k in stages}
  med["other"] = wall - sum(med.values())
  rows = [{"stage": k, "seconds": v, "% of wall": 100 * v / wall} for k, v in med.items()]
  rows.append({"stage": "wall", "seconds": wall, "% of wall": 100.0})
  print(harness.table(rows, ["stage", "seconds", "% of wall"]))
  m = runs[-1]["manifest"]
  print(f"config {args.config} {' '.join(overrides)}; cache {args.cache}; median of {args.reps} run(s); "
        f"platform {m.get('platform')} x {m.get('device_count')}; questions selected "
        f"{m.get('questions_selected')} of {m.get('questions_processed')} processed; peak RSS of the study "
        f"{peak_rss:,.0f} MiB. 'other' = wall - the study's own stage timings (start-up, imports, report).")
  harness.final_json({
      "benchmark": "e2e", "config": args.config, "overrides": overrides, "cache": args.cache, "reps": args.reps,
      "wall_s": round(wall, 2), "walls_s": [round(r["wall_s"], 2) for r in runs],
      "stages_s": {k: round(v, 2) for k, v in med.items()}, "peak_rss_mb": round(peak_rss),
      "platform": m.get("platform"), "questions_selected": m.get("questions_selected"),
      "models": {k: v.get("dtype") for k, v in (m.get("models") or {}).items()}, "speedup": None}, args.json_out)


if __name__ == "__main__":
  main()
