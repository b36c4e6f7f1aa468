"""Records: directory datasets of parquet parts, written atomically; resume bookkeeping.

Layout (design.md, "Records"):
  <workdir>/config.json            the resolved config
  <workdir>/manifest.json          schema version, config hash, versions, seeds, checksums, mesh, timings
  <workdir>/progress.json          questions processed so far (the commit point of resume; study/runs.py)
  <workdir>/records/{rollouts,tokens,nodes}/part-<question_id>.parquet
Read a table whole with `pandas.read_parquet("<workdir>/records/nodes")`.

This module is the one definition of every table's columns, dtypes and meanings (`SCHEMAS`, `describe_schema`),
of the predictor columns (`PREDICTORS`) and of the reasons an alignment is NaN (`NAN_REASONS`): the study, the
teachers, the report and the tests import them from here. It also recomputes node rows' estimates from what they
record (`estimates_from_rows`), claims a workdir for a config (`check_workdir`; the hash is opd_jax/claim.py's) and
refuses a workdir whose bookkeeping JSON is damaged (`check_json_files`). It imports only opd_jax's estimators,
claim.py and atomic.py (every package that reads or writes records sits above it).

A question's parts are written first (each atomically: opd_jax/atomic.py), then its progress file
(also atomically: `runs.write_progress`). A run killed anywhere and rerun redoes at most the question in flight,
whose parts are deterministic, so the records end equal to an uninterrupted run's.
"""
from __future__ import annotations

import io
import json
import math
import pathlib

import jax
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from opd_jax import atomic
from opd_jax import claim
from opd_jax.estimators import divergences
from opd_jax.estimators import gradients
from opd_jax.estimators import predictors
from opd_jax.estimators import success

SCHEMA_VERSION = 3
TABLES = ("rollouts", "tokens", "nodes")
# Per-token and per-node predictor columns (paper.md, "Divergence predictors"), computed by
# `predictors.predictors` (whose module holds the tuple next to the code that computes each).
PREDICTORS: tuple[str, ...] = predictors.PREDICTORS
# The study's alignment_nan_reason where a view's context does not exist for a rollout (contrastive without
# another incorrect rollout).
CONTEXT_UNAVAILABLE = "context_unavailable"
# A cross-tokenizer view (`cross.py`) without q at a node: the text before the node's boundary is text the
# teacher's normalizer changes (it is never given such text to read), or the exact sum needs more teacher states
# than scoring.cross_tokenizer.max_tree_nodes.
TEACHER_NORMALIZES_TEXT = "teacher_normalizes_text"
TEACHER_STATE_BOUND = "teacher_state_bound"
# Why an alignment is NaN: every non-empty value of nodes.alignment_nan_reason ("" = defined). The estimator's
# reasons are `gradients.NAN_REASONS` (indexed by `gradients.nan_reason`'s code), then the study's own.
NAN_REASONS: tuple[str, ...] = tuple(r for r in gradients.NAN_REASONS if r) + (
    CONTEXT_UNAVAILABLE, TEACHER_NORMALIZES_TEXT, TEACHER_STATE_BOUND)

