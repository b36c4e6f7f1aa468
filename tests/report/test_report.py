"""Tests for opd_jax.estimators.stats (bootstrap, Spearman, AUROC, oracle filter) and opd_jax.report (summary files, CLI)."""
import errno
import json
import os
import pathlib
import re
import socket
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sp_stats

from opd_jax import atomic
from opd_jax import records
from opd_jax.report import cli
from opd_jax import report
from opd_jax.report import predictors
from opd_jax.estimators import stats

REPO = pathlib.Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------------------------- cluster bootstrap

def reference_cluster_bootstrap(values, clusters, stat, n_boot, level, seed):
  """The documented protocol, written as a plain loop over replicates and a dict of cluster members."""
  values, clusters = np.asarray(values, float), np.asarray(clusters)
  keep = ~np.isnan(values)
  values, clusters = values[keep], clusters[keep]
  labels = sorted(set(clusters.tolist()))
  members = {g: values[clusters == g] for g in labels}
  draws = np.random.default_rng(seed).integers(0, len(labels), size=(n_boot, len(labels)))
  reps = [stat(np.concatenate([members[labels[i]] for i in row])) for row in draws]
  alpha = (1 - level) / 2
  return stat(values), np.quantile(reps, alpha), np.quantile(reps, 1 - alpha)


def test_one_cluster_per_value_is_the_ordinary_bootstrap():
  rng = np.random.default_rng(1)
  values = rng.normal(size=40)
  n_boot, seed = 500, 3
  idx = np.random.default_rng(seed).integers(0, 40, size=(n_boot, 40))
  for stat, reps in ((np.mean, values[idx].mean(axis=1)), (np.median, np.median(values[idx], axis=1))):
    est, lo, hi = stats.cluster_bootstrap_ci(values, np.arange(40), stat=stat, n_boot=n_boot, seed=seed)
    np.testing.assert_allclose(est, stat(values), rtol=1e-12)
    np.testing.assert_allclose([lo, hi], np.quantile(reps, [0.025, 0.975]), rtol=1e-12)
    assert lo < est < hi


def test_clustered_bootstrap_matches_reference_loop_for_mean_and_other_stats():
  rng = np.random.default_rng(2)
  sizes = rng.integers(1, 9, size=12)
  clusters = np.repeat([f"q{i:02d}" for i in range(12)], sizes)
  values = rng.normal(size=clusters.size) + np.repeat(rng.normal(size=12), sizes)
  values[[0, 5, 17]] = np.nan
  perm = rng.permutation(values.size)                       # members of a cluster need not be contiguous
  values, clusters = values[perm], clusters[perm]
  for stat in (np.mean, lambda v: float(np.mean(v)), np.median):
    got = stats.cluster_bootstrap_ci(values, clusters, stat=stat, n_boot=300, level=0.9, seed=7)
    want = reference_cluster_bootstrap(values, clusters, stat, 300, 0.9, 7)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_bootstrap_nan_dropping_determinism_and_empty_input():
  rng = np.random.default_rng(3)
  values, clusters = rng.normal(size=30), np.repeat(np.arange(10), 3)
  with_nan = np.concatenate([values, [np.nan, np.nan]])
  a = stats.cluster_bootstrap_ci(with_nan, np.concatenate([clusters, [0, 99]]), n_boot=200, seed=5)
  b = stats.cluster_bootstrap_ci(values, clusters, n_boot=200, seed=5)
  assert a == b                                           # NaN rows (and a cluster with only NaN) dropped
  assert stats.cluster_bootstrap_ci(values, clusters, n_boot=200, seed=6) != b
  assert all(np.isnan(stats.cluster_bootstrap_ci([], [], n_boot=10)))
  assert all(np.isnan(stats.cluster_bootstrap_ci([np.nan, np.nan], ["a", "b"], n_boot=10)))
  with pytest.raises(ValueError, match="same length"):
    stats.cluster_bootstrap_ci([1.0, 2.0], [0], n_boot=10)
  with pytest.raises(ValueError, match="n_boot"):
    stats.cluster_bootstrap_ci([1.0], [0], n_boot=0)
  with pytest.raises(ValueError, match="level"):
    stats.cluster_bootstrap_ci([1.0], [0], level=1.0)


