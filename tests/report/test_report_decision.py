"""Issue 14, item 1 and issue 25 (the decision): planted effects are found, null effects are not, the error rates
hold with few questions and a best chosen from the data (a reduced run of benchmarks/verdict_calibration.py), and
the decision table is recomputable from the parquet records with numpy and statsmodels."""
import html
import json

import numpy as np
import pandas as pd
import pytest
from scipy import integrate
from scipy import stats as sp_stats
import statsmodels.api as sm

from benchmarks import verdict_calibration as calibration
from opd_jax import records
from opd_jax import report
from opd_jax.report import compare
from opd_jax.report import decision
from opd_jax.report import validation_note
from opd_jax.report import verdict_text


def planted(seed, effect, n_questions=40, n_nodes=10, sd=0.8, question_sd=0.3):
  """A and B on the same 40 x 10 incorrect nodes: alignment = question effect + node noise (sd 0.8, each
  config its own), A = B + effect on every paired node (plus a per-question wobble of the difference)."""
  rng = np.random.default_rng(seed)
  rows = []
  for qi in range(n_questions):
    q_effect, q_diff = rng.normal(0, question_sd), rng.normal(0, 0.05)
    for pos in range(n_nodes):
      base = q_effect + rng.normal(0, sd, size=2)
      for config_id, value in (("A", base[0] + effect + q_diff), ("B", base[1])):
        rows.append(dict(config_id=config_id, question_id=f"q{qi:02d}", rollout_id=0, position=pos,
                         teacher="t", context="plain", divergence="reverse_kl", correct=False,
                         alignment=value, alignment_nan_reason="", degenerate=False,
                         teacher_advantage=0.1 * value))
  return pd.DataFrame(rows)


SEEDS = range(30)


def test_planted_effect_is_named_and_null_is_indistinguishable():
  found, null_ok = 0, 0
  for seed in SEEDS:
    v = decision.decide(planted(seed, 0.2), n_boot=400, seed=seed)
    top = v["comparisons"][0]
    found += v["verdict"] == "use" and v["best"] == "A" and top["ci_hi"] < 0
    v0 = decision.decide(planted(seed + 1000, 0.0), n_boot=400, seed=seed)
    null_ok += v0["verdict"] == "indistinguishable"
    if v0["verdict"] == "indistinguishable":
      assert v0["line"].startswith("no configuration is shown better on incorrect nodes: ")
      assert v0["line"].endswith(", 95% simultaneous") and " - " in v0["line"]
  assert found >= 0.9 * len(SEEDS), found
  assert null_ok >= 0.9 * len(SEEDS), null_ok


def test_underpowered_target_decides_nothing():
  nodes = planted(0, 0.5, n_questions=6)          # 60 nodes per config but only 6 questions
  v = decision.decide(nodes, n_boot=200)
  assert v["verdict"] == "underpowered" and v["line"] == (
      "no configuration is shown better on incorrect nodes: UNDERPOWERED, A has 6 questions with a defined alignment, "
      "needs 10")
  assert v["details"][0].startswith(
      "UNDERPOWERED on incorrect nodes (A: 6 questions with a defined alignment, need 10): no decision")
  assert all(r["underpowered"] for r in v["ranking"])
  # One question: nothing is comparable, nothing distinguishable, power not estimable (it printed p 0.000 and
  # "distinguishable: yes" with zero-width intervals).
  one = decision.decide(planted(0, 0.5, n_questions=1), n_boot=200)
  assert one["verdict"] == "underpowered" and one["family_size"] == 0
  assert [(c["comparable"], c["distinguishable"], np.isnan(c["ci_lo"])) for c in one["comparisons"]] == [
      (False, False, True)]
  assert not one["power"]["estimable"] and "not estimable" in verdict_text.power_text(one["power"])


def three_configs(seed=0):
  """A, B, C with NaN alignments and unequal node sets; correct and incorrect rollouts."""
  rng = np.random.default_rng(seed)
  frames = []
  for shift, config_id in ((0.15, "A"), (0.0, "B"), (-0.2, "C")):
    df = planted(seed, 0.0, n_questions=14, n_nodes=6).query("config_id == 'A'").copy()
    df["config_id"] = config_id
    df["alignment"] = df["alignment"] + shift + rng.normal(0, 0.3, len(df))
    df["correct"] = df["position"] % 3 == 0
    nan = rng.random(len(df)) < 0.15
    df.loc[nan, "alignment"] = np.nan
    df.loc[nan, "alignment_nan_reason"] = "zero_distillation_gradient"
    frames.append(df)
  return pd.concat(frames, ignore_index=True)


