"""Looks the design did not plan (issue 49, item 4): a rerun of the same questions under another schedule is
labelled "not a decision" (the ledger of looks), a replication is not; a report that asks another target or
estimand is labelled; the advice names a new study on unseen questions; looks need a margin."""
import json

import numpy as np
import pandas as pd

from configs import smoke
from opd_jax.report import cli
from opd_jax.report import decision
from opd_jax.report import looks
from opd_jax.report import verdict_text


def _study(path, questions, looks_=()):
  c = smoke.get_config()
  c.budget.questions, c.budget.looks = questions, looks_
  path.mkdir(parents=True)
  (path / "config.json").write_text(json.dumps(c.to_dict(), default=list))
  return c


def test_a_rerun_with_another_cap_is_not_a_decision_and_a_replication_is(tmp_path, monkeypatch):
  monkeypatch.setenv(looks.LEDGER_ENV, str(tmp_path / "ledger.jsonl"))
  ids = [f"q{i}" for i in range(40)]
  first = _study(tmp_path / "first", 20)
  looks.note_look(tmp_path / "first", ids[:20], 20, looks.design(first).looks)
  _study(tmp_path / "again", 20)                                   # the same config: the same records and verdict
  assert looks.unplanned(tmp_path / "again", ids[:20], (20,)) is None
  bigger = _study(tmp_path / "bigger", 40)                          # the verdict's old advice: a larger cap
  why = looks.unplanned(tmp_path / "bigger", ids, looks.design(bigger).looks)
  assert why.startswith("20 of these questions were already looked at by ") and "task.exclude" in why
  other = _study(tmp_path / "other", 40)
  other.seed = 7                                                    # another key: other questions
  (tmp_path / "other" / "config.json").write_text(json.dumps(other.to_dict(), default=list))
  assert looks.unplanned(tmp_path / "other", ids, (40,)) is None
  monkeypatch.setenv(looks.LEDGER_ENV, "off")
  assert looks.unplanned(tmp_path / "bigger", ids, (40,)) is None


def test_the_report_labels_another_target_and_decide_labels_the_verdict(tmp_path):
  c = _study(tmp_path / "w", 20)
  (tmp_path / "w" / "progress.json").write_text(json.dumps({"selected": ["q1"]}))
  assert cli.unplanned_reason(tmp_path / "w", c.report.target, c.report.estimand) is None
  why = cli.unplanned_reason(tmp_path / "w", "all", c.report.estimand)
  assert why == f"--target=all is not the study's planned config.report.target={c.report.target!r}"
  rng = np.random.default_rng(0)
  rows = pd.DataFrame([dict(config_id=c_, question_id=f"q{q}", rollout_id=0, position=t, teacher="t", context="plain",
                            divergence="reverse_kl", correct=False, alignment=rng.normal(0.1 * (c_ == "a"), 0.3),
                            alignment_nan_reason=None, degenerate=False, teacher_advantage=0.0)
                       for c_ in "ab" for q in range(12) for t in range(3)])
  plain = decision.decide(rows, n_boot=20)
  got = decision.decide(rows, n_boot=20, unplanned=why)
  assert got["line"] == f"NOT A DECISION: {plain['line']}"
  assert got["details"] == [f"not a decision ({why}); read as exploratory", *plain["details"]]
  assert got["planned"] is False and got["decided"] is False and got["best"] == plain["best"]


def test_the_advice_names_only_a_new_study_on_unseen_questions():
  v = {"ranking": [{"short": ""}], "best": "a", "power": {}, "n_questions": 9, "undecided": [
      {"questions_needed": 120}], "decided": False, "margin": 0.05, "verdict": "indistinguishable"}
  text = verdict_text.next_step(v)
  assert "raise config.budget.questions" not in text
  assert f"--config.task.exclude=<this workdir>/{verdict_text.SEEN} --config.budget.questions=120" in text
