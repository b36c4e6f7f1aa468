"""benchmarks/validate_v2.py on tiny random models (issue 47): a training piece writes its row with the v2 columns
(stage, stratum, the self-teacher's weights), the held-out rewards per question and the last step's rollouts, and
a finished piece is not rerun."""
import json
import pathlib
import subprocess
import sys

import pandas as pd

from benchmarks import validate_v2

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
