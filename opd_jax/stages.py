"""Stage-level progress on stderr: a tqdm bar with ETA per stage, and an absl log line of each stage's time.

  with stages.bar("base rollouts", total=rows * max_new_tokens, unit="tok") as b:
    ...; b.update(n)

Stages (study.py, models/checkpoints.py): model assembly and conversion (bytes, tensors), base rollouts (decoded
tokens), scoring (rollouts x views), targeted continuations (decoded tokens), report. Bars are off when
`ENABLED` is False (`config.logging.progress=False`, set by study.run); the log lines are always written.
"""
from __future__ import annotations

import contextlib
import time

from absl import logging
from tqdm import tqdm

ENABLED = True


@contextlib.contextmanager
def bar(stage: str, total: float | None = None, unit: str = "it", unit_scale: bool = False):
  """A tqdm bar for `stage` (closed on exit, even on error), then `INFO <stage>: <seconds> s`.

  Args:
    stage: what runs, e.g. "base rollouts".
    total: the planned amount (an upper bound is fine: the bar is filled on a normal exit); None: no total.
    unit, unit_scale: tqdm's.
  Yields:
    the tqdm bar (call .update(n)); disabled bars accept .update too.
  """
  t0 = time.time()
  b = tqdm(total=total, desc=stage, unit=unit, unit_scale=unit_scale, disable=not ENABLED, leave=False,
           dynamic_ncols=True)
  ok = False
  try:
    yield b
    ok = True
  finally:
    if ok and total is not None and b.n < total:
      b.update(total - b.n)
    b.close()
    logging.info("%s: %.1f s", stage, time.time() - t0)
