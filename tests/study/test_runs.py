"""The process split, per-process progress files and waiting for every process (runs.py); the workdir lock:
tests/test_claim.py.

Two real jax.distributed processes running them: tests/models/test_sharding.py.
"""
import json
import os
import re
import socket

import pytest

from opd_jax import claim
from opd_jax import records
from opd_jax.study import runs


def test_split_questions_round_robin_and_quotas():
  ids = [f"q{i}" for i in range(11)]
  shares = [runs.split_questions(ids, i, 3) for i in range(3)]
  assert shares[1] == ["q1", "q4", "q7", "q10"]
  assert sorted(sum(shares, []), key=lambda s: int(s[1:])) == ids
  assert runs.split_questions(ids, 0, 1) == ids
  assert [runs.question_quota(7, i, 3) for i in range(3)] == [3, 2, 2]
  assert [runs.question_quota(2, i, 4) for i in range(4)] == [1, 1, 0, 0]
  with pytest.raises(ValueError, match="process_index must be an int in \\[0, 3\\), got 3"):
    runs.split_questions(ids, 3, 3)


class _Clock:
  """A fake `time` for runs.wait_for_processes: monotonic() reads it, sleep(s) advances it and calls on_sleep."""

  def __init__(self):
    self.now, self.sleeps, self.on_sleep = 0.0, [], None

  def monotonic(self):
    return self.now

  def sleep(self, s):
    self.sleeps.append(s)
    self.now += s
    if self.on_sleep:
      self.on_sleep()


def test_progress_files_and_waiting_for_all_processes(tmp_path, monkeypatch):
  assert runs.progress_path(tmp_path, 0, 1).name == "progress.json"
  assert runs.wait_for_processes(tmp_path / "single", 1) == [{}]       # one process waits for nobody
  assert runs.read_progress(tmp_path, 1, 3) == {"processed": [], "selected": [], "done": False}
  runs.write_progress(tmp_path, {"processed": ["q0"], "selected": ["q0"]}, 0, 3, done=True)
  runs.write_progress(tmp_path, {"processed": ["q1"], "selected": []}, 1, 3)
  assert runs.read_progress(tmp_path, 1, 3)["processed"] == ["q1"]
  clock = _Clock()                                   # the waiting runs on a fake clock: no wall time, no race
  monkeypatch.setattr(runs, "time", clock)
  with pytest.raises(TimeoutError, match=r"processes \[1, 2\] of 3"):
    runs.wait_for_processes(tmp_path, 3, timeout_s=0.2, poll_s=0.05)
  assert 0.2 < clock.now <= 0.3 and set(clock.sleeps) == {0.05}     # polled until the timeout, then gave up

  def finish():                                      # the other processes finish during the third poll's sleep
    if len(clock.sleeps) == 3:
      runs.write_progress(tmp_path, {"processed": ["q1"], "selected": []}, 1, 3, done=True)
      runs.write_progress(tmp_path, {"processed": ["q2"], "selected": ["q2"]}, 2, 3, done=True)

  clock.sleeps, clock.on_sleep = [], finish
  states = runs.wait_for_processes(tmp_path, 3, timeout_s=20, poll_s=0.05)
  assert clock.sleeps == [0.05] * 3                  # it waited for them, and returned at the first poll after
  assert [s["processed"] for s in states] == [["q0"], ["q1"], ["q2"]] and all(s["done"] for s in states)
  runs.write_progress(tmp_path, {"processed": [], "selected": []}, 2, 3, error="OOM on question q5")
  with pytest.raises(RuntimeError, match="process 2 of 3 failed: OOM on question q5"):
    runs.wait_for_processes(tmp_path, 3, timeout_s=5, poll_s=0.05)
  with pytest.raises(ValueError, match="started with 3 process"):
    runs.read_progress(tmp_path, 0, 2)
  with pytest.raises(ValueError, match="started with 3 process"):
    runs.read_progress(tmp_path, 0, 1)


