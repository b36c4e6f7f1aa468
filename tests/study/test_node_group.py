"""budget.node_group="target" (issue 48): node rollouts from the verdict's group only, recorded in the manifest,
and a report that reads a study whose other group is empty."""
import json

from configs import smoke as smoke_config
from opd_jax import claim
from opd_jax import records
from opd_jax.report import common
from opd_jax.study import checklist
from opd_jax.study import pipeline
from opd_jax.study import preflight


def test_target_group_node_rollouts_only_and_the_report_reads_them(tmp_path):
  c = smoke_config.get_config()
  c.budget.update(questions=2, rollouts_per_question=4, node_rollouts_per_question=2, nodes_per_rollout=2,
                  continuations_per_candidate=2, node_group="target")
  c.report.target = "incorrect"                   # the verdict's group the node rollouts are drawn from
  c.configurations = {"solution": "self:solution:reverse_kl"}
  c.logging.progress = False
  c.report.pages = 0
  workdir = tmp_path / "run"
  pipeline.run(c, str(workdir))
  rollouts, nodes = records.read_table(workdir, "rollouts"), records.read_table(workdir, "nodes")
  assert len(nodes) and set(rollouts["question_id"]) == set(nodes["question_id"])
  for qid, r in rollouts.groupby("question_id"):
    r = r.sort_values("rollout_id")
    wrong = [i for i, n in zip(r.loc[r["reward"] == 0, "rollout_id"][:2], r.loc[r["reward"] == 0, "length"]) if n]
    assert sorted(set(nodes.loc[nodes["question_id"] == qid, "rollout_id"])) == wrong, qid
  assert not nodes["correct"].astype(bool).any()
  manifest = json.loads((workdir / "manifest.json").read_text())
  assert manifest["design"]["node_group"] == "target"
  assert (workdir / "report.html").exists()
  summary = (workdir / "summary.md").read_text()
  assert "- not sampled: the correct group (budget.node_group=target" in summary
  assert "/ correct:" not in summary and "the correct group is empty by design" in summary


def test_a_bad_node_group_names_the_field_and_the_default_leaves_the_hash():
  c = smoke_config.get_config()
  c.budget.node_group = "incorrect"
  try:
    preflight.validate(c)
  except ValueError as e:
    assert str(e).startswith("config.budget.node_group must be one of ('balanced', 'target'), got 'incorrect'") and (
        "node_group=target with report.target=incorrect" in str(e)), e
  else:
    raise AssertionError("node_group='incorrect' was accepted")
  d = smoke_config.get_config().to_dict()
  old = {**d, "budget": {k: v for k, v in d["budget"].items() if k != "node_group"}}
  assert claim.config_hash(d) == claim.config_hash(old)


def test_the_sampled_group_and_the_dry_runs_budget_line():
  pairs = [("target", "incorrect"), ("target", "correct"), ("target", "all"), ("target", "trained"),
           ("balanced", "incorrect"), ("balanced", "correct")]
  assert [common.sampled_group(g, t) for g, t in pairs] == ["incorrect", "correct", "all", "all", "all", "all"]
  c = smoke_config.get_config()
  lines = {}
  for group, target in (("target", "correct"), ("balanced", "trained")):   # target with trained: refused (below)
    c.budget.node_group, c.report.target = group, target
    lines[target] = next(l for l in checklist.describe(c).splitlines() if l.startswith("budget:"))
  assert f"({c.budget.node_rollouts_per_question} correct only with nodes x" in lines["correct"]
  assert f"({c.budget.node_rollouts_per_question} with nodes x" in lines["trained"]


def test_target_node_group_is_refused_where_the_verdict_reads_both_groups():
  """node_group="target" with report.target all or trained would draw the same balanced rollouts as "balanced":
  one error line names the field, the target and the fix, instead of a setting that does nothing."""
  c = smoke_config.get_config()
  c.budget.node_group = "target"
  for target in ("trained", "all"):
    c.report.target = target
    try:
      preflight.validate(c)
    except ValueError as e:
      assert str(e).startswith("config.budget.node_group: 'target' draws node rollouts from report.target's group "
                               f"only, but report.target={target!r} reads both groups, got 'target'"), e
      assert "set budget.node_group='balanced'" in str(e) and "\n" not in str(e), e
    else:
      raise AssertionError(f"node_group='target' with report.target={target!r} was accepted")
  for target in ("incorrect", "correct"):
    c.report.target = target
    preflight.validate(c)                                            # a single group: accepted
