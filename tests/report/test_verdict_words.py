"""The verdict a newcomer reads (issue 50, item 8): a short first line (what to use, or that no configuration is
shown better, and the number that says how sure), the rest on the lines after it; what the training validation
showed, exactly when a self-distillation context is the best or could be best, its numbers read from the committed
files; and advice that keeps the design's error rates (a new study on unseen questions, never more questions or
configurations added to this one)."""
import functools
import json
import re

import numpy as np
import pandas as pd
import pytest

from benchmarks import verdict_calibration as calibration
from opd_jax import report
from opd_jax.report import common
from opd_jax.report import console
from opd_jax.report import decision
from opd_jax.report import sequential
from opd_jax.report import validation_note
from opd_jax.report import verdict_text
from opd_jax.study import planning
from tests.report.test_report_decision import planted     # pylint: disable=g-bad-import-order
from tests.report.test_report_sequential import table      # pylint: disable=g-bad-import-order

LONG = ["self_contrastive_jsd", "external_teacher_fkl", "solution_summary_ctx", "answer_with_solution",
        "misleading_control_1", "external_jsd_beta_05"]                   # config ids of 20 characters
NUMBER = re.compile(r"[+-]?\d+(\.\d+)?")


def _named(nodes: pd.DataFrame, selfs=()) -> pd.DataFrame:
  """`nodes` with config ids c0, c1, ... (or A, B, ...) renamed to LONG's and teacher "self" for `selfs` (indices)."""
  ids = list(pd.unique(nodes["config_id"]))
  out = nodes.assign(config_id=nodes["config_id"].map({c: LONG[i] for i, c in enumerate(ids)}))
  return out.assign(teacher=np.where(out["config_id"].isin([LONG[i] for i in selfs]), "self", "t"))


def _verdicts():
  """Verdicts of every kind, with 20-character config ids: fixed design (use, no decision, underpowered, one with
  data, unplanned) and sequential (use, equivalent, continue, cap, futile, the pool ran out)."""
  out = {"use": decision.decide(_named(planted(0, 0.5)), n_boot=20),
         "null": decision.decide(_named(planted(1, 0.0)), n_boot=20),
         "underpowered": decision.decide(_named(planted(0, 0.5, n_questions=6)), n_boot=20),
         "one_question": decision.decide(_named(planted(0, 0.5, n_questions=1)), n_boot=20)}
  only = _named(planted(0, 0.5))
  only.loc[only["config_id"] == LONG[1], "alignment"] = np.nan
  out["only_one"] = decision.decide(only.assign(degenerate=only["alignment"].isna()), n_boot=20)
  out["unplanned"] = decision.decide(_named(planted(1, 0.0)), n_boot=20, unplanned="x" * 70)
  design = sequential.Design(looks=(10, 20, 40), margin=0.05)
  align, q = table([0.5, 0.0, 0.0], 40, seed=2, noise=0.05)
  out["seq_use"] = decision.decide(_named(calibration.as_nodes(align[q < 10], q[q < 10])), n_boot=20, design=design,
                                   look=1)
  align, q = table([0.0, 0.0, -0.8], 40, seed=3, noise=0.002)
  align[:, 2] = align[:, 0] - 0.8 + 0.1 * np.random.default_rng(0).normal(size=q.size)
  out["seq_equivalent"] = decision.decide(_named(calibration.as_nodes(align[q < 20], q[q < 20])), n_boot=20,
                                          design=design, look=2)
  align, q = table([0.0, 0.0, 0.0, 0.0, 0.0, 0.0], 40, seed=4)
  six = _named(calibration.as_nodes(align, q))
  first = six[six["question_id"].isin({f"q{x:03d}" for x in range(20)})].reset_index(drop=True)
  out["seq_continue"] = decision.decide(first, n_boot=20, design=design, look=2)
  out["seq_cap"] = decision.decide(six, n_boot=20, design=design, look=3)
  out["seq_ran_out"] = decision.decide(first, n_boot=20, design=design, look=2, final=True)
  futile = sequential.Design(looks=(10, 14), margin=0.01, futility=0.1)
  out["seq_futile"] = decision.decide(six[six["question_id"] < "q010"].reset_index(drop=True), n_boot=20,
                                      design=futile, look=1)
  return out