def test_decision_table_recomputed_from_parquet_with_numpy(tmp_path):
  nodes = three_configs()
  directory = tmp_path / "records" / "nodes"
  directory.mkdir(parents=True)
  for q, part in nodes.groupby("question_id"):
    part.to_parquet(directory / f"part-{q}.parquet")
  report.write_summary(str(tmp_path), n_boot=300, seed=2, html=False)
  verdict = json.loads((tmp_path / "verdict.json").read_text())
  df = pd.concat([pd.read_parquet(p) for p in sorted(directory.glob("part-*.parquet"))])
  tgt = df[(~df["correct"]) & df["alignment"].notna()]
  key = ["question_id", "rollout_id", "position"]
  series = {c: tgt[tgt.config_id == c].set_index(key).alignment for c in "ABC"}
  # Every pair on its shared nodes: the mean, and the same CR2 / Bell-McCaffrey t test written out by hand.
  pairs = {}
  for a, b in (("A", "B"), ("A", "C"), ("B", "C")):
    shared = series[a].index.intersection(series[b].index)
    d = (series[a][shared] - series[b][shared]).to_numpy()
    g = shared.get_level_values("question_id").to_numpy()
    labels, idx = np.unique(g, return_inverse=True)
    n_g = np.bincount(idx).astype(float)
    r_g = np.bincount(idx, d - d.mean())
    se = np.sqrt(np.sum(r_g ** 2 / (d.size ** 2 * (1 - n_g / d.size))))
    pairs[a, b] = (d.mean(), se, d.size, labels.size)
  m = len(pairs)
  assert verdict["family_size"] == m and verdict["best"] == "A"      # A = B + 0.15 (C: -0.2) on the same nodes
  for comp in verdict["comparisons"]:
    mean, se, n, g = pairs["A", comp["config_id"]]
    np.testing.assert_allclose([comp["diff"], comp["se"], comp["n_shared"], comp["n_shared_questions"]],
                               [-mean, se, n, g], rtol=1e-10)
    half = sp_stats.t.ppf(1 - 0.05 / (2 * m), comp["df"]) * se
    np.testing.assert_allclose([comp["ci_lo"], comp["ci_hi"], comp["ci_level"]], [-mean - half, -mean + half,
                                                                                1 - 0.05 / m], rtol=1e-10)
    p = 2 * sp_stats.t.sf(abs(mean) / se, comp["df"])
    np.testing.assert_allclose([comp["p_value"], comp["p_adjusted"]], [p, min(1, m * p)], rtol=1e-10)
    assert comp["distinguishable"] == (comp["ci_hi"] < 0 or comp["ci_lo"] > 0) == (min(1, m * p) <= 0.05)
  assert verdict["verdict"] == ("use" if all(c["distinguishable"] for c in verdict["comparisons"])
                                else "indistinguishable")
  # The ranking's intervals are summary.csv's (one interval per mean in the report, not two with other ends).
  summary = pd.read_csv(tmp_path / "summary.csv").set_index(["config_id", "group"])
  for r in verdict["ranking"]:
    row = summary.loc[(r["config_id"], "incorrect")]
    np.testing.assert_allclose([r["mean_alignment"], r["ci_lo"], r["ci_hi"], r["n_questions"]],
                               [row.mean_alignment, row.alignment_ci_lo, row.alignment_ci_hi, row.n_defined_questions],
                               rtol=1e-12)
  markdown = (tmp_path / "summary.md").read_text()
  row = summary.loc[("A", "incorrect")]
  assert markdown.count(f"[{row.alignment_ci_lo:.4f}, {row.alignment_ci_hi:.4f}]") == 1
  assert "P(best)" not in markdown and verdict["line"] in markdown


