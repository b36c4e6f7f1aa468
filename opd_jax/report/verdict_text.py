"""The verdict in words: its one-line summary (`line`), intervals and power in text, the next step to take, and the
table of configurations that summary.md, report.html and the console print (`opd_jax/report/decision.py` decides;
this module only renders)."""
from __future__ import annotations

import math

from opd_jax.report import common


def power_text(power: dict | None) -> str:
  """The power sentence of the report ("" without data)."""
  if not power:
    return ""
  if not power["estimable"]:
    return f"Power: not estimable ({power['reason']})."
  text = (f"Power ({power['vs']} against the best, level {power['alpha']:.3g} per comparison): the smallest "
          f"difference detectable with {100 * power['power']:g}% "
          + ("expected power (averaged over the error of the estimated se) " if power.get("expected") else "power ")
          + f"at this budget ({power['questions']} shared "
          f"questions) is {power['detectable_difference']:.4f}"
          + (" (more than 2, the largest a difference of cosines can be: none is detectable)"
             if power["detectable_difference"] > 2 else ""))
  if power["min_effect"] is not None:
    need = power["questions_needed"]
    text += (f"; to detect {power['min_effect']:g}: {need} questions ({power['more_questions']} more)"
             if need is not None else f"; {power['min_effect']:g} is not detectable with any number of questions")
  return text + "."


def spans_everything(lo: float, hi: float) -> bool:
  """An interval cut to [-2, 2] at both ends (or NaN): it excludes no difference two cosines can have."""
  return not (lo > -2.0 or hi < 2.0)


def interval_text(c: dict, min_questions: int, *, flip: bool = False, signed: bool = True) -> str:
  """A comparison's interval ("[lo, hi]"; `flip`: of the best minus the configuration), or "not estimable (...)"
  when it spans [-2, 2], every difference two cosines can have (`spans_everything`: too few shared questions for
  the family's level; printed as [-2.0000, +2.0000] it looked like a bug)."""
  lo, hi = (-c["ci_hi"], -c["ci_lo"]) if flip else (c["ci_lo"], c["ci_hi"])
  if math.isnan(lo) or math.isnan(hi):
    return "n/a"
  if spans_everything(lo, hi):
    g = c["n_shared_questions"]
    return ("not estimable ("
            + (f"{common.counted(g, 'shared question')} < {min_questions}: " if g < min_questions else "")
            + "the interval spans every possible difference, [-2, 2])")
  return f"[{lo:+.4f}, {hi:+.4f}]" if signed else common.ci(lo, hi)


SEEN = "questions_seen.json"    # a study's processed question texts (pipeline.run): config.task.exclude reads it


def _new_study(n=None) -> str:
  """The one action on more questions that keeps the stated error rates (issue 49, item 4): a new study on
  questions this one did not see. A rerun of these questions with a larger cap would look at them again."""
  cap = f" --config.budget.questions={n}" if n else ""
  return (f"a new study on questions this one did not see (--config.task.exclude=<this workdir>/{SEEN}{cap}; a "
          "larger cap on these same questions would test them again: not a decision)")


def next_step(verdict: dict) -> str:
  """What would decide, for the console (`console.results_text`): "" when the verdict is decided and no
  min_effect was asked; else the questions that would detect min_effect (or the design's margin) with 80% power,
  or, without min_effect, the power rule's questions and the difference this budget can detect."""
  if not verdict.get("ranking") or verdict.get("best") is None:
    return ""
  p, n = verdict.get("power") or {}, verdict["n_questions"]
  decided = verdict.get("decided", verdict["verdict"] == "use")
  needs = [u["questions_needed"] for u in verdict.get("undecided") or () if u["questions_needed"] is not None]
  if needs and not decided:
    return (f"to decide: ~{max(needs)} questions would detect {verdict['margin']:g} with 80% expected power (now "
            f"{n}): {_new_study(max(needs))}")
  effect, need = p.get("min_effect"), p.get("questions_needed")
  if effect is not None and need is not None:
    return (f"{'to decide' if not decided else 'power'}: ~{need} questions ({p['more_questions']} more) would detect "
            f"a difference of {effect:g} with 80% power (config.report.min_effect): {_new_study(need)}")
  if decided:
    return "" if effect is None else f"power: {effect:g} is not detectable with any number of questions"
  short = verdict["ranking"][0].get("short")
  text = (f"to decide: at least {verdict['min_questions']} questions with a defined "
          f"{verdict.get('estimand', 'alignment')} (now {n}): {_new_study()}" if short
          else f"to decide: more questions: {_new_study()}")
  if p.get("estimable"):
    text += (f"; this budget detects differences >= {p['detectable_difference']:.3f} only: "
             "--config.report.min_effect=<the smallest worth detecting> prints the questions that would detect it")
  return text


