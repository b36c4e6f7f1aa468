"""benchmarks/validate_v2.py on tiny random models (issue 47): a training piece writes its row with the v2 columns
(stage, stratum, the self-teacher's weights), the held-out rewards per question and the last step's rollouts, and
a finished piece is not rerun."""
import json
import pathlib
import subprocess
import sys

import pandas as pd

from benchmarks import validate_v2
from configs import validation

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_a_tiny_piece_writes_its_v2_row_and_is_not_rerun(tmp_path):
  work, data = tmp_path / "w", tmp_path / "d"
  cmd = [sys.executable, str(REPO / "benchmarks/validate_v2.py"), f"--workdir={work}", f"--data_dir={data}", "--tiny",
         "--piece=train:tiny_frozen"]
  env = {"PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"}
  first = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO, env=env)
  assert first.returncode == 0, first.stderr[-2000:]
  runs = pd.read_csv(data / "runs.csv")
  assert list(runs.columns) == list(validate_v2.RUN_COLUMNS) and runs.configuration.tolist() == ["tiny_frozen"]
  row = runs.iloc[0]
  assert (row.stage, row.stratum, row.teacher_weights) == (1, "self", "initial")
  evals = pd.read_csv(data / "eval_tiny_frozen.csv")
  assert abs(evals.after.mean() - evals.before.mean() - row["diff"]) < 1e-12
  last = [json.loads(l) for l in (data / "samples_tiny_frozen.jsonl").read_text().splitlines()]
  assert last and {l["step"] for l in last} == {int(row.steps)}
  again = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO, env=env)
  assert again.returncode == 0 and "done" in again.stdout and "not rerun" in again.stdout


def test_a_tiny_study_block_and_a_v2_replicate_write_their_tables(tmp_path):
  """Stage 2's piece: the block's node CSV, view sums and node records (every configuration on the same nodes, each
  continuation's reward kept, no question of the trainer's pool); stage 3's protocol: a replicate's row carries its
  training seed, its eval CSV the rewards after each evaluation."""
  work, data = tmp_path / "w", tmp_path / "d"
  cmd = [sys.executable, str(REPO / "benchmarks/validate_v2.py"), f"--workdir={work}", f"--data_dir={data}", "--tiny",
         "--piece=study:1,train:tiny_v2_rep"]
  env = {"PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"}
  got = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=REPO, env=env)
  assert got.returncode == 0, got.stderr[-2000:]
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
  runs = pd.read_csv(data / "runs.csv").set_index("configuration")
  assert runs.loc["tiny_v2_rep", "train_seed"] == 1 and runs.loc["tiny_v2_rep", "stage"] == 3
  evals = pd.read_csv(data / "eval_tiny_v2_rep.csv")
  assert sorted(c for c in evals.columns if c.startswith("after")) == ["after", "after_step1"]