def null_rates(sims, configs, questions, nodes="geom40", seed=0, through_decide=False):
  """Share of simulated studies with K equal configurations whose comparisons flag any difference, say "use", or
  whose K = 2 interval misses 0 (benchmarks/verdict_calibration.simulate)."""
  rng = np.random.default_rng(seed)
  flagged = used = missed = 0
  for _ in range(sims):
    align, q = calibration.simulate(rng, [0.0] * configs, questions, nodes)
    if through_decide:
      v = decision.decide(calibration.as_nodes(align, q), n_boot=10)
      flagged += any(c["distinguishable"] for c in v["comparisons"])
      used += v["verdict"] == "use"
      missed += any(not c["ci_lo"] <= 0 <= c["ci_hi"] for c in v["comparisons"])
    else:
      res = decision.compare_arrays(align, q)
      flagged += res["distinguishable"].any()
      used += res["verdict"] == "use"
      missed += not res["ci_lo"][0, 1] <= 0 <= res["ci_hi"][0, 1]
  return flagged / sims, used / sims, missed / sims


def test_error_rates_hold_with_few_questions_and_a_best_chosen_from_the_data():
  """Reduced benchmarks/verdict_calibration.py (fixed seeds). Before issue 25: 38% of studies with 6 equal
  configurations on 10 questions flagged one "distinguishable"; the paired interval covered 0.89 at 10 questions."""
  fwer, used, _ = null_rates(150, 6, 10, through_decide=True)
  assert fwer <= 0.08 and used == 0, (fwer, used)
  fwer3, _, _ = null_rates(400, 3, 10)
  assert fwer3 <= 0.07, fwer3
  _, false_use, miss = null_rates(1500, 2, 10)
  assert 1 - miss >= 0.93 and false_use <= 0.06, (1 - miss, false_use)


def test_sparse_configuration_is_not_comparable_and_vetoes_nothing():
  nodes = planted(3, 0.5, n_questions=30)                       # A = B + 0.5: "use A"
  sparse = nodes[(nodes.config_id == "A") & nodes.question_id.isin(["q00", "q01"])].assign(config_id="S")
  sparse["alignment"] += 2.0                                      # far ahead, on 2 questions only
  v = decision.decide(pd.concat([nodes, sparse], ignore_index=True), n_boot=100)
  assert v["verdict"] == "use" and v["best"] == "A" and v["not_comparable"] == ["S"]
  s = next(c for c in v["comparisons"] if c["config_id"] == "S")
  assert s["n_shared_questions"] == 2 and not s["comparable"] and not s["distinguishable"]
  assert "not comparable (fewer than 5 questions shared with A): S (2)" in v["details"]
  assert v["family_size"] == 1 and "S" in v["best_set"]          # untested, so never excluded from the best set
  assert [r["short"] for r in v["ranking"] if r["config_id"] == "S"] == [
      "2 questions with a defined alignment, need 10"]


def test_identical_configuration_missing_on_the_hardest_questions_is_not_ahead():
  """B equals A where defined but is missing on the 20% hardest questions: its own mean is higher (the bootstrap
  P(best) gave it 0.96); paired on shared nodes the two are identical."""
  nodes = planted(4, 0.0, n_questions=30)
  a = nodes[nodes.config_id == "A"]
  hardest = a.groupby("question_id").alignment.mean().nsmallest(6).index
  b = a[~a.question_id.isin(hardest)].assign(config_id="B")
  v = decision.decide(pd.concat([a, b], ignore_index=True), n_boot=100, min_effect=0.1)
  means = {r["config_id"]: r["mean_alignment"] for r in v["ranking"]}
  assert means["B"] > means["A"]
  c = v["comparisons"][0]
  assert v["best"] == "A" and c["diff"] == 0 and c["n_shared_questions"] == 24 and not c["distinguishable"]
  assert v["verdict"] == "indistinguishable" and v["best_set"] == ["A", "B"] and "p_best" not in v["ranking"][0]
  assert not v["power"]["estimable"] and "zero variance" in v["power"]["reason"]


