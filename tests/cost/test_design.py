"""The design by variance split and cost (opd_jax/cost/design.py, issue 48 items 2-4): unit costs recovered from a
known linear cost, the cheapest design against an independent search and Cochran's continuous optimum, the dry
run's lines from a split file, :paper's committed pilot (rebuilt from its CSVs; a design chosen from it holds at
every continuation share), and what the manifest and the config hash keep of the design."""
import json
import math
import pathlib
import sys

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


def test_lifted_raises_only_the_targets_below_the_floor_and_above_floor_names_the_rest():
  targets = {"a": 1e-6, "b": 4e-4, "c": 1e-2}
  assert design.lifted(targets, 4e-4) == {"a": 4e-4, "b": 4e-4, "c": 1e-2}
  assert design.above_floor(targets, 4e-4) == ["c"]


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
  assert len(line) == 1 and float(line[0].split("precision: ", 1)[1].split()[0]) > 0
  assert "needs a measured variance split" in estimate.describe(config, "h200")
  config.budget.pilot, config.budget.precision_of = str(path), (50, 2, 8)     # the config names its pilot
  lines = estimate.describe(config, "h200").splitlines()
  assert any(l.startswith("  the fixed design: 50 questions, nodes_per_rollout 2, R = 8, no looks:") for l in lines)
  assert sum("hours for R=8's precision: " in l for l in lines) == 1
  with pytest.raises(ValueError, match="not a variance split"):
    design.read_split(tmp_path / "missing.json")


REPO = pathlib.Path(__file__).resolve().parents[2]
PILOT = "docs/data/variance_split/validation.json"


def _linear_hours(monkeypatch, c_q=0.0014, c_n=0.0008, c_c=0.00015):
  monkeypatch.setattr(design, "hours", lambda cfg, w, ch, k, nodes_per_rollout, r: c_q + nodes_per_rollout * (
      cfg.budget.node_rollouts_per_question * (c_n + r * c_c)))


def test_the_committed_pilot_is_its_csvs_split_and_the_paper_design_holds_at_every_share(monkeypatch):
  """docs/data/variance_split/validation.json is what benchmarks/variance_split.py writes from the committed
  validation rows; the design chosen from it (a linear stand-in for the cost model) reaches the fixed design's
  variance on every pair at both ends of the unknown continuation share and between them."""
  sys.path.insert(0, str(REPO / "benchmarks"))
  import pandas as pd  # pylint: disable=g-import-not-at-top
  import variance_split  # pylint: disable=g-import-not-at-top
  rows = pd.concat([pd.read_csv(p, dtype={"question_id": str})
                    for p in sorted((REPO / "docs/data/validation").glob("study_nodes_*.csv"))], ignore_index=True)
  got = variance_split.split_without_rewards(rows, "projection", "incorrect", 4)
  committed = json.loads((REPO / PILOT).read_text())
  assert got["pairs"].keys() == committed["pairs"].keys() and len(got["pairs"]) == 28
  for k, v in got["pairs"].items():
    assert v["continuation"] is None and v == pytest.approx(committed["pairs"][k])
  from configs import teacher_sweep  # pylint: disable=g-import-not-at-top
  config = teacher_sweep.get_config("paper")
  config.budget.pilot = PILOT                        # :paper's pilot before the v2 split (`test_the_paper_design...`)
  assert tuple(config.budget.precision_of) == (100, 16, 64) and config.budget.node_group == "target"
  _linear_hours(monkeypatch)
  c = design.choose(config, None, None, 1, config.budget.pilot)
  assert (c.fixed.questions, c.fixed.nodes_per_rollout, c.fixed.r) == (100, 16, 64) and set(c.ends) == set(
      design.ENDS) and c.pairs == 28
  assert c.floor == {"floor": 0.0125, "unit": None} and c.chosen == c.every      # no scale: every pair, unfloored
  d = c.chosen
  for v in committed["pairs"].values():
    for share in (0.0, 0.3, 1.0):                    # the continuation share of the within-question variance
      s2_c = share * v["within"] * 4
      comp = variance.Components(question=v["question"], node=v["within"] - s2_c / 4, continuation=s2_c,
                                 questions=1, nodes=1, r=4)
      # 4 incorrect node rollouts per question (node_group "target"), the fixed design's 2 (balanced)
      assert comp.variance(d.questions, 4 * d.nodes_per_rollout, d.r) <= comp.variance(100, 32, 64) * (1 + 1e-9)
  assert d.hours < c.fixed.hours and min(e.hours for e in c.ends.values()) <= d.hours


