"""Builds every report file of a study from its records: summary.md, summary.csv, verdict.json, where.csv,
predictors.csv, alignment.png, report.html and html/ (per-token pages) (each written atomically; same records
and arguments -> same bytes: no clock, no absolute paths)."""
import json
import os

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from opd_jax import atomic
from opd_jax import records
from opd_jax.estimators import stats
from opd_jax.report import ceiling
from opd_jax.report import common
from opd_jax.report import decision
from opd_jax.report import figures
from opd_jax.report import markdown as md
from opd_jax.report import page
from opd_jax.report import predictors as why
from opd_jax.report import proxies as proxy_lib
from opd_jax.report import router as rt
from opd_jax.report import summary as summ
from opd_jax.report import token_pages
from opd_jax.report import validation_note
from opd_jax.report import where


def read_records(workdir: str, table: str = "nodes", columns: list[str] | None = None) -> pd.DataFrame:
  """All part files of `<workdir>/records/<table>` in one DataFrame (parts in file-name order).

  Reads `part-*.parquet` only, so a temporary file left by an interrupted write is never read. `columns`
  restricts the columns read (all by default).

  Raises:
    FileNotFoundError: the directory is missing or holds no part file; the message names the directory.
  """
  directory = os.path.join(workdir, "records", table)
  if not os.path.isdir(directory):
    raise FileNotFoundError(f"no {table} records: directory {directory} does not exist; run the study first "
                            "(python -m opd_jax.main --workdir=...) or pass the workdir that holds records/")
  records.check_parts(workdir, (table,))           # foreign (another config's) or truncated parts: refused
  parts = records.part_files(workdir, table)
  if not parts:
    raise FileNotFoundError(f"no {table} records: directory {directory} holds no part-*.parquet file; the study "
                            "has not finished a question yet")
  return pd.concat([pd.read_parquet(p, columns=columns) for p in parts], ignore_index=True)


def _flatten(tree, prefix: str = "") -> dict:
  """Scalar leaves of a JSON tree as {"a.b": value}; long values shortened."""
  out = {}
  if isinstance(tree, dict):
    for k, v in tree.items():
      out.update(_flatten(v, f"{prefix}{k}."))
  else:
    text = json.dumps(tree) if isinstance(tree, (list, tuple)) else str(tree)
    out[prefix[:-1]] = text if len(text) <= 160 else text[:157] + "..."
  return out


def _proxies(workdir: str, nodes: pd.DataFrame, *, n_boot: int, seed: int) -> tuple[pd.DataFrame, str]:
  """(proxies.proxy_table of the study's tokens table, "" or why it is empty: the report's run facts say so)."""
  empty = proxy_lib.proxy_table(pd.DataFrame(columns=list(proxy_lib.COLUMNS)), nodes.iloc[:0])
  parts = records.part_files(workdir, "tokens")
  if not parts:
    return empty, "not shown: no records/tokens (the per-token divergences they average)"
  have = set(pq.read_schema(parts[0]).names)
  if not {"question_id", "teacher", "context"} <= have:
    return empty, "not shown: records/tokens has no question_id, teacher or context column"
  tokens = read_records(workdir, "tokens", columns=[c for c in proxy_lib.COLUMNS if c in have])
  table = proxy_lib.proxy_table(tokens, nodes, n_boot=n_boot, seed=seed)
  missing = sorted(set(proxy_lib.PROXIES) - set(table["proxy"]))
  return table, (f"{', '.join(missing)} not shown: no finite value in records/tokens" if missing and len(table)
                 else "" if len(table) else "not shown: no finite value in records/tokens")


def success_rates(workdir, target: str, rollouts: pd.DataFrame | None = None) -> pd.Series | None:
  """With target "trained", each question's base success rate from `workdir`'s rollout records
  (common.success_rates; `rollouts`: that table when already read), else None.

  Raises:
    FileNotFoundError: target "trained" and no rollout records (the message names the directory)."""
  if target != common.TRAINED:
    return None
  if rollouts is None:
    rollouts = read_records(str(workdir), "rollouts", columns=["question_id", "reward"])
  return common.success_rates(rollouts)


def _load_json(path: str) -> dict | None:
  if not os.path.isfile(path):
    return None
  with open(path) as f:
    return json.load(f)


