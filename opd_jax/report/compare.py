"""Across studies (issue 14, item 6): one comparison page and CSV over several studies (students x tasks x
configurations), each study's verdict and its configurations' paired differences against its best side by side.

  python -m opd_jax.report --workdir=runs/a --workdir=runs/b --out=runs/compare   # or --workdir='runs/*'
"""
import glob
import html
import json
import os

import pandas as pd

from opd_jax import records
from opd_jax.report import build
from opd_jax.report import common
from opd_jax.report import decision
from opd_jax.report import page


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
            min_nodes: int = common.MIN_NODES, min_questions: int = common.MIN_QUESTIONS
            ) -> tuple[pd.DataFrame, list[dict]]:
  """decision.decide on every study's node records (same target, n_boot, seed and power rule).

  Returns:
    (table, verdicts): table has one row per (study, configuration): study, workdir, name, verdict, best,
    config_id, n_defined, n_questions (with a defined alignment), mean_alignment, ci_lo, ci_hi, could_be_best,
    underpowered, n_shared_questions, comparable, diff_vs_best, diff_ci_lo, diff_ci_hi (simultaneous over the
    study's comparable pairs), p_adjusted, distinguishable (NaN / "" for the best itself; a configuration that is
    not comparable with the best, decision.MIN_SHARED_QUESTIONS, is never distinguishable); verdicts: decide's
    dicts with "workdir" and "name" added, in study order.
  Raises:
    ValueError: an unknown workdir or glob (expand), a study of another schema version (check_schema) or bad
      records; FileNotFoundError: a study without node records.
  """
  workdirs = expand(workdirs)
  check_schema(workdirs)
  rows, verdicts = [], []
  for i, w in enumerate(workdirs):
    nodes = build.read_records(w, "nodes")
    v = decision.decide(nodes, target=target, n_boot=n_boot, seed=seed, min_nodes=min_nodes,
                        min_questions=min_questions)
    v = {**v, "workdir": w, "name": _name(w)}
    verdicts.append(v)
    comps = {c["config_id"]: c for c in v["comparisons"]}
    for r in v["ranking"]:
      c = comps.get(r["config_id"], {})
      rows.append({"study": i, "workdir": w, "name": v["name"], "verdict": v["verdict"], "best": v["best"],
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
  parts.append(f'<p class="note">{html.escape(summary)}. Target group: {html.escape(verdicts[0]["target"])} '
               f"nodes; means with {100 * verdicts[0]['level']:g}% cluster-bootstrap intervals over each study's "
               f"questions (n_boot={verdicts[0]['n_boot']}, seed={verdicts[0]['seed']}).</p>")
  parts.append("<h2>Verdicts</h2>" + page.table_html(
      ["#", "study", "workdir", "verdict", "verdict line"],
      [[str(i), v["name"], v["workdir"], v["verdict"], v["line"]] for i, v in enumerate(verdicts)], cls="verdicts"))
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
  """compare(...) written to `<out>/comparison.html` and `<out>/comparison.csv` (atomically)."""
  table, verdicts = compare(workdirs, **kw)
  os.makedirs(out, exist_ok=True)
  records.atomic_write_bytes(os.path.join(out, "comparison.csv"), table.to_csv(index=False))
  records.atomic_write_bytes(os.path.join(out, "comparison.html"), render(table, verdicts))
  return table, verdicts