def test_the_paper_design_reaches_every_pair_floored_on_its_pilot_with_rewards():
  """`:paper` (node rollouts from the incorrect group only, 4 per question) reaches, on every pair of its pilot
  (validation v2's four blocks, the continuation share measured), a standard error at most the fixed design's
  (100 questions, 16 nodes per rollout, R = 64, 2 incorrect node rollouts) or the floor min_effect / 4 in ratio
  units (the projection's split over the scale S), whichever is larger; and its every-pair-only design could not
  (the pure continuation-noise pair asks for more)."""
  from configs import teacher_sweep  # pylint: disable=g-import-not-at-top
  config = teacher_sweep.get_config("paper")
  b = config.budget
  split = json.loads((REPO / b.pilot).read_text())
  assert split["estimand"] == "projection" and split["target"] == config.report.target == "incorrect"
  floor_var = (0.25 * config.report.min_effect * split["scale"]) ** 2
  worst = 0.0
  for v in split["pairs"].values():
    comp = variance.Components(question=v["question"], node=v["node"], continuation=v["continuation"], questions=1,
                               nodes=1, r=1)
    target = max(comp.variance(100, 16 * 2, 64), floor_var)
    worst = max(worst, comp.variance(b.questions, b.nodes_per_rollout * 4, b.continuations_per_candidate) / target)
  assert worst <= 1 + 1e-9 and len(split["pairs"]) == 351
  noise = split["pairs"]["ext_answer_fkl - ext_answer_jsd"]
  comp = variance.Components(question=noise["question"], node=noise["node"], continuation=noise["continuation"],
                             questions=1, nodes=1, r=1)
  assert comp.variance(b.questions, b.nodes_per_rollout * 4, b.continuations_per_candidate) > comp.variance(
      100, 32, 64)


def test_the_manifest_records_the_design_and_an_old_config_keeps_its_hash(tmp_path):
  """manifest.json "design" (looks.design_record): r, the estimand, the looks, the fixed design it replaces and
  the pilot with its split; a config.json written before budget.pilot / budget.precision_of (they read as '' and
  ()) hashes as before and its workdir is claimed again, not refused."""
  import hashlib  # pylint: disable=g-import-not-at-top
  from configs import teacher_sweep  # pylint: disable=g-import-not-at-top
  from opd_jax import claim  # pylint: disable=g-import-not-at-top
  from opd_jax import records  # pylint: disable=g-import-not-at-top
  from opd_jax.report import looks  # pylint: disable=g-import-not-at-top
  paper = teacher_sweep.get_config("paper")
  rec = looks.design_record(paper.to_dict())
  assert (rec["r"], rec["nodes_per_rollout"], rec["questions"], rec["looks"], rec["futility"]) == (3, 8, 131,
                                                                                                  [33, 66, 98], 0.1)
  assert rec["estimand"] == "alignment_ratio" and rec["precision_of"] == [100, 16, 64]
  assert rec["node_group"] == "target" and "node_group" not in looks.design_record(
      teacher_sweep.get_config("paper_fixed").to_dict())
  text = (REPO / paper.budget.pilot).read_bytes()
  assert rec["pilot"] == {"path": paper.budget.pilot, "sha256": hashlib.sha256(text).hexdigest(),
                          "split": json.loads(text)}
  fixed = teacher_sweep.get_config("paper_fixed").to_dict()
  old = json.loads(json.dumps(fixed))
  for f in ("pilot", "precision_of"):
    del old["budget"][f]
  assert claim.config_hash(old) == claim.config_hash(fixed) and claim.config_difference(old, fixed) == []
  assert looks.design_record(old) == {**looks.design_record(fixed)} and looks.design_record(old)["pilot"] is None
  assert looks.design_record(old)["r"] == 64 and looks.design_record(old)["estimand"] == "alignment"
  (tmp_path / "config.json").write_text(json.dumps(old))
  records.check_workdir(tmp_path, fixed)                                   # resumes: not refused
  assert claim.config_difference(old, paper.to_dict())[:1] and claim.config_hash(paper.to_dict()) != \
      claim.config_hash(old)
  with pytest.raises(ValueError, match="holds a run of a different config"):
    records.check_workdir(tmp_path, {**fixed, "budget": {**fixed["budget"], "precision_of": [100, 16, 64]}})


