"""benchmarks/variance_split.py --records (issue 48): committed node-record parquet files (validate_v2's
study_records_<b>.parquet, question ids prefixed "<b>:") give the split a workdir holding the same rows gives, one
block or several pooled; blocks that share a node are refused."""
import json
import math

import numpy as np
import pandas as pd
import pytest

from benchmarks import variance_split
from opd_jax import records
from opd_jax.study import nodes, targeted
from opd_jax.teachers import contexts


def _block(seed: int, n_questions: int = 4) -> pd.DataFrame:
  """Node rows of a tiny study block: n_questions one-rollout questions of 3 nodes, three configurations (two
  divergences of one view, one of another), 6 continuations per candidate, all nodes incorrect."""
  rng = np.random.default_rng(seed)
  confs = [contexts.parse("rkl", "t:plain:reverse_kl"), contexts.parse("fkl", "t:plain:forward_kl"),
           contexts.parse("ans", "t:answer:jsd@0.3")]
  out = []
  for i in range(n_questions):
    cands = np.array([[1, 2, 3], [4, 5, 6], [7, 8, -1]])
    rewards = rng.integers(0, 2, (3, 3, 6)).astype(np.int8)
    rewards[:, :, 0], rewards[:, :, 1] = 1, 0                  # no node degenerate in either half
    views = {c.scoring_key: np.log(rng.dirichlet(np.ones(3), 3)) for c in confs}
    pred = {v: {k: np.zeros(3) for k in records.PREDICTORS} for v in views}
    at = nodes.RolloutNodes([0, 1, 2], cands, np.log(rng.dirichlet(np.ones(3), 3)), views)
    out.append(nodes.node_rows(confs, f"q{i}", 0, False, [1, 4, 7], at,
                               targeted.Outcomes(rewards=rewards, valid=cands >= 0), pred))
  return pd.concat(out, ignore_index=True)


def _run(tmp_path, name, *flags):
  out = tmp_path / f"{name}.json"
  assert variance_split.main(["--estimand=projection", f"--out={out}", *flags]) == 0
  got = json.loads(out.read_text())
  return got.pop("source"), got


def test_records_files_give_the_workdirs_split_one_block_and_pooled(tmp_path):
  blocks = {b: _block(seed) for b, seed in ((1, 3), (2, 4))}
  one, both = tmp_path / "one" / "records" / "nodes", tmp_path / "both" / "records" / "nodes"
  one.mkdir(parents=True)
  both.mkdir(parents=True)
  blocks[1].to_parquet(one / "part-00000.parquet")                   # a study's workdir: ids as written
  for b, rows in blocks.items():                                     # the export: ids prefixed "<block>:"
    rows.assign(question_id=f"{b}:" + rows.question_id).to_parquet(tmp_path / f"study_records_{b}.parquet")
    rows.assign(question_id=f"{b}:" + rows.question_id).to_parquet(both / f"part-{b:05d}.parquet")
  _, want = _run(tmp_path, "w1", f"--workdir={tmp_path / 'one'}")
  source, got = _run(tmp_path, "r1", f"--records={tmp_path / 'study_records_1.parquet'}")
  assert got == want and len(got["pairs"]) == 3 and got["r"] == 6.0
  assert source.endswith("(1 files, 4 questions)")
  _, want = _run(tmp_path, "w12", f"--workdir={tmp_path / 'both'}")
  source, got = _run(tmp_path, "r12", f"--records={tmp_path / 'study_records_*.parquet'}")
  assert got == want and source.endswith("(2 files, 8 questions)")
  assert all(v["questions"] == 8 and v["nodes"] == 24 for v in got["pairs"].values())
  rows = pd.concat([pd.read_parquet(tmp_path / f"study_records_{b}.parquet") for b in (1, 2)], ignore_index=True)
  assert got["scale"] == variance_split.differences(rows, "projection", "incorrect")[3] > 0   # the ratio's S
  # the pooled split is not either block's: pooling adds rows, it does not pick a file
  assert got["pairs"] != _run(tmp_path, "r2", f"--records={tmp_path / 'study_records_2.parquet'}")[1]["pairs"]


