"""Side-by-side benchmark harness: each side runs in its own worker subprocess, driven over pipes.

A worker loads its model once, then answers JSON commands on stdin with JSON lines on stdout, so the driver
can interleave repetitions of both sides (A, B, A, B, ...) and take medians. Memory is measured per side as
peak RSS during a command minus the RSS after loading (VmHWM is reset before each command).
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from typing import Callable

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def rss_mb() -> tuple[float, float]:
  """(current RSS, peak RSS since the last reset) of this process in MiB (Linux /proc)."""
  cur = peak = 0.0
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith("VmRSS:"):
        cur = int(line.split()[1]) / 1024
      elif line.startswith("VmHWM:"):
        peak = int(line.split()[1]) / 1024
  return cur, peak


def reset_peak() -> None:
  try:
    with open("/proc/self/clear_refs", "w") as f:
      f.write("5")
  except OSError:
    pass


def serve(handler: Callable[[dict], dict]) -> None:
  """Worker loop: one JSON command per stdin line -> one JSON result per stdout line ("READY" first)."""
  out = sys.stdout
  sys.stdout = sys.stderr            # keep library prints off the protocol channel
  base, _ = rss_mb()
  out.write(json.dumps({"ready": True, "rss_after_load_mb": base}) + "\n")
  out.flush()
  for line in sys.stdin:
    cmd = json.loads(line)
    if cmd.get("quit"):
      break
    reset_peak()
    before, _ = rss_mb()
    t0 = time.perf_counter()
    result = handler(cmd)
    result.setdefault("seconds", time.perf_counter() - t0)
    _, peak = rss_mb()
    result["peak_above_load_mb"] = peak - base
    result["peak_above_before_mb"] = peak - before
    out.write(json.dumps(result) + "\n")
    out.flush()


class Worker:
  """The driver's handle on one side."""

  def __init__(self, argv: list[str], env: dict | None = None):
    self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO,
                                 env=dict(os.environ, PYTHONPATH=REPO, **(env or {})))
    t0 = time.perf_counter()
    self.ready = json.loads(self.proc.stdout.readline())
    self.ready["load_seconds"] = time.perf_counter() - t0

  def __call__(self, **cmd) -> dict:
    self.proc.stdin.write(json.dumps(cmd) + "\n")
    self.proc.stdin.flush()
    line = self.proc.stdout.readline()
    if not line:
      raise RuntimeError(f"worker {self.proc.args} died (exit {self.proc.wait()})")
    return json.loads(line)

  def close(self):
    try:
      self.proc.stdin.write(json.dumps({"quit": True}) + "\n")
      self.proc.stdin.flush()
    except BrokenPipeError:
      pass
    self.proc.wait(timeout=60)


def median(xs):
  return statistics.median(xs)


def table(rows: list[dict], columns: list[str]) -> str:
  widths = [max(len(c), *(len(_fmt(r.get(c))) for r in rows)) for c in columns]
  line = lambda vals: "  ".join(v.rjust(w) for v, w in zip(vals, widths))
  return "\n".join([line(columns), line(["-" * w for w in widths])] +
                   [line([_fmt(r.get(c)) for c in columns]) for r in rows])


def _fmt(v) -> str:
  if isinstance(v, float):
    return f"{v:,.2f}" if abs(v) < 1e5 else f"{v:,.0f}"
  return str(v)