def test_bad_design_fields_are_one_line_naming_the_field():
  from configs import smoke  # pylint: disable=g-import-not-at-top
  from opd_jax.report import looks  # pylint: disable=g-import-not-at-top
  c = smoke.get_config()
  c.budget.precision_of = (100, 16)
  with pytest.raises(ValueError, match=r"^config.budget.precision_of must be \(\) or \(questions, .*precision_of="):
    looks.validate(c)
  c.budget.precision_of = ()
  c.budget.pilot = "nowhere.json"
  with pytest.raises(ValueError, match=r"^config.budget.pilot=nowhere.json: not a variance split .*pilot=''"):
    looks.validate(c)


def test_cochrans_continuous_optimum_is_the_least_cost_times_variance_and_its_edge_cases():
  """r* and nodes_per_rollout* against a brute-force search of cost x variance per question (Q cancels), with 4
  node rollouts costed of which 2 hold the split's nodes."""
  s = _split(question=0.002, node=0.03, continuation=0.5)
  costs, rollouts, g = (0.05, 0.004, 0.0005), 4, 2
  r, n = design.cochran_optimum(s, costs, rollouts, g)
  rs, ns = np.meshgrid(np.geomspace(0.5, 200, 1200), np.geomspace(0.05, 200, 1200), indexing="ij")
  f = (costs[0] + ns * rollouts * (costs[1] + rs * costs[2])) * (s.question + (s.node + s.continuation / rs) / (ns * g))
  i, j = np.unravel_index(np.argmin(f), f.shape)
  assert r == pytest.approx(rs[i, j], rel=0.02) and n == pytest.approx(ns[i, j], rel=0.02), (r, rs[i, j], n, ns[i, j])
  assert design.cochran_optimum(_split(question=0.002, node=0.0, continuation=0.5), costs, rollouts, g) == (
      math.inf, 0.0)
  assert design.cochran_optimum(_split(question=0.0, node=0.03, continuation=0.5), costs, rollouts, g)[1] == math.inf
  r, n = design.cochran_optimum(_split(question=0.0, node=0.0, continuation=0.0), costs, rollouts, g)
  assert math.isnan(r) and n == math.inf


def test_the_pair_table_counts_each_pairs_questions_at_the_chosen_design():
  """needs: the least Q (a loop) whose variance is at most the target at the chosen nodes and r; binding: those
  that need all its questions; own design: `cheapest` of the pair alone; continuation share: by hand."""
  split = {"a - b": _split(question=0.001, node=0.02, continuation=0.4),
           "a - c": _split(question=0.0, node=0.01, continuation=0.9),
           "b - c": _split(question=0.004, node=0.001, continuation=0.01)}
  costs, ref = (0.05, 0.004, 0.0005), (100, 8, 32)
  targets = {k: s.variance(100, 8 * 2, 32) for k, s in split.items()}
  q, n, r, _ = design.cheapest(split, targets, costs, node_rollouts=4, group_rollouts=2)
  chosen = design.Design(questions=q, nodes_per_rollout=n, r=r, hours=0.0)
  rows = design.pair_table(split, ref, costs, 4, 2, chosen)
  for row, (k, s) in zip(rows, split.items()):
    need = next(x for x in range(1, 10 ** 6) if s.variance(x, n * 2, r) <= targets[k] * (1 + 1e-12))
    assert row["pair"] == k and row["needs"] == need and row["binding"] == (need == q)
    assert row["target"] == pytest.approx(targets[k])
    assert row["continuation_share"] == pytest.approx(s.continuation / (100 * 16 * 32) / targets[k])
    assert (row["own_questions"], row["own_nodes_per_rollout"], row["own_r"]) == design.cheapest(
        {k: s}, targets, costs, 4, 2)[:3]
  assert max(row["needs"] for row in rows) == q and any(row["binding"] for row in rows)


