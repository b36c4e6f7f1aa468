"""What `budget.stop_at_answer` saves and changes: a study run whose every batch of continuations is run twice.

  python benchmarks/stop_at_answer.py --config=configs/teacher_sweep.py --workdir=/tmp/stop_after \\
      --config.budget.stop_at_answer=True

Runs `opd_jax.main` with its flags; each `targeted._continue` call runs the policy as configured (the records are
those of the study with the stop), then, when the policy stops at the answer, the same branches again without
the stop (same row ids, so the same draws: the full responses). At exit it prints one line `STOPSTATS {json}`:
continuations compared, generated tokens with and without the stop (forced tokens excluded, as
`Outcomes.tokens`), and continuations whose reward differs. The study's wall time includes the second run.
With STOPSTATS_FILE set, the running totals are also written there after every batch (a long run stopped early
keeps what it compared).
"""
import atexit
import dataclasses
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position

from opd_jax import main  # pylint: disable=g-import-not-at-top,wrong-import-position
from opd_jax.study import targeted  # pylint: disable=g-import-not-at-top,wrong-import-position

_ORIGINAL = targeted._continue  # pylint: disable=protected-access
STATS = {"continuations": 0, "tokens_cut": 0, "tokens_full": 0, "reward_diffs": 0, "calls": 0}


def _continue_twice(policy, verify, prompt, rollouts, todo, outs, generated, **kw):
  gen = [np.zeros_like(g) for g in generated]
  _ORIGINAL(policy, verify, prompt, rollouts, todo, outs, gen, **kw)
  for g, d in zip(generated, gen):
    g += d
  if getattr(policy, "answer_span", None) is None or not todo:
    return
  full_outs, full_gen = [o.copy() for o in outs], [np.zeros_like(g) for g in generated]
  _ORIGINAL(dataclasses.replace(policy, answer_span=None), verify, prompt, rollouts, todo, full_outs, full_gen, **kw)
  STATS["calls"] += 1
  STATS["continuations"] += len(todo)
  STATS["tokens_cut"] += int(sum(g.sum() for g in gen))
  STATS["tokens_full"] += int(sum(g.sum() for g in full_gen))
  STATS["reward_diffs"] += sum(int(outs[i][m, k, r] != full_outs[i][m, k, r]) for i, m, k, r in todo)
  if os.environ.get("STOPSTATS_FILE"):          # the running totals, kept where a long run may be stopped
    with open(os.environ["STOPSTATS_FILE"], "w", encoding="utf-8") as f:
      f.write(json.dumps(STATS) + "\n")


@atexit.register
def _report():
  print("STOPSTATS", json.dumps(STATS), flush=True)


if __name__ == "__main__":
  targeted._continue = _continue_twice  # pylint: disable=protected-access
  main.run()