VERDICTS = _verdicts()


def test_every_kind_of_verdict_is_built():
  kinds = {k: (v["verdict"], v.get("decision")) for k, v in VERDICTS.items()}
  assert kinds["use"] == ("use", None) and kinds["null"] == ("indistinguishable", None)
  assert kinds["underpowered"][0] == kinds["one_question"][0] == "underpowered"
  assert {kinds[k][1] for k in kinds if k.startswith("seq_")} == {"use", "equivalent", "continue", "cap", "futile"}


@pytest.mark.parametrize("kind", sorted(VERDICTS))
def test_the_first_line_is_short_and_says_what_to_use_and_how_sure(kind):
  v = VERDICTS[kind]
  line = v["line"]
  assert "\n" not in line and len(line) <= verdict_text.HEADLINE_MAX, (len(line), line)
  decided = v.get("decision", v["verdict"]) in ("use", "equivalent")
  head = line.removeprefix("NOT A DECISION: ")
  assert head.startswith("use ") if decided else (head.startswith(verdict_text.NOT_SHOWN) or kind == "only_one"), line
  if kind not in ("only_one",) and v["verdict"] != "no_data":
    assert NUMBER.search(line.replace(v["best"], "")), line          # the interval, the questions or P(decided)
  # Nothing of the verdict is lost: its details hold the rest (the old one-line sentence's parts).
  assert all(d and "\n" not in d for d in v["details"])
  text = "\n".join(verdict_text.lines(v))
  if v["verdict"] == "underpowered":
    assert "UNDERPOWERED on incorrect nodes (" in text
  if kind.startswith("seq_") and v["decision"] != "use":
    assert v["details"][0].startswith("look ")
  if kind == "unplanned":
    assert line.startswith("NOT A DECISION: ") and v["details"][0].startswith(f"not a decision ({'x' * 70})")


def _verdict(best, best_set, target="incorrect", kind="use"):
  return {"verdict": kind, "best": best, "best_set": best_set, "target": target, "estimand": "alignment"}


@pytest.mark.parametrize("best, best_set, selfs, shown", [
    ("a", ["a"], ["a"], True),                        # the best is a self context
    ("a", ["a", "b"], ["b"], True),                   # one that could be best is
    ("a", ["a"], ["b"], False),                       # a self context distinguishably behind: no lines
    ("a", ["a", "b"], [], False),                     # no self context
    (None, [], ["a"], False)])                        # no data
def test_validation_lines_appear_exactly_when_a_self_context_could_be_best(best, best_set, selfs, shown):
  got = validation_note.lines(_verdict(best, best_set), selfs)
  assert bool(got) == shown
  if shown:
    named = [c for c in dict.fromkeys([best, *best_set]) if c in selfs]
    assert got[0].startswith(", ".join(f"{c} (the best)" if c == best else f"{c} (could be best)" for c in named))
    assert "moving" in got[0] and "v2" in got[1] and "frozen" in got[1] and "teacher's identity" in got[2]
    under = validation_note.lines(_verdict(best, best_set, kind="underpowered"), selfs)[0]
    assert "(the best)" not in under and (best not in selfs or f"{best} (the highest mean, not a decision)" in under)


