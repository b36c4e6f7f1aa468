"""How many node rollouts of the verdict's group a question yields with budget.node_group="target", and the
questions a design then needs (issue 48).

The design (`opd_jax/cost/design.py`) counts budget.node_rollouts_per_question node rollouts in the group per
question; a question with fewer rollouts in the group yields fewer. With the pilot's per-question success rates s_q
(validation v2's study_questions_<b>.csv), the number in the incorrect group of `rollouts` is Binomial(rollouts,
1 - s_q), conditioned on an informative question (0 < it < rollouts, the study's selection), and a question yields
min(node_rollouts, it). The mean over the pilot's questions replaces node_rollouts_per_question in the variance of
every pair of the config's pilot split: this prints the worst ratio to the floored target (design.floored) at the
config's design and the questions needed at its nodes per rollout and r.

  python benchmarks/group_shortfall.py --config=configs/teacher_sweep.py:paper \\
      --questions='docs/data/validation_v2/study_questions_*.csv' --out=docs/data/variance_split/paper_shortfall.json
"""
import argparse
import glob
import json
import os
import sys

import numpy as np
import pandas as pd
from scipy import stats

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ml_collections.config_flags import config_flags  # pylint: disable=g-import-not-at-top,wrong-import-position

from opd_jax.cost import design  # pylint: disable=g-import-not-at-top,wrong-import-position


def expected_in_group(success_rates, rollouts: int, node_rollouts: int, target: str = "incorrect") -> float:
  """Mean over questions of E[min(node_rollouts, X) | 0 < X < rollouts], X ~ Binomial(rollouts, 1 - s_q) for the
  incorrect group (s_q for the correct one): node rollouts of the group per informative question."""
  x = np.arange(rollouts + 1)
  out = []
  for s in success_rates:
    pr = stats.binom.pmf(x, rollouts, 1 - s if target == "incorrect" else s) * ((x > 0) & (x < rollouts))
    out.append(float((np.minimum(node_rollouts, x) * pr).sum() / pr.sum()))
  return float(np.mean(out))


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--config", default="configs/teacher_sweep.py:paper")
  ap.add_argument("--questions", required=True, help="glob of CSVs with a success_rate column per question")
  ap.add_argument("--out", required=True)
  a = ap.parse_args(argv)
  config = config_flags.ConfigFileFlagParser(name="config").parse(a.config)
  b = config.budget
  files = sorted(glob.glob(a.questions))
  rates = pd.concat([pd.read_csv(f) for f in files]).success_rate.to_numpy()
  meta, split = design.read_split(b.pilot, "config.budget.pilot")
  target = meta.get("target", "incorrect")
  g = expected_in_group(rates, b.rollouts_per_question, b.node_rollouts_per_question, target)
  floor_var = (design.FLOOR_FRACTION * float(config.report.min_effect) * meta["scale"]) ** 2
  lifted = design.lifted(design.fixed_targets(config, split, target), floor_var)
  at = lambda gr: max(s.variance(b.questions, b.nodes_per_rollout * gr, b.continuations_per_candidate) / lifted[k]
                      for k, s in split.items())
  need = lambda gr: max(design.questions_needed(s, lifted[k], b.nodes_per_rollout * gr, b.continuations_per_candidate)
                        for k, s in split.items())
  out = {"config": a.config, "questions_files": files, "pilot_questions": int(len(rates)),
         "rollouts_per_question": b.rollouts_per_question, "node_rollouts_per_question": b.node_rollouts_per_question,
         "expected_in_group": g, "questions": b.questions, "nodes_per_rollout": b.nodes_per_rollout,
         "r": b.continuations_per_candidate, "worst_at_full_group": at(b.node_rollouts_per_question),
         "worst_at_expected": at(g), "questions_needed_at_full_group": need(b.node_rollouts_per_question),
         "questions_needed_at_expected": need(g)}
  with open(a.out, "w") as f:
    json.dump(out, f, indent=1)
  print(json.dumps(out, indent=1))


if __name__ == "__main__":
  main()