def _read_rollouts(workdir: str) -> pd.DataFrame | None:
  """The rollout records' question_id, rollout_id, reward and length columns (question_id and reward for older
  records), or None without readable rollout records: read once per report."""
  for columns in (["question_id", "rollout_id", "reward", "length"], ["question_id", "reward"]):
    try:
      return read_records(workdir, "rollouts", columns=columns)
    except (FileNotFoundError, KeyError, ValueError):        # no rollout records, or older columns
      continue
  return None


def _rollout_lengths(rollouts: pd.DataFrame | None, meta: dict) -> pd.DataFrame | None:
  if rollouts is None:
    return None
  reward = rollouts["reward"].to_numpy(np.float64)
  meta["rollouts"] = (f"{common.counted(len(rollouts), 'rollout')}, "
                      f"{common.counted(rollouts['question_id'].nunique(), 'question')}, "
                      f"accuracy {np.mean(reward == 1):.3f}")
  return rollouts if "length" in rollouts.columns else None


def write_summary(workdir: str, *, n_boot: int = 2000, seed: int = 0, min_nodes: int = common.MIN_NODES,
                  min_questions: int = common.MIN_QUESTIONS, target: str = "incorrect", plot: bool = True,
                  html: bool = True, decode=None, n_boot_predictors: int = 200,
                  pages: int = token_pages.DEFAULT_PAGES, colour_by: str = token_pages.DEFAULT_COLOUR_BY,
                  min_effect: float = 0.0, design=None, look: int | None = None, final: bool = False,
                  estimand: str = "alignment", question_order=None, unplanned: str | None = None,
                  out_dir: str | None = None) -> str:
  """Rebuilds the report files of `<workdir>` from its node records (and rollouts, config.json, manifest.json).

  Files: summary.md (markdown, returned), summary.csv (summary.summarize), proxies.csv (proxies.proxy_table: each
  configuration's cheap per-token proxies, no targeted rollouts), verdict.json (decision.decide on
  `target`, with the router (router.route on `target`) under "router" and what the training validation showed
  about its self-distillation contexts under "validation": validation_note.lines), where.csv (where.where_table),
  predictors.csv (predictors.predictor_table), alignment.png (plot), report.html (html; figures inline) and
  html/ (html and pages > 0: token_pages.write_pages, linked from report.html), written as one set
  (`atomic.write_files`): a failure (a full disk) leaves the previous report's files as they were.

  Args:
    workdir: the study's working directory (holds records/nodes).
    n_boot, seed, min_nodes, min_questions: intervals and the power rule (summary.summarize, decision.decide).
    target: the decision's node group: "incorrect" (default), "correct", "all" or "trained" (all nodes as training
      weighs them, by each question's base success rate from the rollout records: decision.decide; the router
      then reads all nodes).
    design, look, final: a sequential study's design (`sequential.Design`), the look its verdict is read at
      (1-based) and whether that look was final (the pool ran out): decision.decide's; None: the fixed design.
      With a design the margin is design.margin and min_effect is not read.
    min_effect: the smallest difference of interest (> 0): the verdict adds the questions needed to detect it
      with 80% power (decision.decide); 0: not asked.
    estimand: what the verdict compares per node (common.ESTIMANDS): "alignment" or "projection"; min_effect
      and a design's margin are in its units.
    plot: write alignment.png and link it from the markdown.
    html: write report.html (with the where and predictor figures).
    decode: token id -> text (e.g. `lambda t: tokenizer.decode([t])`) for the token-kind split; without it the
      split is skipped with a note.
    n_boot_predictors: bootstrap replicates of the predictor intervals (rank statistics: slower per replicate).
    pages: the cap on per-token pages in html/ (0: none).
    colour_by: the predictor the per-token pages colour by (a tokens column, e.g. "kl_pq").
    out_dir: where the files go (None: `workdir`); another folder leaves the study's own report as it is.
  Returns:
    The markdown written to summary.md.
  Raises:
    FileNotFoundError: records/nodes is missing or empty (the message names the directory).
    ValueError: inconsistent records (common.check_nodes) or an unknown target.
    atomic.WriteError: a report file that could not be written (stage "report"; nothing was replaced).
  """
  nodes = read_records(workdir, "nodes")
  common.check_nodes(nodes)
  if {"p", "successes", "n"} <= set(nodes.columns):
    nodes = nodes.assign(ceiling=ceiling.node_ceilings(nodes, seed=seed))
  summary = summ.summarize(nodes, n_boot=n_boot, seed=seed, min_nodes=min_nodes, min_questions=min_questions)
  seq = {} if design is None else {"design": design, "look": look, "final": final, "level": 1.0 - design.alpha,
                                   "question_order": question_order}
  rollouts = _read_rollouts(workdir)
  rates = success_rates(workdir, target, rollouts)
  verdict = decision.decide(nodes, target=target, n_boot=n_boot, seed=seed, min_nodes=min_nodes,
                            min_questions=min_questions,
                            min_effect=(min_effect or None) if design is None else design.margin,
                            estimand=estimand, unplanned=unplanned, success_rates=rates,
                            **seq)
  predictor_rows = why.predictor_table(nodes, n_boot=n_boot_predictors, seed=seed)
  proxy_rows, proxy_note = _proxies(workdir, nodes, n_boot=n_boot, seed=seed)
  routed = rt.route(nodes, target="all" if target == common.TRAINED else target, n_boot=n_boot, seed=seed,
                    min_nodes=min_nodes, min_questions=min_questions)
  verdict = {**verdict, "validation": [validation_note.basis_line(verdict),
                                       *validation_note.lines(verdict, validation_note.self_configs(nodes))],
             "router": routed}
  config = _load_json(os.path.join(workdir, "config.json"))
  manifest = _load_json(os.path.join(workdir, "manifest.json"))
  name = (config or {}).get("name") or os.path.basename(os.path.abspath(workdir))
  meta = {"nodes": f"{common.counted(len(nodes), 'node row')}, "
                   f"{common.counted(nodes['question_id'].nunique(), 'question')}, "
                   f"{common.counted(nodes['config_id'].nunique(), 'configuration')}"}
  lengths = _rollout_lengths(rollouts, meta)
  if proxy_note:
    meta["cheap proxies"] = proxy_note
  meta["intervals"] = (f"{100 * summary['ci_level'].iloc[0]:g}% percentile cluster bootstrap over questions, "
                       f"n_boot={n_boot}, seed={seed}; underpowered below {min_nodes} defined alignments or "
                       f"{min_questions} questions (intervals indicative)")
  unsampled = ()
  if common.sampled_group(((config or {}).get("budget") or {}).get("node_group", "balanced"), target) != "all":
    unsampled = tuple(sorted({"correct", "incorrect"} - {target}))       # budget.node_group: not sampled on purpose
    meta["node rollouts"] = (f"from the {target} group only (budget.node_group=target): the {unsampled[0]} group "
                             "is empty by design")
  if config is not None:
    meta["config.json"] = _flatten(config)
  if manifest is not None:
    meta["manifest.json"] = _flatten(manifest)
  markdown = md.render_markdown(summary, title=f"opd_jax summary: {name}", meta=meta, verdict=verdict,
                                predictors=predictor_rows, router=routed, unsampled=unsampled, proxies=proxy_rows)
  pngs, files = {}, {}                   # path -> bytes of every file of the report, written as one at the end
  dest = workdir if out_dir is None else str(out_dir)
  if plot:
    pngs["alignment"] = figures.alignment_by_config(summary)
    files[os.path.join(dest, "alignment.png")] = pngs["alignment"]
    markdown += "\n![mean alignment by configuration and group](alignment.png)\n"
  notes, where_rows = _where(nodes, lengths, decode, config, n_boot=n_boot, seed=seed, min_nodes=min_nodes,
                             min_questions=min_questions)
  if html:
    for split in pd.unique(where_rows["split"]) if len(where_rows) else []:
      pngs[f"where_{split}"] = figures.where_split(where_rows, split)
    if len(predictor_rows):
      pngs["predictors"] = figures.predictor_auroc(predictor_rows)
    links = _pages(workdir, nodes, notes, pages=pages, colour_by=colour_by, decode=decode, out=files, dest=dest)
    files[os.path.join(dest, "report.html")] = page.render_html(
        title=f"opd_jax report: {name}", verdict=verdict, summary=summary, figures=pngs, where=where_rows,
        predictors=predictor_rows, meta=meta, notes=notes, router=routed, pages=links, proxies=proxy_rows)
  files[os.path.join(dest, "summary.md")] = markdown
  files[os.path.join(dest, "summary.csv")] = summary.to_csv(index=False)
  files[os.path.join(dest, "where.csv")] = where_rows.to_csv(index=False)
  files[os.path.join(dest, "predictors.csv")] = predictor_rows.to_csv(index=False)
  files[os.path.join(dest, "proxies.csv")] = proxy_rows.to_csv(index=False)
  files[os.path.join(dest, "verdict.json")] = atomic.json_text(_json_ready(verdict))
  with atomic.writing("report"):
    atomic.write_files(files)
  return markdown