def test_records_that_share_a_node_or_lack_rewards_are_refused(tmp_path, capsys):
  rows = _block(5, n_questions=2)
  rows.to_parquet(tmp_path / "study_records_1.parquet")
  rows.to_parquet(tmp_path / "study_records_2.parquet")          # the same question ids in two blocks
  with pytest.raises(ValueError, match=rf"^--records=.*{len(rows)} rows repeat a \(config_id, question_id"):
    variance_split.read_node_records(str(tmp_path / "study_records_*.parquet"))
  rows.drop(columns="rewards").to_parquet(tmp_path / "study_records_2.parquet")
  with pytest.raises(ValueError, match=r"study_records_2.parquet has no rewards column"):
    variance_split.read_node_records(str(tmp_path / "study_records_*.parquet"))
  with pytest.raises(SystemExit):
    variance_split.main([f"--records={tmp_path / 'none_*.parquet'}", f"--out={tmp_path / 'x.json'}"])
  assert "error: --records=" in capsys.readouterr().err


def test_explain_prices_the_dry_runs_design_and_each_criterion_reaches_its_targets(tmp_path, monkeypatch):
  """--explain on a tiny pilot (the cost model replaced by a linear stand-in, as in tests/cost/test_design.py):
  its every-pair design is the dry run's (`design.choose` on the JSON it wrote), each criterion's design reaches
  its pairs' targets (floored: the looser of the fixed design's variance and the floor's), and the resamples are
  the seed's."""
  from benchmarks import design_binding  # pylint: disable=g-import-not-at-top
  from configs import teacher_sweep  # pylint: disable=g-import-not-at-top
  from opd_jax.cost import design, estimate  # pylint: disable=g-import-not-at-top
  c_q, c_n, c_c = 0.002, 0.0008, 0.00015
  monkeypatch.setattr(design, "hours", lambda cfg, w, ch, k, nodes_per_rollout, r: c_q + nodes_per_rollout * (
      cfg.budget.node_rollouts_per_question * (c_n + r * c_c)))
  monkeypatch.setattr(estimate, "planned_work", lambda config: None)
  rows = _block(7, n_questions=8)
  rows.to_parquet(tmp_path / "study_records_1.parquet")
  config = teacher_sweep.get_config("paper")
  config.budget.node_group = "balanced"                            # the fixed design's group (2 of 4 node rollouts)
  wide, configs, r, scale = variance_split.differences(rows, "projection", "incorrect")
  se = sorted(math.sqrt(s.variance(100, 32, 64)) / scale for s in variance_split.pair_components(
      wide, configs, r).values())
  config.report.min_effect = 4 * math.sqrt(se[0] * se[1])          # a floor that some pairs are above, some not
  meta = {"estimand": "projection", "target": "incorrect"}
  table, crit = design_binding.explain(rows, wide, configs, r, scale, meta, config, "h200", str(tmp_path / "x"),
                                      boot=3, seed=1)
  assert (tmp_path / "x_binding.csv").exists() and (tmp_path / "x_criteria.csv").exists()
  (tmp_path / "x.json").write_text(json.dumps({**meta, "r": r, "scale": scale, "pairs": {
      k: v.__dict__ for k, v in variance_split.pair_components(wide, configs, r).items()}}))
  choice = design.choose(config, None, None, 1, tmp_path / "x.json")
  for name, d in (("every pair", choice.every), ("every pair, floored", choice.chosen)):   # the dry run's two
    row = crit.set_index("criterion").loc[name]
    assert (row.questions, row.nodes_per_rollout, row.r) == (d.questions, d.nodes_per_rollout, d.r)
    assert row.hours == pytest.approx(d.hours) and row.pairs == 3
  split = variance_split.pair_components(wide, configs, r)
  floor_var = (0.25 * config.report.min_effect * scale) ** 2
  assert table.above_floor.tolist() == [table.target[i] > floor_var for i in range(3)]
  assert 0 < table.above_floor.sum() < 3, table.se_fixed_verdict        # the test's floor splits the pairs
  for c in crit.itertuples():
    if c.criterion not in design_binding.CRITERIA:
      continue
    pairs, tg = design_binding.select(c.criterion, split, dict(zip(table.pair, table.target)), floor_var,
                                      c.leader, design.unit_costs(config, None, None, 1), 4, 2)
    assert len(pairs) == c.pairs
    assert all(s.variance(c.questions, 2 * c.nodes_per_rollout, c.r) <= tg[k] * (1 + 1e-9) for k, s in pairs.items())
    if c.criterion == "every pair, floored":
      assert all(t == max(table.target[table.pair == k].item(), floor_var) for k, t in tg.items())
  again = design_binding.explain(rows, wide, configs, r, scale, meta, config, "h200", str(tmp_path / "y"),
                                 boot=3, seed=1)[1]
  boot = [c for c in crit.columns if c.startswith("boot_")]
  assert crit[boot].equals(again[boot]) and crit[boot].notna().any().all()
