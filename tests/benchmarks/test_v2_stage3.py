"""Validation v2's stage-3 analysis (benchmarks/v2_analysis.py `stage3_tables`) on committed-form CSVs written here:
each table against an independent pandas/scipy computation of what its docstring says, and the driver's refusal of a
stage-3 run before hypothesis.md exists."""
import json
import os
import socket
import subprocess

import numpy as np
import pandas as pd
import pytest
import scipy.stats

from benchmarks import v2_analysis
from benchmarks import v2_results
from benchmarks import validate_v2

SPECS = {"ext_plain_rkl": "t:plain:reverse_kl", "ext_plain_fkl": "t:plain:forward_kl",
         "ext_answer_rkl": "t:answer:reverse_kl", "self_solution_rkl": "self:solution:reverse_kl",
         "self_solution_fkl": "self:solution:forward_kl", "self_summary_rkl": "self:summary:reverse_kl"}
QUESTIONS = [f"1:q{i}" for i in range(6)]
EVAL = [f"e{i}" for i in range(10)]


def _write(data, rng, gain_of):
  """Study CSVs (4 nodes per question and configuration: 2 correct, 2 incorrect; one undefined alignment), the
  questions' success rates, and per configuration one stage-3 run (two for ext_plain_rkl) whose held-out rewards
  and gold-answer log-probs differ by gain_of(configuration) on average."""
  nodes, views = [], []
  cols = [f"{k}_{s}" for k in ("kl_pq", "kl_qp", "js", "topk_overlap") for s in ("n", "sum")]
  per_view = {(v, q): {c: 5 if c.endswith("_n") else rng.uniform(0, 5) for c in cols}     # one view's tokens
              for v in sorted({c.rsplit("_", 1)[0] for c in SPECS}) for q in QUESTIONS}
  for c in SPECS:
    for q in QUESTIONS:
      for r in range(4):
        a = rng.uniform(-1, 1) if (c, q, r) != ("ext_answer_rkl", "1:q0", 3) else np.nan
        nodes.append(dict(config_id=c, question_id=q, rollout_id=r, position=r % 2, correct=r < 2, alignment=a,
                          teacher_advantage=rng.normal(), projection=rng.normal()))
      views.append(dict(configuration=c, question_id=q, **per_view[(c.rsplit("_", 1)[0], q)]))
  pd.DataFrame(nodes).to_csv(data / "study_nodes_1.csv", index=False)
  pd.DataFrame(views).to_csv(data / "study_views_1.csv", index=False)
  rates = pd.DataFrame(dict(question_id=QUESTIONS, rollouts=8, success_rate=rng.integers(1, 8, len(QUESTIONS)) / 8))
  rates.to_csv(data / "study_questions_1.csv", index=False)
  rows = []
  for c, spec in SPECS.items():
    for seed in ((-1, 1) if c == "ext_plain_rkl" else (-1,)):
      name = validate_v2.stage3_name(c, seed)
      before = rng.integers(0, 5, len(EVAL)) / 4
      after = np.clip(before + gain_of(c) + rng.normal(0, 0.1, len(EVAL)), 0, 1)
      gold = rng.normal(-5, 1, len(EVAL))                        # log p(gold answer) before, and after
      pd.DataFrame(dict(question_id=EVAL, before=before, after=after, samples=4, gold_before=gold,
                        gold_after=gold + rng.normal(gain_of(c), 0.5, len(EVAL)))).to_csv(data / f"eval_{name}.csv",
                                                                                          index=False)
      rows.append(dict(configuration=name, spec=spec, stage=3, train_seed=seed, after=after.mean()))
  rows.append(dict(configuration="s1_x", spec="self:answer:reverse_kl", stage=1, train_seed=-1, after=0.5))
  pd.DataFrame(rows).to_csv(data / "runs.csv", index=False)
  return pd.DataFrame(nodes), rates


