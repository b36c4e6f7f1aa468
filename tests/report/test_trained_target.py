"""The verdict's "trained" target (issue 47, item 6; validation v2's primary predictor): all nodes as training weighs
them, each question's correct and incorrect nodes by its base success rate. Checked against an independent pandas
weighting and scipy's paired t test over questions, end to end through the report, and in the config checks."""
import json
import re
import shutil
import types

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sp_stats

from configs import smoke
from opd_jax import report
from opd_jax.report import common
from opd_jax.report import decision
from opd_jax.study import preflight
from opd_jax.study import questions


def _nodes(seed: int, n_questions: int = 12, effect: float = 0.3) -> tuple[pd.DataFrame, pd.Series]:
  """Three configurations on the same nodes: 2-4 correct and 1-3 incorrect nodes per question (a degenerate one
  in some), A ahead of B on correct nodes only, C a copy of B plus noise; and each question's success rate."""
  rng = np.random.default_rng(seed)
  rows = []
  for q in range(n_questions):
    for r, correct in enumerate([True] * int(rng.integers(2, 5)) + [False] * int(rng.integers(1, 4))):
      base = rng.normal(0.2, 0.4)
      degenerate = q % 5 == 0 and r == 0
      for c, value in (("A", base + effect * correct + rng.normal(0, 0.1)), ("B", base),
                       ("C", base + rng.normal(0, 0.2))):
        rows.append(dict(config_id=c, question_id=f"q{q:02d}", rollout_id=r, position=0, teacher="t",
                         context="plain", divergence="reverse_kl", correct=correct,
                         alignment=np.nan if degenerate else value, degenerate=degenerate,
                         alignment_nan_reason="degenerate" if degenerate else "", teacher_advantage=0.1 * value))
  rates = pd.Series(rng.integers(1, 8, n_questions) / 8, index=[f"q{q:02d}" for q in range(n_questions)])
  return pd.DataFrame(rows), rates


def _weighted(nodes: pd.DataFrame, rates: pd.Series) -> pd.DataFrame:
  """[question, configuration] s_q x correct mean + (1 - s_q) x incorrect mean of the defined alignments."""
  out = {}
  for (c, q), g in nodes.dropna(subset=["alignment"]).groupby(["config_id", "question_id"]):
    good, bad = g[g.correct].alignment, g[~g.correct].alignment
    out[(q, c)] = (rates[q] * good.mean() + (1 - rates[q]) * bad.mean() if len(good) and len(bad)
                   else (good if len(good) else bad).mean())
  return pd.Series(out).unstack()