def test_interval_width_shrinks_with_more_clusters():
  rng = np.random.default_rng(4)
  widths = []
  for n_clusters in (20, 500):
    values = rng.normal(size=n_clusters * 5)
    _, lo, hi = stats.cluster_bootstrap_ci(values, np.repeat(np.arange(n_clusters), 5), n_boot=1000)
    widths.append(hi - lo)
  assert widths[1] < widths[0] / 3                          # sqrt(25) = 5 in expectation


def test_clusters_are_resampled_as_units():
  # A shared effect per question makes its nodes correlated: the cluster interval must be much wider than the
  # interval that treats the 400 nodes as independent (design effect sqrt(1 + (m - 1) rho) ~ 4.4 here).
  rng = np.random.default_rng(5)
  clusters = np.repeat(np.arange(20), 20)
  values = np.repeat(rng.normal(size=20), 20) + 0.1 * rng.normal(size=400)
  _, lo_c, hi_c = stats.cluster_bootstrap_ci(values, clusters, n_boot=1000)
  _, lo_i, hi_i = stats.cluster_bootstrap_ci(values, np.arange(400), n_boot=1000)
  assert hi_c - lo_c > 3 * (hi_i - lo_i)


# ------------------------------------------------------------------------------------------- spearman and auroc

def test_rankdata_and_spearman_match_scipy_with_ties_nan_and_inf():
  rng = np.random.default_rng(6)
  x = np.round(rng.normal(size=200), 1)                     # many ties
  y = np.round(x + rng.normal(size=200), 1)
  np.testing.assert_allclose(stats.rankdata(x), sp_stats.rankdata(x))
  np.testing.assert_allclose(stats.spearman(x, y), sp_stats.spearmanr(x, y).statistic, atol=1e-12)
  x[[3, 9]], y[[4, 9, 11]] = np.nan, np.nan
  x[[20, 21]], x[22] = np.inf, -np.inf                      # kept: ranked last / first
  keep = ~(np.isnan(x) | np.isnan(y))
  np.testing.assert_allclose(stats.spearman(x, y), sp_stats.spearmanr(x[keep], y[keep]).statistic, atol=1e-12)
  assert np.isnan(stats.spearman([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]))
  assert np.isnan(stats.spearman([1.0, np.nan], [2.0, 3.0]))


def brute_force_auroc(scores, labels):
  pos, neg = scores[labels][:, None], scores[~labels][None, :]
  return ((pos > neg).sum() + 0.5 * (pos == neg).sum()) / (pos.size * neg.size)


def trapezoid_roc_auroc(scores, labels):
  """Area under the empirical ROC curve, thresholds at every distinct score (ties give diagonal segments)."""
  thresholds = np.unique(scores)[::-1]
  tpr = np.r_[0.0, [(scores[labels] >= t).mean() for t in thresholds]]
  fpr = np.r_[0.0, [(scores[~labels] >= t).mean() for t in thresholds]]
  return float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2))


def test_auroc_matches_pairwise_count_and_roc_curve():
  rng = np.random.default_rng(7)
  labels = rng.uniform(size=150) < 0.4
  scores = np.round(rng.normal(size=150) + labels, 1)       # ties within and across classes
  got = stats.auroc(scores, labels)
  np.testing.assert_allclose(got, brute_force_auroc(scores, labels), atol=1e-12)
  np.testing.assert_allclose(got, trapezoid_roc_auroc(scores, labels), atol=1e-12)
  np.testing.assert_allclose(stats.auroc(-scores, labels), 1 - got, atol=1e-12)
  np.testing.assert_allclose(stats.auroc(scores, labels.astype(int)), got)
  scores_nan = scores.copy()
  scores_nan[:5] = np.nan
  np.testing.assert_allclose(stats.auroc(scores_nan, labels), brute_force_auroc(scores[5:], labels[5:]))
  assert stats.auroc([np.inf, 0.0, 1.0], [True, False, False]) == 1.0
  assert np.isnan(stats.auroc([1.0, 2.0], [True, True]))
  with pytest.raises(ValueError, match="labels"):
    stats.auroc([1.0, 2.0], [0, 2])


# ----------------------------------------------------------------------------------------------------- summary

