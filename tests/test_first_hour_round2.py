"""A newcomer's first hour, round 2 (issue 35, items 4-6) beyond the bad-input table of test_first_hour.py: a full
disk names the file and stage and leaves the previous report whole, a --configuration that replaces one of the
config file's says so, and the verdict says what would decide it instead of printing [-2.0000, +2.0000]."""
import errno
import json
import math
import os

import numpy as np
import pandas as pd
import pytest

from configs import smoke
from opd_jax import atomic
from opd_jax import overrides
from opd_jax import records
from opd_jax import report
from opd_jax.estimators import sample_size
from opd_jax.report import console
from opd_jax.report import decision
from opd_jax.report import verdict_text
from opd_jax.study import planning
from tests.report.test_report_decision import planted      # pylint: disable=g-bad-import-order
from tests.report.test_report_decision import three_configs   # pylint: disable=g-bad-import-order


def _study(workdir, nodes, name="teacher_sweep"):
  directory = workdir / "records" / "nodes"
  directory.mkdir(parents=True)
  for q, part in nodes.groupby("question_id"):
    part.to_parquet(directory / f"part-{q}.parquet")
  (workdir / "config.json").write_text(json.dumps({"name": name}))
  return workdir


def _files(workdir):
  return {str(p.relative_to(workdir)): p.read_bytes() for p in sorted(workdir.rglob("*")) if p.is_file()}


def test_a_full_disk_names_the_file_and_stage_and_leaves_the_report_whole(tmp_path, monkeypatch):
  workdir = _study(tmp_path / "run", three_configs())
  options = dict(n_boot=50, n_boot_predictors=20, html=False, plot=False)
  report.write_summary(str(workdir), **options)
  before = _files(workdir)
  assert {"summary.md", "summary.csv", "where.csv", "predictors.csv", "verdict.json"} <= set(before)
  fsync, calls = os.fsync, []

  def full(fd):                    # the disk fills up while the third file of the set is written
    calls.append(fd)
    if len(calls) == 3:
      raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return fsync(fd)
  monkeypatch.setattr(atomic.os, "fsync", full)
  with pytest.raises(atomic.WriteError) as e:
    report.write_summary(str(workdir), **{**options, "seed": 1})     # another seed: every file would change
  line = str(e.value)
  assert line.startswith(f"report: cannot write {workdir}/") and "No space left on device (ENOSPC)" in line, line
  assert "free space on that disk and rerun the same command" in line and "\n" not in line
  assert e.value.errno == errno.ENOSPC and isinstance(e.value, OSError)     # main's USER_ERRORS: one line, exit 2
  assert _files(workdir) == before                  # nothing replaced, no temporary file left behind
  # A records part names its stage too (study.run_questions).
  calls.clear()
  calls += [0, 0]
  with pytest.raises(atomic.WriteError, match=r"^records of question q9: cannot write .*part-q9\.parquet: No "):
    with atomic.writing("records of question q9"):
      records.write_part(workdir, "nodes", "q9", pd.DataFrame())
  monkeypatch.setattr(atomic.os, "fsync", fsync)
  report.write_summary(str(workdir), **{**options, "seed": 1})
  assert _files(workdir) != before and not list(workdir.rglob("*.tmp"))


def test_a_configuration_flag_that_replaces_one_of_the_file_says_so():
  config = smoke.get_config()
  old = config.configurations["external"]
  notes = overrides.with_configurations(config, ["external=self:plain:reverse_kl", "mine=self:answer:reverse_kl",
                                            "self_plain=self:plain:reverse_kl"])      # the same spec: no note
  assert notes == [f"note: --configuration=external=... replaced the config's configuration 'external': {old!r} -> "
                   "'self:plain:reverse_kl' (pick another name to add one beside it)"]
  assert config.configurations["external"] == "self:plain:reverse_kl"
  assert config.configurations["mine"] == "self:answer:reverse_kl"


def _six(n_questions, seed=0):
  """Six configurations on the same nodes of n_questions questions, alignments pure noise: with 15 pairs and few
  questions the simultaneous interval of the best against the runner-up is cut to [-2, 2] at both ends."""
  rng = np.random.default_rng(seed)
  base = planted(seed, 0.0, n_questions=n_questions, n_nodes=1).query("config_id == 'A'")
  frames = [base.assign(config_id=c, alignment=np.clip(rng.normal(0, 0.7, len(base)), -1, 1)) for c in "ABCDEF"]
  return pd.concat(frames, ignore_index=True)


def test_the_verdict_says_not_estimable_and_what_would_decide(tmp_path):
  v = decision.decide(_six(5), n_boot=50)
  top = v["comparisons"][0]
  assert top["ci_lo"] == -2.0 and top["ci_hi"] == 2.0          # the interval that printed as [-2.0000, +2.0000]
  text = "\n".join(verdict_text.lines(v))
  assert "2.0000" not in text and "not estimable (5 shared questions < 10: the interval spans" in text
  assert all("2.0000, 2.0000" not in cell for row in verdict_text.table_rows(v) for cell in row)
  assert verdict_text.next_step(v).startswith(
      "to decide: at least 10 questions with a defined alignment (this study: 5")
  # With min_effect: the questions needed, on the console too (they were in summary.md and report.html only),
  # and the larger variant of the default sweep with the dry run's estimate (what opd_jax.main passes; issue 50).
  workdir = _study(tmp_path / "run", _six(12))
  report.write_summary(str(workdir), n_boot=50, n_boot_predictors=20, html=False, plot=False, min_effect=0.1)
  verdict = json.loads((workdir / "verdict.json").read_text())
  p = verdict["power"]
  need = sample_size.questions_needed(0.1, p["se"], p["df"], p["questions"], alpha=p["alpha"], power=0.8, se_df=p["df"])
  assert verdict["verdict"] != "use" and p["questions_needed"] == math.ceil(need)
  advice = planning.larger_advice("teacher_sweep")        # what opd_jax.main passes after the default study
  plain = console.results_text(workdir).splitlines()
  step_at = 1 + len(verdict["details"]) + len(verdict["validation"])
  assert plain[step_at] == verdict_text.next_step(verdict)
  lines = console.results_text(workdir, larger=advice).splitlines()
  assert lines[0] == verdict["line"] and lines[1:1 + len(verdict["details"])] == [f"  {d}" for d in verdict["details"]]
  step = lines[step_at]
  assert step.startswith(f"to decide: a study of ~{math.ceil(need)} questions would detect a difference of 0.1 with "
                         "80% power")
  assert step.endswith(f"; {advice}") and advice.startswith(
      "or configs/teacher_sweep.py:hour with the same --config.task.exclude (a new study, its looks planned before it "
      "starts; up to 80 ")
  assert f"to detect 0.1: {math.ceil(need)} questions" in (workdir / "summary.md").read_text()
  assert verdict_text.next_step(verdict) in (workdir / "summary.md").read_text()     # what would decide, there too
