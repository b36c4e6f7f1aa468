"""benchmarks/validate_v2.py on tiny random models (issue 47): every kind of piece writes its tables, and a finished
piece is not rerun."""
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pandas as pd

from benchmarks import validate_v2
from configs import validation

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_the_pieces_write_their_tables_and_a_finished_piece_is_not_rerun(tmp_path):
  """One driver run of every kind of piece (each in its child process; one XLA compilation cache for them all):
  - stage 2's study block writes the node CSV, view sums and node records (every configuration on the same nodes,
    each continuation's reward kept, no question of the trainer's pool), and its tables;
  - stage 2's verdict per stratum, named before training;
  - a training piece (stage 3's protocol) writes its row with the v2 columns (stage, stratum, the self-teacher's
    weights, the training seed), the held-out rewards per question after each evaluation and the last step's
    rollouts;
  - stage 3's analysis reads them;
  and a second run reruns none of the study and training pieces."""
  work, data = tmp_path / "w", tmp_path / "d"
  cmd = [sys.executable, str(REPO / "benchmarks/validate_v2.py"), f"--workdir={work}", f"--data_dir={data}", "--tiny",
         "--piece=study:1,stage2,train:tiny_v2_rep,stage3"]
  env = {"PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin",
         "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "jax_cache"), "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
         **{k: v for k, v in os.environ.items() if k.startswith("OPD_JAX_")}}   # the tests' cache, no looks ledger
  data.mkdir()
  (data / "hypothesis.md").write_text("the predictions\n")      # a stage-3 run waits for them (test_v2_stage3.py)
  first = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=REPO, env=env)
  assert first.returncode == 0, first.stderr[-2000:]
  runs = pd.read_csv(data / "runs.csv").set_index("configuration")
  assert list(runs.reset_index().columns) == list(validate_v2.RUN_COLUMNS)
  assert runs.index.tolist() == ["tiny_v2_rep"]
  row = runs.loc["tiny_v2_rep"]
  assert (row.stage, row.stratum, row.teacher_weights, row.train_seed) == (3, "self", "initial", 1)
  evals = pd.read_csv(data / "eval_tiny_v2_rep.csv")
  assert abs(evals.after.mean() - evals.before.mean() - row["diff"]) < 1e-12
  assert sorted(c for c in evals.columns if c.startswith("after")) == ["after", "after_step1"]
  last = [json.loads(l) for l in (data / "samples_tiny_v2_rep.jsonl").read_text().splitlines()]
  assert last and {l["step"] for l in last} == {int(row.steps)}
  nodes = pd.read_csv(data / "study_nodes_1.csv", dtype={"question_id": str})
  records = pd.read_parquet(data / "study_records_1.parquet")
  assert set(nodes.config_id) == set(records.config_id) == set(validation.V2_TINY)
  keys = lambda df, c: set(zip(*(df[df.config_id == c][k] for k in ("question_id", "rollout_id", "position"))))
  assert all(keys(records, c) == keys(records, "self_solution_rkl") for c in validation.V2_TINY)
  assert all(len(r) == len(c) for r, c in zip(records.rewards, records.candidates))
  assert all(sum(len(x) for x in r) == sum(n) for r, n in zip(records.rewards, records.n))
  assert nodes.question_id.str.startswith("1:").all() and records.question_id.str.startswith("1:").all()
  pool = set(json.loads((work / "train_pool_questions.json").read_text()))
  seen = set(json.loads((work / "study1" / "questions_seen.json").read_text()))     # the block's question texts
  assert pool and seen and not pool & seen
  # Stage 2's tables: a predictor's value is the mean over the configuration's nodes (pandas, here), its contrasts
  # the differences of those values; reliabilities are correlations.
  values = pd.read_csv(data / "stage2.csv")
  mean = nodes.groupby("config_id").alignment.mean()             # NaN alignments skipped: the defined nodes
  got = values[values.predictor == "alignment_all"].set_index("configuration").value
  assert np.allclose(got.loc[mean.index], mean, equal_nan=True)
  assert set(values.stratum) == {"external", "self"}
  contrasts = pd.read_csv(data / "stage2_contrasts.csv")
  row = contrasts[(contrasts.predictor == "alignment_all") & (contrasts.a == "self_solution_fkl")
                  & (contrasts.b == "self_solution_jsd")].iloc[0]
  assert np.isclose(row["diff"], mean["self_solution_fkl"] - mean["self_solution_jsd"], equal_nan=True)
  rel = pd.read_csv(data / "stage2_reliability.csv")
  assert set(rel.stratum) == {"external", "self"} and (rel.configurations == 3).all()
  assert rel.split_half_rho.dropna().between(-1, 1).all()
  r = rel.split_half_rho
  assert np.allclose(rel.spearman_brown[r >= 0], 2 * r[r >= 0] / (1 + r[r >= 0]))
  assert rel.spearman_brown[r < 0].isna().all()                  # a negative rho is not stepped up
  assert {"study_verdict_external.csv", "study_verdict_self_line.txt"} <= {p.name for p in data.iterdir()}
  gains = pd.read_csv(data / "stage3_gains.csv")                 # one configuration trained: its gain, no rho
  assert gains.configuration.tolist() == ["self_solution_rkl"]
  assert np.isclose(gains.gain[0], runs.loc["tiny_v2_rep", "diff"])
  assert np.isnan(pd.read_csv(data / "stage3.csv").statistic).all()
  results = (data / "stage3_results.md").read_text()             # its text: no test (no stratum has a rho)
  assert "Decision, by hypothesis.md's rule: no test" in results and "INTERIM" not in results
  again = subprocess.run(cmd[:-1] + ["--piece=study:1,train:tiny_v2_rep"], capture_output=True, text=True, timeout=600,
                         cwd=REPO, env=env)
  assert again.returncode == 0 and again.stdout.count("not rerun") == 2, again.stdout[-2000:]
