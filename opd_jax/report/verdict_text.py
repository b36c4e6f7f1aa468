"""The verdict in words: its first line (`headline`: what to use, or that no configuration is shown better, and the
one number that says how sure), the lines after it (`fixed_parts`' details), intervals and power in text, the next
step to take, and the table of configurations that summary.md, report.html and the console print
(`opd_jax/report/decision.py` decides; this module only renders)."""
from __future__ import annotations

import math

from opd_jax.report import common

NOT_SHOWN = "no configuration is shown better"     # the first line's words when the verdict names none
HEADLINE_MAX = 160                                 # the first line's length with config ids of <= 20 characters


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
    text += (f"; to detect {power['min_effect']:g}: {need} questions, in a new study on unseen questions"
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


def headline(what: str, target: str, number: str = "", suffix: str = "", how: str = "") -> str:
  """The verdict's first line: `what` ("use X", NOT_SHOWN, ...) on the target group, then the number that says how
  sure (`number`, with `how`, e.g. ", 95% simultaneous", where the line stays within HEADLINE_MAX), then `suffix` (a
  sequential design's look) in parentheses. Within HEADLINE_MAX for config ids of <= 20 characters: everything
  else goes to the lines after it."""
  def join(tail):
    return f"{what} {common.on_nodes(target)}" + (f": {number}{tail}" if number else "") + (f" ({suffix})" if suffix else "")
  return join(how) if len(join(how)) <= HEADLINE_MAX else join("")


def lead(out: dict, *, compact: bool = False) -> str:
  """"best - closest = diff [interval]" of the first comparable comparison ("" without one); `compact`: three
  decimals, and the interval without the reason when it is not estimable (for the first line)."""
  top = next((c for c in out["comparisons"] if c["comparable"]), None)
  if top is None:
    return ""
  if not compact:
    return (f"{out['best']} - {top['config_id']} = {-top['diff']:+.4f} "
            f"{interval_text(top, out['min_questions'], flip=True)}")
  head, lo, hi = f"{out['best']} - {top['config_id']} = {-top['diff']:+.3f}", -top["ci_hi"], -top["ci_lo"]
  if math.isnan(lo) or math.isnan(hi) or spans_everything(lo, hi):
    return f"{head}, its interval not estimable (too few shared questions)"
  return f"{head} [{lo:+.3f}, {hi:+.3f}]"


def _short_head(out: dict) -> str:
  """Why the best is underpowered, in a few words for the first line."""
  r, word, best = out["ranking"][0], out.get("estimand", "alignment"), out["best"]
  if r["n_questions"] < out["min_questions"]:
    return (f"{best} has {common.counted(r['n_questions'], 'question')} with a defined {word}, "
            f"needs {out['min_questions']}")
  if r["n_defined"] < out["min_nodes"]:
    return f"{best} has {common.counted(r['n_defined'], 'node')} with a defined {word}, needs {out['min_nodes']}"
  return f"no configuration shares {common.MIN_SHARED_QUESTIONS} questions with {best}"


def fixed_parts(out: dict) -> dict:
  """The verdict of the fixed design in words: {what, number, how} (the first line's parts, `headline`) and details
  (the lines after it: why, the intervals' family, what could be best, what is not comparable or not defined).

  `out` is decision.decide's dict with a best (ranking, comparisons, power, best_set, verdict, level, ...)."""
  best, comps, target = out["best"], out["comparisons"], out["target"]
  word, pct = out.get("estimand", "alignment"), f"{100 * out['level']:g}%"
  defined = {r["config_id"] for r in out["ranking"] if r["n_defined"]}
  sparse = [f"{c['config_id']} ({c['n_shared_questions']})" for c in comps
            if not c["comparable"] and c["config_id"] in defined]
  empty = [c["config_id"] for c in comps if c["config_id"] not in defined]
  absent = ([f"not comparable (fewer than {common.MIN_SHARED_QUESTIONS} questions shared with {best}): "
             f"{', '.join(sparse)}"] if sparse else []) + ([f"no defined {word}: {', '.join(empty)}"] if empty else [])
  full, short = lead(out), lead(out, compact=True)
  how = f", {pct} simultaneous" if short.endswith("]") else ""          # the interval's level, when there is one
  family = (f"{pct} simultaneous intervals over {common.counted(out['family_size'], 'pairwise comparison')}, "
            + ("paired by question" if target == common.TRAINED else "paired on shared nodes") + ", CR2 by question")
  if out["verdict"] == "underpowered":
    first = out["ranking"][0]["short"]
    why = (f"{best}: {first}" if first
           else f"no configuration shares {common.MIN_SHARED_QUESTIONS} questions with {best}")
    return dict(what=NOT_SHOWN, number=f"UNDERPOWERED, {_short_head(out)}",
                details=[f"UNDERPOWERED {common.on_nodes(target)} ({why}): no decision"
                         + (f"; indicative only: {full}" if full else ""), *absent])
  if not sparse and not full:
    return dict(what=f"only {best} has defined {word}s", number="nothing to compare", details=absent)
  if out["verdict"] == "use":
    return dict(what=f"use {best}", number=short, how=how,
                details=[f"{best} is distinguishable from every comparable configuration {common.on_nodes(target)}; closest: "
                         f"{full} mean {word} ({family})", *absent])
  tied = [c["config_id"] for c in comps if c["comparable"] and not c["distinguishable"]]
  ahead = [c["config_id"] for c in comps if c["comparable"] and c["distinguishable"] and c["diff"] > 0]
  p = out["power"]
  mde = (f"; detectable with 80% {'expected ' * bool(p.get('expected'))}power at this budget: "
         f"{p['detectable_difference']:.4f}" if p["estimable"] else "")
  why = ([f"{best} is not distinguishable from {', '.join(tied)}"] if tied else []) + (
      [f"{', '.join(ahead)} distinguishably ahead of {best} on their shared nodes"] if ahead else [])
  return dict(what=NOT_SHOWN, number=short, how=how,
              details=[f"{'; '.join(why)} ({full}; {family})", f"could be best: {', '.join(out['best_set'])}{mde}",
                       *absent])


def lines(verdict: dict) -> list[str]:
  """Every line of the verdict in the order printed: the first line, its details, then what the training
  validation showed (verdict["validation"], report.validation_note; build adds it)."""
  return [verdict["line"], *verdict.get("details", ()), *verdict.get("validation", ())]


SEEN = "questions_seen.json"    # a study's processed question texts (pipeline.run): config.task.exclude reads it


def _new_study(n=None) -> str:
  """The one action on more data that keeps the stated error rates (issue 49, item 4; issue 50, item 8): a new
  study, its configurations, cap and looks fixed before it starts, on questions this one did not see. More
  questions or configurations added to this study after its verdict would test these questions again (a look, or
  a family, its design did not plan)."""
  cap = f" --config.budget.questions={n}" if n else ""
  return (f"a new study on questions this one did not see, its configurations, cap and looks fixed before it starts "
          f"(--config.task.exclude=<this workdir>/{SEEN}{cap}); more questions or configurations added to this "
          "study would test these questions again: not a decision")


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
    return (f"to decide: a study of ~{max(needs)} questions would detect {verdict['margin']:g} with 80% expected "
            f"power (this one: {n}): {_new_study(max(needs))}")
  effect, need = p.get("min_effect"), p.get("questions_needed")
  if effect is not None and need is not None:
    return (f"{'to decide' if not decided else 'power'}: a study of ~{need} questions would detect a difference of "
            f"{effect:g} with 80% power (config.report.min_effect): {_new_study(need)}")
  if decided:
    return "" if effect is None else f"power: {effect:g} is not detectable with any number of questions"
  short = verdict["ranking"][0].get("short")
  text = (f"to decide: at least {verdict['min_questions']} questions with a defined "
          f"{verdict.get('estimand', 'alignment')} (this study: {n}): {_new_study()}" if short
          else f"to decide: a larger sample: {_new_study()}")
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
  trained = verdict["target"] == common.TRAINED
  unit = ("question values (one per question and configuration: s_q x its correct nodes' mean + (1 - s_q) x its "
          "incorrect nodes' mean over the nodes the configuration defines, s_q the question's base success rate)"
          if trained else "nodes")
  return (f"{what}Configurations {common.on_nodes(verdict['target'])} ({common.counted(verdict['n_questions'], 'question')} "
          "with a defined "
          f"{est}), the best first, then by their paired difference against it. diff vs best = mean of "
          f"(configuration - best) over the {unit} both define (paired), with a CR2 cluster-robust standard error by "
          f"question and Bell-McCaffrey degrees of freedom; {family}. Pairs sharing fewer than "
          f"{verdict['min_shared_questions']} questions are not comparable (not tested, no veto). could be best: no "
          f"comparable configuration is distinguishably better (a {lvl} confidence set for the best). mean align "
          f"and teacher adv are over each configuration's own {'question values' if trained else 'nodes'} (their "
          "intervals: the table by configuration x "
          "correctness). questions: questions with a defined alignment.")