CONFIGS = (("solution", "self", "solution", "reverse_kl", np.nan), ("jsd", "teacher-1.5b", "plain", "jsd", 0.5))


def synthetic_nodes(seed=0, n_questions=6, n_positions=5):
  """2 configs x 6 questions x (1 correct + 1 incorrect rollout) x 5 positions, with NaN alignments.

  solution/correct: positions 0-3 degenerate -> 6 defined nodes (underpowered); jsd/incorrect: position 0 of
  questions 0-2 has a zero distillation gradient, position 1 of question 5 has no context -> 26 defined.
  """
  rng = np.random.default_rng(seed)
  rows = []
  for qi in range(n_questions):
    for rollout_id, correct in ((0, True), (1, False)):
      for pos in range(n_positions):
        for config_id, teacher, context, divergence, beta in CONFIGS:
          reason = ""
          if config_id == "solution" and correct and pos < 4:
            reason = "degenerate"
          elif config_id == "jsd" and not correct and pos == 0 and qi < 3:
            reason = "zero_distillation_gradient"
          elif config_id == "jsd" and not correct and pos == 1 and qi == 5:
            reason = "context_unavailable"
          kl = float(rng.exponential())
          align = np.nan if reason else float(np.tanh(0.5 * kl + rng.normal() - 0.3 * correct))
          rows.append(dict(
              config_id=config_id, question_id=f"q{qi}", rollout_id=rollout_id, position=pos, teacher=teacher,
              context=context, divergence=divergence, beta=beta, clip=np.nan, correct=correct,
              sampled_token=int(rng.integers(100)), candidates=[1, 2, 3], p=[0.2, 0.3, 0.5],
              alignment=align, alignment_nan_reason=reason, degenerate=reason == "degenerate",
              teacher_advantage=0.0 if reason == "degenerate" else float(rng.normal()),
              noise_ceiling=float(rng.uniform()), kl_pq=kl, cosine=float(rng.uniform()),
              logq_minus_logp=np.inf if pos == 4 and qi == 0 else float(rng.normal())))
  return pd.DataFrame(rows)


def write_parts(nodes, workdir):
  directory = workdir / "records" / "nodes"
  directory.mkdir(parents=True)
  for question_id, part in nodes.groupby("question_id"):
    part.to_parquet(directory / f"part-{question_id}.parquet")


def underpowered_lines(markdown):
  return {(m[0], m[1]): int(m[2]) for m in re.findall(r"UNDERPOWERED: (\S+) / (\S+): only (\d+) non", markdown)}


def test_summarize_counts_means_and_correlations_match_pandas():
  nodes = synthetic_nodes()
  summary = summarize_fast(nodes)
  predictor_table = predictors.predictor_table(nodes, n_boot=100)
  assert list(summary["config_id"]) == ["solution"] * 3 + ["jsd"] * 3
  assert list(summary["group"]) == ["correct", "incorrect", "all"] * 2
  for _, row in summary.iterrows():
    sub = nodes[nodes.config_id == row.config_id]
    if row.group != "all":
      sub = sub[sub.correct == (row.group == "correct")]
    reasons = sub.alignment_nan_reason
    assert row.n_nodes == len(sub)
    assert row.n_defined == sub.alignment.notna().sum()
    assert row.n_degenerate == sub.degenerate.sum() == (reasons == "degenerate").sum()
    assert row.n_nondegenerate == len(sub) - sub.degenerate.sum()
    assert row.n_zero_distillation_gradient == (reasons == "zero_distillation_gradient").sum()
    assert row.n_context_unavailable == (reasons == "context_unavailable").sum()
    assert row.n_nan_other == 0
    assert row.n_questions == sub.question_id.nunique()
    np.testing.assert_allclose(row.mean_alignment, sub.alignment.mean(), rtol=1e-12)   # pandas skips NaN
    np.testing.assert_allclose(row.alignment_std, sub.alignment.std(), rtol=1e-12)
    np.testing.assert_allclose(row.mean_teacher_advantage, sub.teacher_advantage.mean(), rtol=1e-12)
    np.testing.assert_allclose(row.mean_split_half_ceiling, sub.noise_ceiling[sub.alignment.notna()].mean(),
                               rtol=1e-12)
    assert row.alignment_ci_lo <= row.mean_alignment <= row.alignment_ci_hi
    defined = sub[sub.alignment.notna()]
    # 6 questions < 10: every group is underpowered by the question count, whatever its node count.
    assert row.underpowered and row.n_defined_questions == defined.question_id.nunique()
    np.testing.assert_allclose(row.oracle_kept_share, (defined.alignment > 0).mean())
    if row.group == "all":
      table = predictor_table[predictor_table.config_id == row.config_id].set_index("predictor")
      for name in ("kl_pq", "cosine", "logq_minus_logp"):
        np.testing.assert_allclose(table.loc[name, "spearman"],
                                   sp_stats.spearmanr(defined[name], defined.alignment).statistic, atol=1e-12)
        np.testing.assert_allclose(table.loc[name, "auroc"], brute_force_auroc(
            defined[name].to_numpy(), defined.alignment.to_numpy() > 0), atol=1e-12)
        assert table.loc[name, "auroc_lo"] <= table.loc[name, "auroc"] <= table.loc[name, "auroc_hi"]
  counts = summary.set_index(["config_id", "group"])
  assert counts.loc[("solution", "correct"), "n_defined"] == 6
  assert counts.loc[("jsd", "incorrect"), "n_defined"] == 26
  relaxed = summarize_fast(nodes, min_questions=1)
  assert list(relaxed.loc[relaxed.underpowered, ["config_id", "group"]].itertuples(index=False, name=None)) == [
      ("solution", "correct")]
  # alignment was generated increasing in kl_pq: the predictor columns are read from the right rows.
  assert predictor_table.set_index(["config_id", "predictor"]).loc[("jsd", "kl_pq"), "spearman"] > 0