def _pages(workdir, nodes, notes, *, pages, colour_by, decode, dest, out=None):
  """token_pages.write_pages into `dest`/html/ from `workdir`'s tokens table (or the rollouts' response_ids) of the
  selected rollouts; without either, no pages and a note."""
  chosen = token_pages.select_rollouts(nodes, pages)
  if not len(chosen):
    return token_pages.write_pages(dest, nodes, pd.DataFrame(), max_pages=0, out=out)
  keys = pd.MultiIndex.from_frame(chosen[["question_id", "rollout_id"]])

  def selected(frame):
    return frame[pd.MultiIndex.from_frame(frame[["question_id", "rollout_id"]]).isin(keys)]

  try:
    tokens, rollouts = selected(read_records(workdir, "tokens")), None
  except FileNotFoundError:
    try:
      tokens, rollouts = None, selected(read_records(workdir, "rollouts",
                                                     columns=["question_id", "rollout_id", "response_ids"]))
    except (FileNotFoundError, KeyError, ValueError):
      tokens = rollouts = None
  if (tokens is None or not len(tokens)) and rollouts is None:
    notes.append("per-token pages skipped: no records/tokens and no rollouts with response_ids")
    return token_pages.write_pages(dest, nodes, pd.DataFrame(), max_pages=0, out=out)
  tokens = token_pages.rollout_tokens(tokens, rollouts)
  try:
    infos = selected(read_records(workdir, "rollouts"))
    infos = infos[[c for c in token_pages.ROLLOUT_COLUMNS if c in infos.columns]]
  except (FileNotFoundError, KeyError, ValueError):          # no rollout records
    infos = None
  return token_pages.write_pages(dest, nodes, tokens, max_pages=pages, colour_by=colour_by, decode=decode,
                                 rollouts=infos, out=out)