def test_validation_numbers_are_read_from_the_committed_files(tmp_path):
  """The repository's files give v1's collapse and gains and v1's Spearman; other files give other numbers, and
  without files the lines state none."""
  v1 = pd.read_csv(validation_note.ROOT / validation_note.V1 / "runs.csv")
  own = v1[v1["spec"].str.startswith("self:")]
  ext = v1[~v1["spec"].str.startswith("self:")]
  lines = validation_note.lines(_verdict("a", ["a"]), ["a"])
  before = own["before"].iloc[0]
  assert (own["after"] == 0).all() and (own["before"] == before).all()
  assert f"all {len(own)} self-teacher runs fell from {before:.3f} to 0.000 held-out pass@1" in lines[0]
  assert f"{ext['diff'].min():+.2f} to {ext['diff'].max():+.2f}" in lines[0]
  pred = pd.read_csv(validation_note.ROOT / validation_note.V1 / "predictors.csv").set_index("predictor")
  for target in ("incorrect", "correct"):
    text = validation_note.lines(_verdict("a", ["a"], target), ["a"])[2]
    assert f"{pred.at[f'alignment_{target}', 'spearman']:+.2f} (mean alignment, {target} nodes)" in text
    assert f"{pred.at['reference_external_teacher', 'spearman']:+.2f} (teacher external or self)" in text
  # Other files: one self run of two fell, the external one lost; v2's frozen runs listed.
  (tmp_path / validation_note.V1).mkdir(parents=True)
  (tmp_path / validation_note.V2).mkdir(parents=True)
  pd.DataFrame({"spec": ["self:a:reverse_kl", "self:b:reverse_kl", "ext:plain:reverse_kl"], "steps": 7,
                "before": 0.5, "after": [0.0, 0.375, 0.25], "diff": [-0.5, -0.125, -0.25]}).to_csv(
                    tmp_path / validation_note.V1 / "runs.csv", index=False)
  pd.DataFrame({"spec": ["self:a:reverse_kl", "self:b:reverse_kl"], "teacher_weights": ["initial", "current"],
                "diff": [0.125, 0.0], "lo": [0.0, 0.0], "hi": [0.25, 0.0]}).to_csv(
                    tmp_path / validation_note.V2 / "runs.csv", index=False)
  other = validation_note.lines(_verdict("a", ["a"]), ["a"], root=tmp_path)
  assert "1 of 2 self-teacher runs fell from 0.500 to 0.000" in other[0] and "-0.25 to -0.25" in other[0]
  assert other[1].endswith("self:a:reverse_kl +0.125 [+0.000, +0.250]") and "self:b" not in other[1]
  # With stages: each labelled with its held-out size; past LISTED runs a stage is summed up (independent counts).
  diffs = [0.3, -0.2, 0.0, 0.05, 0.1, -0.05]
  staged = pd.DataFrame({"spec": [f"self:c{i}:reverse_kl" for i in range(7)], "teacher_weights": "initial",
                         "stage": [1] + [3] * 6, "n_questions": [40] + [80] * 6, "samples": [8] + [4] * 6,
                         "diff": [0.0] + diffs, "lo": [-0.1] + [d - 0.07 for d in diffs],
                         "hi": [0.1] + [d + 0.07 for d in diffs]})
  staged.to_csv(tmp_path / validation_note.V2 / "runs.csv", index=False)
  line = validation_note.lines(_verdict("a", ["a"]), ["a"], root=tmp_path)[1]
  assert line.endswith("stage 1, 40 questions x 8 samples: self:c0:reverse_kl +0.000 [-0.100, +0.100]; stage 3, 80 "
                       "questions x 4 samples: 6 runs from -0.200 to +0.300, 2 above 0 and 1 below 0 by their 95% "
                       "intervals"), line
  assert other[2].endswith('(README.md, "Does the study predict training?")')      # no predictors.csv: no number
  bare = validation_note.lines(_verdict("a", ["a"]), ["a"], root=tmp_path / "none")
  assert len(bare) == 3 and not any(re.search(r"\d\.\d", line) for line in bare), bare