def _trained(nodes, rates):
  """The alignment as training weighs the nodes, computed here with pandas from the rows."""
  s = rates.set_index("question_id").success_rate
  ok = nodes.dropna(subset=["alignment"])
  per_q = {}
  for (c, q), g in ok.groupby(["config_id", "question_id"]):
    good, bad = g[g.correct].alignment, g[~g.correct].alignment
    per_q.setdefault(c, []).append(s[q] * good.mean() + (1 - s[q]) * bad.mean() if len(good) and len(bad)
                                   else (good if len(good) else bad).mean())
  return pd.Series({c: np.mean(v) for c, v in per_q.items()})


def test_stage3_tables_against_pandas_and_scipy(tmp_path):
  rng = np.random.default_rng(0)
  nodes, rates = _write(tmp_path, rng, lambda c: 0.05 * len(c) % 0.3)
  out = v2_analysis.stage3_tables(tmp_path, SPECS, n_boot=200, n_perm=1000)
  gains = out["gains"].set_index("configuration")
  runs = pd.read_csv(tmp_path / "runs.csv")
  for c in SPECS:                                    # the mean over replicates of the mean paired difference
    names = [validate_v2.stage3_name(c, k) for k in ((-1, 1) if c == "ext_plain_rkl" else (-1,))]
    evals = [pd.read_csv(tmp_path / f"eval_{n}.csv") for n in names]
    want = np.mean([(e.after - e.before).mean() for e in evals])
    assert np.isclose(gains.loc[c, "gain"], want) and gains.loc[c, "lo"] <= want <= gains.loc[c, "hi"]
    assert np.isclose(gains.loc[c, "gold_gain"], np.mean([(e.gold_after - e.gold_before).mean() for e in evals]))
    assert gains.loc[c, "replicates"] == len(names)
    assert gains.loc[c, "lowest_after"] == runs[runs.configuration.isin(names)].after.min()
    assert np.isclose(gains.loc[c, "lowest_run_gain"], min((e.after - e.before).mean() for e in evals))
  trained = _trained(nodes, rates)
  assert np.allclose(gains.loc[list(SPECS), "alignment_trained"], trained.loc[list(SPECS)])
  assert np.allclose(gains.alignment_all, nodes.groupby("config_id").alignment.mean().loc[gains.index])
  tests = out["tests"].set_index("predictor")
  assert out["tests"].iloc[0].predictor == v2_analysis.PRIMARY and tests.primary.sum() == 1
  strata = {"external": ["ext_plain_rkl", "ext_plain_fkl", "ext_answer_rkl"],
            "self": ["self_solution_rkl", "self_solution_fkl", "self_summary_rkl"]}
  rhos = {s: scipy.stats.spearmanr(trained.loc[cs], gains.loc[cs, "gain"])[0] for s, cs in strata.items()}
  row = tests.loc[v2_analysis.PRIMARY]
  assert np.isclose(row.statistic, np.mean(list(rhos.values())))
  assert np.isclose(row.rho_external, rhos["external"]) and np.isclose(row.rho_self, rhos["self"])
  assert 0 < row.p_value <= 1 and row.permutations == 36            # 3! x 3!: exact
  gold = {s: scipy.stats.spearmanr(trained.loc[cs], gains.loc[cs, "gold_gain"])[0] for s, cs in strata.items()}
  assert np.isclose(row.statistic_gold, np.mean(list(gold.values()))) and 0 < row.p_value_gold <= 1
  assert row.lo <= row.hi and row.minus_primary == 0 and row.minus_primary_lo == row.minus_primary_hi == 0
  kl = tests.loc["minus_kl_qp"]
  assert np.isclose(kl.minus_primary, kl.statistic - row.statistic)
  pairs = out["pairs"]                              # views with two divergences trained: plain and solution
  assert set(pairs.view) == {"ext_plain", "self_solution"} and len(pairs) == 2 * len(tests)
  p = pairs[(pairs.view == "ext_plain") & (pairs.predictor == "alignment_all")].iloc[0]
  a, b = sorted(["ext_plain_rkl", "ext_plain_fkl"], key=lambda c: ("self" in c, c))
  assert (p.a, p.b) == (a, b) and np.isclose(p.gain_diff, gains.loc[a, "gain"] - gains.loc[b, "gain"])
  assert p.agree == (np.sign(p.predictor_diff) == np.sign(p.gain_diff))
  assert (pairs[pairs.predictor == "minus_kl_qp"].predictor_diff == 0).all()     # a view-level proxy: no contrast
  regret = out["regret"].set_index(["stratum", "rule"])
  rule = regret.loc[("external", "no study: the 1.5B teacher, plain, reverse KL")]
  best = gains.loc[strata["external"], "gain"].max()
  assert rule.named == "ext_plain_rkl" and np.isclose(rule.regret, best - gains.loc["ext_plain_rkl", "gain"])
  top = regret.loc[("self", f"{v2_analysis.PRIMARY}'s top")]
  assert top.named == trained.loc[strata["self"]].idxmax()
  # Prediction 4: per predictor, the pairs whose two differences are nonzero, and how many agree in sign.
  summary = out["pairs_summary"].set_index("predictor")
  for k, g in pairs.groupby("predictor"):
    both = g[np.isfinite(g.predictor_diff) & np.isfinite(g.gain_diff) & (g.predictor_diff != 0) & (g.gain_diff != 0)]
    agree = int((np.sign(both.predictor_diff) == np.sign(both.gain_diff)).sum())
    assert (summary.loc[k, "pairs"], summary.loc[k, "agree"]) == (len(both), agree)
    if len(both):
      assert np.isclose(summary.loc[k, "p_binomial"], scipy.stats.binomtest(agree, len(both)).pvalue)
  assert summary.loc["minus_kl_qp", "pairs"] == 0                       # a view-level proxy has no contrast
  # Secondary 7: the replicates' spread (ext_plain_rkl's two runs) against the configurations'.
  noise = out["noise"].set_index("stratum")
  one = [pd.read_csv(tmp_path / f"eval_{validate_v2.stage3_name('ext_plain_rkl', k)}.csv") for k in (-1, 1)]
  d = (one[1].after - one[1].before).mean() - (one[0].after - one[0].before).mean()
  assert np.isclose(noise.loc["external", "training_sd"], abs(d) / np.sqrt(2))
  assert np.isclose(noise.loc["external", "between_sd"], gains.loc[strata["external"], "gain"].std())
  assert noise.loc["external", "replicated"] == 1 and noise.loc["self", "replicated"] == 0
  assert np.isnan(noise.loc["self", "training_sd"]) and out["collapse"].empty     # nothing collapsed here


