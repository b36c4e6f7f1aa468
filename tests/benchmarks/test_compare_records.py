"""benchmarks/compare_records.py on two studies of unlike configurations (issue 49, item 7): the shared
configurations and views are compared, the others are left out and named.

Reference: the workdirs are built here (records/<table>/part-q0.parquet, the records' layout), the second with one
configuration of a view of its own and one more configuration of a shared view; what is left out is the set
difference of the two configuration lists, and a change is planted in one shared float.
"""
import sys
import zlib

import numpy as np
import pandas as pd
import pytest

from benchmarks import compare_records


def _draw(*key):
  """A value fixed by its row's key, so both workdirs hold the same numbers for the rows they share."""
  return np.random.default_rng([zlib.crc32(repr(key).encode())]).random(3)


def _workdir(path, configs, views, *, shift=0.0):
  """A workdir whose records hold one question, two rollouts, two positions per (rollout, view / configuration)."""
  tables = {
      "rollouts": pd.DataFrame({"question_id": "q0", "rollout_id": [0, 1], "reward": [1.0, 0.0]}),
      "tokens": pd.DataFrame([{"question_id": "q0", "rollout_id": r, "teacher": t, "context": c, "position": pos,
                               "kl_pq": _draw(t, c, r, pos)[0]}
                              for t, c in views for r in (0, 1) for pos in (0, 1)]),
      "nodes": pd.DataFrame([{"question_id": "q0", "rollout_id": r, "config_id": name, "position": pos,
                              "alignment": _draw(name, r, pos)[0], "q": list(_draw(name, r, pos))}
                             for name in configs for r in (0, 1) for pos in (0, 1)]),
  }
  tables["nodes"].loc[0, "alignment"] += shift                # first row of the first configuration
  for table, frame in tables.items():
    (path / "records" / table).mkdir(parents=True)
    frame.to_parquet(path / "records" / table / "part-q0.parquet")
  return str(path)


BEFORE = {"configs": ["solution", "solution_fkl"], "views": [("self", "solution")]}
AFTER = {"configs": ["solution", "solution_fkl", "solution_jsd", "plain"],
         "views": [("self", "solution"), ("self", "plain")]}


def test_shared_configurations_are_compared_and_the_others_named(tmp_path):
  a = _workdir(tmp_path / "a", BEFORE["configs"], BEFORE["views"])
  b = _workdir(tmp_path / "b", AFTER["configs"], AFTER["views"])
  problems, _, left = compare_records.compare(a, b, 0.0)
  only_b = sorted(set(AFTER["configs"]) - set(BEFORE["configs"]))
  assert left == [f"tokens: views only in {b}, left out: self:plain",
                  f"nodes: configurations only in {b}, left out: {', '.join(only_b)}"], left
  assert problems == [], problems
  assert compare_records.compare(b, a, 0.0)[2] == left                                    # either order
  shifted = _workdir(tmp_path / "c", AFTER["configs"], AFTER["views"], shift=1e-3)
  problems, worst, left = compare_records.compare(b, shifted, 1e-6)
  assert left == [] and len(problems) == 1 and problems[0].startswith("nodes.alignment row "), problems
  np.testing.assert_allclose(worst["nodes.alignment"], 1e-3, rtol=1e-9)
  assert compare_records.compare(b, shifted, 2e-3)[0] == []


def test_the_command_exits_0_on_the_shared_part_and_says_what_it_left_out(tmp_path, monkeypatch, capsys):
  a = _workdir(tmp_path / "a", BEFORE["configs"], BEFORE["views"])
  b = _workdir(tmp_path / "b", AFTER["configs"], AFTER["views"])
  monkeypatch.setattr(sys, "argv", ["compare_records.py", a, b])
  with pytest.raises(SystemExit) as done:
    compare_records.main()
  out = capsys.readouterr().out
  assert done.value.code == 0, out
  assert "left out: plain, solution_jsd" in out and "left out: self:plain" in out and "candidate set C(u)" in out
  assert "0 differences" in out