def test_forget_damaged_drops_the_question_and_keeps_the_rest(tmp_path):
  """--repair (issue 35, item 3): a part that does not read takes its question's other parts with it, and the
  question is no longer processed (still selected: the run computes it again) nor done; the manifest goes."""
  frame = lambda table: records.SCHEMAS[table].empty_table().to_pandas()
  for q in ("q1", "q2"):
    for table in records.TABLES:
      records.write_part(tmp_path, table, q, frame(table))
  bad = records.part_files(tmp_path, "tokens")[1]
  bad.write_bytes(bad.read_bytes()[:-20])
  runs.write_progress(tmp_path, {"processed": ["q0", "q1", "q2"], "selected": ["q1", "q2"]}, 0, 1, done=True)
  (tmp_path / "manifest.json").write_text("{}")
  assert records.damaged_parts(tmp_path) == [bad] and runs.forget_damaged(tmp_path, 0, 1) == ["q2"]
  assert [records.question_of(p) for t in records.TABLES for p in records.part_files(tmp_path, t)] == ["q1"] * 3
  progress = runs.read_progress(tmp_path, 0, 1)
  assert progress["processed"] == ["q0", "q1"] and progress["selected"] == ["q1", "q2"] and not progress["done"]
  assert not (tmp_path / "manifest.json").exists() and records.check_parts(tmp_path) == 3
  assert runs.forget_damaged(tmp_path, 0, 1) == []           # nothing damaged: nothing changes


def test_a_workdir_of_another_config_names_both_configs_then_the_fields(tmp_path):
  (tmp_path / "config.json").write_text(json.dumps({"name": "smoke", "job": "train", "seed": 0,
                                                    "budget": {"questions": 3}}))
  with pytest.raises(ValueError, match=re.escape(
      "holds a run of a different config ('smoke'; this one is 'sweep') (fields differ: config.budget.questions: 3 -> "
      "10; config.name: 'smoke' -> 'sweep')")):
    runs.check_workdir_for(tmp_path, {"name": "sweep", "job": "train", "seed": 0, "budget": {"questions": 10}}, "train")
  with pytest.raises(ValueError, match=re.escape("holds a run of a different config (fields differ: config.seed")):
    runs.check_workdir_for(tmp_path, {"name": "smoke", "job": "train", "seed": 3, "budget": {"questions": 3}}, "train")
  with pytest.raises(ValueError, match=re.escape(                   # the workdir's claim itself (records.py) too
      "holds a run of a different config ('smoke'; this one is 'sweep') (fields differ: budget.questions, name)")):
    records.check_workdir(tmp_path, {"name": "sweep", "job": "train", "seed": 0, "budget": {"questions": 10}})


def test_a_run_refused_by_the_lock_leaves_the_live_runs_files(tmp_path):
  """A start that fails is undone (its log lines cut, its files and folders removed); one refused because another
  live run holds the workdir removes only its own new files: the log's lines and the folders since are that run's."""
  from opd_jax import main, terminal  # pylint: disable=g-import-not-at-top,multiple-imports
  log = tmp_path / terminal.LOG_NAME
  log.write_text("live 1\n")
  with pytest.raises(claim.WorkdirInUse):
    with main.failed_start_undone(tmp_path):
      with open(log, "a") as f:
        f.write("live 2\n")                                   # the live run writes meanwhile
      (tmp_path / "train").mkdir()
      (tmp_path / "config.json").write_text("{}")             # what the refused run wrote itself: removed
      raise claim.WorkdirInUse("in use")
  assert log.read_text() == "live 1\nlive 2\n" and (tmp_path / "train").is_dir()
  assert not (tmp_path / "config.json").exists()
  with pytest.raises(ValueError):                             # any other failed start: undone
    with main.failed_start_undone(tmp_path):
      with open(log, "a") as f:
        f.write("mine\n")
      raise ValueError("a failed start")
  assert log.read_text() == "live 1\nlive 2\n"
  lock = claim.lock_path(tmp_path, 0)
  lock.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
  with pytest.raises(claim.WorkdirInUse):                      # what workdir_lock raises for a live holder
    with claim.workdir_lock(tmp_path, 0):
      pass