def test_the_results_text_holds_the_tables_cells_against_the_hypothesis(tmp_path):
  """stage3_results.md (v2_results.markdown): the primary's statistic, interval, p and the decision at alpha 0.05,
  each stratum's predicted and observed ranks, the expectations' counts recomputed here from the gains table."""
  _write(tmp_path, np.random.default_rng(0), lambda c: 0.05 * len(c) % 0.3)
  out = v2_analysis.stage3_tables(tmp_path, SPECS, n_boot=100, n_perm=500)
  text = v2_results.markdown(out)
  row = out["tests"].set_index("predictor").loc[v2_analysis.PRIMARY]
  assert f"**{row.statistic:+.3f}** [{row.lo:+.3f}, {row.hi:+.3f}]" in text and f"**{row.p_value:.3g}**" in text
  assert ("p >= 0.05: that the study predicts training beyond the teacher's identity is not shown" in text) == (
      row.p_value >= 0.05) and "INTERIM" not in text
  gains = out["gains"]
  for s, g in gains.groupby("stratum"):
    pred = scipy.stats.rankdata(-g[v2_analysis.PRIMARY].to_numpy())
    obs = scipy.stats.rankdata(-g.gain.to_numpy())
    for r, a, b in zip(g.itertuples(), pred, obs):
      assert (f"| {s} | {r.configuration} | {a:g} | {r.alignment_trained:+.3f} | {r.gain:+.3f} [{r.lo:+.3f}, "
              f"{r.hi:+.3f}] | {b:g} | {r.replicates} |") in text
  ext, slf = gains[gains.stratum == "external"], gains[gains.stratum == "self"]
  assert (f"{(ext.gain > 0).sum()} of {len(ext)} configurations' gains (their replicates averaged) are above 0, "
          f"{(ext.lo > 0).sum()} with an interval") in text
  def run_gain(name):
    e = pd.read_csv(tmp_path / f"eval_{name}.csv")
    return (e.after - e.before).mean()
  every_run = sum(all(run_gain(validate_v2.stage3_name(c, k)) > 0 for k in ((-1, 1) if c == "ext_plain_rkl" else (-1,)))
                  for c in ext.configuration)
  assert f"; every run of {every_run} of them gains;" in text
  assert ("- Runs left out (hypothesis.md's rule: a run that failed twice for a cause of its own; excluded.csv): "
          "none.") in text
  assert "here a positive difference means the predictor ranked the gains better than the primary" in text
  left = v2_results.markdown(out, left_out={"s3_a": "memory, twice", "s3_b": "a crash, twice"})
  assert "excluded.csv): s3_a (memory, twice); s3_b (a crash, twice)." in left
  assert f"(|gain| < 0.05): {(slf.gain.abs() < 0.05).sum()} of {len(slf)}" in text
  pooled = scipy.stats.spearmanr(gains.alignment_trained, gains.gain)[0]
  assert f"over all {len(gains)} configurations pooled, {pooled:+.3f}" in text
  assert text.count("| alignment_incorrect (the default verdict's) |") == 1
  interim = v2_results.markdown(out, interim="3 of 28 stage-3 runs")
  assert interim.splitlines()[4] == "**INTERIM: 3 of 28 stage-3 runs**" and "p >= 0.05" not in interim
  assert "Decision, by hypothesis.md's rule: none: an interim result is not the test" in interim


