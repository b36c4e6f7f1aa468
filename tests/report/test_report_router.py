"""Issue 14, items 4-6: the cross-validated router (against scipy's optimiser, planted crossing effects and a
numpy recomputation), the per-token pages (html/), and the comparison of several studies (CLI, schema check)."""
import contextlib
import io
import json
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from scipy import optimize

from opd_jax import records
from opd_jax import report
from opd_jax import terminal
from opd_jax.report import compare
from opd_jax.report import decision
from opd_jax.report import router

REPO = pathlib.Path(__file__).resolve().parents[2]


def crossing(seed, n_questions=40, n_nodes=10, sd=0.3, slope=0.5):
  """A and B on the same incorrect nodes: A = 0.05 + slope x + noise, B = -slope x + noise, x = kl_pq of the
  node (shared view); entropy_p is pure noise. A is better when the predictor is high, B when it is low."""
  rng = np.random.default_rng(seed)
  rows = []
  for qi in range(n_questions):
    for pos in range(n_nodes):
      x, noise, ent = rng.normal(), rng.normal(0, sd, 2), rng.exponential()
      for config_id, a in (("A", 0.05 + slope * x + noise[0]), ("B", -slope * x + noise[1])):
        rows.append(dict(config_id=config_id, question_id=f"q{qi:02d}", rollout_id=0, position=pos, teacher="t",
                         context="plain", divergence="reverse_kl", correct=False,
                         alignment=float(np.clip(a, -1, 1)), alignment_nan_reason="", degenerate=False,
                         teacher_advantage=0.0, kl_pq=x, entropy_p=ent))
  return pd.DataFrame(rows)


def test_fit_logistic_matches_scipy_minimiser():
  rng = np.random.default_rng(0)
  x = np.concatenate([rng.normal(size=(200, 3)), np.ones((200, 1))], axis=1)    # a constant column too
  y = rng.random(200) < 1 / (1 + np.exp(-(0.3 + x[:, :3] @ [1.0, -2.0, 0.0])))

  def loss(w, l2=1.0):
    z = w[0] + x @ w[1:]
    return np.sum(np.logaddexp(0, z) - y * z) + l2 / 2 * np.sum(w[1:] ** 2)

  want = optimize.minimize(loss, np.zeros(5), method="BFGS", options={"gtol": 1e-9}).x
  np.testing.assert_allclose(router.fit_logistic(x, y, l2=1.0), want, atol=1e-4)
  with pytest.raises(ValueError, match="non-finite"):
    router.fit_logistic(np.array([[np.nan]]), np.array([1]))


def test_router_beats_best_single_on_held_out_questions_and_stays_under_the_oracle():
  nodes = crossing(0)
  nodes.loc[nodes.index[::17], "alignment"] = np.nan            # some undefined nodes: routed among the rest
  nodes.loc[nodes.index[::17], "alignment_nan_reason"] = "zero_distillation_gradient"
  r = router.route(nodes, n_boot=300, seed=3)
  by = {row["name"]: row for row in r["rows"]}
  gain = r["router_minus_best"]
  assert gain["ci_lo"] > 0.1 and by["router"]["mean"] > max(by["A"]["mean"], by["B"]["mean"]) + 0.1
  assert 0 <= r["oracle_minus_router"]["diff"] and r["oracle_minus_router"]["ci_lo"] >= 0
  assert by["router"]["mean"] <= by["oracle"]["mean"]
  # numpy recomputation of the oracle, the single configurations and the best.
  wide = nodes.pivot_table(index=["question_id", "position"], columns="config_id", values="alignment")
  wide = wide.dropna(how="all")
  np.testing.assert_allclose(by["oracle"]["mean"], wide.max(axis=1).mean(), rtol=1e-12)
  np.testing.assert_allclose([by["A"]["mean"], by["B"]["mean"]], wide.mean().to_numpy(), rtol=1e-12)
  assert r["best"] == wide.mean().idxmax() and by["router"]["n"] == len(wide)
  assert 0.3 < by["A"]["share_routed"] < 0.7            # routes both ways
  # Folds hold whole questions; no predictor signal -> the router is no better than the best single config.
  fold = router.folds_by_question(nodes["question_id"].to_numpy(), 5, 0)
  assert (pd.Series(fold).groupby(nodes["question_id"].to_numpy()).nunique() == 1).all()
  flat = router.route(crossing(1, slope=0.0).drop(columns="kl_pq"), n_boot=300)
  assert flat["router_minus_best"]["ci_lo"] < 0.02
  assert router.route(nodes[nodes.config_id == "A"])["rows"] == []


