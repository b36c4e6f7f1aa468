"""benchmarks/variance_split.py --records (issue 48): committed node-record parquet files (validate_v2's
study_records_<b>.parquet, question ids prefixed "<b>:") give the split a workdir holding the same rows gives, one
block or several pooled; blocks that share a node are refused."""
import json

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
