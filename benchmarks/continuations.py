"""The study's continuation stage at several decode segments (how often finished rows leave the batch).

  python benchmarks/continuations.py                              # teacher_sweep's default, segments 64,8,4
  python benchmarks/continuations.py --segments=64,4 --reps=3 --questions=8

One process, the real default models (warm cache): the first block of teacher_sweep's questions is sampled,
verified, scored and given its nodes once (`study`'s own functions); then `questions.continuations` of every
informative question runs for each --segments value in turn (`branching.branch`'s `segment`), --reps times
interleaved. The first repetition includes compiles; the last is the one to read. Prints seconds per segment,
the decode row-steps (rows x steps of every decode call) against the tokens generated, and checks that every
segment gives the same outcomes (a row's tokens depend on its key alone). Ends with one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
  from opd_jax.study import questions  # pylint: disable=g-import-not-at-top
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--segments", default="64,8,4")
  ap.add_argument("--reps", type=int, default=2)
  ap.add_argument("--questions", type=int, default=8, help="pool indices 0.. sampled as one block")
  args = ap.parse_args()

  import numpy as np  # pylint: disable=g-import-not-at-top
  from configs import teacher_sweep  # pylint: disable=g-import-not-at-top
  from opd_jax.decode import branching  # pylint: disable=g-import-not-at-top
  from opd_jax.decode import sampling  # pylint: disable=g-import-not-at-top
  from opd_jax.study import environment

  config = teacher_sweep.get_config(None)
  config.logging.progress = False
  env = environment.setup(config)
  block = list(range(args.questions))
  views = sorted({conf.scoring_key for conf in env.confs})
  ready = []
  for i, out in zip(block, questions.base_rollouts(env, block)):
    problem = env.task.problems[i]
    prompt = env.chat(env.task.prompt(problem))
    v = questions.verify(env, i, problem, prompt, out)
    if all(v.correct) or not any(v.correct):
      continue
    rollouts = questions.choose_node_rollouts(env, v)
    dense, h_p = questions.score_views(env, problem, prompt, views, v, rollouts)
    ready.append((i, problem, prompt, v.responses, questions.nodes_of(env, views, rollouts, v.responses, dense, h_p)))

  branch, decode, segment, steps = branching.branch, sampling.decode, [64], {"row_steps": 0, "tokens": 0}
  branching.branch = lambda *a, **k: branch(*a, **{**k, "segment": segment[0]})

  def counted(*a, **k):
    out = decode(*a, **k)
    n = np.asarray(out[2])
    steps["row_steps"] += n.shape[0] * int(n.max())
    steps["tokens"] += int(n.sum())
    return out

  sampling.decode = counted
  segments = [int(s) for s in args.segments.split(",")]
  seconds, outcomes, counts = {}, {}, {}
  for rep in range(args.reps):
    for s in segments:
      segment[0] = s
      steps.update(row_steps=0, tokens=0)
      t = time.time()
      got = [questions.continuations(env, i, p, prompt, resp, at) for i, p, prompt, resp, at in ready]
      seconds.setdefault(s, []).append(time.time() - t)
      flat = np.concatenate([o.rewards.ravel() for q in got for o in q])
      assert s not in outcomes or np.array_equal(outcomes[s], flat)
      outcomes[s], counts[s] = flat, dict(steps)
      print(f"rep {rep} segment {s:3d}: {seconds[s][-1]:6.1f} s, {steps['row_steps']} row-steps, "
            f"{steps['tokens']} tokens", flush=True)
  same = all(np.array_equal(outcomes[segments[0]], outcomes[s]) for s in segments)
  print(f"{len(ready)} questions; outcomes equal across segments: {same}")
  print(json.dumps({"questions": len(ready), "seconds_last_rep": {s: round(seconds[s][-1], 2) for s in segments},
                    "row_steps": {s: counts[s]["row_steps"] for s in segments},
                    "tokens": counts[segments[0]]["tokens"], "outcomes_equal": same}))


if __name__ == "__main__":
  main()