def summarize_fast(nodes, **kwargs):
  return report.summarize(nodes, n_boot=300, **kwargs)


def test_every_nan_reason_the_study_writes_is_counted_by_name():
  """records.NAN_REASONS is every non-empty alignment_nan_reason (the estimator's three, then the study's context
  reason and a cross-tokenizer view's two), and the summary counts each under its own column: none falls into
  n_nan_other."""
  assert records.NAN_REASONS == ("degenerate", "zero_distillation_gradient", "zero_ideal_gradient",
                                 "context_unavailable", "teacher_normalizes_text", "teacher_state_bound")
  nodes = synthetic_nodes()
  ideal = (nodes.config_id == "jsd") & ~nodes.correct & (nodes.position == 3)           # 6 nodes, one per question
  nodes.loc[ideal, ["alignment", "alignment_nan_reason"]] = [np.nan, "zero_ideal_gradient"]
  summary = summarize_fast(nodes).set_index(["config_id", "group"])
  assert summary.loc[("jsd", "incorrect"), "n_zero_ideal_gradient"] == 6
  assert summary.loc[("jsd", "incorrect"), "n_zero_distillation_gradient"] == 3
  assert summary.loc[("jsd", "incorrect"), "n_context_unavailable"] == 1
  assert (summary["n_nan_other"] == 0).all()
  nodes.loc[ideal, "alignment_nan_reason"] = records.TEACHER_NORMALIZES_TEXT
  summary = summarize_fast(nodes).set_index(["config_id", "group"])
  assert summary.loc[("jsd", "incorrect"), "n_teacher_normalizes_text"] == 6
  assert (summary["n_teacher_state_bound"] == 0).all() and (summary["n_nan_other"] == 0).all()