# Probability conventions of the records (also in manifest.json, "conventions"). "raw" = softmax of the model's
# logits (temperature 1, no truncation); "sampled policy" = what the sampler draws from (`sampling.
# policy_logprobs`: logits / sampling.temperature, then top-k, then top-p, renormalised); "scaled teacher" =
# softmax(teacher logits / T_q), T_q = scoring.teacher_temperature (0 = the sampling temperature, as GKD and
# TRL divide both sides by one temperature; 1 with greedy sampling), never truncated (a truncated q makes KL
# infinite).
CONVENTIONS = {
    "p": "sampled policy (temperature, top-k, top-p applied) restricted to C(u) and renormalised",
    "q": "scaled teacher softmax(z_q / T_q) restricted to C(u) and renormalised; never truncated",
    "tokens": "raw (T = 1, untruncated) log-probs and predictors of student and teacher",
    "estimators": "V, g*, g_D, alignment, teacher advantage and sampled_advantage use the node columns p and q",
    "not run": "a candidate outside the sampled policy's support (p = 0 under top-k / top-p) gets no continuations "
               "unless budget.continue_unsupported, nor (budget.allocation='weighted') one whose p and every q are "
               "below budget.allocation_min_mass: its n is 0, rewards empty, p_succ, p_succ_lo, p_succ_hi NaN; "
               "V, g*, alignment and degenerate use the candidates run (p renormalised over them: "
               "success.estimator_p_succ; no change where p = 0); "
               "teacher_advantage = sum_k q'_k P_succ(k) - V over the candidates run, q' = q renormalised there "
               "(NaN when q has no mass on them), i.e. q's mass outside p's support is left out",
    "cross-tokenizer view": "a teacher with another tokenizer (or scoring.cross_tokenizer.force) reads text "
                            "(opd_jax/teachers/cross.py): q(k) is the probability of the event that "
                            "its continuation of the "
                            "node's text writes k's bytes and not those of a longer candidate that begins with them "
                            "(scoring.cross_tokenizer.mode: exact over every teacher tokenization, or its canonical "
                            "tokens' path, less the paths that extend it), divided by the exact probability of the "
                            "boundary's tail; candidates with one event (equal bytes, stop tokens) share it equally; "
                            "the events are disjoint, so q_mass <= 1 (up to pruning's bound); its C(u) has no "
                            "teacher top-k; in tokens, logq is of the sampled token's text, logq_minus_logp and "
                            "entropy_p are defined, the predictors comparing two distributions over one vocabulary "
                            "(kl_pq, kl_qp, js, jsd_beta, tv, cosine, entropy_q, topk_overlap) are NaN; a node "
                            "without q (q empty, logq NaN at its position) has alignment_nan_reason "
                            "teacher_normalizes_text (the text before its boundary is changed by the teacher's "
                            "normalizer, e.g. NFC: never conditioned on) or teacher_state_bound (more than "
                            "scoring.cross_tokenizer.max_tree_nodes teacher states)",
}