RULE = {"student_top_k": 2, "teacher_top_k": 1, "views": ["self:solution", "t:plain"]}   # nodes.candidate_rule's


def tiny_study(workdir, seed=0, schema_version=records.SCHEMA_VERSION, name="tiny", candidate_set=RULE):
  """crossing() records on 12 questions written as a study: nodes with candidates / P_succ columns, a tokens
  table (8 positions, kl_pq and the cheap proxies' kl_qp, js, topk_overlap), rollouts with text, config.json and manifest.json (with `candidate_set` unless
  None: a manifest written before the rule was recorded)."""
  rng = np.random.default_rng(seed)
  nodes = crossing(seed, n_questions=12, n_nodes=4)
  n = len(nodes)
  nodes["candidates"] = [[5, 6, 7]] * n
  nodes["p"] = [[0.6, 0.3, 0.1]] * n
  nodes["q"] = [[0.2, 0.7, 0.1]] * n
  nodes["p_succ"] = [[0.25, 0.75, 0.5]] * n
  nodes["p_succ_lo"] = [[0.0456, 0.3006, 0.15]] * n
  nodes["p_succ_hi"] = [[0.6994, 0.9544, 0.85]] * n
  nodes["value"] = 0.425
  nodes["correct"] = nodes["question_id"] < "q03"
  for table, frame in (("nodes", nodes),):
    for q, part in frame.groupby("question_id"):
      (workdir / "records" / table).mkdir(parents=True, exist_ok=True)
      part.to_parquet(workdir / "records" / table / f"part-{q}.parquet")
  keys = nodes[["question_id", "rollout_id"]].drop_duplicates()
  tokens = pd.concat([keys.assign(position=t, token=int(t % 4), teacher="t", context="plain",
                                  kl_pq=rng.exponential(size=len(keys)), kl_qp=rng.exponential(size=len(keys)),
                                  js=rng.uniform(0, 0.69, len(keys)), topk_overlap=rng.integers(0, 5, len(keys)) / 4)
                      for t in range(8)])
  (workdir / "records" / "tokens").mkdir()
  tokens.to_parquet(workdir / "records" / "tokens" / "part-all.parquet")
  (workdir / "records" / "rollouts").mkdir()
  keys.assign(reward=0.0, length=8, text="x = 1 + 2").to_parquet(workdir / "records" / "rollouts" / "part-all.parquet")
  (workdir / "config.json").write_text(json.dumps({"name": name, "student": {"name": f"s{seed}"}}))
  manifest = {"schema_version": schema_version}
  if candidate_set is not None:
    manifest["candidate_set"] = candidate_set
  (workdir / "manifest.json").write_text(json.dumps(manifest))
  return workdir


def test_per_token_pages_index_hover_and_report_links(tmp_path):
  workdir = tiny_study(tmp_path / "run")
  report.write_summary(str(workdir), n_boot=100, n_boot_predictors=20, pages=3,
                       decode=lambda t: ["7", " the", "+", "\n", "a", "b", "c", "d"][t])
  pages = sorted(os.listdir(workdir / "html"))
  assert pages == ["index.html", "rollout-0000.html", "rollout-0001.html", "rollout-0002.html"]
  main = (workdir / "report.html").read_text()
  assert 'href="html/index.html"' in main and main.index("Predictors") < main.index("Router") < main.index("Oracle")
  verdict = json.loads((workdir / "verdict.json").read_text())
  assert verdict["router"]["best"] in ("A", "B") and len(verdict["router"]["rows"]) == 4
  index = (workdir / "html" / "index.html").read_text()
  assert index.count('href="rollout-') == 3 and "incorrect" in index.split("rollout-0000")[1].split("</tr>")[0]
  page = (workdir / "html" / "rollout-0000.html").read_text()
  assert "<script" not in page and page.count("x = 1 + 2") == 1       # decoded in one piece: reads differently
  spans = re.findall(r'<span title="([^"]*)" style="([^"]*)">([^<]*)</span>', page)
  assert len(spans) == 8                                    # the response once; A, B and the view's kl_pq options
  assert page.count('type="radio"') == 3
  q = re.search(r"question id (q\d+)", page).group(1)
  node = pd.read_parquet(workdir / "records" / "nodes" / f"part-{q}.parquet").query(
      "config_id == 'A' and position == 0").iloc[0]
  tip = spans[0][0]
  assert f"A: alignment={node.alignment:.4g}" in tip and "V=0.425" in tip
  assert "&#x27;b&#x27; p=0.6 q=0.2 P_succ=0.25 [0.0456, 0.699]" in tip   # candidate 5 decodes to "b"
  fade = int(round(255 * (1 - abs(node.alignment))))
  assert spans[0][1].startswith(f"--c0:rgb({fade},255,{fade})" if node.alignment > 0
                                else f"--c0:rgb(255,{fade},{fade})")
  # A smaller cap removes the pages it no longer writes.
  report.write_summary(str(workdir), n_boot=50, n_boot_predictors=10, pages=1)
  assert sorted(os.listdir(workdir / "html")) == ["index.html", "rollout-0000.html"]


