"""Replays the sequential verdict (issue 33) on a finished study's node rows: at which look would it have stopped?

  python benchmarks/sequential_replay.py                       # the validation study's 40 questions (committed)
  python benchmarks/sequential_replay.py --looks=10,20,30,40 --margin=0.05 --targets=correct \
      --subsets='all;external,misleading;external,solution'

The study's questions in a fixed order (study blocks in order, then each block's questions as its records list
them), the verdict of `opd_jax.report.looks.verdict` at each look (`report.decision.decide` with the design's repeated
confidence intervals, Lan-DeMets O'Brien-Fleming-type spending, equivalence within the margin), on each subset of
configurations. A replay, not a run: the looks see the same questions a fixed study saw, in the order it ran
them, so "decided at look k" means the sequential study would have stopped after k of the looks' questions. Writes
sequential_replay.csv beside the node rows (--data_dir, default docs/data/validation).
"""
from __future__ import annotations

import argparse
import os
import pathlib
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pandas as pd  # pylint: disable=g-import-not-at-top,wrong-import-position

from benchmarks import validate_training as vt  # pylint: disable=g-import-not-at-top,wrong-import-position
from opd_jax.report import common  # pylint: disable=g-import-not-at-top,wrong-import-position
from opd_jax.report import decision  # pylint: disable=g-import-not-at-top,wrong-import-position
from opd_jax.report import sequential  # pylint: disable=g-import-not-at-top,wrong-import-position


def replay(nodes: pd.DataFrame, design: sequential.Design, *, target: str, configs=None) -> list[dict]:
  """[{look, questions, decided, decision, line}] of the verdict at each look of `design` on `nodes` (the
  configurations `configs`, None: all), questions taken in their order of first appearance in `nodes`; stops
  after the first decided look, as the study would."""
  if configs is not None:
    nodes = nodes[nodes.config_id.isin(configs)]
  order = list(dict.fromkeys(nodes.question_id))
  out = []
  for look, n in enumerate(design.looks, 1):
    if n > len(order):
      break
    sub = nodes[nodes.question_id.isin(set(order[:n]))].reset_index(drop=True)
    v = decision.decide(sub, target=target, level=1.0 - design.alpha, min_effect=design.margin, design=design,
                        look=look, final=look == len(design.looks), n_boot=200)
    out.append({"look": look, "questions": n, "decided": bool(v["decided"]), "decision": v["decision"],
                "line": v["line"]})
    if v["decided"]:
      break
  return out


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--data_dir", default=str(vt.DATA_DIR))
  ap.add_argument("--looks", default="10,20,30,40")
  ap.add_argument("--margin", type=float, default=0.05, help="equivalence margin (report.min_effect)")
  ap.add_argument("--targets", default="incorrect,correct")
  ap.add_argument("--subsets", default="all;external,misleading;external,solution;external,external_fkl,external_jsd",
                  help="';'-separated configuration lists ('all': every configuration)")
  args = ap.parse_args(argv)
  bad = sorted(set(args.targets.split(",")) - set(common.GROUPS))
  if bad:
    print(f"error: --targets={args.targets}: {bad} not replayed; use incorrect, correct or all (the 'trained' group "
          "needs each question's base success rate, which the validation's study CSVs do not hold)", file=sys.stderr)
    return 2
  data = pathlib.Path(args.data_dir)
  nodes, _, found = vt.read_study(data)
  design = sequential.Design(looks=tuple(int(x) for x in args.looks.split(",")), margin=args.margin)
  rows = []
  for target in args.targets.split(","):
    for subset in args.subsets.split(";"):
      configs = None if subset == "all" else subset.split(",")
      for r in replay(nodes, design, target=target, configs=configs):
        rows.append({"target": target, "configurations": subset, **r})
        print(f"{target:9s} {subset:40s} look {r['look']} ({r['questions']} q): {r['decision']}", flush=True)
  pd.DataFrame(rows).to_csv(data / "sequential_replay.csv", index=False)
  print(f"blocks {found}; wrote {data / 'sequential_replay.csv'}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
