"""Across studies (issue 14, item 6): one comparison page and CSV over several studies (students x tasks x
configurations), each study's verdict and its configurations' paired differences against its best side by side.

  python -m opd_jax.report --workdir=runs/a --workdir=runs/b --out=runs/compare   # or --workdir='runs/*'

A configuration's alignment is defined on its study's candidate sets C(u), the union of every view's top-k
(`nodes.candidate_rule`, issue 34, item 7): the same configuration in a study with other views is measured on
other tokens. Studies whose manifest.json "candidate_set" rules differ are refused (`check_candidates`) unless
allow_unlike_candidates (--allow_unlike_candidates), and then flagged: a warning line, a note on the page and the
rule of each study in comparison.csv ("candidate_set"). A manifest written before the rule was recorded is
"unknown": compared, with a warning.
"""
import glob
import html
import json
import os

import pandas as pd

from opd_jax import atomic
from opd_jax import records
from opd_jax.report import build
from opd_jax.report import common
from opd_jax.report import decision
from opd_jax.report import page
from opd_jax.report import validation_note


def expand(workdirs: list[str]) -> list[str]:
  """The workdirs with glob patterns expanded (sorted; a pattern matching no directory is an error), in order,
  duplicates dropped. Raises ValueError for a pattern or path that names no directory."""
  out = []
  for w in workdirs:
    matches = sorted(m for m in glob.glob(w) if os.path.isdir(m)) if glob.has_magic(w) else [w]
    if not matches or not all(os.path.isdir(m) for m in matches):
      raise ValueError(f"--workdir={w} names no study directory; pass existing workdirs (or a glob matching them)")
    out += [m for m in matches if m not in out]
  return out


def check_schema(workdirs: list[str]) -> None:
  """Refuses, in one error, every study whose manifest.json is missing or has another "schema_version" than
  records.SCHEMA_VERSION (its records could not be compared column for column)."""
  bad = []
  for w in workdirs:
    path = os.path.join(w, "manifest.json")
    if not os.path.isfile(path):
      bad.append(f"{w}: no manifest.json (schema version unknown)")
      continue
    with open(path) as f:
      version = json.load(f).get("schema_version")
    if version != records.SCHEMA_VERSION:
      bad.append(f"{w}: schema_version {version!r}")
  if bad:
    raise ValueError(f"cannot compare studies whose records are not of schema version {records.SCHEMA_VERSION} "
                     f"(this opd_jax): {'; '.join(bad)}; rerun those studies with this version (or compare them "
                     "with the opd_jax that wrote them)")


def candidate_sets(workdirs: list[str]) -> list[dict | None]:
  """Each study's candidate-set rule, manifest.json "candidate_set" (`nodes.candidate_rule`); None where the manifest
  predates it (or is missing: `check_schema` refuses that first)."""
  out = []
  for w in workdirs:
    path = os.path.join(w, "manifest.json")
    manifest = {}
    if os.path.isfile(path):
      with open(path) as f:
        manifest = json.load(f)
    out.append(manifest.get("candidate_set"))
  return out


def rule_text(rule: dict | None) -> str:
  """One line of a candidate-set rule: "sampled token + student top-2 + top-1 of views [a:plain, self:solution]"."""
  if rule is None:
    return "unknown (manifest.json without 'candidate_set': written before opd_jax recorded it)"
  views = rule.get("views") or []
  return (f"sampled token + student top-{rule.get('student_top_k')}"
          + (f" + top-{rule.get('teacher_top_k')} of views [{', '.join(views)}]" if views else ""))


def _difference(rule: dict, first: dict, first_workdir: str) -> str:
  """What `rule` changes against `first` (the first study's), in words."""
  parts = []
  added = sorted(set(rule.get("views") or []) - set(first.get("views") or []))
  dropped = sorted(set(first.get("views") or []) - set(rule.get("views") or []))
  if added:
    parts.append(f"views added [{', '.join(added)}]")
  if dropped:
    parts.append(f"views missing [{', '.join(dropped)}]")
  for k in ("student_top_k", "teacher_top_k"):
    if rule.get(k) != first.get(k):
      parts.append(f"{k} {rule.get(k)}")
  return (", ".join(parts) or "another rule") + f" (against {first_workdir})"


def unlike_candidates(workdirs: list[str], rules: list[dict | None]) -> str:
  """"" when every study of a known rule forms its candidate sets as the first such study; else one phrase naming
  each study that differs and how ("runs/b: views added [self:summary] (against runs/a)")."""
  known = [(w, r) for w, r in zip(workdirs, rules) if r is not None]
  if not known:
    return ""
  first_w, first = known[0]
  return "; ".join(f"{w}: {_difference(r, first, first_w)}" for w, r in known[1:] if r != first)