def test_summarize_empty_group_and_bad_input():
  nodes = synthetic_nodes()
  only_correct = summarize_fast(nodes[nodes.correct])
  row = only_correct[(only_correct.config_id == "jsd") & (only_correct.group == "incorrect")].iloc[0]
  assert row.n_nodes == 0 and row.underpowered and np.isnan(row.mean_alignment)
  with pytest.raises(ValueError, match="missing columns.*alignment"):
    report.summarize(nodes.drop(columns=["alignment"]))
  with pytest.raises(ValueError, match="duplicate"):
    report.summarize(pd.concat([nodes, nodes.iloc[:1]]))
  bad = nodes.copy()
  bad.loc[bad.config_id == "jsd", "teacher"] = ["a", "b"] * (len(bad[bad.config_id == "jsd"]) // 2)
  with pytest.raises(ValueError, match="several teacher"):
    report.summarize(bad)
  with pytest.raises(ValueError, match="empty"):
    report.summarize(nodes.iloc[:0])


def test_write_summary_files_markdown_and_cli(tmp_path):
  nodes = synthetic_nodes()
  workdir = tmp_path / "run"
  write_parts(nodes, workdir)
  (workdir / "config.json").write_text(json.dumps({"name": "smoke", "student": {"name": "tiny-student"}}))
  (workdir / "records" / "rollouts").mkdir()
  for qi in range(6):
    pd.DataFrame({"question_id": [f"q{qi}"] * 2, "rollout_id": [0, 1], "reward": [1.0, 0.0], "text": ["a", "b"]}
                 ).to_parquet(workdir / "records" / "rollouts" / f"part-q{qi}.parquet")
  markdown = report.write_summary(str(workdir), n_boot=300, seed=1, html=False)
  assert (workdir / "summary.md").read_text() == markdown
  assert not [p for p in os.listdir(workdir) if p.endswith(".tmp")]
  # The parquet round trip and the CSV give back the in-memory summary.
  want = summarize_fast(nodes, seed=1)
  got = pd.read_csv(workdir / "summary.csv")
  assert list(got.columns) == list(want.columns)
  numeric = [c for c in want.columns if pd.api.types.is_numeric_dtype(want[c])]
  np.testing.assert_allclose(got[numeric].to_numpy(float), want[numeric].to_numpy(float), rtol=1e-12)
  assert markdown.startswith("# opd_jax summary: smoke\n")
  assert "`student.name`: tiny-student" in markdown
  assert "- **rollouts**: 12 rollouts, 6 questions, accuracy 0.500\n" in markdown
  assert underpowered_lines(markdown)[("solution", "correct")] == 6
  assert "only 6 questions (< 10)" in markdown and "## Verdict" in markdown
  jsd_all = want[(want.config_id == "jsd") & (want.group == "all")].iloc[0]
  assert f"| jsd | all | 60 | 56 | 0 | 3 | 1 | 0 | 6 | {jsd_all.mean_alignment:.4f} |" in markdown
  assert "| jsd | teacher-1.5b | plain | jsd(beta=0.5) |" in markdown

  os.remove(workdir / "summary.md")
  env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
  run = subprocess.run([sys.executable, "-m", "opd_jax.report", f"--workdir={workdir}", "--n_boot=300", "--seed=1",
                        "--nohtml"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False)
  assert run.returncode == 0, run.stderr
  assert run.stdout.strip() == report.results_text(workdir)          # the verdict and the table, not summary.md
  assert (workdir / "summary.md").read_text() == markdown
  # Without --target / --min_effect the report reads the study's own (config.json's report), as the study does,
  # also where --workdir is a glob (read once it is expanded).
  (workdir / "config.json").write_text(json.dumps({"name": "smoke", "student": {"name": "tiny-student"},
                                                   "report": {"target": "correct", "min_effect": 0.2}}))
  own = report.write_summary(str(workdir), n_boot=300, seed=1, html=False, target="correct", min_effect=0.2)
  assert own != markdown
  run = subprocess.run([sys.executable, "-m", "opd_jax.report", f"--workdir={tmp_path / 'ru[n]'}", "--n_boot=300",
                        "--seed=1", "--nohtml"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
                       check=False)
  assert run.returncode == 0, run.stderr
  assert (workdir / "summary.md").read_text() == own and "NOT A DECISION" not in own
  assert not (workdir / "lock.0.json").exists()          # the rebuild held the study's lock and let it go
  # With --out, a report at another target goes there, also beside a running study (a live lock); the study's own
  # files stay as they are.
  before = {f: (workdir / f).read_bytes() for f in ("summary.md", "summary.csv", "verdict.json")}
  running = json.dumps({"pid": os.getpid(), "host": socket.gethostname()})
  (workdir / "lock.0.json").write_text(running)
  run = subprocess.run([sys.executable, "-m", "opd_jax.report", f"--workdir={workdir}", "--n_boot=300", "--seed=1",
                        "--nohtml", "--target=all", f"--out={tmp_path / 'other'}"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=60, check=False)
  assert run.returncode == 0, run.stderr
  assert {f: (workdir / f).read_bytes() for f in before} == before
  other = (tmp_path / "other" / "summary.md").read_text()
  assert other == report.write_summary(str(workdir), n_boot=300, seed=1, html=False, target="all", min_effect=0.2,
                                       unplanned=cli.unplanned_reason(workdir, "all", "alignment"),
                                       out_dir=str(tmp_path / "other2")) and "on all nodes" in other
  assert f"records: {workdir / 'records'}  report: {tmp_path / 'other' / 'report.html'}" in run.stdout
  # Without --out, another target than the planned one is refused: it would replace the study's planned verdict.
  run = subprocess.run([sys.executable, "-m", "opd_jax.report", f"--workdir={workdir}", "--n_boot=300", "--nohtml",
                        "--target=all"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False)
  assert run.returncode == 2 and run.stderr == (
      "error: --target: differs from the study's planned config.report.target='correct' and would replace its own "
      "verdict files, got 'all'; pass --out=<folder> for this report (the study's own files stay as they are)\n")
  assert {f: (workdir / f).read_bytes() for f in before} == before
  # Without --out, rebuilding the study's own report beside a running study is refused (its lock is left).
  run = subprocess.run([sys.executable, "-m", "opd_jax.report", f"--workdir={workdir}", "--n_boot=300", "--nohtml"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False)
  assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
  assert run.stderr.startswith(f"error: --workdir={workdir} is in use by another run with process index 0 (pid "
                               f"{os.getpid()}") and run.stderr.endswith("; or pass --out=<folder> for a report "
                                                                         "beside the running study\n")
  assert {f: (workdir / f).read_bytes() for f in before} == before and (workdir / "lock.0.json").read_text() == running


def test_underpowered_lines_follow_min_nodes():
  summary = summarize_fast(synthetic_nodes(), min_nodes=27, min_questions=1)
  markdown = report.render_markdown(summary, title="t", meta={"a": 1})
  assert underpowered_lines(markdown) == {("solution", "correct"): 6, ("jsd", "incorrect"): 26}
  assert "(< 27)" in markdown


def test_missing_or_empty_records_name_the_directory(tmp_path):
  with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "records" / "nodes"))):
    report.write_summary(str(tmp_path))
  (tmp_path / "records" / "nodes").mkdir(parents=True)
  with pytest.raises(FileNotFoundError, match="no part-"):
    report.write_summary(str(tmp_path))


def test_plot_written_and_linked(tmp_path):
  write_parts(synthetic_nodes(), tmp_path)
  markdown = report.write_summary(str(tmp_path), n_boot=50, html=False)
  assert (tmp_path / "alignment.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  assert "](alignment.png)" in markdown
  os.remove(tmp_path / "alignment.png")
  assert "alignment.png" not in report.write_summary(str(tmp_path), n_boot=50, plot=False, html=False)
  assert not (tmp_path / "alignment.png").exists()


def test_rollout_html_colours_nodes_and_predictors():
  nodes = synthetic_nodes()
  columns = ["question_id", "rollout_id", "position", "teacher", "context", "kl_pq", "cosine"]
  tokens = nodes[columns + ["sampled_token"]].rename(columns={"sampled_token": "token"})
  extra = tokens[tokens.position == 0].assign(position=5, token=7, kl_pq=0.0)   # a position without a node
  tokens = pd.concat([tokens, extra], ignore_index=True)
  page = report.rollout_html(nodes, tokens, question_id="q1", rollout_id=0, config_id="solution",
                             decode=lambda t: "<b>" if t == 7 else f"t{t}")
  spans = re.findall(r'<span title="([^"]*)" style="([^"]*)">([^<]*)</span>', page)
  assert len(spans) == 6 and spans[-1][2] == "&lt;b&gt;" and spans[-1][1] == ""
  rows = nodes[(nodes.config_id == "solution") & (nodes.question_id == "q1") & (nodes.rollout_id == 0)]
  for (tip, style, _), (_, node) in zip(spans, rows.sort_values("position").iterrows()):
    assert f"position {node.position};" in tip
    if np.isnan(node.alignment):
      assert style == "border:1px dashed grey" and "undefined: degenerate" in tip
    else:                                                 # a = 0.5 -> rgb(128,255,128); a = -0.5 -> rgb(255,128,128)
      fade = int(round(255 * (1 - abs(node.alignment))))
      want = f"rgb({fade},255,{fade})" if node.alignment > 0 else f"rgb(255,{fade},{fade})"
      assert style == f"background:{want};font-weight:bold"
  by_kl = report.rollout_html(nodes, tokens, question_id="q1", rollout_id=0, config_id="jsd", colour_by="kl_pq")
  kl = tokens[(tokens.question_id == "q1") & (tokens.rollout_id == 0) & (tokens.teacher == "teacher-1.5b")]
  fades = np.round(255 * (1 - kl.sort_values("position").kl_pq / kl.kl_pq.abs().max())).astype(int)
  assert re.findall(r'style="background:([^"]*)"', by_kl) == [f"rgb({f},255,{f})" for f in fades]
  assert "rgb(0,255,0)" in by_kl                          # the largest KL is fully saturated
  with pytest.raises(ValueError, match="colour_by"):
    report.rollout_html(nodes, tokens, question_id="q1", rollout_id=0, config_id="jsd", colour_by="nope")
  with pytest.raises(ValueError, match="no tokens"):
    report.rollout_html(nodes, tokens, question_id="q9", rollout_id=0, config_id="jsd")


def test_where_table_skips_nodes_without_a_bin():
  """An argmax feature that is neither 0 nor 1 (NaN: the node's argmax is undefined) gets no bin instead of
  crashing the report (a real default-study run crashed here)."""
  from opd_jax.estimators import stats  # pylint: disable=g-import-not-at-top
  from opd_jax.report import where  # pylint: disable=g-import-not-at-top
  nodes = pd.DataFrame({"question_id": ["a", "a", "b", "b"], "alignment": [0.5, -0.2, 0.1, np.nan],
                        "teacher_advantage": [0.1, 0.0, -0.1, 0.2], "config_id": ["c"] * 4,
                        "correct": [True, False, True, False]})
  features = pd.DataFrame({"argmax": [1.0, 0.0, np.nan, 1.0]})
  table = where.where_table(nodes, features, stats.ClusterBootstrap(nodes["question_id"], n_boot=20, seed=0))
  assert set(table["bin"]) == {"argmax", "not argmax"}
  got = table.query("group == 'correct' and bin == 'argmax'")
  assert got["n_defined"].tolist() == [1] and got["mean_alignment"].tolist() == [0.5]


def test_the_reports_own_lock_refuses_a_live_run_names_an_unwritable_workdir_and_is_let_go(tmp_path, monkeypatch):
  """cli.own_report_lock (the report CLI's rebuild of a study's own files): a live holder is one ValueError naming
  --out; a lock file that cannot be created is the WriteError of stage "report" with its fix; a failure inside the
  rebuild lets the lock go."""
  lock = tmp_path / "lock.0.json"
  with pytest.raises(RuntimeError, match="inside"):
    with cli.own_report_lock(tmp_path):
      assert json.loads(lock.read_text())["pid"] == os.getpid()
      raise RuntimeError("inside the rebuild")
  assert not lock.exists()
  disk_full = OSError(errno.ENOSPC, "No space left on device")       # the rebuild's own OSError: passed on as it is
  with pytest.raises(OSError) as raised:
    with cli.own_report_lock(tmp_path):
      raise disk_full
  assert raised.value is disk_full and not lock.exists()
  lock.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
  with pytest.raises(ValueError, match=r"is in use by another run .*; or pass --out=<folder> for a report beside the "
                                       r"running study$"):
    with cli.own_report_lock(tmp_path):
      pytest.fail("entered")
  lock.unlink()
  real_open = os.open
  def unwritable(path, *args, **kwargs):
    if str(path) == str(lock):
      raise PermissionError(errno.EACCES, "Permission denied", str(path))
    return real_open(path, *args, **kwargs)
  monkeypatch.setattr(os, "open", unwritable)
  with pytest.raises(atomic.WriteError) as e:
    with cli.own_report_lock(tmp_path):
      pytest.fail("entered")
  assert str(e.value).startswith(f"report: cannot write {lock}: Permission denied (EACCES); make the folder writable")