_PRED = "raw predictor (predictors.predictors, T = 1) of this (teacher, context) at the node's position"
_LIST = lambda t: pa.list_(t)
_COLUMNS = {
    "rollouts": [
        ("question_id", pa.string(), "task question id"),
        ("question_index", pa.int64(), "index in the task's question pool (seeds the question's randomness)"),
        ("rollout_id", pa.int64(), "rollout index within the question"),
        ("prompt_ids", _LIST(pa.int64()), "student prompt token ids (chat-rendered question)"),
        ("response_ids", _LIST(pa.int64()), "sampled response token ids, stop token included"),
        ("text", pa.string(), "decoded response (special tokens skipped)"),
        ("length", pa.int64(), "response length in tokens"),
        ("truncated", pa.bool_(), "hit sampling.max_new_tokens without a stop token"),
        ("reward", pa.float64(), "task verifier's reward in {0, 1} (0 when truncated unless task.grade_truncated)"),
        ("answer", pa.string(), "gold answer"),
        ("extracted", pa.string(), "answer extracted from the response (null if none)"),
        ("logprob_sum", pa.float64(), "sum of the response tokens' log-probs under the sampled policy (nats)"),
        ("fields", pa.string(), "task fields of the question, JSON"),
    ],
    "tokens": [
        ("question_id", pa.string(), "task question id"),
        ("rollout_id", pa.int64(), "rollout index within the question"),
        ("position", pa.int64(), "0-based response position t"),
        ("token", pa.int64(), "sampled token y_t"),
        ("teacher", pa.string(), "teacher of the view ('self' = the student)"),
        ("context", pa.string(), "teacher context of the view"),
        ("logp", pa.float64(), "raw log p(y_t) of the student (T = 1)"),
        ("logq", pa.float64(), "raw log q(y_t) of the teacher in its context (T = 1)"),
    ] + [(k, pa.float64(), "raw predictor (predictors.predictors, T = 1)") for k in PREDICTORS],
    "nodes": [
        ("question_id", pa.string(), "task question id"),
        ("rollout_id", pa.int64(), "rollout index within the question"),
        ("config_id", pa.string(), "configuration name (config.configurations)"),
        ("teacher", pa.string(), "teacher ('self' = the student)"),
        ("context", pa.string(), "teacher context"),
        ("divergence", pa.string(), "distillation divergence"),
        ("beta", pa.float64(), "JSD_beta weight (NaN unless jsd)"),
        ("clip", pa.float64(), "clip threshold tau (NaN unless clipped_reverse_kl)"),
        ("divergence_param", pa.float64(), "the divergence's '@' parameter, named by its registry entry's `param` "
                                           "(beta, clip, k, ...); NaN if it takes none"),
        ("correct", pa.bool_(), "the node's rollout was correct"),
        ("position", pa.int64(), "0-based response position t of the node"),
        ("sampled_token", pa.int64(), "y_t, also candidates[0]"),
        ("candidates", _LIST(pa.int64()), "C(u): the sampled token, the student's top-k_s, each view's top-k_t"),
        ("p", _LIST(pa.float64()), "sampled policy on C(u), renormalised (CONVENTIONS)"),
        ("q", _LIST(pa.float64()), "scaled teacher on C(u), renormalised (CONVENTIONS); empty if unavailable"),
        ("successes", _LIST(pa.int64()), "successful continuations per candidate"),
        ("n", _LIST(pa.int64()), "continuations run per candidate (may differ between candidates)"),
        ("rewards", _LIST(_LIST(pa.int8())), "per candidate, the 0/1 reward of each continuation, in order"),
        ("continuations", pa.int64(), "targeted continuations run at the node, every candidate (a fixed branch "
         "once: its outcome is decided without sampling)"),
        ("continuation_tokens", pa.int64(), "tokens sampled by the node's continuations (-1: not counted)"),
        ("p_succ", _LIST(pa.float64()), "P_succ = successes / n per candidate; empty if unavailable"),
        ("p_succ_lo", _LIST(pa.float64()), "95% Wilson lower bound of each P_succ"),
        ("p_succ_hi", _LIST(pa.float64()), "95% Wilson upper bound of each P_succ"),
        ("value", pa.float64(), "V = sum_k p_k P_succ(k)"),
        ("alignment", pa.float64(), "cos(g*, g_D); NaN with alignment_nan_reason"),
        ("alignment_nan_reason", pa.string(), "'' or one of NAN_REASONS"),
        ("teacher_advantage", pa.float64(), "sum_k q_k P_succ(k) - V"),
        ("sampled_advantage", pa.float64(),
         "log q(y_t) - log p(y_t) over the full vocabulary, scaled teacher and sampled policy (the sampled_token "
         "divergence's advantage, clipped to +-1e30)"),
        ("degenerate", pa.bool_(), "P_succ equal on every candidate (decided on the integer counts)"),
        ("p_mass", pa.float64(), "mass of the sampled policy on C(u) before renormalising"),
        ("q_mass", pa.float64(), "mass of the scaled teacher on C(u) before renormalising"),
        ("noise_ceiling", pa.float64(),
         "split-half noise ceiling: cos of g* from each candidate's first and next floor(n_k / 2) rewards"),
    ] + [(k, pa.float64(), _PRED) for k in PREDICTORS],
}
SCHEMAS = {t: pa.schema([pa.field(n, ty) for n, ty, _ in cols]) for t, cols in _COLUMNS.items()}


def divergence_param(row) -> tuple[str | None, float]:
  """(the registry's name of its '@' parameter, its value) of a node or summary row's divergence; (None, NaN) for
  a divergence that takes none (or is not registered), NaN where the row records no value. Read from
  `divergence_param`; rows written before that column hold beta and clip in their own columns."""
  entry = divergences.REGISTRY.get(str(row["divergence"]))
  if entry is None or entry.param is None:
    return None, math.nan
  value = row.get("divergence_param", row.get(entry.param, math.nan))
  return entry.param, (math.nan if pd.isna(value) else float(value))