def test_a_collapsed_run_is_listed_with_the_primarys_rank_of_it(tmp_path):
  nodes, rates = _write(tmp_path, np.random.default_rng(4), lambda c: -1.0 if c == "self_summary_rkl" else 0.0)
  collapse = v2_analysis.stage3_tables(tmp_path, SPECS, n_boot=10, n_perm=10)["collapse"]
  text = v2_results.markdown(v2_analysis.stage3_tables(tmp_path, SPECS, n_boot=10, n_perm=10))
  assert f"self_summary_rkl (self, lowest after {collapse.lowest_after.iloc[0]:.3f}): the primary ranks it" in text
  trained = _trained(nodes, rates)
  selfs = ["self_solution_rkl", "self_solution_fkl", "self_summary_rkl"]
  rank = dict(zip(selfs, scipy.stats.rankdata(-trained.loc[selfs].to_numpy())))
  assert collapse.configuration.tolist() == ["self_summary_rkl"] and collapse.lowest_after.iloc[0] < 0.10
  assert collapse["rank"].iloc[0] == rank["self_summary_rkl"] and collapse["of"].iloc[0] == 3
  assert collapse["last"].iloc[0] == (rank["self_summary_rkl"] == 3)


def test_a_planted_ranking_gives_rho_one_and_the_least_exact_p(tmp_path):
  nodes, rates = _write(tmp_path, np.random.default_rng(1), lambda c: 0.0)
  trained = _trained(nodes, rates)
  planted = {c: 0.1 * trained.rank().loc[c] for c in SPECS}           # the gain follows the primary predictor
  _write(tmp_path, np.random.default_rng(1), planted.get)              # the same study rows, these gains
  tests = v2_analysis.stage3_tables(tmp_path, SPECS, n_boot=50, n_perm=1000)["tests"].set_index("predictor")
  gains = pd.read_csv(tmp_path / "stage3_gains.csv").set_index("configuration").gain
  for cs in (list(SPECS)[:3], list(SPECS)[3:]):                       # the planted order survived the eval noise
    assert scipy.stats.spearmanr(trained.loc[cs], gains.loc[cs])[0] == 1
  assert tests.loc[v2_analysis.PRIMARY].statistic == 1.0 and tests.loc[v2_analysis.PRIMARY].p_value == 1 / 36