def test_the_floored_design_is_chosen_and_the_line_names_the_pure_continuation_pair_that_sets_every_pair(
    tmp_path, monkeypatch):
  """A pair of pure continuation noise far below the floor (report.min_effect / 4 on the ratio's scale: the
  projection split over its "scale" S) keeps the every-pair design at the fixed one (its variance falls only with
  questions x nodes x r, and the other pair needs the fixed design's questions); every pair floored (its SE at most
  the fixed design's or the floor) needs far less, is the chosen design, and the line says which pair set the
  every-pair hours. With node rollouts from the verdict's group only, the same precision costs less again."""
  from configs import teacher_sweep  # pylint: disable=g-import-not-at-top
  config = teacher_sweep.get_config("paper")
  config.budget.node_group = "balanced"
  _linear_hours(monkeypatch)
  size = dict(questions=80, nodes=400, r=12.0)
  pairs = {"a - b": dict(question=0.2, node=0.0, continuation=0.0, **size),          # SE 0.045 / S at the fixed
           "a - c": dict(question=0.0, node=0.0, continuation=1.0, **size)}          # SE ~0.002 / S
  path = tmp_path / "split.json"
  path.write_text(json.dumps({"estimand": "projection", "target": "incorrect", "r": 12.0, "scale": 2.0,
                              "pairs": pairs}))
  c = design.choose(config, None, None, 1, str(path))
  fixed = (c.fixed.questions, c.fixed.nodes_per_rollout, c.fixed.r)
  assert fixed == (100, 16, 64) and (c.every.questions, c.every.nodes_per_rollout, c.every.r) == fixed
  fl, g = c.floor, design.group_rollouts(config, "incorrect")
  assert fl["floor"] == pytest.approx(0.0125) and fl["unit"] == 2.0 and fl["above"] == 1 and g == 2
  d = fl["design"]
  assert c.chosen == d and d.hours < 0.2 * c.fixed.hours and fl["setters"] == ["a - c"]
  want = math.sqrt(1.0 / (100 * 16 * g * 64)) / 2.0                                  # a - c's SE, ratio units
  assert fl["setters_se"] == pytest.approx(want) and fl["top_se"] == pytest.approx(want) and want < 0.0125
  ab, ac = variance.Components(**pairs["a - b"]), variance.Components(**pairs["a - c"])
  assert ab.variance(d.questions, d.nodes_per_rollout * g, d.r) <= ab.variance(100, 16 * g, 64) * (1 + 1e-9)
  assert ac.variance(d.questions, d.nodes_per_rollout * g, d.r) <= (0.0125 * 2.0) ** 2 * (1 + 1e-9)
  lines = design.describe(config, None, None, 1, str(path))
  i = next(i for i, l in enumerate(lines) if l.startswith("  hours for R=64's precision: "))
  assert lines[i] == (f"  hours for R=64's precision: {d.hours:.3g} ({d.hours / c.fixed.hours:.3g} of the fixed "
                      f"design's {c.fixed.hours:.3g} h; every pair floored at 0.0125)") and len(lines) == i + 1
  assert lines[i - 2].startswith(f"  the cheapest design for its precision on every pair: 100 questions, "
                                 f"nodes_per_rollout 16, r = 64: {c.fixed.hours:.3g} h")
  assert lines[i - 1].startswith("  the cheapest design for its precision on every pair floored (each pair's SE at "
                                 "most the fixed design's or 0.0125, report.min_effect x 0.25 in alignment_ratio "
                                 f"units, whichever is larger): {d.questions} questions, nodes_per_rollout "
                                 f"{d.nodes_per_rollout}, r = {d.r}: {d.hours:.3g} h (1 of 2 pairs above the floor")
  assert (f"the pairs that set the every-pair hours (a - c, whose own cheapest design costs >= 0.99 of them) have "
          f"fixed-design SE <= {want:.2g}, below the floor; this config runs 131 questions") in lines[i - 1]
  config.budget.node_group = "target"                                              # 4 incorrect node rollouts
  t = design.choose(config, None, None, 1, str(path))
  assert t.chosen.hours < d.hours and t.floor["setters"] == ["a - c"]
  assert ab.variance(t.chosen.questions, t.chosen.nodes_per_rollout * 4, t.chosen.r) <= ab.variance(
      100, 16 * g, 64) * (1 + 1e-9)
  assert "every pair floored at 0.0125, node rollouts from the verdict's group only)" in design.describe(
      config, None, None, 1, str(path))[-1]
  pairs["a - c"]["continuation"] = 1e6                                             # now above the floor: it sets
  path.write_text(json.dumps({"estimand": "projection", "target": "incorrect", "scale": 2.0, "pairs": pairs}))
  assert design.choose(config, None, None, 1, str(path)).floor["above"] == 2
  assert "above the floor; this config runs" in design.describe(config, None, None, 1, str(path))[-2]
  path.write_text(json.dumps({"estimand": "projection", "target": "incorrect", "pairs": pairs}))   # no S
  assert "not priced: this split of projection has no scale" in design.describe(config, None, None, 1, str(path))[-2]
  config.report.min_effect = 0.0                                                       # no floor: no line
  lines = design.describe(config, None, None, 1, str(path))
  assert lines[-1].startswith("  hours for R=64's precision: ") and lines[-1].endswith(
      "every pair, node rollouts from the verdict's group only)") and "floored" not in lines[-2]