def describe_schema() -> dict:
  """{table: {column: {"type": arrow type, "doc": meaning}}} and the probability conventions (manifest.json)."""
  tables = {t: {n: {"type": str(ty), "doc": doc} for n, ty, doc in cols} for t, cols in _COLUMNS.items()}
  return {"version": SCHEMA_VERSION, "tables": tables, "conventions": CONVENTIONS}


def to_arrow(table: str, frame: pd.DataFrame) -> pa.Table:
  """`frame` as an Arrow table of the table's one schema (SCHEMAS[table]; an empty frame gives an empty table).

  Raises:
    ValueError: unknown table, or columns missing from / not in the schema.
  """
  if table not in TABLES:
    raise ValueError(f"unknown table {table!r}; use one of {TABLES}")
  schema = SCHEMAS[table]
  if frame.empty and not len(frame.columns):
    return schema.empty_table()
  missing, extra = set(schema.names) - set(frame.columns), set(frame.columns) - set(schema.names)
  if missing or extra:
    raise ValueError(f"records table {table!r}: columns missing {sorted(missing)}, not in the schema "
                     f"{sorted(extra)}; add them to records._COLUMNS (and bump SCHEMA_VERSION)")
  return pa.Table.from_pandas(frame[schema.names].reset_index(drop=True), schema=schema, preserve_index=False)


PART_HASH_KEY = b"opd_jax.config_hash"     # parquet key-value metadata of every part: its study's config hash


def write_part(workdir, table: str, question_id: str, frame: pd.DataFrame,
               config_hash: str | None = None) -> pathlib.Path:
  """Write one question's rows of `table` as records/<table>/part-<question_id>.parquet, atomically, with the
  table's one schema (`to_arrow`): every part reads back with the same columns and types, even an empty one.
  `config_hash` (the study's `config_hash`) is stored in the part's metadata, so that `check_parts` can refuse
  parts of another study copied into records/."""
  arrow = to_arrow(table, frame)
  if config_hash is not None:
    arrow = arrow.replace_schema_metadata({**(arrow.schema.metadata or {}), PART_HASH_KEY: config_hash.encode()})
  path = pathlib.Path(workdir) / "records" / table / f"part-{question_id}.parquet"
  buffer = io.BytesIO()
  pq.write_table(arrow, buffer)
  atomic.write_bytes(path, buffer.getvalue())
  return path


def part_files(workdir, table: str) -> list[pathlib.Path]:
  """The part files of one table, in name order: `part-*.parquet` only (never a temporary file)."""
  d = pathlib.Path(workdir) / "records" / table
  return sorted(d.glob("part-*.parquet")) if d.is_dir() else []


def check_parts(workdir, tables=TABLES) -> int:
  """Refuse records that cannot be one study's: a part that is not readable parquet (truncated, damaged), or
  whose config hash (`write_part`) is not that of `<workdir>/config.json` (copied from another study). Reads the
  parts' footers only. Parts without a hash (written before hashes were stored) are accepted.

  Returns:
    the number of parts checked.
  Raises:
    ValueError: naming the first bad part and what to do.
  """
  workdir = pathlib.Path(workdir)
  cfg = workdir / "config.json"
  want = claim.config_hash(json.loads(cfg.read_text())) if cfg.is_file() else None
  n = 0
  for table in tables:
    for part in part_files(workdir, table):
      meta = _footer(part)
      if meta is None:
        raise ValueError(f"record part {part} is not readable parquet; it is truncated or damaged: rerun the "
                         "study's command with --repair added, which computes its question again (the same "
                         "records: every draw is seeded)")
      got = meta.get(PART_HASH_KEY)
      if want is not None and got is not None and got.decode() != want:
        raise ValueError(f"record part {part} belongs to another study (config hash {got.decode()[:12]}, this "
                         f"workdir's config.json {want[:12]}); move the foreign parts out of {part.parent}")
      n += 1
  return n


