"""The cost model's CPU estimate against a finished study's measured stage times.

  JAX_COMPILATION_CACHE_DIR=/tmp/jcc python -m opd_jax.main --config=configs/teacher_sweep.py --workdir=/tmp/a
  JAX_COMPILATION_CACHE_DIR=/tmp/jcc python -m opd_jax.main --config=configs/teacher_sweep.py --workdir=/tmp/b
  python benchmarks/cost_check.py /tmp/b

The second run reads its compiled XLA programs from JAX's persistent cache, so less of its stage times
(`manifest.json`, `timings_s`) is compile time (tracing and lowering remain): the cost model excludes compiles.
Any finished workdir can be checked; the stage times of a first run include its compiles. Per stage this prints the estimate
of the dry run (`estimate.planned_work`: lengths measured on the task, counts at the plan's upper bounds), the
estimate with every length and count that the run realized (`realized_work`, from its records), the measured
time and their ratios. The CPU rates are `estimate.CPU_MATMUL_GFLOPS` and `estimate.CPU_BW`, measured beforehand by
`estimate.measure_cpu()`, not fitted to any study. Ends with one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def realized_work(workdir: pathlib.Path, config):
  """`estimate.Work` of what a finished run did: the student prompts of its rollouts, the teacher contexts of its
  selected questions (rendered again with the student's tokenizer), its incorrect rollouts' lengths for
  contrastive, the questions it sampled, the continuations it ran (sum of `n` over distinct nodes) and their
  mean length, taken as the node rollout's own remaining tokens (length - position - 1; a forced candidate's
  continuation may differ)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import pandas as pd  # pylint: disable=g-import-not-at-top
  from opd_jax.cost import estimate  # pylint: disable=g-import-not-at-top
  from opd_jax.study import question_pool
  from opd_jax.study import model_specs

  rollouts = pd.read_parquet(workdir / "records" / "rollouts")
  nodes = pd.read_parquet(workdir / "records" / "nodes").drop_duplicates(["question_id", "rollout_id", "position"])
  manifest = json.loads((workdir / "manifest.json").read_text())
  task = question_pool.load_task(config)
  chosen = set(rollouts.question_id)
  problems = [p for p in task.problems if p.id in chosen]
  _, extra = estimate.context_lengths(config, task, problems, model_specs.header(config.student.name, config)[1],
                                   estimate.context_names(config))
  n = nodes.n.map(sum)
  rest = nodes.merge(rollouts[["question_id", "rollout_id", "length"]], on=["question_id", "rollout_id"])
  remaining = (rest.length - rest.position - 1).clip(lower=0)
  return estimate.Work(
      prompt_tokens=float(rollouts.prompt_ids.map(len).mean()), context_tokens=extra,
      incorrect_tokens=float(rollouts.length[rollouts.reward == 0].mean()),
      sampled_questions=int(manifest["questions_processed"]), continuations=float(n.sum()),
      continuation_tokens=float(np.average(remaining, weights=rest.n.map(sum))),
      source=f"realized by {workdir}")


def main():
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("workdir", type=pathlib.Path)
  args = ap.parse_args()

  import ml_collections  # pylint: disable=g-import-not-at-top
  from opd_jax.cost import estimate  # pylint: disable=g-import-not-at-top

  config = ml_collections.ConfigDict(json.loads((args.workdir / "config.json").read_text()))
  measured = json.loads((args.workdir / "manifest.json").read_text())["timings_s"]
  planned, realized = estimate.planned_work(config), realized_work(args.workdir, config)
  est = {}
  for name, work in (("planned", planned), ("realized", realized)):
    cs = estimate.calls(config, work=work)
    est[name] = {s: estimate.cost([c for c in cs if c.stage == s], None).cpu_s for s in estimate.STAGES}
  print(f"{'stage':14s} {'dry run':>9s} {'realized':>9s} {'measured':>9s}  dry/measured  realized/measured")
  out = {}
  for s in estimate.STAGES:
    m = measured[f"{s}_s"]
    p, r = est["planned"][s], est["realized"][s]
    print(f"{s:14s} {p:8.1f}s {r:8.1f}s {m:8.1f}s  {p / m:12.2f}  {r / m:17.2f}")
    out[s] = {"dry_run_s": round(p, 1), "realized_s": round(r, 1), "measured_s": m}
  print(f"realized: {realized}")
  print(json.dumps(out))


if __name__ == "__main__":
  main()