def test_comparison_of_studies_cli_and_schema_refusal(tmp_path):
  """Two studies of unlike candidate sets (b's C(u) also joins a self:summary view's top-k) compared on request:
  flagged (issue 34, item 7), each number the study's own verdict's."""
  wider = {**RULE, "views": ["self:solution", "self:summary", "t:plain"]}
  a, b = tiny_study(tmp_path / "a", seed=1, name="a"), tiny_study(tmp_path / "b", seed=2, name="b", candidate_set=wider)
  env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
  run = subprocess.run([sys.executable, "-m", "opd_jax.report", f"--workdir={tmp_path}/[ab]",
                        f"--out={tmp_path / 'cmp'}", "--n_boot=200", "--target=all", "--allow_unlike_candidates"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
  assert run.returncode == 0, run.stderr[-3000:]
  flag = f"warning: studies with unlike candidate sets compared (--allow_unlike_candidates): {b}: views added"
  assert flag in run.stdout
  table = pd.read_csv(tmp_path / "cmp" / "comparison.csv")
  assert list(pd.unique(table["workdir"])) == [str(a), str(b)]
  assert set(table[table.study == 1].candidate_set) == {
      "sampled token + student top-2 + top-1 of views [self:solution, self:summary, t:plain]"}
  for i, w in enumerate((a, b)):
    v = decision.decide(report.read_records(str(w)), target="all", n_boot=200, seed=0)
    got = table[table.study == i].set_index("config_id")
    for r in v["ranking"]:
      np.testing.assert_allclose(got.loc[r["config_id"], ["mean_alignment", "ci_lo", "ci_hi"]].to_numpy(float),
                                 [r["mean_alignment"], r["ci_lo"], r["ci_hi"]], rtol=1e-12)
    for c in v["comparisons"]:
      np.testing.assert_allclose(got.loc[c["config_id"], ["diff_vs_best", "diff_ci_lo", "diff_ci_hi"]]
                                 .to_numpy(float), [c["diff"], c["ci_lo"], c["ci_hi"]], rtol=1e-12)
    assert v["line"] in run.stdout
  page = (tmp_path / "cmp" / "comparison.html").read_text()
  assert "<script" not in page and page.count("<tr>") >= 2 + 1 + 2
  assert "Flagged:</b> studies with unlike candidate sets" in page
  old = tiny_study(tmp_path / "old", schema_version=1)
  os.remove(b / "manifest.json")
  want = rf"schema version {records.SCHEMA_VERSION}.*old: schema_version 1.*b: no manifest.json"
  with pytest.raises(ValueError, match=want):
    compare.compare([str(a), str(old), str(b)], n_boot=10)
  with pytest.raises(ValueError, match="names no study directory"):
    compare.expand([str(tmp_path / "nothing*")])


def test_studies_whose_candidate_sets_differ_are_refused_in_one_line_unless_asked(tmp_path):
  """Issue 34, item 7: a configuration's alignment is defined on its study's candidate sets (the union of every
  view's top-k), so studies whose manifest rules differ are refused by name and difference; a manifest without a
  rule is compared with a warning; like studies without one."""
  a, twin = tiny_study(tmp_path / "a", seed=1), tiny_study(tmp_path / "twin", seed=2)
  more = tiny_study(tmp_path / "more", seed=3, candidate_set={**RULE, "views": ["self:solution", "t:plain", "u:plain"]})
  fewer = tiny_study(tmp_path / "fewer", seed=4, candidate_set={**RULE, "student_top_k": 3, "views": ["t:plain"]})
  old = tiny_study(tmp_path / "old", seed=5, candidate_set=None)
  table, verdicts = compare.compare([str(a), str(twin)], n_boot=10)
  assert verdicts[0]["warnings"] == [] and verdicts[1]["candidate_set"] == RULE
  with pytest.raises(ValueError, match=(rf"formed differently: {more}: views added \[u:plain\] \(against {a}\); "
                                        rf"{fewer}: views missing \[self:solution\], student_top_k 3 \(against {a}\);"
                                        r".* pass --allow_unlike_candidates")):
    compare.compare([str(a), str(twin), str(more), str(fewer)], n_boot=10)
  flagged, verdicts = compare.compare([str(a), str(more)], n_boot=10, allow_unlike_candidates=True)
  assert len(verdicts[0]["warnings"]) == 1 and "unlike candidate sets" in verdicts[0]["warnings"][0]
  alone, _ = compare.compare([str(more)], n_boot=10)                     # the flag changes no number
  pd.testing.assert_frame_equal(flagged[flagged.study == 1].drop(columns="study").reset_index(drop=True),
                                alone.drop(columns="study"))
  _, verdicts = compare.compare([str(a), str(old)], n_boot=10)
  assert len(verdicts[0]["warnings"]) == 1 and f"rule unknown for {old}" in verdicts[0]["warnings"][0]
  # The command line: one `error:` line, exit 2.
  got = _report_cli([f"--workdir={a}", f"--workdir={more}", f"--out={tmp_path / 'cmp'}", "--n_boot=10"])
  lines = got["stderr"].strip().splitlines()
  assert got["code"] == 2 and len(lines) == 1 and lines[0].startswith("error: cannot compare studies whose "
                                                                       "candidate sets are formed differently")
  assert not (tmp_path / "cmp").exists()


def _report_cli(argv: list[str]) -> dict:
  """`python -m opd_jax.report argv` in a forked child (as tests/cli_batch.run_cli, without importing opd_jax.main):
  {"code", "stdout", "stderr"}."""
  path = pathlib.Path(os.environ.get("TMPDIR", "/tmp")) / f"report_cli_{os.getpid()}.json"
  pid = os.fork()
  if pid == 0:
    try:
      out, err, code = io.StringIO(), io.StringIO(), 0
      with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
          from absl import flags  # pylint: disable=g-import-not-at-top
          if "opd_jax.report.__main__" not in sys.modules and "workdir" in flags.FLAGS:
            delattr(flags.FLAGS, "workdir")        # opd_jax.main's flag, if a test imported it; the report has its own
          from opd_jax.report import __main__ as report_cli  # pylint: disable=g-import-not-at-top
          report_cli.main(terminal.parse_flags(["opd_jax.report", *argv]))
        except SystemExit as e:
          code = e.code if isinstance(e.code, int) else 1
      path.write_text(json.dumps({"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}))
    finally:
      os._exit(0)
  os.waitpid(pid, 0)
  try:
    return json.loads(path.read_text())
  finally:
    path.unlink()


def test_oracle_gap_beside_its_permutation_null():
  # Issue 25 item 5: with nothing to route (interchangeable configurations, a useless predictor) the observed
  # oracle - router gap sits inside its null; with a planted crossing the router closes it far below the null.
  nodes = crossing(0, n_questions=20)
  rng = np.random.default_rng(1)
  flat = nodes.assign(alignment=np.clip(rng.normal(0, 0.5, len(nodes)), -1, 1), kl_pq=rng.normal(size=len(nodes)))
  flat.loc[flat.index[::13], "alignment"] = np.nan
  r0 = router.route(flat, n_boot=50, seed=3, n_perm=40)
  g0, gap0 = r0["gap_null"], r0["oracle_minus_router"]["diff"]
  assert g0["q05"] <= gap0 <= g0["q95"] and g0["p_value"] > 0.05 and g0["mean"] > 0.2     # a big gap, all noise
  assert "permuted within nodes" in r0["line"] and "null" in router.table_rows(r0)[-1][0]
  r1 = router.route(nodes, n_boot=50, seed=3, n_perm=40)
  assert r1["oracle_minus_router"]["diff"] < r1["gap_null"]["q05"] and r1["gap_null"]["p_value"] == 1 / 41
  # the null by hand: one permutation (same generator), the router refit through the same folds
  align = np.array([[0.1, np.nan, 0.3], [0.5, -0.2, 0.0], [np.nan, np.nan, 0.7], [0.2, 0.4, -0.1]])
  perm = router.permute_within_nodes(align, np.random.default_rng(7))
  np.testing.assert_array_equal(np.isnan(perm), np.isnan(align))
  np.testing.assert_array_equal(np.sort(np.nan_to_num(perm, nan=9)), np.sort(np.nan_to_num(align, nan=9)))
  feats, fold = rng.normal(size=(4, 3, 2)), np.array([0, 1, 0, 1])
  perm = router.permute_within_nodes(align, np.random.default_rng(7))
  choice = router._cv_choice(perm, feats, fold, 1.0)
  want = np.mean(np.nanmax(align, 1) - perm[np.arange(4), choice])
  np.testing.assert_allclose(router.gap_null(align, feats, fold, 1.0, n_perm=1, seed=7), [want])