def test_bad_stage3_inputs_name_the_file(tmp_path):
  rng = np.random.default_rng(2)
  _write(tmp_path, rng, lambda c: 0.0)
  runs = pd.read_csv(tmp_path / "runs.csv")
  runs.loc[0, "spec"] = "t:misleading:reverse_kl"
  runs.to_csv(tmp_path / "runs.csv", index=False)
  with pytest.raises(ValueError, match="no study configuration's"):
    v2_analysis.stage3_tables(tmp_path, SPECS, n_boot=10, n_perm=10)
  (tmp_path / "study_questions_1.csv").unlink()
  with pytest.raises(ValueError, match="study_questions"):
    v2_analysis.study_predictors(tmp_path, list(SPECS))


def test_a_stage3_run_waits_for_the_hypothesis(tmp_path, capsys):
  name = next(n for n, r in validate_v2.RUNS.items() if r["stage"] == 3)
  assert validate_v2.main([f"--workdir={tmp_path}", f"--data_dir={tmp_path}", f"--piece=train:{name}"]) == 2
  err = capsys.readouterr().err
  assert err.startswith("error: ") and "hypothesis.md" in err and len(err.strip().splitlines()) == 1
  assert validate_v2.pieces(False).index("stage2") < min(validate_v2.pieces(False).index(f"train:{n}")
                                                          for n, r in validate_v2.RUNS.items() if r["stage"] == 3)


def test_the_stage3_plan_is_the_hypothesis_rule_on_the_committed_stage2():
  """The replicates are replicate_rule's on the committed stage2.csv, and the plan holds 22 configurations (12
  external, 10 self) and 6 replicates, each run once, the strata interleaved."""
  path = validate_v2.DATA_DIR / "stage2.csv"
  if not path.exists():
    pytest.skip(f"{path} is not in this checkout")
  assert validate_v2.STAGE3_REPLICATES == validate_v2.replicate_rule(pd.read_csv(path))
  plan = validate_v2.STAGE3
  names = [validate_v2.stage3_name(c, k) for c, k in plan]
  assert len(set(names)) == len(names) == 28
  confs = {c for c, k in plan if k < 0}
  assert len({c for c in confs if c.startswith("ext_")}) == 12 and len({c for c in confs if c.startswith("self_")}) == 10
  assert [v2_analysis.stratum(c) for c, _ in plan[:4]] == ["external", "self", "external", "self"]
  assert all(validate_v2.RUNS[n]["stage"] == 3 and validate_v2.RUNS[n]["teacher_weights"] == "initial" for n in names)


def test_hypothesis_tables_are_the_committed_stage2():
  """hypothesis.md's predicted view ranking and reliabilities are stage2.csv's and stage2_reliability.csv's."""
  data = validate_v2.DATA_DIR
  if not (data / "hypothesis.md").exists():
    pytest.skip("no hypothesis.md in this checkout")
  text = " ".join((data / "hypothesis.md").read_text().split())
  values = pd.read_csv(data / "stage2.csv")
  rows = values[(values.predictor == v2_analysis.PRIMARY) & (values.divergence == "rkl")]
  for name in ("external", "self"):
    ranked = rows[rows.stratum == name].sort_values("value", ascending=False)
    for rank, r in enumerate(ranked.itertuples(), 1):
      assert f"| {name} | {r.view} | {r.value:.3f} [{r.lo:.3f}, {r.hi:.3f}] | {rank} |" in text, r.view
  rel = pd.read_csv(data / "stage2_reliability.csv").set_index(["predictor", "stratum"])
  got = lambda k, col: " / ".join(f"{rel.loc[(k, s), col]:.2f}" for s in ("external", "self"))
  assert (f"split-half Spearman {got(v2_analysis.PRIMARY, 'split_half_rho')} between random halves of the questions, "
          f"{got(v2_analysis.PRIMARY, 'spearman_brown')} stepped up") in text
  for k, label in (("alignment_all", "alignment on all nodes"), ("alignment_incorrect", "on incorrect nodes (the "
                   "default verdict's)"), ("teacher_advantage", "teacher advantage"), ("minus_kl_qp", "-KL(q||p)")):
    assert f"{label} {got(k, 'split_half_rho')}" in text, k
  named = {s: pd.read_csv(data / f"study_verdict_{s}.csv").query("named").configuration.item()
           for s in ("external", "self")}
  assert f"{named['external']} in the external stratum, {named['self']} in the self stratum" in text
  c = pd.read_csv(data / "stage2_contrasts.csv").query("predictor == @v2_analysis.PRIMARY")
  assert (f"{int(((c.lo > 0) | (c.hi < 0)).sum())} of the {len(c)} within-view pairs have a 95% interval"
          in text and f"the largest difference {c['diff'].abs().max():.3f}" in text)