def test_validation_lines_say_v2_is_done_once_its_test_table_is_in(tmp_path):
  """Before stage3.csv: v2 "under way", its runs "so far", v1's claim as the project's; with it (the repository
  now): neither, and v1's claim said as v1's alone, pointing at the first validation line (v2's result)."""
  for folder in (validation_note.V1, validation_note.V2):
    (tmp_path / folder).mkdir(parents=True)
  pd.DataFrame({"spec": ["self:a:reverse_kl"], "teacher_weights": ["initial"], "diff": [0.125], "lo": [0.0],
                "hi": [0.25]}).to_csv(tmp_path / validation_note.V2 / "runs.csv", index=False)
  for name in ("runs.csv", "predictors.csv"):
    (tmp_path / validation_note.V1 / name).write_text((validation_note.ROOT / validation_note.V1 / name).read_text())
  before = validation_note.lines(_verdict("a", ["a"]), ["a"], root=tmp_path)
  assert "is under way" in before[1] and "runs so far" in before[1]
  assert before[2].startswith("The study's ranking was not shown to predict")
  (tmp_path / validation_note.V2 / "stage3.csv").write_text(
      (validation_note.ROOT / validation_note.V2 / "stage3.csv").read_text())
  after = validation_note.lines(_verdict("a", ["a"]), ["a"], root=tmp_path)
  assert after[0] == before[0] and after[1] == before[1].replace(
      f" is under way ({validation_note.V2}/PLAN.md)", f", its test done ({validation_note.V2}/stage3.csv)").replace(
          "runs so far", "runs")
  v2 = "; v2 tested it within one teacher (the first validation line above)"
  assert after[2] == ("Validation v1 could not show the ranking predicts training gains beyond the teacher's identity"
                      ": " + before[2].split(": ", 1)[1] + v2)                      # the same v1 numbers
  trained = validation_note.lines(_verdict("a", ["a"], "trained"), ["a"], root=tmp_path)[2]   # not in v1's table
  assert trained.endswith(f'(README.md, "Does the study predict training?"){v2}') and not re.search(r"\d\.\d", trained)
  repo = validation_note.lines(_verdict("a", ["a"]), ["a"])                        # the committed files: v2 done
  assert not any("under way" in line or "so far" in line or "was not shown" in line for line in repo), repo


FORBIDDEN = [re.compile(p) for p in (r"\(\d+ more\)", r"\braise\b", r"\brun more\b", r"\badd (a|more|another) "
                                     r"configuration", r"--configuration=", r"\brerun\b", r"\(now \d+\)")]


@functools.lru_cache(maxsize=None)
def _larger() -> str:
  return planning.larger_advice("teacher_sweep")      # what opd_jax.main passes to the console after the default


@pytest.mark.parametrize("kind", sorted(VERDICTS))
def test_the_advice_keeps_the_error_rates(kind):
  """Every piece of advice (the console's next step with the default sweep's larger variant, the report's power
  sentence) names a new study on unseen questions, never more questions or configurations in this one."""
  v = VERDICTS[kind]
  for effect in (None, 0.05):
    w = {**v, "power": {**(v["power"] or {}), **({"min_effect": effect, "questions_needed": 400,
                                                  "more_questions": 380} if effect else {})}}
    texts = [console.next_line(w, _larger()), verdict_text.power_text(w["power"] if w["power"] else None)]
    for text in filter(None, texts):
      assert not any(p.search(text) for p in FORBIDDEN), text
      if "questions" in text and text.startswith(("to decide", "power:")) and "not detectable" not in text:
        assert f"--config.task.exclude=<this workdir>/{verdict_text.SEEN}" in text, text
        assert "a new study on questions this one did not see" in text, text
      if ":hour" in text:
        assert "with the same --config.task.exclude (a new study" in text


