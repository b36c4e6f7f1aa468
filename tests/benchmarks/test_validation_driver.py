"""The validation experiment's driver (benchmarks/validate_training.py, issue 36) on tiny random models: its pieces,
their exported CSVs checked against the records they come from, a finished piece never rerun, and the table's
rank correlations against scipy on hand-made CSVs."""
import json
import math
import os
import pathlib
import resource
import socket
import subprocess

import numpy as np
import pandas as pd
import pytest
import scipy.stats

from benchmarks import validate_training as vt
from opd_jax import atomic
from opd_jax import records


def test_pieces_export_what_their_records_hold_and_a_finished_piece_is_not_rerun(tmp_path, monkeypatch):
  work, data = tmp_path / "work", tmp_path / "data"
  vt.run_piece("study:1", work, data, tiny=True, figure=None)
  nodes = pd.read_parquet(work / "study1" / "records" / "nodes")
  exported, _, found = vt.read_study(data)
  assert found == [1] and len(exported) == len(nodes)
  sq = vt.question_sums(exported)
  for conf, g in nodes.groupby("config_id"):                  # the per-question sums give the records' means back
    a = g[~g.correct].alignment.dropna()
    s = sq[sq.configuration == conf]
    assert s.incorrect_nodes.sum() == len(a)
    if len(a):
      np.testing.assert_allclose(s.incorrect_alignment_sum.sum() / s.incorrect_nodes.sum(), a.mean(), rtol=1e-12)
    pr = records.estimates_from_rows(g)["projection"]                       # its own recompute, per configuration
    pr = pr[~g.correct.to_numpy() & np.isfinite(pr)]
    assert s.incorrect_projection_nodes.sum() == len(pr)
    np.testing.assert_allclose(s.incorrect_projection_sum.sum(), pr.sum(), rtol=1e-9, atol=1e-12)
  verdict = json.loads((work / "study1" / "verdict.json").read_text())    # the table's verdict from the CSV: the
  ranking = vt.study_verdict(exported, data)["incorrect"]                   # study's own
  assert ranking.configuration.tolist() == [r["config_id"] for r in verdict["ranking"]]
  assert ranking.query("named").configuration.tolist() == ([verdict["best"]] if verdict.get("best") else [])
  written = (data / "study_verdict_line.txt").read_text().splitlines()          # the first line, then details
  assert written[0] == verdict["line"] and set(written[1:]) <= set(verdict["details"])  # (without the design's)
  means = [np.nan if r["mean_alignment"] is None else r["mean_alignment"] for r in verdict["ranking"]]
  np.testing.assert_allclose(ranking.mean_alignment.astype(float), means, rtol=1e-12)

  for name in vt.configurations(tiny=True):
    vt.run_piece(f"train:{name}", work, data, tiny=True, figure=None)
    vt.add_run_row(work / "train" / name, data, wall_s=1.0,
                   peak_rss_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)
  runs = pd.read_csv(data / "runs.csv")
  assert runs.configuration.tolist() == list(vt.configurations(tiny=True))
  before = None
  for row in runs.itertuples():
    ev = pd.read_csv(data / f"eval_{row.configuration}.csv")
    summary = json.loads((work / "train" / row.configuration / "train" / "summary.json").read_text(),
                         parse_constant=lambda c: pytest.fail(f"summary.json holds a bare {c}: not strict JSON"))
    assert math.isclose(row.diff, summary["last_eval"]["diff"]) and row.steps == summary["steps"] == 2
    np.testing.assert_allclose((ev.after - ev.before).mean(), row.diff, atol=1e-12)   # the CSV gives the row back
    before = ev.before if before is None else before
    np.testing.assert_array_equal(ev.before, before)                # one "before" for every run (same keys)
  # A finished piece is read from its CSV, never run again (no child process is started).
  monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: pytest.fail(f"reran {a}"))
  assert vt.main([f"--workdir={work}", f"--data_dir={data}", "--piece=train:solution", "--tiny"]) == 0
  assert vt.main([f"--workdir={work}", f"--data_dir={data}", "--piece=study", "--tiny"]) == 2   # a bad name: one
                                                                                                # line, no child
  assert vt.done("study:1", data) and vt.done("train:external", data) and not vt.done("train:nosuch", data)
  assert not vt.done("study:2", data)


