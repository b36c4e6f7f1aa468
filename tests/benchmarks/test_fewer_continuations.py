"""Estimates recomputed from node records (records.estimates_from_rows) and the continuations subsample of
benchmarks/fewer_continuations.py (issue 33): the records' own counts give the records' numbers back; fewer kept
continuations give counts of the records' rewards."""
import math

import numpy as np
import pandas as pd
import pytest

from benchmarks import fewer_continuations as fc
from opd_jax.teachers import contexts
from opd_jax import claim
from opd_jax import records
from opd_jax.study import nodes, targeted


def _rows():
  """Node rows of one rollout, 3 nodes, 3 configurations (two views; jsd with beta) and a view without context."""
  rng = np.random.default_rng(0)
  confs = [contexts.parse("a", "t:plain:reverse_kl"), contexts.parse("b", "t:plain:jsd@0.3"),
           contexts.parse("c", "self:solution:forward_kl")]
  cands = np.array([[5, 6, 7], [5, 8, -1], [2, 3, 4]])
  logp = np.log(rng.dirichlet(np.ones(3), 3))
  rewards = rng.integers(0, 2, (3, 3, 6)).astype(np.int8)
  rewards[:, :, 0], rewards[:, :, 1] = 1, 0          # no node degenerate by chance
  out = targeted.Outcomes(rewards=rewards, valid=cands >= 0)
  views = {confs[0].scoring_key: np.log(rng.dirichlet(np.ones(3), 3)), confs[2].scoring_key: None}
  pred = {v: {k: np.zeros(3) for k in records.PREDICTORS} for v in views}
  at = nodes.RolloutNodes([0, 1, 2], cands, logp, views)
  return nodes.node_rows(confs, "q0", 0, False, [5, 5, 2], at, out, pred)


def test_estimates_from_rows_give_the_records_back_and_projection_is_alignment_times_the_ideal_norm():
  rows = _rows()
  got = records.estimates_from_rows(rows)
  np.testing.assert_allclose(got["alignment"], rows.alignment.to_numpy(float), atol=1e-12)
  np.testing.assert_allclose(got["teacher_advantage"], rows.teacher_advantage.to_numpy(float), atol=1e-12)
  assert np.isnan(got["projection"][rows.context.to_numpy() == "solution"]).all()     # no context: no q
  for i in np.flatnonzero(rows.context.to_numpy() != "solution"):
    r = rows.iloc[i]
    p, ps = np.asarray(r.p), np.asarray(r.p_succ)
    g_ideal = p * (ps - p @ ps)                                                        # numpy, the paper's g*
    assert math.isclose(got["projection"][i], r.alignment * np.linalg.norm(g_ideal), rel_tol=1e-9)


def test_subsampled_counts_come_from_the_records_rewards():
  rows = _rows()
  key = list(zip(rows.question_id, rows.rollout_id, rows.position))
  rewards = {k: [np.asarray(x, float) for x in rw] for k, rw in zip(key, rows.rewards)}
  full = fc.subsample(rewards, None, None)
  for k, rw in zip(key, rows.rewards):
    assert all(np.array_equal(a, b) for a, b in zip(full[k], rw))
  assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(
      records.estimates_from_rows(rows, rewards=full).values(), records.estimates_from_rows(rows).values()))
  half = fc.subsample(rewards, 3, np.random.default_rng(1))
  for k, s in zip(key, rows.successes):
    got = np.asarray([x.sum() for x in half[k]])
    assert all(x.size == 3 for x in half[k]) and (got <= np.minimum(3, s)).all() and (got >= np.asarray(s) - 3).all()
  again = records.estimates_from_rows(rows, rewards=half)
  assert np.isfinite(again["teacher_advantage"][rows.context.to_numpy() != "solution"]).all()
  assert not np.allclose(np.nan_to_num(again["alignment"]), np.nan_to_num(rows.alignment.to_numpy(float)))


def _study_rows(n_questions=8, seed=5):
  """Node rows of n_questions one-rollout questions, two configurations of one view (reverse and forward KL)."""
  rng = np.random.default_rng(seed)
  confs = [contexts.parse("rkl", "t:plain:reverse_kl"), contexts.parse("fkl", "t:plain:forward_kl")]
  out = []
  for i in range(n_questions):
    cands = np.array([[1, 2, 3], [4, 5, 6], [7, 8, -1]])
    rewards = rng.integers(0, 2, (3, 3, 4)).astype(np.int8)
    rewards[2] = 1                                                          # one degenerate node per question
    at = nodes.RolloutNodes([0, 1, 2], cands, np.log(rng.dirichlet(np.ones(3), 3)),
                            {confs[0].scoring_key: np.log(rng.dirichlet(np.ones(3), 3))})
    pred = {confs[0].scoring_key: {k: np.zeros(3) for k in records.PREDICTORS}}
    out.append(nodes.node_rows(confs, f"q{i}", 0, False, [1, 4, 7], at,
                               targeted.Outcomes(rewards=rewards, valid=cands >= 0), pred))
  return pd.concat(out, ignore_index=True)


