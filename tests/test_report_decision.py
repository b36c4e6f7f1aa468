"""Issue 14, item 1 (the decision): planted effects are found, null effects are not, and the decision table is
recomputable from the parquet records with numpy."""
import json

import numpy as np
import pandas as pd
import pytest

from opd_jax import report
from opd_jax.report import decision


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
      assert v0["line"].startswith("no configuration is distinguishable from")
  assert found >= 0.9 * len(SEEDS), found
  assert null_ok >= 0.9 * len(SEEDS), null_ok


def test_underpowered_target_decides_nothing():
  nodes = planted(0, 0.5, n_questions=6)          # 60 nodes per config but only 6 questions
  v = decision.decide(nodes, n_boot=200)
  assert v["verdict"] == "underpowered" and v["line"].startswith("UNDERPOWERED")
  assert all(r["underpowered"] for r in v["ranking"])


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
  # numpy from the parquet files alone, following decide's documented protocol.
  df = pd.concat([pd.read_parquet(p) for p in sorted(directory.glob("part-*.parquet"))])
  labels = np.unique(df["question_id"].to_numpy())
  draws = np.random.default_rng(2).integers(0, len(labels), size=(300, len(labels)))
  w = np.stack([np.bincount(row, minlength=len(labels)) for row in draws]).astype(float)
  tgt = df[(~df["correct"]) & df["alignment"].notna()]

  def reps(values, qs):
    idx = np.searchsorted(labels, qs)
    s = np.bincount(idx, weights=values, minlength=len(labels))
    c = np.bincount(idx, minlength=len(labels))
    return (w @ s) / (w @ c)

  means = {c: tgt[tgt.config_id == c].alignment.to_numpy().mean() for c in "ABC"}
  order = sorted(means, key=lambda c: -means[c])
  assert [r["config_id"] for r in verdict["ranking"]] == order
  for r in verdict["ranking"]:
    sub = tgt[tgt.config_id == r["config_id"]]
    rep = reps(sub.alignment.to_numpy(), sub.question_id.to_numpy())
    np.testing.assert_allclose([r["mean_alignment"], r["ci_lo"], r["ci_hi"]],
                               [means[r["config_id"]], *np.quantile(rep, [0.025, 0.975])], rtol=1e-10)
  best = verdict["best"]
  assert best == "A"                    # A = B + 0.15 on every shared node (B's own mean may lead by chance)
  b = tgt[tgt.config_id == best].set_index(["question_id", "rollout_id", "position"]).alignment
  pvals = []
  assert all(c["diff"] < 0 for c in verdict["comparisons"])
  for comp in verdict["comparisons"]:
    o = tgt[tgt.config_id == comp["config_id"]].set_index(["question_id", "rollout_id", "position"]).alignment
    shared = o.index.intersection(b.index)
    d = (o[shared] - b[shared]).to_numpy()
    rep = reps(d, shared.get_level_values(0).to_numpy())
    p = min(1.0, 2 * min(np.mean(rep <= 0), np.mean(rep >= 0)))
    pvals.append(p)
    np.testing.assert_allclose([comp["diff"], comp["p_value"], comp["n_shared"]], [d.mean(), p, d.size])
    np.testing.assert_allclose([comp["ci_lo"], comp["ci_hi"]],
                               np.quantile(rep, [(1 - comp["ci_level"]) / 2, (1 + comp["ci_level"]) / 2]))
  # Holm by hand for two comparisons.
  lo, hi = sorted(pvals)
  want = {lo: min(1, 2 * lo), hi: min(1, max(2 * lo, hi))}
  np.testing.assert_allclose([c["p_holm"] for c in verdict["comparisons"]], [want[p] for p in pvals])
  # The summary table's means too (summary.csv).
  summary = pd.read_csv(tmp_path / "summary.csv")
  for _, row in summary.iterrows():
    sub = df[df.config_id == row.config_id]
    if row.group != "all":
      sub = sub[sub.correct == (row.group == "correct")]
    np.testing.assert_allclose(row.mean_alignment, np.nanmean(sub.alignment.to_numpy()), rtol=1e-12)
    a = sub.alignment.dropna().to_numpy()
    np.testing.assert_allclose(row.oracle_net_share, a.sum() / np.abs(a).sum(), rtol=1e-12)