def test_the_trained_verdict_is_a_paired_t_test_over_the_weighted_question_means():
  nodes, rates = _nodes(0)
  v = decision.decide(nodes, target="trained", success_rates=rates, n_boot=50)
  want = _weighted(nodes, rates)
  assert v["target"] == "trained" and v["best"] == want.mean().idxmax() == "A"
  ranking = {r["config_id"]: r for r in v["ranking"]}
  for c in "ABC":
    assert ranking[c]["mean_alignment"] == pytest.approx(want[c].mean(), rel=1e-12)
    assert ranking[c]["n_questions"] == ranking[c]["n_defined"] == len(want)
  m = v["family_size"]
  for comp in v["comparisons"]:                                     # every other configuration against the best
    c, best = comp["config_id"], comp["vs"]
    d = want[c] - want[best]
    t = sp_stats.ttest_rel(want[c], want[best])
    assert comp["diff"] == pytest.approx(d.mean(), rel=1e-12) and comp["df"] == pytest.approx(len(d) - 1)
    assert comp["se"] == pytest.approx(d.std(ddof=1) / np.sqrt(len(d)), rel=1e-9)
    assert comp["p_value"] == pytest.approx(t.pvalue, rel=1e-8)
    half = sp_stats.t.ppf(1 - 0.05 / m / 2, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
    assert (comp["ci_lo"], comp["ci_hi"]) == pytest.approx((d.mean() - half, d.mean() + half), rel=1e-9)
  assert v["verdict"] == "use" and v["line"].startswith("use A on all nodes as training weighs them: A - B = ")
  plain = decision.decide(nodes, target="all", n_boot=20)                 # the node-weighted mean: another number
  assert {r["config_id"]: r["mean_alignment"] for r in plain["ranking"]}["A"] != pytest.approx(want["A"].mean())
  with pytest.raises(ValueError, match="pass success_rates"):
    decision.decide(nodes, target="trained")
  with pytest.raises(ValueError, match=r"no base success rate for questions \['q00'\]"):
    decision.decide(nodes, target="trained", success_rates=rates.drop("q00"))


def test_the_power_rule_of_the_trained_group_counts_questions():
  nodes, rates = _nodes(1, n_questions=8)
  v = decision.decide(nodes, target="trained", success_rates=rates, n_boot=20)
  assert v["verdict"] == "underpowered" and v["min_nodes"] == 0
  assert v["ranking"][0]["short"] == "8 questions with a defined alignment, need 10"


def test_the_report_reads_the_success_rates_from_the_rollout_records(tmp_path):
  nodes, rates = _nodes(2)
  for table, frame in (("nodes", nodes), ("rollouts", pd.DataFrame(
      [dict(question_id=q, rollout_id=r, reward=float(r < 8 * s)) for q, s in rates.items() for r in range(8)]))):
    directory = tmp_path / "records" / table
    directory.mkdir(parents=True)
    for q, part in frame.groupby("question_id"):
      part.to_parquet(directory / f"part-{q}.parquet")
  (tmp_path / "config.json").write_text(json.dumps({"name": "t", "report": {"target": "trained"}}))
  report.write_summary(str(tmp_path), n_boot=30, n_boot_predictors=5, plot=False, html=False, pages=0,
                       target="trained")
  v = json.loads((tmp_path / "verdict.json").read_text())
  want = decision.decide(nodes, target="trained", success_rates=rates, n_boot=30)
  assert v["target"] == "trained" and v["best"] == want["best"] and v["line"] == want["line"]
  assert v["router"]["target"] == "all" and "on all nodes as training weighs them" in v["validation"][0]
  assert "alignment_trained" in v["validation"][0]
  shutil.rmtree(tmp_path / "records" / "rollouts")           # no rollout records: no rates, one error naming them
  with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "records" / "rollouts"))):
    report.write_summary(str(tmp_path), n_boot=30, n_boot_predictors=5, plot=False, html=False, pages=0,
                         target="trained")


def test_the_config_accepts_the_trained_target_and_balances_its_node_rollouts():
  config = smoke.get_config()
  config.report.target = "trained"
  preflight.validate(config)                                      # accepted
  config.report.target = "trianed"
  with pytest.raises(ValueError, match=r"config.report.target must be 'incorrect', 'correct', 'all' or 'trained'"):
    preflight.validate(config)
  assert common.on_nodes("trained") == "on all nodes as training weighs them"
  assert common.on_nodes("correct") == "on correct nodes"
  # budget.node_group=target draws node rollouts of the target group; for "trained" (as for "all"): both, balanced.
  v = types.SimpleNamespace(responses=["x"] * 6, finished=[True] * 6, correct=[True, True, True, False, False, False])
  for target, want in (("trained", [0, 3]), ("all", [0, 3]), ("incorrect", [3, 4]), ("correct", [0, 1])):
    env = types.SimpleNamespace(spec=types.SimpleNamespace(
        budget=types.SimpleNamespace(prefer_finished=False, node_group="target", node_rollouts_per_question=2),
        looks=types.SimpleNamespace(target=target)))
    assert questions.choose_node_rollouts(env, v) == want, target


def test_the_trained_group_is_v2s_primary_predictor():
  """The verdict's per-configuration mean on the trained group is benchmarks/v2_analysis.trained_alignment's value
  (validation v2's primary predictor, which hypothesis.md tests against the training gains)."""
  from benchmarks import v2_analysis  # pylint: disable=g-import-not-at-top
  nodes, rates = _nodes(3)
  confs, qs = ["A", "B", "C"], sorted(rates.index)
  num, den, _ = v2_analysis.trained_alignment(nodes, rates.rename_axis("question_id").rename("success_rate")
                                              .reset_index(), confs, qs)
  rows = common.trained_rows(nodes, rates)
  got = rows.groupby("config_id").alignment.mean().loc[confs].to_numpy()
  np.testing.assert_allclose(got, num.sum(1) / den.sum(1), rtol=1e-12)