def test_the_report_prints_the_validation_lines_where_the_verdict_is_read(tmp_path):
  """verdict.json, summary.md, report.html and the console carry the validation lines: the basis line always, v1's
  and v2's self-teacher lines when the best is a self context, not when the self context is distinguishably
  behind."""
  for name, selfs, shown in (("ahead", (0,), True), ("behind", (1,), False)):
    workdir = tmp_path / name
    directory = workdir / "records" / "nodes"
    directory.mkdir(parents=True)
    nodes = _named(planted(0, 0.5, n_questions=12), selfs)                  # A = B + 0.5: "use A"
    for q, part in nodes.groupby("question_id"):
      part.to_parquet(directory / f"part-{q}.parquet")
    (workdir / "config.json").write_text(json.dumps({"name": "teacher_sweep"}))
    report.write_summary(str(workdir), n_boot=50, n_boot_predictors=10, plot=False, pages=0)
    v = json.loads((workdir / "verdict.json").read_text())
    assert v["verdict"] == "use" and v["best"] == LONG[0] and len(v["validation"]) == (4 if shown else 1)
    assert v["validation"][0] == validation_note.basis_line(v)
    printed = console.results_text(workdir)
    markdown, page = (workdir / "summary.md").read_text(), (workdir / "report.html").read_text()
    assert printed.splitlines()[0] == v["line"] and f"**{v['line']}**" in markdown
    for line in v["details"] + v["validation"]:
      assert f"  {line}" in printed and f"- {line}" in markdown
    assert ("Validation v1" in printed) == ("Validation v1" in markdown) == ("Validation v1" in page) == shown


def test_counts_read_as_words():
  """A count of one is singular in the report's text ("only 1 questions" was printed for a group of one)."""
  assert common.underpowered_reason(1, 1) == ("only 1 non-degenerate node with a defined alignment (< 10); only 1 "
                                             "question (< 10) with a defined alignment")
  assert common.underpowered_reason(3, 2) == ("only 3 non-degenerate nodes with a defined alignment (< 10); only 2 "
                                             "questions (< 10) with a defined alignment")
  one = VERDICTS["one_question"]
  assert "(1 question with a defined alignment)" in verdict_text.table_note(one)