def test_the_dry_run_prices_the_study_without_its_continuations(monkeypatch):
  """The cost model's line for the cheap proxies alone (issue 47, item 6): the rollouts' and scoring's rows summed,
  against the total (the rows are parsed back from the table it prints)."""
  from configs import smoke  # pylint: disable=g-import-not-at-top
  from opd_jax.cost import estimate, programs  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(programs, "_compiled_flops", lambda kind, cfg, rows, tokens, slots, *_: float(rows * tokens))
  config = smoke.get_config()
  cs = estimate.calls(config, work=estimate.planned_work(config))
  parts = {s: estimate.cost([c for c in cs if c.stage == s], None, 1).cpu_s for s in estimate.STAGES}
  line = next(l for l in estimate.describe(config, "cpu").splitlines() if "without the targeted continuations" in l)
  cheap = parts["rollouts"] + parts["scoring"]
  assert f"CPU est {estimate._secs(cheap)} ({cheap / sum(parts.values()):.0%} of the total)" in line  # pylint: disable=protected-access


def test_group_rollouts_counts_both_groups_for_all_and_trained():
  """Node rollouts per question in the split's group: a single group gets half of the balanced node rollouts and
  all of them under node_group "target"; "all" and "trained" (training's weighting of every node) read both."""
  from configs import smoke  # pylint: disable=g-import-not-at-top
  config = smoke.get_config()
  m = config.budget.node_rollouts_per_question
  config.budget.node_group = "balanced"
  assert [design.group_rollouts(config, t) for t in ("incorrect", "correct", "all", "trained")] == [
      m / 2, m / 2, m, m]
  config.budget.node_group = "target"
  assert [design.group_rollouts(config, t) for t in ("incorrect", "all", "trained")] == [m, m, m]
  assert design.group_rollouts(config, "incorrect", "balanced") == m / 2