def test_power_is_the_detectable_difference_and_the_questions_for_min_effect():
  nodes = planted(5, 0.05, n_questions=20)
  v = decision.decide(nodes, n_boot=100, min_effect=0.05)
  p, c = v["power"], v["comparisons"][0]
  assert p["estimable"] and p["se"] == c["se"] and p["questions"] == 20 and p["alpha"] == pytest.approx(0.05)
  # The detectable difference is the planted difference the test rejects with 80% probability on average over
  # the sampling error of se (se^2 / se_hat^2 ~ chi2_df / df; noncentral t), by quadrature here.
  c_crit, df = sp_stats.t.ppf(0.975, p["df"]), p["df"]
  nc = p["detectable_difference"] / p["se"]
  power = lambda x: (sp_stats.nct.sf(c_crit, df, nc * np.sqrt(x / df))
                     + sp_stats.nct.cdf(-c_crit, df, nc * np.sqrt(x / df))) * sp_stats.chi2.pdf(x, df)
  np.testing.assert_allclose(integrate.quad(power, 0, sp_stats.chi2.isf(1e-12, df), limit=200)[0], 0.8, atol=1e-4)
  assert p["questions_needed"] > 20 and p["more_questions"] == p["questions_needed"] - 20
  assert "to detect 0.05:" in verdict_text.power_text(p)
  with pytest.raises(ValueError, match="min_effect"):
    decision.decide(nodes, min_effect=0.0)


def test_compare_arrays_matches_statsmodels_cr1_limit_and_orders_by_paired_difference():
  """With many equal-sized questions CR2 equals statsmodels' CR1 and the df is G - 1; the ranking is the order of
  the paired differences with the best."""
  rng = np.random.default_rng(0)
  q = np.repeat(np.arange(12), 4)
  align = rng.normal(size=(q.size, 3)) + rng.normal(size=(12, 3))[q] * 0.5 + [0.0, 0.6, 0.3]
  res = decision.compare_arrays(align, q)
  assert res["best"] == 1 and list(res["order"]) == [1, 2, 0]
  d = align[:, 0] - align[:, 1]
  fit = sm.OLS(d, np.ones((d.size, 1))).fit(cov_type="cluster", cov_kwds={"groups": q}, use_t=True)
  np.testing.assert_allclose([res["diff"][0, 1], res["se"][0, 1], res["df"][0, 1]], [fit.params[0], fit.bse[0], 11],
                             rtol=1e-9)
  np.testing.assert_allclose(res["p_value"][1, 0], fit.pvalues[0], rtol=1e-9)


def test_comparison_page_stars_only_comparable_distinguishable_configurations(tmp_path):
  """A 1-question study starred every configuration "distinguishable" on the cross-study page."""
  studies = {"one": planted(6, 0.5, n_questions=1), "many": planted(6, 0.5, n_questions=30)}
  for name, nodes in studies.items():
    (tmp_path / name / "records" / "nodes").mkdir(parents=True)
    nodes.to_parquet(tmp_path / name / "records" / "nodes" / "part-0.parquet")
    (tmp_path / name / "manifest.json").write_text(json.dumps({"schema_version": records.SCHEMA_VERSION}))
  table, verdicts = compare.write([str(tmp_path / "one"), str(tmp_path / "many")], str(tmp_path / "out"), n_boot=50)
  other = table[table.config_id != table.best].set_index("study")
  assert other.loc[0, "comparable"] is False and other.loc[0, "distinguishable"] is False
  assert other.loc[1, "comparable"] is True and other.loc[1, "distinguishable"] is True
  page = (tmp_path / "out" / "comparison.html").read_text()
  assert page.count(" *</td>") == 1 and "not comparable (1 shared questions)" in page
  assert [v["verdict"] for v in verdicts] == ["underpowered", "use"]
  assert html.escape(validation_note.basis_line(verdicts[0])) in page        # what the verdicts rank on, once


def test_intervals_stay_within_what_a_difference_of_cosines_can_be():
  """5 shared questions with widely spread paired differences: the t interval (few df) is cut to [-2, 2]."""
  q = np.repeat(np.arange(5), 2)
  sign = np.repeat([1.0, -1.0, 1.0, -1.0, 1.0], 2)            # per question the paired difference is +-2
  a = np.stack([sign, -sign], axis=1)
  res = decision.compare_arrays(a, q.astype(str))
  lo, hi = res["ci_lo"][0, 1], res["ci_hi"][0, 1]
  assert -2.0 <= lo < hi <= 2.0 and (lo == -2.0 or hi == 2.0)