def test_stage3_waits_for_every_run_or_writes_an_interim_elsewhere(tmp_path, capsys, monkeypatch):
  """hypothesis.md computes the primary test once, at every planned stage-3 run: before that `--piece=stage3` is
  refused in one line; with --interim the tables are labelled and go to <workdir>/interim, never the data folder."""
  data, work = tmp_path / "d", tmp_path / "w"
  data.mkdir()
  _write(data, np.random.default_rng(3), lambda c: 0.0)
  planned = [n for n, r in validate_v2.RUNS.items() if r["stage"] == 3]
  n_in = len(set(pd.read_csv(data / "runs.csv").configuration) & set(planned))
  assert 0 < n_in < len(planned) == 28
  assert validate_v2.main([f"--workdir={work}", f"--data_dir={data}", "--piece=stage3"]) == 2
  err = capsys.readouterr().err
  assert err.startswith(f"error: --piece=stage3: {n_in} of 28 stage-3 runs are in ") and len(err.splitlines()) == 1
  assert "--interim" in err and not list(data.glob("stage3*"))
  stage3_tables = v2_analysis.stage3_tables           # the driver's draws, fewer: the plumbing is what is checked
  monkeypatch.setattr(v2_analysis, "stage3_tables", lambda *a, **k: stage3_tables(*a, **{**k, "n_boot": 20,
                                                                                          "n_perm": 50}))
  monkeypatch.setattr(validate_v2.validation, "V2_CONFIGURATIONS", SPECS)
  validate_v2.run_piece("stage3", work, data, tiny=False, interim=True)
  assert capsys.readouterr().out.startswith(f"INTERIM: {n_in} of 28 stage-3 runs; not the primary test")
  assert not list(data.glob("stage3*"))
  assert sorted(p.name for p in (work / "interim").iterdir()) == [
      "stage3.csv", "stage3_collapse.csv", "stage3_gains.csv", "stage3_noise.csv", "stage3_pairs.csv",
      "stage3_pairs_summary.csv", "stage3_regret.csv", "stage3_results.md"]
  assert (work / "interim" / "stage3_results.md").read_text().splitlines()[4] == (
      f"**INTERIM: {n_in} of 28 stage-3 runs; not the primary test (computed once, at all 28)**")