def check_candidates(workdirs: list[str], rules: list[dict | None], *, allow_unlike: bool = False) -> list[str]:
  """The comparison's contract on candidate sets (module docstring): the warning lines to print (studies of unknown
  rule; studies of unlike rules compared on request).

  Raises:
    ValueError: studies whose candidate-set rules differ, without allow_unlike (one line: which, how, the fix).
  """
  warnings = []
  unknown = [w for w, r in zip(workdirs, rules) if r is None]
  if unknown and len(workdirs) > 1:
    warnings.append(f"candidate-set rule unknown for {', '.join(unknown)} (manifest.json written before opd_jax "
                    "recorded it): its configurations' alignments may be on other candidate sets than the other "
                    "studies'; to record it, delete its manifest.json and rerun its command with this opd_jax (its "
                    "questions are done: nothing is sampled again)")
  unlike = unlike_candidates(workdirs, rules)
  if unlike and not allow_unlike:
    raise ValueError(f"cannot compare studies whose candidate sets are formed differently: {unlike}; a "
                     "configuration's alignment is defined on its study's candidate sets, the union of every "
                     "view's top-k (docs/usage.md, \"Candidate sets are the study's\"), so it moves when views are "
                     "added: run the studies with the same configurations' views and budget.student_top_k / "
                     "teacher_top_k, or pass --allow_unlike_candidates to compare them anyway (flagged)")
  if unlike:
    warnings.append(f"studies with unlike candidate sets compared (--allow_unlike_candidates): {unlike}; a "
                    "configuration's alignments in them are on different candidate sets")
  return warnings


def _name(workdir: str) -> str:
  path = os.path.join(workdir, "config.json")
  config = {}
  if os.path.isfile(path):
    with open(path) as f:
      config = json.load(f)
  parts = [str(config.get("name") or os.path.basename(os.path.abspath(workdir)))]
  for key in ("student", "task"):
    value = config.get(key)
    if isinstance(value, dict) and value.get("name"):
      parts.append(f"{key} {value['name']}")
  return ", ".join(parts)


def compare(workdirs: list[str], *, target: str = "incorrect", n_boot: int = 2000, seed: int = 0,
            min_nodes: int = common.MIN_NODES, min_questions: int = common.MIN_QUESTIONS,
            allow_unlike_candidates: bool = False) -> tuple[pd.DataFrame, list[dict]]:
  """decision.decide on every study's node records (same target, n_boot, seed and power rule).

  Returns:
    (table, verdicts): table has one row per (study, configuration): study, workdir, name, candidate_set (the
    study's rule, `rule_text`), verdict, best,
    config_id, n_defined, n_questions (with a defined alignment), mean_alignment, ci_lo, ci_hi, could_be_best,
    underpowered, n_shared_questions, comparable, diff_vs_best, diff_ci_lo, diff_ci_hi (simultaneous over the
    study's comparable pairs), p_adjusted, distinguishable (NaN / "" for the best itself; a configuration that is
    not comparable with the best, decision.MIN_SHARED_QUESTIONS, is never distinguishable); verdicts: decide's
    dicts with "workdir", "name", "candidate_set" (the manifest's rule or None) and "warnings" (`check_candidates`'
    lines, the same in every study's dict) added, in study order.
  Raises:
    ValueError: an unknown workdir or glob (expand), a study of another schema version (check_schema), studies
      of unlike candidate sets without allow_unlike_candidates (check_candidates) or bad records;
      FileNotFoundError: a study without node records.
  """
  workdirs = expand(workdirs)
  check_schema(workdirs)
  rules = candidate_sets(workdirs)
  warnings = check_candidates(workdirs, rules, allow_unlike=allow_unlike_candidates)
  rows, verdicts = [], []
  for i, (w, rule) in enumerate(zip(workdirs, rules)):
    nodes = build.read_records(w, "nodes")
    v = decision.decide(nodes, target=target, n_boot=n_boot, seed=seed, min_nodes=min_nodes,
                        min_questions=min_questions, success_rates=build.success_rates(w, target))
    v = {**v, "workdir": w, "name": _name(w), "candidate_set": rule, "warnings": warnings}
    verdicts.append(v)
    comps = {c["config_id"]: c for c in v["comparisons"]}
    for r in v["ranking"]:
      c = comps.get(r["config_id"], {})
      rows.append({"study": i, "workdir": w, "name": v["name"], "candidate_set": rule_text(rule),
                   "verdict": v["verdict"], "best": v["best"],
                   "config_id": r["config_id"], "n_defined": r["n_defined"], "n_questions": r["n_questions"],
                   "mean_alignment": r["mean_alignment"], "ci_lo": r["ci_lo"], "ci_hi": r["ci_hi"],
                   "could_be_best": r["could_be_best"], "underpowered": r["underpowered"],
                   "n_shared_questions": c.get("n_shared_questions", r["n_questions"]),
                   "comparable": c.get("comparable", ""),
                   "diff_vs_best": c.get("diff", float("nan")), "diff_ci_lo": c.get("ci_lo", float("nan")),
                   "diff_ci_hi": c.get("ci_hi", float("nan")), "p_adjusted": c.get("p_adjusted", float("nan")),
                   "distinguishable": c.get("distinguishable", "")})
  return pd.DataFrame(rows), verdicts