def _footer(part: pathlib.Path) -> dict | None:
  """The key-value metadata of a part's parquet footer, or None when the file does not read as parquet."""
  try:
    return pq.read_metadata(part).metadata or {}
  except (OSError, pa.ArrowException):
    return None


def damaged_parts(workdir, tables=TABLES) -> list[pathlib.Path]:
  """The record parts that do not read as parquet (truncated, damaged; footers only), in table and name order."""
  return [part for table in tables for part in part_files(workdir, table) if _footer(part) is None]


def question_of(part: pathlib.Path) -> str:
  """The question id of a part `records/<table>/part-<question_id>.parquet` (`write_part`)."""
  return part.name[len("part-"):-len(".parquet")]


def read_table(workdir, table: str) -> pd.DataFrame:
  """All parts of one table, read with its schema (an empty frame with the schema's columns when none).

  Raises:
    ValueError: a part is unreadable or of another study (`check_parts`).
  """
  check_parts(workdir, (table,))
  parts = part_files(workdir, table)
  if not parts:
    return SCHEMAS[table].empty_table().to_pandas()
  return pq.read_table([str(p) for p in parts], schema=SCHEMAS[table]).to_pandas()


ROW_ESTIMANDS = ("alignment", "teacher_advantage", "projection", "g_ideal_norm2")


def estimates_from_rows(rows: pd.DataFrame, counts: dict | None = None,
                        rewards: dict | None = None) -> dict[str, np.ndarray]:
  """Recomputes estimates of node rows from what they record (p, q, successes, n): `success.node_estimates`.

  For the report and benchmarks that read records: `gradients.projection` is not a record column, and `counts`
  replaces the rows' counts, e.g. by a subsample of their rewards (benchmarks/fewer_continuations.py). The
  divergence's parameter is read from `divergence_param` (records written before it: the beta / clip column
  that its registry entry's `param` names).

  Args:
    rows: node rows (SCHEMAS["nodes"]), any configurations and nodes.
    counts: optional {(question_id, rollout_id, position): (successes [K], n [K]) int} over the node's recorded
      candidates, for every node of `rows`; None: the rows' own successes and n (or those of `rewards`).
    rewards: optional {(question_id, rollout_id, position): K arrays of 0/1 rewards}, e.g. a subsample of the
      rows' `rewards`; None: the rows' own `rewards` column (NaN g_ideal_norm2 where the rows have none).
  Returns:
    {name: float64 [len(rows)]} for ROW_ESTIMANDS; NaN where the row has no q (context unavailable, or a
    cross-tokenizer node without q) and where the estimator is undefined (alignment: gradients.nan_reason;
    projection: no distillation direction). g_ideal_norm2 is the cross-fitted |g*|^2 from the rewards' two halves
    (`success.halves`, `success.crossfit_norm2`: unbiased at any number of continuations >= 2), the same for
    every configuration at a node (g* does not depend on the teacher); NaN where a candidate ran once.
  """
  out = {name: np.full(len(rows), np.nan) for name in ROW_ESTIMANDS}
  for _, idx in rows.groupby(["config_id"], sort=False).indices.items():
    sub = rows.iloc[idx]
    width = max(1, max(len(c) for c in sub["candidates"]))
    pad = lambda xs, dtype: np.stack([np.pad(np.asarray(x, dtype), (0, width - len(x))) for x in xs])
    keys = list(zip(sub["question_id"], sub["rollout_id"], sub["position"]))
    node_rewards = ([rewards[k] for k in keys] if rewards is not None else
                    list(sub["rewards"]) if "rewards" in sub.columns else None)
    if counts is None and rewards is not None:
      got = [success.halves(rw) for rw in node_rewards]
      succ, n = [a + b for a, _, b, _ in got], [na + nb for _, na, _, nb in got]
    elif counts is None:
      succ, n = sub["successes"], sub["n"]
    else:
      got = [counts[k] for k in keys]
      succ, n = [s for s, _ in got], [c for _, c in got]
    has_q = np.asarray([len(x) > 0 for x in sub["q"]])
    p = pad([x if ok else np.zeros(len(c)) for x, c, ok in zip(sub["p"], sub["candidates"], has_q)], np.float64)
    q = pad([x if ok else np.zeros(len(c)) for x, c, ok in zip(sub["q"], sub["candidates"], has_q)], np.float64)
    first = sub.iloc[0]
    div = str(first["divergence"])
    value = divergence_param(first)[1]
    opts = divergences.options(div, None if math.isnan(value) else value)
    est = success.node_estimates(p, q, pad(succ, np.int64), pad(n, np.int64), divergence=div,
                                  sampled_index=np.zeros(len(sub), np.int64),
                                  advantage=np.nan_to_num(sub["sampled_advantage"].to_numpy(np.float64)), **opts)
    undirected = est.nan_reason == gradients.ZERO_DISTILLATION_GRADIENT       # no distillation direction
    with jax.enable_x64(True):
      proj = np.asarray(gradients.projection(est.g_ideal, est.g_distill))
    out["alignment"][idx] = np.where(has_q, est.alignment, np.nan)
    out["teacher_advantage"][idx] = np.where(has_q, est.teacher_advantage, np.nan)
    out["projection"][idx] = np.where(has_q & ~undirected, proj, np.nan)
    if node_rewards is not None:                  # g* needs p and the rewards only: every row, q or not
      split = [success.halves(rw) for rw in node_rewards]
      a_s, a_n, b_s, b_n = (pad([h[i] for h in split], np.int64) for i in range(4))
      p_all = pad([x if len(x) == len(c) else np.zeros(len(c)) for x, c in zip(sub["p"], sub["candidates"])],
                  np.float64)
      out["g_ideal_norm2"][idx] = success.crossfit_norm2(p_all, a_s, a_n, b_s, b_n)
  return out


