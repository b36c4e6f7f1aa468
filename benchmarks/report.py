"""Report build time on synthetic records of ~10k node rows (issue 14 target: <= 60 s on the 2-core CPU).

  PYTHONPATH=$PWD python benchmarks/report.py [--questions=250] [--configs=5] [--nodes=8]

Writes a synthetic study (nodes with p, counts, predictors; rollouts with lengths) to a temporary workdir and
times opd_jax.report.write_summary with its defaults (n_boot=2000, report.html included).
"""
import argparse
import json
import pathlib
import tempfile
import time

import numpy as np
import pandas as pd

from opd_jax import records
from opd_jax import report


def synthetic_study(workdir: pathlib.Path, *, questions: int, configs: int, nodes: int, k: int = 7, r: int = 8,
                    seed: int = 0) -> int:
  rng = np.random.default_rng(seed)
  rows, rollouts = [], []
  for qi in range(questions):
    q_effect = rng.normal(0, 0.2)
    for rollout_id, correct in ((0, True), (1, False)):
      rollouts.append(dict(question_id=f"q{qi:05d}", rollout_id=rollout_id, reward=float(correct), length=64))
      for pos in sorted(rng.choice(64, nodes // 2, replace=False)):
        p = rng.dirichlet(np.ones(k))
        succ = rng.binomial(r, rng.uniform(size=k))
        preds = {name: float(rng.exponential()) for name in records.PREDICTORS}
        for c in range(configs):
          a = float(np.tanh(q_effect + 0.05 * c + rng.normal(0, 0.8)))
          rows.append(dict(config_id=f"c{c}", question_id=f"q{qi:05d}", rollout_id=rollout_id, position=int(pos),
                           teacher="t", context=f"ctx{c}", divergence="reverse_kl", beta=np.nan, clip=np.nan,
                           correct=correct, sampled_token=int(rng.integers(0, 100)), p=list(p),
                           successes=list(succ), n=[r] * k, alignment=a, alignment_nan_reason="",
                           degenerate=False, teacher_advantage=float(rng.normal(0, 0.1)),
                           noise_ceiling=float(rng.uniform()), **preds))
  frame = pd.DataFrame(rows)
  (workdir / "records" / "nodes").mkdir(parents=True)
  (workdir / "records" / "rollouts").mkdir(parents=True)
  frame.to_parquet(workdir / "records" / "nodes" / "part-all.parquet")
  pd.DataFrame(rollouts).to_parquet(workdir / "records" / "rollouts" / "part-all.parquet")
  (workdir / "config.json").write_text(json.dumps({"name": "bench", "budget": {"student_top_k": 2}}))
  return len(frame)


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--questions", type=int, default=250)
  parser.add_argument("--configs", type=int, default=5)
  parser.add_argument("--nodes", type=int, default=8)
  args = parser.parse_args()
  with tempfile.TemporaryDirectory() as tmp:
    n = synthetic_study(pathlib.Path(tmp), questions=args.questions, configs=args.configs, nodes=args.nodes)
    start = time.perf_counter()
    report.write_summary(tmp, decode=lambda t: str(t % 10) if t < 50 else " word")
    print(json.dumps({"node_rows": n, "questions": args.questions, "configs": args.configs,
                      "write_summary_s": round(time.perf_counter() - start, 2)}))


if __name__ == "__main__":
  main()