TABLE_HEADER = ["config", "nodes", "questions", "mean align", "teacher adv", "shared nodes", "shared questions",
                "diff vs best", "CI", "p (adjusted)", "vs best", "could be best", "power rule"]


def table_rows(verdict: dict) -> list[list[str]]:
  """The verdict table's rows (TABLE_HEADER) for summary.md and report.html, in the ranking's order."""
  comps = {c["config_id"]: c for c in verdict["comparisons"]}
  rows = []
  for r in verdict["ranking"]:
    c = comps.get(r["config_id"])
    if c is None:
      cells = ["", "", "", "", "", "best" if r["config_id"] == verdict["best"] else ""]
    else:
      status = ("distinguishable" if c["distinguishable"] else "not distinguishable") if c["comparable"] else (
          f"not comparable (< {verdict['min_shared_questions']} shared questions)")
      status += f"; equivalent within +-{verdict['margin']:g}" if c.get("equivalent") else ""
      cells = [str(c["n_shared"]), str(c["n_shared_questions"]), common.fmt(c["diff"]),
               interval_text(c, verdict["min_questions"], signed=False), common.fmt(c["p_adjusted"], 3), status]
    rule = (f"no defined {verdict.get('estimand', 'alignment')}" if not r["n_defined"]
            else f"indicative: {r['short']}" if r["short"] else "")
    rows.append([str(r["config_id"]), str(r["n_defined"]), str(r["n_questions"]), common.fmt(r["mean_alignment"]),
                 common.fmt(r["mean_teacher_advantage"]), *cells, "yes" if r["could_be_best"] else "no", rule])
  return rows


def table_note(verdict: dict) -> str:
  """How to read the verdict table, in one paragraph."""
  m, lvl = verdict["family_size"], f"{100 * verdict['level']:g}%"
  family = (f"each CI at {100 * verdict['ci_level']:.4g}%, so {lvl} simultaneous over all "
            f"{common.counted(m, 'comparable pair')} of configurations "
            "(Bonferroni: it holds for a best chosen from the "
            f"data); p (adjusted) = min(1, {m} p)" if m else "no pair is comparable, so nothing is tested")
  if m and len(verdict.get("looks") or ()) > 1:
    family = (f"each CI at {100 * verdict['ci_level']:.4g}%, this look's level in a sequential design spending "
              f"{100 - 100 * verdict['level']:g}% / {m} per pair over looks at {verdict['looks']} questions "
              f"({verdict['spending']} alpha spending), so {lvl} simultaneous over all "
              f"{common.counted(m, 'comparable pair')}"
              f" and every look; p (adjusted) = min(1, p {1 - verdict['level']:g} / "
              f"{1 - verdict['ci_level']:.3g}); equivalent: the CI inside +-{verdict['margin']:g}")
  est = verdict.get("estimand", "alignment")
  what = "" if est == "alignment" else (
      f"The verdict compares the {est}, {common.ESTIMANDS[est]}, per node ('mean align' "
      "and 'diff vs best' hold it). ")
  return (f"{what}Configurations on {verdict['target']} nodes ({verdict['n_questions']} questions with a defined "
          f"{est}), the best first, then by their paired difference against it. diff vs best = mean of "
          f"(configuration - best) over the nodes both define (paired), with a CR2 cluster-robust standard error by "
          f"question and Bell-McCaffrey degrees of freedom; {family}. Pairs sharing fewer than "
          f"{verdict['min_shared_questions']} questions are not comparable (not tested, no veto). could be best: no "
          f"comparable configuration is distinguishably better (a {lvl} confidence set for the best). mean align "
          "and teacher adv are over each configuration's own nodes (their intervals: the table by configuration x "
          "correctness). questions: questions with a defined alignment.")
