"""The alignment ratio's simulated tables (benchmarks/ratio_tables.py, the calibration's cells for
--estimand=alignment_ratio): their mean differences are the cells' true values at r = 2 as at r = 16 (the ratio has
no small-r bias), and a sequential cell runs on them."""
import numpy as np

from benchmarks import ratio_tables
from benchmarks import verdict_calibration as calibration
from opd_jax.report import sequential


def test_the_tables_mean_difference_is_the_true_one_at_small_r():
  model = ratio_tables.RatioModel()
  rng = np.random.default_rng(0)
  for r in (2, 16):
    diffs = []
    for _ in range(6):
      align, q = model.tables([0.1, 0.0], 2000, 4, r)(rng)(2000)
      assert align.shape == (8000, 2) and np.isfinite(align).all() and q.max() == 1999
      diffs.append(np.mean(align[:, 0] - align[:, 1]))
    se = np.std(diffs, ddof=1) / np.sqrt(len(diffs))
    assert abs(np.mean(diffs) - 0.1) < 4 * se + 0.005, (r, np.mean(diffs), se)


def test_a_sequential_cell_runs_on_the_ratio_tables():
  model = ratio_tables.RatioModel()
  design = sequential.Design(looks=(20, 40), margin=0.05, futility=0.1)
  line = calibration.run_sequential([0.0, 0.0], "ratio", 3, np.random.default_rng(1), design, False,
                                    model.tables([0.0, 0.0], 40, 4, 4))
  assert line["sims"] == 3 and 20 <= line["mean_questions"] <= 40 and 0 <= line["coverage"] <= 1
