"""The sequential study's loop (opd_jax/report/looks.py): the schedule, its checks, stopping at a decided look, resuming."""
import json

import pytest

from configs import smoke as smoke_config
from opd_jax.report import looks
from opd_jax import claim
from opd_jax import records
from opd_jax.study import pipeline
from opd_jax.report import decision


def _config(**budget):
  c = smoke_config.get_config()
  for k, v in budget.items():
    c.budget[k] = v
  if budget.get("looks"):
    c.report.min_effect = 0.05                  # required with looks (issue 49, item 4)
  return c


def test_looks_without_a_margin_are_refused_not_read_as_the_default():
  from opd_jax.study import preflight  # pylint: disable=g-import-not-at-top
  c = _config(questions=80, looks=(10,))
  c.report.min_effect = 0.0
  with pytest.raises(ValueError, match=r"^config.report.min_effect must be > 0 with budget.looks.*min_effect=0.05"):
    preflight.validate(c)


@pytest.mark.parametrize("cap", [3, 10, 80])
def test_following_the_fix_of_a_looks_error_gives_a_config_that_validates(cap):
  """Each error's own fix, applied as the flags it names, is accepted (a newcomer's report: the old fixes named
  looks past a small cap and left out the margin looks need)."""
  import re  # pylint: disable=g-import-not-at-top
  from opd_jax.study import preflight  # pylint: disable=g-import-not-at-top

  def apply(c, message):
    for field, value in re.findall(r"--config\.(\w+\.\w+)=('[^']*'|[\d.]+)", message.split("; ", 1)[1]):
      group, leaf = field.split(".")
      c[group][leaf] = eval(value.strip("'"))  # pylint: disable=eval-used
    return c
  for c in (_config(questions=cap, futility=0.1), _config(questions=cap, looks=(cap + 1,))):
    c.report.min_effect = 0.0 if c.budget.futility else c.report.min_effect
    with pytest.raises(ValueError) as e:
      preflight.validate(c)
    preflight.validate(apply(c, str(e.value)))
    assert looks.schedule(c)[-1] == cap and len(looks.schedule(c)) >= 2


def test_schedule_appends_the_cap_and_validate_names_the_field():
  assert looks.schedule(_config(questions=80, looks=(10, 20, 40))) == (10, 20, 40, 80)
  assert looks.schedule(_config(questions=40, looks=(10, 40))) == (10, 40)
  assert looks.schedule(_config(questions=3)) == (3,) and not looks.is_sequential(_config(questions=3))
  assert looks.design(_config(questions=80, looks=(10,))).margin == pytest.approx(0.05)
  for bad in ((20, 10), (10, 10), (1,), (90,), ("10",), [True]):
    with pytest.raises(ValueError, match=r"^config.budget.looks .*; e.g. --config.budget.looks="):
      looks.validate(_config(questions=80, looks=bad))
  with pytest.raises(ValueError, match=r"config.budget.looks: needs one process, got 2.*--config.budget.looks='\(\)'"):
    looks.check(_config(questions=80, looks=(10,)), 2)
  looks.check(_config(questions=80), 2)                    # the fixed design runs across processes


def test_pending_stopped_and_the_reports_look():
  c = looks.resolve(_config(questions=40, looks=(10, 20)))
  taken = [{"look": 1, "questions": 10, "decided": False}]
  assert looks.pending(c, ["q"] * 9, []) == [] and looks.pending(c, ["q"] * 25, taken) == [2]
  assert looks.pending(c, ["q"] * 40, taken + [{"look": 2, "decided": False}]) == []   # the cap is the report
  assert looks.stopped(taken) is None
  seq = looks.report_look(c, {"selected": ["q"] * 20, "looks": taken + [{"look": 2, "questions": 20, "decided": True}]})
  assert (seq["look"], seq["final"]) == (2, False)
  order = [f"q{i}" for i in range(40)]
  assert {k: v for k, v in looks.report_look(c, {"selected": order, "looks": taken}).items() if k != "design"} \
      == {"look": 3, "final": False, "question_order": order}          # each pair's history reads the order
  # The pool ran out after look 1: the next look is final and spends what is left.
  assert {k: v for k, v in looks.report_look(c, {"selected": order[:13], "looks": taken}).items() if k != "design"} \
      == {"look": 2, "final": True, "question_order": order[:13]}
  # The fixed design: one look, whatever was selected.
  fixed = looks.report_look(looks.resolve(_config(questions=40)), {"selected": ["q"] * 12})
  assert (fixed["look"], fixed["final"], fixed["design"].n_looks) == (1, False, 1)
  # A futile look (budget.futility) stops the study as a decided one does, and the report reads that look.
  futile = {"look": 1, "questions": 10, "decided": False, "decision": "futile"}
  assert looks.stops(futile) and not looks.stops(taken[0]) and looks.stopped([futile]) == futile
  assert looks.report_look(c, {"selected": ["q"] * 10, "looks": [futile]})["look"] == 1