def check_workdir(workdir, config_dict: dict) -> None:
  """Claim `workdir` for this config (writes config.json), or refuse one written by another config (leaving it
  untouched). The progress to resume from is `runs.read_progress`'s.

  Raises:
    ValueError: the workdir's config.json has a different hash (any field but logging).
  """
  workdir = pathlib.Path(workdir)
  h = claim.config_hash(config_dict)
  cfg_path = workdir / "config.json"
  if cfg_path.exists():
    old = json.loads(cfg_path.read_text())
    if claim.config_hash(old) != h:
      changed = claim.config_difference(old, config_dict, claim.VOLATILE_FIELDS)
      raise ValueError(f"--workdir={workdir} holds a run of a different config{claim.whose(old, config_dict)} "
                       f"(fields differ: {', '.join(changed) or 'nested values'}); pass a new --workdir or rerun "
                       "with the same config to resume")
  else:
    atomic.write_json(cfg_path, config_dict)


def json_object(path: pathlib.Path, fix: str) -> dict:
  """The JSON object in `path`; a ValueError naming the file, the position and `fix` when it is not one."""
  try:
    value = json.loads(path.read_text())
  except json.JSONDecodeError as e:
    raise ValueError(f"{path}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno}); {fix}") from None
  except UnicodeDecodeError:
    raise ValueError(f"{path}: not valid JSON (not UTF-8 text); {fix}") from None
  if not isinstance(value, dict):
    raise ValueError(f"{path}: not a JSON object (a {type(value).__name__}); {fix}")
  return value


def check_json_files(workdir) -> None:
  """Refuse a workdir whose bookkeeping JSON is damaged, naming the file (json's own error names none):
  config.json, manifest.json and the progress files.

  Raises:
    ValueError: naming the file, the position and the fix.
  """
  workdir = pathlib.Path(workdir)
  fixes = {"config.json": "it records the run's config: restore it, or pass a new --workdir",
           "manifest.json": "it is rewritten when the run finishes: delete it and rerun the same command",
           "progress": "it records which questions are done: restore it, or pass a new --workdir"}
  paths = [workdir / "config.json", workdir / "manifest.json", workdir / "progress.json",
           *sorted(workdir.glob("progress.*-of-*.json"))]
  for path in paths:
    if path.is_file():
      json_object(path, fixes.get(path.name, fixes["progress"]))