def _hand_csvs(data: pathlib.Path, rng) -> tuple[list, np.ndarray, np.ndarray]:
  """Four configurations, 6 study questions in two blocks, 10 held-out questions: the CSVs the pieces would write."""
  confs = ["a", "b", "c", "d"]
  nodes, views = [], []
  for q in range(6):
    block = 1 + q // 3
    for r in range(int(rng.integers(2, 5))):
      correct = bool(r % 2)
      for c in confs:
        a = float(np.clip(rng.normal(0.2 * confs.index(c), 0.3), -1, 1))
        nodes.append(dict(config_id=c, question_id=f"{block}:q{q}", rollout_id=r, position=3 * (r // 2), teacher="t",
                          context=c, divergence="reverse_kl", correct=correct, alignment=a, alignment_nan_reason="",
                          degenerate=False, teacher_advantage=float(rng.normal(0, 0.1)), projection=0.1 * a))
    for c in confs:
      views.append({"configuration": c, "question_id": f"{block}:q{q}", **{
          f"{col}_{k}": v for col in vt.VIEW_PREDICTORS for k, v in (("n", 3), ("sum", float(rng.random() * 3)))}})
  nodes = pd.DataFrame(nodes)
  for b in (1, 2):
    nodes[nodes.question_id.str.startswith(f"{b}:")].to_csv(data / f"study_nodes_{b}.csv", index=False)
    pd.DataFrame([v for v in views if v["question_id"].startswith(f"{b}:")]).to_csv(data / f"study_views_{b}.csv",
                                                                                    index=False)
  before = rng.integers(0, 5, 10) / 4
  gains = []
  for i, c in enumerate(confs):
    after = np.clip(before + rng.integers(-1, 3, 10) / 4 * (i - 1), 0, 1)
    pd.DataFrame({"question_id": range(10), "before": before, "after": after, "samples": 4}).to_csv(
        data / f"eval_{c}.csv", index=False)
    gains.append((after - before).mean())
  pd.DataFrame([{**{k: 0 for k in vt.RUN_COLUMNS}, "configuration": c, "lo": -1, "hi": 1} for c in confs]).to_csv(
      data / "runs.csv", index=False)
  return confs, np.array(gains), nodes


def test_table_rank_correlations_match_scipy_and_the_regret_is_the_named_gain_minus_the_best(tmp_path):
  confs, gains, nodes = _hand_csvs(tmp_path, np.random.default_rng(3))
  out = vt.table(tmp_path, tmp_path / "fig.png", n_boot=100).set_index("predictor")
  mean_incorrect = nodes[~nodes.correct].groupby("config_id").alignment.mean()      # both blocks' nodes
  row = out.loc["alignment_incorrect"]
  np.testing.assert_allclose([row[f"value_{c}"] for c in confs], mean_incorrect[confs], rtol=1e-12)
  assert math.isclose(row.spearman, scipy.stats.spearmanr(mean_incorrect[confs], gains).statistic)
  assert math.isclose(row.kendall, scipy.stats.kendalltau(mean_incorrect[confs], gains).statistic)
  assert row.spearman_lo <= row.spearman <= row.spearman_hi and row.n_configurations == 4
  assert row.spearman_minus_verdicts == row.spearman_minus_verdicts_lo == row.spearman_minus_verdicts_hi == 0
  other = out.loc["alignment_correct"]                   # paired by bootstrap draw with the verdict's estimand
  assert math.isclose(other.spearman_minus_verdicts, other.spearman - row.spearman)
  verdict = pd.read_csv(tmp_path / "study_verdict.csv")             # ranked by the verdict's own mean alignment
  assert verdict.configuration.tolist() == mean_incorrect.sort_values(ascending=False).index.tolist()
  rank = verdict.set_index("configuration")["rank"][confs]
  assert math.isclose(out.loc["verdict_ranking"].spearman, scipy.stats.spearmanr(-rank, gains).statistic)
  first = nodes[nodes.position == 0].groupby("config_id").teacher_advantage.mean()     # the first-token slice
  np.testing.assert_allclose([out.loc["teacher_advantage_first", f"value_{c}"] for c in confs], first[confs])
  sign = out.loc["reference_gain_sign"]                # a reference: the sign of each measured gain alone
  assert sign.kind == "reference"
  assert math.isclose(sign.spearman, scipy.stats.spearmanr(np.sign(gains), gains).statistic)
  regret = pd.read_csv(tmp_path / "regret.csv").set_index("target")     # the verdict on each node group
  named = verdict.configuration[verdict.named].tolist()
  assert regret.default.tolist() == [t == "incorrect" for t in regret.index]
  assert regret.named.get("incorrect") == (named[0] if named else None)
  for target, row in regret.iterrows():
    i = confs.index(row.named)
    assert math.isclose(row.regret, gains[i] - gains.max()) and row.named in row.could_be_best.split(";")
    assert math.isclose(row.could_be_best_worst_gain, min(gains[confs.index(c)] for c in row.could_be_best.split(";")))
  assert (tmp_path / "fig.png").stat().st_size > 0


def test_a_study_pool_without_the_trainers_questions_shares_none(tmp_path):
  """configs/validation.py's pools overlap (sums of small numbers repeat); config.task.exclude removes exactly the
  listed questions (the driver lists the trainer's pool), and a bad exclude file is one error naming the field."""
  from configs import validation  # pylint: disable=g-import-not-at-top
  from opd_jax.study import question_pool  # pylint: disable=g-import-not-at-top
  study, train = validation.get_config("study"), validation.get_config("train")
  assert study.task.name == train.task.name and study.seed != train.seed
  full, train_pool = question_pool.load_task(study), question_pool.load_task(train)
  train_texts = {p.question for p in train_pool.problems}
  shared = {p.question for p in full.problems} & train_texts
  assert 0 < len(shared) < len(full.problems) // 10       # chance repeats of small sums, not a shifted stream
  listed = tmp_path / "train.json"
  listed.write_text(json.dumps(sorted(train_texts)))
  kept = question_pool.excluded(full, str(listed)).problems
  assert [p.id for p in kept] == [p.id for p in full.problems if p.question not in shared]
  assert not {p.question for p in kept} & train_texts
  listed.write_text("{}")
  with pytest.raises(ValueError, match=r"^config\.task\.exclude=.*JSON list"):
    question_pool.excluded(full, str(listed))


def test_rank_correlations_equal_scipys_with_ties_and_undefined_values():
  rng = np.random.default_rng(0)
  for _ in range(50):
    x, y = rng.integers(0, 4, 7).astype(float), rng.integers(0, 4, 7).astype(float)
    x[rng.integers(0, 7)] = np.nan
    rho, tau, n = vt.rank_correlations(x, y)
    ok = np.isfinite(x)
    if np.ptp(x[ok]) == 0 or np.ptp(y[ok]) == 0:
      assert math.isnan(rho) and math.isnan(tau)
      continue
    assert n == 6
    assert math.isclose(rho, scipy.stats.spearmanr(x[ok], y[ok]).statistic, abs_tol=1e-12)
    assert math.isclose(tau, scipy.stats.kendalltau(x[ok], y[ok]).statistic, abs_tol=1e-12)


def test_json_records_are_strict_json(tmp_path):
  """atomic.write_json (summary.json, manifest.json, verdict.json): NaN and inf are written as null."""
  atomic.write_json(tmp_path / "x.json", {"a": float("nan"), "b": [np.float32("inf"), 1.5, np.float64(2)],
                                          "c": {"d": -float("inf"), "e": "NaN"}})
  back = json.loads((tmp_path / "x.json").read_text(), parse_constant=lambda c: pytest.fail(f"bare {c}"))
  assert back == {"a": None, "b": [None, 1.5, 2.0], "c": {"d": None, "e": "NaN"}}


def test_sequential_replay_stops_at_the_first_decided_look_with_the_verdicts_own_decision(tmp_path):
  """benchmarks/sequential_replay.py: each look is decide() on the first n questions in their order, and the replay
  ends at the first decided look (or the cap), as a sequential study would."""
  from benchmarks import sequential_replay  # pylint: disable=g-import-not-at-top
  from opd_jax.report import decision, sequential  # pylint: disable=g-import-not-at-top,multiple-imports
  rng = np.random.default_rng(0)
  nodes = pd.DataFrame([dict(config_id=c, question_id=f"q{q}", rollout_id=r, position=0, teacher="t", context=c,
                             divergence="reverse_kl", correct=False, alignment=float(rng.normal(m, 0.2)),
                             alignment_nan_reason="", degenerate=False, teacher_advantage=0.0)
                        for q in range(36) for r in range(3) for c, m in (("a", 0.0), ("d", 0.6))])
  design = sequential.Design(looks=(12, 24, 36), margin=0.05)
  out = sequential_replay.replay(nodes, design, target="all", configs=["a", "d"])
  assert [r["look"] for r in out] == list(range(1, len(out) + 1)) and not any(r["decided"] for r in out[:-1])
  assert out[-1]["decided"] and out[-1]["decision"] == "use" and len(out) < 3      # stopped before the cap
  order = list(dict.fromkeys(nodes.question_id))
  last = out[-1]
  sub = nodes[nodes.config_id.isin(["a", "d"]) & nodes.question_id.isin(order[:last["questions"]])]
  v = decision.decide(sub.reset_index(drop=True), target="all", level=0.95, min_effect=0.05, design=design,
                      look=last["look"], final=False, n_boot=200)
  assert (v["decision"], v["line"]) == (last["decision"], last["line"])
  assert sequential_replay.main([f"--data_dir={tmp_path}", "--targets=incorrect,trained"]) == 2   # no rates there


def test_tiny_runs_never_write_the_committed_record_and_one_driver_holds_a_workdir(tmp_path, capsys, monkeypatch):
  """--tiny defaults to <workdir>/data and <workdir>/validation_training.png and refuses the committed ones; a
  second driver on a workdir whose lock a live driver holds is one error line, and starts no child."""
  monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: pytest.fail(f"started {a}"))
  for flag in (f"--data_dir={vt.DATA_DIR}", f"--figure={vt.FIGURE_PATH}"):
    assert vt.main([f"--workdir={tmp_path}", "--tiny", flag]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --tiny writes random models' rows") and len(err.splitlines()) == 1
  assert not (tmp_path / "data").exists()
  from opd_jax import claim  # pylint: disable=g-import-not-at-top
  claim.lock_path(tmp_path, 0).write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
  assert vt.main([f"--workdir={tmp_path}", "--tiny", "--piece=table"]) == 2
  err = capsys.readouterr().err
  assert err.startswith(f"error: --workdir={tmp_path} is in use by another run") and len(err.splitlines()) == 1
  assert (tmp_path / "data").is_dir()                          # the tiny default, not the committed folder
