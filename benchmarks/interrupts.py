"""Ctrl-C at many moments of a run (issue 50, item 1): each press must end the run within 5 s with exit 130 and
one `interrupted:` line, never an "Exception ignored" line, and the same command must then resume.

  python benchmarks/interrupts.py --job=study --moments=20          # the smoke study, presses 0.3-12 s in (~6 min)
  python benchmarks/interrupts.py --job=train --moments=20 --resume_every=5

Each moment starts the job afresh in its own workdir (a shared JAX compilation cache, as a user's second run
has), sends one SIGINT after `t` seconds and measures the time to exit. With --resume_every=k every k-th workdir
is rerun with the same command, which must finish (exit 0). Prints one row per moment and a JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
CONFIGS = {"study": "configs/smoke.py", "train": "configs/opd_train.py:smoke"}


def command(job: str, workdir: pathlib.Path) -> list[str]:
  return [sys.executable, "-m", "opd_jax.main", f"--config={REPO / CONFIGS[job]}", f"--workdir={workdir}",
          "--config.logging.progress=False"]


def env(cache: pathlib.Path) -> dict:
  return dict(os.environ, PYTHONPATH=str(REPO), JAX_PLATFORMS="cpu", JAX_COMPILATION_CACHE_DIR=str(cache),
              JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")


def press(job: str, workdir: pathlib.Path, after_s: float, cache: pathlib.Path, timeout_s: float = 120) -> dict:
  """One run interrupted after `after_s` seconds: {after_s, code, exit_s (press to exit), lines (stderr lines
  starting "interrupted"), ignored ("Exception ignored" seen), last (stderr's last line), finished_first}."""
  proc = subprocess.Popen(command(job, workdir), env=env(cache), cwd=REPO, text=True, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE)
  try:
    proc.wait(timeout=after_s)
    finished_first = True                         # the run ended before the press (a short job)
    t_press = time.time()
  except subprocess.TimeoutExpired:
    finished_first = False
    t_press = time.time()
    proc.send_signal(signal.SIGINT)
  try:
    _, err = proc.communicate(timeout=timeout_s)
  except subprocess.TimeoutExpired:
    proc.kill()
    _, err = proc.communicate()
  lines = err.strip().splitlines()
  return {"after_s": round(after_s, 2), "code": proc.returncode, "exit_s": round(time.time() - t_press, 2),
          "lines": sum(l.startswith("interrupted") for l in lines), "ignored": "Exception ignored" in err,
          "last": lines[-1] if lines else "", "finished_first": finished_first}


def ok(row: dict, limit_s: float = 5.0) -> bool:
  """The press ended the run as promised (or the run had finished before it)."""
  if row["finished_first"]:
    return row["code"] == 0 and not row["ignored"]
  return (row["code"] == 130 and row["exit_s"] <= limit_s and row["lines"] == 1 and not row["ignored"]
          and row["last"].startswith("interrupted"))


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--job", default="study", choices=tuple(CONFIGS))
  ap.add_argument("--moments", type=int, default=20)
  ap.add_argument("--first_s", type=float, default=0.3)
  ap.add_argument("--last_s", type=float, default=12.0)
  ap.add_argument("--resume_every", type=int, default=0)
  args = ap.parse_args(argv)
  base = pathlib.Path(tempfile.mkdtemp(prefix="interrupts-"))
  rows = []
  for i in range(args.moments):
    t = args.first_s + (args.last_s - args.first_s) * i / max(args.moments - 1, 1)
    row = press(args.job, base / f"w{i}", t, base / "jax_cache")
    if args.resume_every and i % args.resume_every == 0 and not row["finished_first"]:
      again = subprocess.run(command(args.job, base / f"w{i}"), env=env(base / "jax_cache"), cwd=REPO,
                             capture_output=True, text=True, timeout=900)
      row["resumed_code"] = again.returncode
    row["ok"] = ok(row) and row.get("resumed_code", 0) == 0
    rows.append(row)
    print(row, flush=True)
  print(json.dumps({"job": args.job, "moments": len(rows), "ok": sum(r["ok"] for r in rows),
                    "max_exit_s": max(r["exit_s"] for r in rows if not r["finished_first"]) if any(
                        not r["finished_first"] for r in rows) else None, "rows": rows}))
  return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
  sys.exit(main())