def test_the_resolved_looks_carry_the_configs_design_target_and_estimand():
  c = _config(questions=80, looks=(10, 40), futility=0.1)
  c.report.target, c.report.estimand, c.report.min_effect = "all", "projection", 0.01
  seq = looks.resolve(c)
  assert seq == looks.Looks(design=looks.design(c), target="all", estimand="projection") and seq.sequential
  assert (seq.design.looks, seq.design.margin, seq.design.futility) == ((10, 40, 80), 0.01, 0.1)
  assert not looks.resolve(_config(questions=80)).sequential


def test_futility_reaches_the_design_and_a_bad_one_names_the_field():
  assert looks.design(_config(questions=80, looks=(10,))).futility == 0.0
  assert looks.design(_config(questions=80, looks=(10,), futility=0.1)).futility == 0.1
  for bad in (1.0, -0.1, 2.5):
    with pytest.raises(ValueError, match=r"^config.budget.futility .*e.g. --config.budget.futility=0.05"):
      looks.validate(_config(questions=80, looks=(10,), futility=bad))
  with pytest.raises(ValueError, match=r"^config.budget.futility: needs budget.looks"):
    looks.validate(_config(questions=80, futility=0.1))
  # Added at its old behaviour's value (0: never), it leaves the config hash of runs started before it.
  c = _config(questions=80).to_dict()
  old = {**c, "budget": {k: v for k, v in c["budget"].items() if k != "futility"}}
  assert claim.config_hash(c) == claim.config_hash(old)
  assert claim.config_hash({**c, "budget": {**c["budget"], "futility": 0.1}}) != claim.config_hash(old)


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory):
  """A smoke study capped at 3 questions with a look at 2 that (patched) decides: it must stop there."""
  workdir = tmp_path_factory.mktemp("seq") / "run"
  c = _config(questions=3, looks=(2,), rollouts_per_question=4, nodes_per_rollout=2, continuations_per_candidate=2,
              question_batch=1)
  c.configurations = {"solution": "self:solution:reverse_kl", "solution_fkl": "self:solution:forward_kl"}
  c.logging.progress = False
  c.report.pages = 0
  c.report.target = "incorrect"               # the group the test's planted look decides on
  real = looks.take
  calls = []

  def take(wd, config, selected, look):
    entry = real(wd, config, selected, look)          # the real verdict at this look, then "decided"
    calls.append((entry, list(selected)))
    return {**entry, "decided": True, "decision": "use"}

  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(looks, "take", take)
    pipeline.run(c, str(workdir))
  return workdir, c, calls


def test_a_decided_look_stops_the_study_and_the_report_reads_that_look(stopped_run):
  workdir, c, calls = stopped_run
  progress = json.loads((workdir / "progress.json").read_text())
  assert progress["done"] and len(progress["selected"]) == 2 and len(calls) == 1
  assert [t["look"] for t in progress["looks"]] == [1] and progress["looks"][0]["decided"]
  nodes = records.read_table(workdir, "nodes")
  assert set(nodes["question_id"]) == set(progress["selected"]) == set(calls[0][1])
  manifest = json.loads((workdir / "manifest.json").read_text())
  assert manifest["looks"] == progress["looks"] and manifest["work"]["continuations"] == int(
      nodes.drop_duplicates(["question_id", "rollout_id", "position"])["continuations"].sum())
  assert manifest["design"] == looks.design_record(c.to_dict()) and (manifest["design"]["r"], manifest["design"][
      "looks"], manifest["design"]["estimand"], manifest["design"]["pilot"]) == (2, [2], "alignment", None)
  verdict = json.loads((workdir / "verdict.json").read_text())
  assert verdict["look"] == 1 and verdict["looks"] == [2, 3]
  # The look's verdict is decision.decide at look 1 of the design on the first 2 questions' nodes.
  want = decision.decide(nodes, target="incorrect", n_boot=200, min_effect=0.05, design=looks.design(c), look=1)
  assert calls[0][0]["line"] == want["line"] and calls[0][0]["decision"] == want["decision"]


def test_a_stopped_study_is_complete_on_rerun(stopped_run, capsys):
  workdir, c, _ = stopped_run
  pipeline.run(c, str(workdir))
  assert "holds a finished run of this config (nothing to run)" in capsys.readouterr().err
  assert len(records.read_table(workdir, "rollouts")["question_id"].unique()) == 2