def render(table: pd.DataFrame, verdicts: list[dict]) -> str:
  """The comparison page: one verdict line per study, then configurations x studies (mean alignment [CI];
  paired difference against the study's best [CI], simultaneous over the comparable pairs)."""
  parts = ["<h1>opd_jax: comparison of studies</h1>"]
  bests = {v["best"] for v in verdicts if v["verdict"] == "use"}
  decided = sum(v["verdict"] == "use" for v in verdicts)
  summary = (f"{decided} of {len(verdicts)} studies name a best configuration"
             + (f"; they disagree ({', '.join(sorted(map(str, bests)))}): no configuration wins everywhere"
                if len(bests) > 1 else ""))
  group = common.on_nodes(verdicts[0]["target"]).removeprefix("on ")
  parts.append(f'<p class="note">{html.escape(summary)}. Target group: {html.escape(group)}; means with '
               f"{100 * verdicts[0]['level']:g}% cluster-bootstrap intervals over each study's "
               f"questions (n_boot={verdicts[0]['n_boot']}, seed={verdicts[0]['seed']}).</p>")
  if verdicts:                     # what every study's verdict ranks on, and what validation v2 showed of it
    parts.append(f'<p class="note">{html.escape(validation_note.basis_line(verdicts[0]))}</p>')
  for w in verdicts[0].get("warnings", []):
    parts.append(f'<p class="note"><b>Flagged:</b> {html.escape(w)}.</p>')
  parts.append("<h2>Verdicts</h2>" + page.table_html(
      ["#", "study", "workdir", "verdict", "verdict line"],
      [[str(i), v["name"], v["workdir"], v["verdict"], v["line"]] for i, v in enumerate(verdicts)], cls="verdicts"))
  if "candidate_set" in verdicts[0]:
    parts.append('<p class="note">Candidate sets (a configuration\'s alignment is defined on its study\'s C(u)): '
                 + "; ".join(f"#{i} {html.escape(rule_text(v['candidate_set']))}" for i, v in enumerate(verdicts))
                 + ".</p>")
  configs = list(pd.unique(table["config_id"]))
  header = ["config"] + [f"#{i} mean [CI]" for i in range(len(verdicts))] + [
      f"#{i} vs best [CI]" for i in range(len(verdicts))]
  body = []
  for c in configs:
    cells = [c]
    means, diffs = [], []
    for i, v in enumerate(verdicts):
      r = table[(table["study"] == i) & (table["config_id"] == c)]
      if r.empty:
        means.append("-")
        diffs.append("-")
        continue
      r = r.iloc[0]
      means.append(f"{common.fmt(r['mean_alignment'], 3)} {common.ci(r['ci_lo'], r['ci_hi'], 3)}"
                   + (" (indicative)" if r["underpowered"] else ""))
      if c == v["best"]:
        diffs.append("best")
      elif r["comparable"] is not True:
        diffs.append(f"not comparable ({r['n_shared_questions']} shared questions)")
      else:
        diffs.append(f"{common.fmt(r['diff_vs_best'], 3)} {common.ci(r['diff_ci_lo'], r['diff_ci_hi'], 3)}"
                     + (" *" if r["distinguishable"] is True else ""))
    body.append(cells + means + diffs)
  parts.append("<h2>Configurations side by side</h2>" + page.table_html(header, body))
  parts.append('<p class="note">vs best: paired difference (configuration - the study\'s best) on the nodes both '
               "define, with a CR2 interval by question simultaneous over the study's comparable pairs (Bonferroni); "
               f"* = distinguishable; not comparable = fewer than {decision.MIN_SHARED_QUESTIONS} shared questions "
               "(not tested); indicative = underpowered.</p>")
  return page.document("opd_jax: comparison of studies", parts)


def write(workdirs: list[str], out: str, **kw) -> tuple[pd.DataFrame, list[dict]]:
  """compare(...) (same keywords) written to `<out>/comparison.html` and `<out>/comparison.csv` (atomically)."""
  table, verdicts = compare(workdirs, **kw)
  os.makedirs(out, exist_ok=True)
  atomic.write_bytes(os.path.join(out, "comparison.csv"), table.to_csv(index=False))
  atomic.write_bytes(os.path.join(out, "comparison.html"), render(table, verdicts))
  return table, verdicts