def test_the_verdict_on_the_projection_compares_numpys_projection_with_degenerate_nodes_at_zero():
  from opd_jax.report import decision  # pylint: disable=g-import-not-at-top
  from opd_jax.report import verdict_text
  rows = _study_rows()
  want = []
  for r in rows.itertuples():                               # numpy: g* = p (P - V), g_D of each divergence
    p, q, ps = np.asarray(r.p), np.asarray(r.q), np.asarray(r.successes) / np.asarray(r.n)
    g_ideal = p * (ps - p @ ps)
    g = (p * (np.log(q) - np.log(p) + p @ (np.log(p) - np.log(q))) if r.divergence == "reverse_kl" else q - p)
    want.append(g_ideal @ g / np.linalg.norm(g))
  rows_np = rows.assign(alignment=want, degenerate=False)
  got = decision.decide(rows, target="all", n_boot=50, estimand="projection")
  ref = decision.decide(rows_np, target="all", n_boot=50)
  assert got["estimand"] == "projection" and got["best"] == ref["best"]
  for a, b in zip(got["ranking"], ref["ranking"]):
    assert a["config_id"] == b["config_id"] and a["n_defined"] == b["n_defined"] == len(rows) // 2
    assert math.isclose(a["mean_alignment"], b["mean_alignment"], rel_tol=1e-9)
  for a, b in zip(got["comparisons"], ref["comparisons"]):
    assert math.isclose(a["diff"], b["diff"], rel_tol=1e-9) and math.isclose(a["se"], b["se"], rel_tol=1e-9)
  assert "projection" in verdict_text.table_note(got)
  plain = decision.decide(rows, target="all", n_boot=50)                      # the default: the records' column
  assert plain["ranking"][0]["n_defined"] < len(rows) // 2 and plain["estimand"] == "alignment"
  with pytest.raises(ValueError, match="unknown estimand 'cosine'"):
    decision.decide(rows, estimand="cosine")


def test_the_report_flag_names_the_estimands_and_a_sequential_projection_needs_its_margin(tmp_path, monkeypatch):
  import types  # pylint: disable=g-import-not-at-top
  from opd_jax.report import cli, sequential  # pylint: disable=g-import-not-at-top
  f = types.SimpleNamespace(target="incorrect", n_boot=10, seed=0, pages=0, colour_by="kl_pq", min_effect=0.0,
                            estimand="projektion")
  with pytest.raises(ValueError, match=r"^--estimand must be one of .*did you mean 'projection'"):
    cli.check_flags(f)
  (tmp_path / "config.json").write_text('{"report": {"min_effect": 0.0}}')
  (tmp_path / "progress.json").write_text("{}")
  monkeypatch.setattr(cli.looks, "resolve", lambda c: None)                # the config.json above is partial
  monkeypatch.setattr(cli.looks, "report_look", lambda seq, p: {"design": sequential.Design(looks=(10, 20))})
  with pytest.raises(ValueError, match=r"^--min_effect must be > 0 with --estimand=projection"):
    cli.sequential_look(tmp_path, 0.0, "projection")
  assert cli.sequential_look(tmp_path, 0.01, "projection")["design"].margin == 0.01


def test_the_estimand_field_is_checked_first_and_leaves_older_studies_resumable():
  from configs import teacher_sweep  # pylint: disable=g-import-not-at-top
  from opd_jax.study import preflight  # pylint: disable=g-import-not-at-top
  config = teacher_sweep.get_config()
  old = config.to_dict()
  del old["report"]["estimand"]                              # a study's config.json from before the field
  assert claim.config_hash(old) == claim.config_hash(config.to_dict())
  assert claim.config_difference(old, config.to_dict()) == []
  config.report.estimand = "projection"
  assert claim.config_difference(old, config.to_dict()) == ["report.estimand"]
  preflight.validate(config)                             # a fixed design: no margin needed
  config.budget.looks = (10,)
  with pytest.raises(ValueError, match=r"^config\.report\.min_effect must be > 0 with report\.estimand='projection'"):
    preflight.validate(config)
  config.report.estimand = "cos"
  with pytest.raises(ValueError, match=r"^config\.report\.estimand must be one of"):
    preflight.validate(config)


def test_records_files_give_the_workdirs_numbers_on_the_same_rows(tmp_path, capsys):
  import json  # pylint: disable=g-import-not-at-top
  nodes_dir = tmp_path / "study" / "records" / "nodes"
  nodes_dir.mkdir(parents=True)
  for b in (1, 2):                          # two blocks, ids prefixed "<block>:" as validate_v2 exports them
    rows = _study_rows(4, seed=b).assign(question_id=lambda t, b=b: f"{b}:" + t.question_id)
    rows.to_parquet(nodes_dir / f"part-{b:05d}.parquet")
    rows.to_parquet(tmp_path / f"study_records_{b}.parquet")
  flags = ["--r=2", "--draws=3", "--target=all"]
  a = fc.main([f"--workdir={tmp_path / 'study'}", *flags])
  b = fc.main([f"--records={tmp_path / 'study_records_*.parquet'}", *flags, f"--out={tmp_path / 'out.json'}"])
  assert a.pop("workdir") == str(tmp_path / "study") and b.pop("records") == str(tmp_path / "study_records_*.parquet")
  a.pop("seconds"), b.pop("seconds")
  assert json.dumps(a, default=float) == json.dumps(b, default=float)
  for name in ("alignment", "projection"):  # the subsample moved something: the comparison is not of constants
    assert a[name]["max_diff_shift"][2] > 0 and a[name]["max_diff_shift"][4] == 0
  kept = json.loads((tmp_path / "out.json").read_text())
  assert kept["configs"] == 2 and kept["R"] == 4 and "2 files" in kept["records"] and "8 questions" in kept["records"]
  assert kept["command"].startswith("python benchmarks/fewer_continuations.py --records=")
  assert "pairs" not in kept["alignment_ratio"] and kept["projection"]["max_diff_shift_se"]["2"] > 0
  with pytest.raises(SystemExit):
    fc.main([f"--workdir={tmp_path / 'study'}", f"--records={tmp_path / 'study_records_*.parquet'}"])
  with pytest.raises(SystemExit):
    fc.main([f"--records={tmp_path / 'none_*.parquet'}"])
  assert "error: --records=" in capsys.readouterr().err
