"""The design by variance split and cost (opd_jax/cost/design.py, issue 48 item 2): unit costs recovered from a
known linear cost, the cheapest design against an independent search and Cochran's continuous optimum, and the
dry run's lines from a split file."""
import json
import math

import numpy as np
import pytest

from opd_jax.cost import design
from opd_jax.estimators import variance


def test_unit_costs_recover_a_linear_cost_exactly(monkeypatch):
  from configs import teacher_sweep  # pylint: disable=g-import-not-at-top
  config = teacher_sweep.get_config()
  m = config.budget.node_rollouts_per_question
  c_q, c_n, c_c = 0.3, 0.02, 0.001
  monkeypatch.setattr(design, "hours", lambda cfg, w, ch, k, nodes_per_rollout, r:
                      c_q + nodes_per_rollout * m * (c_n + r * c_c))
  np.testing.assert_allclose(design.unit_costs(config, None, None, 1), (c_q, c_n, c_c), rtol=1e-9)


def _split(**kw):
  return variance.Components(questions=1, nodes=1, r=1, **kw)


def test_the_cheapest_design_is_the_least_cost_on_the_grid_and_near_cochrans_optimum():
  split = {"a - b": _split(question=0.02, node=0.05, continuation=0.8), "a - c": _split(question=0.01, node=0.1,
                                                                                        continuation=0.4)}
  targets = {k: s.variance(2000, 16, 64) for k, s in split.items()}    # many questions: rounding is negligible
  costs = (0.05, 0.004, 0.0005)
  q, n, r, cost = design.cheapest(split, targets, costs, node_rollouts=4)
  best = min((max(math.ceil(s.variance(1, 4 * nn, rr) / targets[k] - 1e-9) for k, s in split.items())
              * (costs[0] + 4 * nn * (costs[1] + rr * costs[2])), nn, rr)
             for nn in design.NODES_GRID for rr in design.R_GRID)
  assert (cost, n, r) == pytest.approx(best) and all(s.variance(q, 4 * n, r) <= targets[k] * (1 + 1e-9)
                                                    for k, s in split.items())
  one = {"x": _split(question=0.02, node=0.05, continuation=0.8)}          # one pair: Cochran's r* and m*
  r_star = math.sqrt(0.8 * costs[1] / (0.05 * costs[2]))                  # = 8
  q, n, r, _ = design.cheapest(one, {"x": one["x"].variance(5000, 16, 64)}, costs, node_rollouts=1,
                               r_grid=range(2, 65), nodes_grid=range(1, 200))
  m_star = math.sqrt((0.05 + 0.8 / r_star) * costs[0] / (0.02 * (costs[1] + r_star * costs[2])))
  assert abs(r - r_star) <= 1 and abs(n - m_star) <= 1, (r, r_star, n, m_star)


def test_the_dry_run_prints_the_design_from_a_split_file(tmp_path, monkeypatch):
  """The lines of `estimate.describe` with and without a split (the cost model's hours at other budgets replaced
  by a linear stand-in: the cost model itself is tests/cost/test_costs.py's)."""
  from configs import smoke  # pylint: disable=g-import-not-at-top
  from opd_jax.cost import estimate, programs  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(design, "hours", lambda cfg, w, ch, k, nodes_per_rollout, r: 0.3 + nodes_per_rollout * (
      0.02 + r * 0.001))
  monkeypatch.setattr(programs, "_compiled_flops", lambda kind, cfg, rows, tokens, slots, *_: float(rows * tokens))
  path = tmp_path / "split.json"
  comp = dict(question=0.001, node=0.02, continuation=0.1, questions=20, nodes=300, r=12.0)
  path.write_text(json.dumps({"estimand": "alignment_ratio", "target": "incorrect", "pairs": {"a - b": comp}}))
  config = smoke.get_config()
  text = estimate.describe(config, "h200", str(path))
  line = [l for l in text.splitlines() if f"hours for R={config.budget.continuations_per_candidate}'s precision:" in l]
  assert len(line) == 1 and float(line[0].rsplit(":", 1)[1]) > 0
  assert "needs a measured variance split" in estimate.describe(config, "h200")
  with pytest.raises(ValueError, match="not a variance split"):
    design.read_split(tmp_path / "missing.json")