def test_the_basis_line_names_what_the_verdict_ranks_on_and_reads_v2s_test(tmp_path):
  """Every verdict's first validation line (issue 47, item 6): the estimand and group it ranks on; before v2's
  stage3.csv exists, that v2 tests it; after, that predictor's statistic, interval and p beside the primary's."""
  before = validation_note.basis_line({"estimand": "alignment", "target": "incorrect"}, root=tmp_path)
  assert before.startswith("Ranked on the alignment on incorrect nodes (v2's predictor alignment_incorrect)")
  assert "under way" in before and not re.search(r"\d\.\d", before)
  (tmp_path / validation_note.V2).mkdir(parents=True)
  table = pd.DataFrame({"predictor": ["alignment_trained", "alignment_incorrect", "minus_js"],
                        "statistic": [0.61, 0.2, 0.4], "lo": [0.3, -0.25, 0.05], "hi": [0.8, 0.55, 0.7],
                        "p_value": [0.004, 0.21, 0.03], "configurations": 22})
  table.to_csv(tmp_path / validation_note.V2 / "stage3.csv", index=False)
  line = validation_note.basis_line({"estimand": "alignment", "target": "incorrect"}, root=tmp_path)
  assert "22 trained configurations" in line and line.endswith(
      "gain (95% interval resampling configurations, questions and the replicated configurations' seeds) +0.20 "
      "[-0.25, +0.55], one-sided "
      "permutation p 0.21 (the primary, alignment_trained: +0.61 [+0.30, +0.80], one-sided permutation p 0.004)")
  trained = validation_note.basis_line({"estimand": "alignment", "target": "trained"}, root=tmp_path)
  assert trained.endswith("seeds) +0.61 [+0.30, +0.80], one-sided permutation p 0.004") and "(the primary" not in trained
  # With the paired differences from the primary: the best cheap proxy (the highest statistic) and how it compares.
  for lo, hi, word in ((-0.5, 0.1, "not distinguishable from it"), (-0.4, -0.01, "below it"), (0.02, 0.3, "above it")):
    table.assign(minus_primary=[0.0, -0.41, -0.21], minus_primary_lo=[0.0, -0.9, lo],
                 minus_primary_hi=[0.0, 0.1, hi]).to_csv(tmp_path / validation_note.V2 / "stage3.csv", index=False)
    line = validation_note.basis_line({"estimand": "alignment", "target": "trained"}, root=tmp_path)
    assert line.endswith(f"; the best of 1 cheap proxies (no targeted rollouts), minus_js, +0.40 [+0.05, +0.70], "
                         f"one-sided permutation p 0.03; it minus the primary -0.21 [{lo:+.2f}, {hi:+.2f}] (paired "
                         f"draws, not adjusted for picking the best): {word}")
  # PLAN.md's item 6, rule 1: a proxy above the primary (paired interval above 0) is named before a higher one that
  # is not distinguishable from it.
  three = pd.DataFrame({"predictor": ["alignment_trained", "minus_js", "minus_kl_qp"], "statistic": [0.5, 0.9, 0.7],
                        "lo": 0.0, "hi": 0.95, "p_value": 0.01, "configurations": 22, "minus_primary": [0, 0.4, 0.2],
                        "minus_primary_lo": [0, -0.1, 0.05], "minus_primary_hi": [0, 0.8, 0.4]})
  three.to_csv(tmp_path / validation_note.V2 / "stage3.csv", index=False)
  line = validation_note.basis_line({"estimand": "alignment", "target": "trained"}, root=tmp_path)
  assert line.endswith("; of those above the primary, the best of 2 cheap proxies (no targeted rollouts), minus_kl_qp, "
                       "+0.70 [+0.00, +0.95], one-sided permutation p 0.01; it minus the primary +0.20 [+0.05, +0.40] "
                       "(paired draws, not adjusted for picking the best): above it")
  three.assign(minus_primary_lo=[0, 0.1, 0.05]).to_csv(tmp_path / validation_note.V2 / "stage3.csv", index=False)
  assert "; the best of 2 cheap proxies (no targeted rollouts), minus_js, +0.90" in validation_note.basis_line(
      {"estimand": "alignment", "target": "trained"}, root=tmp_path)
  table.to_csv(tmp_path / validation_note.V2 / "stage3.csv", index=False)
  ratio = validation_note.basis_line({"estimand": "alignment_ratio", "target": "all"}, root=tmp_path)
  assert "no row for alignment_ratio_all; the primary, alignment_trained, +0.61" in ratio
  projection = validation_note.basis_line({"estimand": "projection", "target": "trained"}, root=tmp_path)
  assert "(v2's predictor projection_trained)" in projection and "no row for projection_trained" in projection
  # A proxy without a statistic is never the best: the finite ones are compared (none: no clause).
  nan_first = pd.DataFrame({"predictor": ["alignment_trained", "minus_kl_qp", "minus_js"], "statistic": [0.6, np.nan, 0.4],
                            "lo": 0.0, "hi": 0.9, "p_value": 0.01, "configurations": 22, "minus_primary": [0, np.nan, -0.2],
                            "minus_primary_lo": [0, np.nan, -0.5], "minus_primary_hi": [0, np.nan, 0.1]})
  nan_first.to_csv(tmp_path / validation_note.V2 / "stage3.csv", index=False)
  line = validation_note.basis_line({"estimand": "alignment", "target": "trained"}, root=tmp_path)
  assert "the best of 1 cheap proxies (no targeted rollouts), minus_js" in line and "nan" not in line
  nan_first.iloc[:2].to_csv(tmp_path / validation_note.V2 / "stage3.csv", index=False)
  assert "cheap prox" not in validation_note.basis_line({"estimand": "alignment", "target": "trained"}, root=tmp_path)