def test_runs_left_out_by_the_rule_are_listed_and_the_test_runs_without_them(tmp_path, capsys, monkeypatch):
  """hypothesis.md: a run that fails twice for a cause of its own is reported and left out. excluded.csv (committed
  by hand) names it: `--piece=stage3` then runs at the rest, into the data folder, and stage3_results.md lists it;
  a malformed file is one error line naming it."""
  data, work = tmp_path / "d", tmp_path / "w"
  data.mkdir()
  _write(data, np.random.default_rng(5), lambda c: 0.0)
  missing = validate_v2.stage3_missing(data, tiny=False)
  pd.DataFrame({"configuration": missing[:-1], "reason": "out of memory, twice"}).to_csv(data / "excluded.csv",
                                                                                          index=False)
  assert validate_v2.stage3_missing(data, tiny=False) == missing[-1:]
  assert validate_v2.main([f"--workdir={work}", f"--data_dir={data}", "--piece=stage3"]) == 2      # one still due
  assert capsys.readouterr().err.startswith(f"error: --piece=stage3: {28 - len(missing)} of {29 - len(missing)} ")
  for bad, match in (({"configuration": ["s3_nope"], "reason": ["x"]}, "'s3_nope' is no planned stage-3 run"),
                     ({"configuration": ["s3_ext_plain_rkl"], "reason": ["x"]}, "has its row in runs.csv"),
                     ({"configuration": missing[:1], "reason": [" "]}, "has no reason"),
                     ({"configuration": missing[:1] * 2, "reason": ["x", "y"]}, "listed twice"),
                     ({"configuration": missing[:1]}, "needs the columns configuration and reason")):
    pd.DataFrame(bad).to_csv(data / "excluded.csv", index=False)
    with pytest.raises(ValueError, match=match):
      validate_v2.stage3_missing(data, tiny=False)
  pd.DataFrame({"configuration": missing, "reason": "out of memory, twice"}).to_csv(data / "excluded.csv", index=False)
  stage3_tables = v2_analysis.stage3_tables
  monkeypatch.setattr(v2_analysis, "stage3_tables", lambda *a, **k: stage3_tables(*a, **{**k, "n_boot": 20,
                                                                                          "n_perm": 50}))
  monkeypatch.setattr(validate_v2.validation, "V2_CONFIGURATIONS", SPECS)
  validate_v2.run_piece("stage3", work, data, tiny=False)
  text = (data / "stage3_results.md").read_text()
  assert "INTERIM" not in text and not (work / "interim").exists()
  assert f"excluded.csv): {missing[0]} (out of memory, twice); {missing[1]} (out of memory, twice);" in text


def test_tiny_runs_never_write_the_committed_record_and_a_missing_runs_csv_is_one_line(tmp_path, capsys):
  assert validate_v2.main([f"--workdir={tmp_path}", "--tiny", f"--data_dir={validate_v2.DATA_DIR}"]) == 2
  err = capsys.readouterr().err
  assert err.startswith("error: --tiny writes random models' rows") and len(err.splitlines()) == 1
  assert validate_v2.main([f"--workdir={tmp_path}", "--tiny", "--piece=stage1"]) == 2     # default: <workdir>/data
  err = capsys.readouterr().err
  assert err == (f"error: --piece=stage1 reads {tmp_path / 'data' / 'runs.csv'}, which does not exist: run its "
                 "training pieces first (or point --data_dir at the folder that holds them)\n")


def test_a_pair_without_a_predictor_value_has_no_sign_to_agree(tmp_path):
  """A predictor undefined for a configuration (no node counts: NaN) gives its pairs no agreement, rather than a
  disagreement (np.sign(nan) equals nothing)."""
  _write(tmp_path, np.random.default_rng(5), lambda c: 0.05 * len(c) % 0.3)
  nodes = pd.read_csv(tmp_path / "study_nodes_1.csv")
  nodes.loc[nodes.config_id == "ext_plain_fkl", "alignment"] = np.nan
  nodes.to_csv(tmp_path / "study_nodes_1.csv", index=False)
  out = v2_analysis.stage3_tables(tmp_path, SPECS, n_boot=10, n_perm=10)
  assert np.isnan(out["gains"].set_index("configuration").loc["ext_plain_fkl", "alignment_all"])
  pairs = out["pairs"][out["pairs"].predictor == "alignment_all"].set_index("view")
  assert pairs.loc["ext_plain", "agree"] is None and isinstance(pairs.loc["self_solution", "agree"], bool)
  assert out["pairs_summary"].set_index("predictor").loc["alignment_all", "pairs"] == 1


def test_a_second_driver_on_a_workdir_is_one_error_line_and_starts_nothing(tmp_path, capsys, monkeypatch):
  """The v2 driver holds its workdir's lock as the v1 driver does (validate_training.locked)."""
  from opd_jax import claim  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: pytest.fail(f"started {a}"))
  claim.lock_path(tmp_path, 0).write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
  assert validate_v2.main([f"--workdir={tmp_path}", "--tiny", "--piece=stage1"]) == 2
  err = capsys.readouterr().err
  assert err.startswith(f"error: --workdir={tmp_path} is in use by another run") and len(err.splitlines()) == 1