def _where(nodes, lengths, decode, config, *, n_boot, seed, min_nodes, min_questions):
  notes = []
  features = where.node_features(nodes, lengths=lengths, decode=decode)
  if "rel_position" not in features.columns:
    notes.append("relative position split skipped: the rollout records have no length column")
  if "kind" not in features.columns:
    notes.append("token-kind split skipped: no tokenizer given (write_summary(decode=...) or --tokenizer)")
  top_k = ((config or {}).get("budget") or {}).get("student_top_k")
  if "argmax" in features.columns and top_k is not None and int(top_k) < 1:
    features = features.drop(columns="argmax")
    notes.append("argmax split skipped: budget.student_top_k = 0, so C(u) need not hold the student's argmax")
  boot = stats.ClusterBootstrap(nodes["question_id"].astype(str).to_numpy(), n_boot=n_boot, seed=seed)
  return notes, where.where_table(nodes, features, boot, min_nodes=min_nodes, min_questions=min_questions)


def _json_ready(tree):
  """NaN / inf -> None, numpy scalars -> Python (strict JSON)."""
  if isinstance(tree, dict):
    return {k: _json_ready(v) for k, v in tree.items()}
  if isinstance(tree, (list, tuple)):
    return [_json_ready(v) for v in tree]
  if isinstance(tree, (float, np.floating)):
    return float(tree) if np.isfinite(tree) else None
  if isinstance(tree, np.integer):
    return int(tree)
  if isinstance(tree, np.bool_):
    return bool(tree)
  return tree
