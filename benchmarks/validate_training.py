"""Does the study predict training? The validation experiment's resumable driver (issue 36; configs/validation.py).

  python benchmarks/validate_training.py --workdir=runs/validation                   # every piece not yet done
  python benchmarks/validate_training.py --workdir=runs/validation --piece=study:1   # one piece (train:<name>, table)
Pieces, each in a child process of its own (its wall time and peak RSS measured by the parent, `os.wait4`):
  study:<b>      block b of the study (`configs/validation.py:study<b>`, every configuration on the block's own 10
                 questions, 8-11 min alone on 2 cores): study_nodes_<b>.csv (one row per configuration and node, with
                 the projection <g*, g_D> / |g_D|) and study_views_<b>.csv (per-question sums of the tokens table's
                 divergences). A piece per block, so that each fits a session and is committed before the machine goes.
  train:<name>   one OPD run of configuration <name> from the base model (`:train`), exported as eval_<name>.csv
                 (held-out pass@1 per question before and after, same keys) and its row of runs.csv.
  table          the verdict of the blocks' nodes together (study_verdict.csv: report.decision.decide, as the study's
                 report), predictors.csv (Spearman and Kendall of every predictor with the gains, intervals
                 resampling the study's and the evaluation's questions), regret.csv and docs/validation_training.png,
                 from the CSVs alone: a finished piece is never rerun (its CSV is the record; --data_dir, default
                 docs/data/validation, is committed). Blocks not yet run are left out (the table says how many).
                 The same for blocks 2 on alone (*_heldout.csv): data/validation/hypothesis.md was formed on block 1.
The first training run's "before" rewards (the base model under the evaluation's keys) are copied into every later
run's workdir: the same model and keys give the same rewards (checked: each run's eval CSV holds them).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position
import pandas as pd  # pylint: disable=g-import-not-at-top,wrong-import-position
import scipy.stats  # pylint: disable=g-import-not-at-top,wrong-import-position

from configs import validation  # pylint: disable=g-import-not-at-top,wrong-import-position
from opd_jax import claim  # pylint: disable=g-import-not-at-top,wrong-import-position
from opd_jax import records  # pylint: disable=g-import-not-at-top,wrong-import-position
from opd_jax.report import common  # pylint: disable=g-import-not-at-top,wrong-import-position
from opd_jax.report import decision  # pylint: disable=g-import-not-at-top,wrong-import-position
from opd_jax.report import verdict_text  # pylint: disable=g-import-not-at-top,wrong-import-position

REPO = pathlib.Path(__file__).resolve().parents[1]
DATA_DIR = REPO / "docs" / "data" / "validation"
FIGURE_PATH = REPO / "docs" / "validation_training.png"
GROUPS = ("all", "incorrect", "correct")
# Node slices with predictors of their own: the node groups, and the nodes at the response's first token ("first",
# both groups: docs/data/validation/hypothesis.md, formed on block 1 and tested on the later blocks).
SLICES = (*GROUPS, "first")
VIEW_PREDICTORS = ("kl_pq", "kl_qp", "js", "topk_overlap")   # the tokens table's cheap per-token divergences
NODE_COLUMNS = (*common.REQUIRED_COLUMNS, "projection")        # study_nodes_<b>.csv
REGRET_COLUMNS = ("target", "default", "named", "gain", "best", "best_gain", "regret", "regret_lo", "regret_hi",
                  "could_be_best", "could_be_best_worst_gain")
FIGURE = {"alignment_incorrect": "study: mean alignment, incorrect nodes (the verdict's)",
          "alignment_correct": "study: mean alignment, correct nodes",
          "teacher_advantage_first": "study: mean teacher advantage at the first token"}
RUN_COLUMNS = ("configuration", "spec", "steps", "learning_rate", "seed", "micro_batch_rows", "before", "after", "diff",
               "lo", "hi", "p_value", "n_questions", "samples", "last_loss", "last_train_reward",
               "last_response_tokens", "wall_s", "peak_rss_gb")


def configurations(tiny: bool) -> dict[str, str]:
  return dict(validation.TINY if tiny else validation.CONFIGURATIONS)


def blocks(tiny: bool) -> list[int]:
  return [1] if tiny else list(range(1, validation.BLOCKS + 1))


def pieces(tiny: bool) -> list[str]:
  return [f"study:{b}" for b in blocks(tiny)] + [f"train:{name}" for name in configurations(tiny)] + ["table"]


def done(piece: str, data: pathlib.Path) -> bool:
  """A piece is done when its CSV is in `data` (the committed record), whatever the workdir holds."""
  if piece.startswith("study:"):
    b = piece.split(":", 1)[1]
    return all((data / f"study_{kind}_{b}.csv").exists() for kind in ("nodes", "views"))
  if piece.startswith("train:"):
    name = piece.split(":", 1)[1]
    runs = data / "runs.csv"
    return (data / f"eval_{name}.csv").exists() and runs.exists() and name in set(pd.read_csv(runs).configuration)
  return False


# ---------------------------------------------------------------------------------------------------------------
# Running a piece (in the child process).

def _job(config, workdir: pathlib.Path, job: str) -> None:
  """What `python -m opd_jax.main` does for a study or train config, in this process (resumes a started run)."""
  from opd_jax import main, terminal  # pylint: disable=g-import-not-at-top,multiple-imports
  from opd_jax.study import preflight, runs, pipeline
  terminal.console(progress=config.logging.progress, verbosity=config.logging.verbosity)
  if job == "train":
    from opd_jax.training import checks  # pylint: disable=g-import-not-at-top
    from opd_jax.training import loop  # pylint: disable=g-import-not-at-top
    loop.validate(config)
    checks.check_train(config)
    runs.check_workdir_for(str(workdir), config.to_dict(), "train")
    main.record_train_config(str(workdir), config)
    print(loop.run(config, str(workdir)), flush=True)
  else:
    preflight.validate(config)
    runs.check_workdir_for(str(workdir), config.to_dict(), "study")
    print(pipeline.run(config, str(workdir)), flush=True)


def train_pool_file(workdir: pathlib.Path, train_config) -> str:
  """workdir/train_pool_questions.json, the question texts of the trainer's pool (written once): a study block's
  config.task.exclude, so that the study shares no question with the trainer."""
  from opd_jax.study import question_pool  # pylint: disable=g-import-not-at-top
  exclude = workdir / "train_pool_questions.json"
  if not exclude.exists():
    workdir.mkdir(parents=True, exist_ok=True)
    exclude.write_text(json.dumps(sorted({p.question for p in question_pool.load_task(train_config).problems})))
  return str(exclude.resolve())


def run_study(block: int, workdir: pathlib.Path, data: pathlib.Path, tiny: bool) -> None:
  config = validation.get_config(f"{'tiny_' if tiny else ''}study{block}")
  config.task.exclude = train_pool_file(workdir, validation.get_config("tiny_train" if tiny else "train"))
  _job(config, workdir / f"study{block}", "study")
  export_study(workdir / f"study{block}", data, block)


def run_train(name: str, workdir: pathlib.Path, data: pathlib.Path, tiny: bool) -> None:
  config = validation.get_config("tiny_train" if tiny else "train")
  config.train.configuration = configurations(tiny)[name]
  run_dir = workdir / "train" / name
  shared = workdir / "eval_before.npy"
  if shared.exists() and not (run_dir / "train" / "eval_before.npy").exists():
    (run_dir / "train").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(shared, run_dir / "train" / "eval_before.npy")
  _check_disjoint(workdir, config, tiny)
  _job(config, run_dir, "train")
  if not shared.exists():
    shutil.copyfile(run_dir / "train" / "eval_before.npy", shared)
  export_train(name, config, run_dir, data)


def shared_questions(study_config, train_config, study_ids=None) -> set[str]:
  """Question texts of the study's pool (or of its questions `study_ids`) that are also in the trainer's pool."""
  from opd_jax.study import question_pool  # pylint: disable=g-import-not-at-top
  study = {p.question for p in question_pool.load_task(study_config).problems if study_ids is None or p.id in study_ids}
  return study & {p.question for p in question_pool.load_task(train_config).problems}


def _check_disjoint(workdir: pathlib.Path, train_config, tiny: bool) -> None:
  """Refuse a training pool that shares a question's text with the study's questions (three disjoint sets: the
  study's pool excludes the trainer's, `run_study`; held-out and training questions are disjoint by
  construction)."""
  for b in blocks(tiny):
    rollouts = workdir / f"study{b}" / "records" / "rollouts"
    if not rollouts.exists():
      continue
    ids = {str(q) for q in pd.read_parquet(rollouts, columns=["question_id"]).question_id}
    shared = shared_questions(validation.get_config(f"{'tiny_' if tiny else ''}study{b}"), train_config, ids)
    if shared:
      raise ValueError(f"{len(shared)} questions of study block {b} are also in the training pool (e.g. "
                       f"{sorted(shared)[0]!r}): it ran without config.task.exclude="
                       f"{workdir / 'train_pool_questions.json'}")


def export_study(study_dir: pathlib.Path, data: pathlib.Path, block: int) -> None:
  """study_nodes_<block>.csv and study_views_<block>.csv from a block's records; question ids get the prefix
  "<block>:" (blocks draw from pools of their own, whose ids repeat)."""
  nodes = pd.read_parquet(study_dir / "records" / "nodes")
  nodes["projection"] = records.estimates_from_rows(nodes)["projection"]       # not a record column
  nodes["question_id"] = f"{block}:" + nodes.question_id.astype(str)
  data.mkdir(parents=True, exist_ok=True)
  nodes[list(NODE_COLUMNS)].to_csv(data / f"study_nodes_{block}.csv", index=False)
  tokens = pd.read_parquet(study_dir / "records" / "tokens")
  tokens["question_id"] = f"{block}:" + tokens.question_id.astype(str)
  views = nodes.drop_duplicates("config_id")[["config_id", "teacher", "context"]]
  rows = []
  for conf, teacher, context in views.itertuples(index=False):
    sel = tokens[(tokens.teacher == teacher) & (tokens.context == context)]
    for q, g in sel.groupby("question_id", sort=True):
      row = {"configuration": conf, "question_id": q}
      for col in VIEW_PREDICTORS:
        v = g[col].to_numpy(float)
        v = v[np.isfinite(v)]
        row.update({f"{col}_n": len(v), f"{col}_sum": float(v.sum())})
      rows.append(row)
  pd.DataFrame(rows).to_csv(data / f"study_views_{block}.csv", index=False)


def read_study(data: pathlib.Path, only=None) -> tuple[pd.DataFrame, pd.DataFrame, list[int]]:
  """(node rows, per-question view sums, the blocks read) of the study blocks' CSVs in `data`: every block, or
  those of `only` that are there."""
  found = sorted(int(p.stem.rsplit("_", 1)[1]) for p in data.glob("study_nodes_*.csv"))
  found = [b for b in found if only is None or b in only]
  if not found:
    raise ValueError(f"{data}: no study_nodes_<b>.csv; run a study block first (--piece=study:1)")
  nodes = pd.concat([pd.read_csv(data / f"study_nodes_{b}.csv", dtype={"question_id": str}) for b in found],
                    ignore_index=True)
  views = pd.concat([pd.read_csv(data / f"study_views_{b}.csv", dtype={"question_id": str}) for b in found],
                    ignore_index=True)
  return nodes, views, found


def question_sums(nodes: pd.DataFrame) -> pd.DataFrame:
  """Per (configuration, question) sums of the node rows (alignment, positive signs and projection by node group;
  teacher advantage), so the table can resample questions."""
  rows = []
  for (conf, q), g in nodes.groupby(["config_id", "question_id"], sort=True):
    row = {"configuration": conf, "question_id": q}
    for group in SLICES:
      sel = (g if group == "all" else g[g.position == 0] if group == "first"
             else g[g.correct.astype(bool) == (group == "correct")])
      adv = sel.teacher_advantage.to_numpy(float)
      adv = adv[np.isfinite(adv)]
      a = sel.alignment.to_numpy(float)
      a = a[np.isfinite(a)]
      pr = sel.projection.to_numpy(float)
      pr = pr[np.isfinite(pr)]
      row.update({f"{group}_nodes": len(a), f"{group}_alignment_sum": float(a.sum()),
                  f"{group}_positive": int((a > 0).sum()), f"{group}_projection_nodes": len(pr),
                  f"{group}_projection_sum": float(pr.sum()), f"{group}_advantage_n": len(adv),
                  f"{group}_advantage_sum": float(adv.sum())})
    rows.append(row)
  return pd.DataFrame(rows)


def study_verdict(nodes: pd.DataFrame, data: pathlib.Path, suffix: str = "") -> dict[str, pd.DataFrame]:
  """The verdict of the blocks' nodes together, as the study's report decides it (report.decision.decide with the
  study config's estimand), on each node group: {target: ranking} (`named` = the configuration it names,
  `could_be_best` = those it cannot exclude). Writes the study config's target's as study_verdict.csv and
  study_verdict_line.txt (its first line and details, verdict_text.lines)."""
  report = validation.get_config("study").report
  out = {}
  for target in GROUPS:
    verdict = decision.decide(nodes, target=target, estimand=report.get("estimand", "alignment"),
                              min_effect=report.get("min_effect") or None)
    out[target] = pd.DataFrame([dict(configuration=r["config_id"], rank=i + 1, mean_alignment=r.get("mean_alignment"),
                                     could_be_best=bool(r.get("could_be_best")),
                                     named=r["config_id"] == verdict.get("best"))
                                for i, r in enumerate(verdict.get("ranking", []))])
    if target == report.target:
      out[target].to_csv(data / f"study_verdict{suffix}.csv", index=False)
      (data / f"study_verdict{suffix}_line.txt").write_text("\n".join(verdict_text.lines(verdict)) + "\n")
  return out


def export_train(name: str, config, run_dir: pathlib.Path, data: pathlib.Path) -> None:
  out = run_dir / "train"
  ids = json.loads((out / "eval_questions.json").read_text())
  before = np.load(out / "eval_before.npy")
  last = max(int(p.stem.removeprefix("eval_step")) for p in out.glob("eval_step*.npy"))
  after = np.load(out / f"eval_step{last}.npy")
  data.mkdir(parents=True, exist_ok=True)
  pd.DataFrame({"question_id": ids, "before": before.mean(axis=1), "after": after.mean(axis=1),
                "samples": before.shape[1]}).to_csv(data / f"eval_{name}.csv", index=False)
  summary = json.loads((out / "summary.json").read_text())
  ev = summary["last_eval"]
  metrics = pd.read_csv(out / "metrics.csv")
  row = {"configuration": name, "spec": config.train.configuration, "steps": last,
         "learning_rate": config.train.optim.learning_rate, "seed": config.seed,
         "micro_batch_rows": config.train.micro_batch_rows, "before": ev["before"],
         "after": ev["after"], "diff": ev["diff"], "lo": ev["lo"], "hi": ev["hi"], "p_value": ev["p_value"],
         "n_questions": ev["n_questions"], "samples": before.shape[1], "last_loss": float(metrics.loss.iloc[-1]),
         "last_train_reward": float(metrics.train_reward.iloc[-1]),
         "last_response_tokens": float(metrics.response_tokens.iloc[-1])}
  pending = run_dir / "row.json"                    # the parent adds wall time and peak memory, then runs.csv
  pending.write_text(json.dumps(row))


def add_run_row(run_dir: pathlib.Path, data: pathlib.Path, wall_s: float, peak_rss_gb: float) -> dict:
  row = {**json.loads((run_dir / "row.json").read_text()), "wall_s": round(wall_s, 1),
         "peak_rss_gb": round(peak_rss_gb, 2)}
  path = data / "runs.csv"
  runs = pd.read_csv(path) if path.exists() else pd.DataFrame(columns=RUN_COLUMNS)
  runs = pd.concat([runs[runs.configuration != row["configuration"]], pd.DataFrame([row])], ignore_index=True)
  runs[list(RUN_COLUMNS)].to_csv(path, index=False)
  return row


# ---------------------------------------------------------------------------------------------------------------
# The table: predictors against gains, with intervals that resample the study's and the evaluation's questions.

def predictor_sums(study_q: pd.DataFrame, study_v: pd.DataFrame, confs: list[str]) -> tuple[list, dict]:
  """(questions, {predictor: (numerators [C, Q], denominators [C, Q], sign)}) from the per-question sums: a
  predictor's value is sign * (num @ w) / (den @ w) for question weights w (all ones, or a bootstrap draw's counts).
  Divergences enter with sign -1 (a smaller divergence predicting a larger gain), top-k overlap with +1."""
  questions = sorted(set(study_q.question_id) | set(study_v.question_id))

  def mat(df, col):
    return (df.pivot_table(index="configuration", columns="question_id", values=col, aggfunc="sum")
            .reindex(index=confs, columns=questions).fillna(0.0).to_numpy(float))

  out = {}
  for group in SLICES:
    den = mat(study_q, f"{group}_nodes")
    out[f"alignment_{group}"] = (mat(study_q, f"{group}_alignment_sum"), den, 1.0)
    out[f"positive_fraction_{group}"] = (mat(study_q, f"{group}_positive"), den, 1.0)
    out[f"projection_{group}"] = (mat(study_q, f"{group}_projection_sum"), mat(study_q, f"{group}_projection_nodes"),
                                  1.0)
  for group, name in (("all", "teacher_advantage"), ("first", "teacher_advantage_first")):
    out[name] = (mat(study_q, f"{group}_advantage_sum"), mat(study_q, f"{group}_advantage_n"), 1.0)
  for col in VIEW_PREDICTORS:
    sign = 1.0 if col == "topk_overlap" else -1.0
    out[f"{'' if sign > 0 else 'minus_'}{col}"] = (mat(study_v, f"{col}_sum"), mat(study_v, f"{col}_n"), sign)
  return questions, out


def predictor_values(sums: dict, w: np.ndarray) -> dict:
  """{predictor: values [C]} under question weights w [Q] (`predictor_sums`); NaN where no node or token counts."""
  with np.errstate(invalid="ignore", divide="ignore"):
    return {k: sign * (num @ w) / (den @ w) for k, (num, den, sign) in sums.items()}


def gains(evals: dict[str, pd.DataFrame], confs: list[str], eidx=None) -> np.ndarray:
  """Mean paired held-out difference per configuration [C]; `eidx`: the evaluation questions drawn."""
  d = np.stack([(evals[c].after - evals[c].before).to_numpy(float) for c in confs])    # [C, Q]
  return d.mean(axis=1) if eidx is None else d[:, eidx].mean(axis=1)


def rank_correlations(x: np.ndarray, y: np.ndarray) -> tuple[float, float, int]:
  """(Spearman's rho, Kendall's tau-b, n) over the configurations where both are defined; NaN below 3 or when
  either side is constant. Numpy forms of scipy.stats.spearmanr / kendalltau (the tests compare them), fast
  enough for thousands of bootstrap draws."""
  ok = np.isfinite(x) & np.isfinite(y)
  n = int(ok.sum())
  x, y = x[ok], y[ok]
  if n < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
    return np.nan, np.nan, n
  rho = float(np.corrcoef(scipy.stats.rankdata(x), scipy.stats.rankdata(y))[0, 1])
  i, j = np.triu_indices(n, 1)
  sx, sy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
  tau = float((sx * sy).sum() / np.sqrt(np.count_nonzero(sx) * np.count_nonzero(sy)))
  return rho, tau, n


def table(data: pathlib.Path, figure: pathlib.Path | None, n_boot: int = 2000, seed: int = 0, blocks=None,
          suffix: str = "") -> pd.DataFrame:
  """predictors<suffix>.csv, regret<suffix>.csv and study_verdict<suffix>.csv in `data` (and the figure), from the
  committed CSVs only; `blocks`: the study blocks read (None: all)."""
  runs = pd.read_csv(data / "runs.csv")
  confs = list(runs.configuration)
  evals = {c: pd.read_csv(data / f"eval_{c}.csv") for c in confs}
  ids = evals[confs[0]].question_id.tolist()
  for c in confs:
    if evals[c].question_id.tolist() != ids or not np.array_equal(evals[c].before, evals[confs[0]].before):
      raise ValueError(f"eval_{c}.csv: its held-out questions or before-rewards differ from eval_{confs[0]}.csv")
  nodes, study_v, found = read_study(data, blocks)
  print(f"study blocks {found} ({nodes.question_id.nunique()} questions)", flush=True)
  study_q = question_sums(nodes)
  target = validation.get_config("study").report.target                  # the default verdict's node group
  verdicts = study_verdict(nodes, data, suffix)
  verdict = verdicts[target]
  rank = dict(zip(verdict.configuration, verdict["rank"]))
  questions, sums = predictor_sums(study_q, study_v, confs)
  point = predictor_values(sums, np.ones(len(questions)))
  point["verdict_ranking"] = -np.array([rank.get(c, np.nan) for c in confs], float)
  g = gains(evals, confs)
  # Two references that need no study: what a rank correlation reaches from the teacher alone (external model or
  # self), and from knowing only whether each configuration helped or hurt (the sign of its measured gain).
  fixed = {"verdict_ranking": point["verdict_ranking"],
           "reference_external_teacher": np.array([not str(s).startswith("self:") for s in runs.spec],
                                                 float),
           "reference_gain_sign": np.sign(g)}
  point.update(fixed)
  rng = np.random.default_rng(seed)
  boot = {k: [] for k in point}
  boot_gain, boot_x = [], {k: [] for k in FIGURE}
  for _ in range(n_boot):             # study and evaluation questions resampled independently, alike for all confs
    w = np.bincount(rng.integers(0, len(questions), len(questions)), minlength=len(questions)).astype(float)
    eidx = rng.integers(0, len(ids), len(ids))
    vals = predictor_values(sums, w)
    vals.update(fixed)                     # the verdict's own ranking as the study gave it; the references
    gb = gains(evals, confs, eidx)
    boot_gain.append(gb)
    for k in FIGURE:
      boot_x[k].append(vals[k])
    for k, v in vals.items():
      boot[k].append(rank_correlations(v, gb)[:2])
  # Against the verdict's own estimand (its mean alignment on report.target's nodes), resampled with it: does a
  # predictor rank the gains better than the verdict does? (the difference of Spearman's rho, paired by draw)
  base = f"alignment_{target}"
  base_rho, base_boot = rank_correlations(point[base], g)[0], np.array(boot[base], float)[:, 0]
  rows = []
  for k, v in point.items():
    rho, tau, n = rank_correlations(v, g)
    b = np.array(boot[k], float)
    d = b[:, 0] - base_boot
    d_lo, d_hi = np.nanpercentile(d, [2.5, 97.5]) if np.isfinite(d).any() else (np.nan, np.nan)
    lo = np.nanpercentile(b, 2.5, axis=0) if np.isfinite(b).any() else [np.nan, np.nan]
    hi = np.nanpercentile(b, 97.5, axis=0) if np.isfinite(b).any() else [np.nan, np.nan]
    kind = "reference" if k.startswith("reference_") else "verdict" if k == "verdict_ranking" else "study"
    rows.append(dict(predictor=k, kind=kind, n_configurations=n, spearman=rho, spearman_lo=lo[0], spearman_hi=hi[0],
                     kendall=tau, kendall_lo=lo[1], kendall_hi=hi[1], spearman_minus_verdicts=rho - base_rho,
                     spearman_minus_verdicts_lo=d_lo, spearman_minus_verdicts_hi=d_hi,
                     **{f"value_{c}": x for c, x in zip(confs, v)}))
  out = pd.DataFrame(rows)
  out.to_csv(data / f"predictors{suffix}.csv", index=False)
  bg = np.array(boot_gain)
  regret = []                      # the verdict on each node group: what its named configuration gained, and the
  for group, ranking in verdicts.items():      # worst gain among those it could not exclude
    named = ranking.configuration[ranking.named].tolist()
    if not named or named[0] not in confs:
      continue
    i = confs.index(named[0])
    r = bg[:, i] - bg.max(axis=1)
    kept = [confs.index(c) for c in ranking.configuration[ranking.could_be_best] if c in confs]
    regret.append(dict(target=group, default=group == target, named=named[0], gain=g[i],
                       best=confs[int(np.argmax(g))], best_gain=g.max(), regret=g[i] - g.max(),
                       regret_lo=np.percentile(r, 2.5), regret_hi=np.percentile(r, 97.5),
                       could_be_best=";".join(confs[k] for k in kept),
                       could_be_best_worst_gain=min((g[k] for k in kept), default=np.nan)))
  pd.DataFrame(regret, columns=REGRET_COLUMNS).to_csv(data / f"regret{suffix}.csv", index=False)
  if figure is not None:
    x_ci = {k: np.nanpercentile(np.array(v, float), [2.5, 97.5], axis=0) for k, v in boot_x.items()}   # [2, C]
    _figure(figure, confs, {k: point[k] for k in FIGURE}, x_ci, g, runs)
  return out


def _figure(path: pathlib.Path, confs, xs: dict, x_ci: dict, y, runs) -> None:
  """One panel per predictor of FIGURE: its value (95% bootstrap over study questions) against the gain (the
  trainer's paired 95% t interval); labels of coinciding points are stacked."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, axes = plt.subplots(1, len(xs), figsize=(5.2 * len(xs), 4.4), sharey=True)
  lo, hi = runs.lo.to_numpy(float), runs.hi.to_numpy(float)
  for ax, (k, x) in zip(np.atleast_1d(axes), xs.items()):
    ax.errorbar(x, y, xerr=np.abs(x_ci[k] - x), yerr=np.abs(np.vstack([lo, hi]) - y), fmt="o", capsize=3)
    near = 0.15 * (np.nanmax(x) - np.nanmin(x) or 1.0)    # labels closer than this on one gain are stacked
    placed: list = []
    for i in np.argsort(x):
      n = sum(abs(y[i] - b) < 0.01 and x[i] - a < near for a, b in placed)
      placed.append((x[i], y[i]))
      ax.annotate(confs[i], (x[i], y[i]), textcoords="offset points", xytext=(4, 4 + 10 * n), fontsize=8)
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xlabel(FIGURE[k])
  axes[0].set_ylabel("OPD: held-out pass@1 change")
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


# ---------------------------------------------------------------------------------------------------------------

def run_piece(piece: str, workdir: pathlib.Path, data: pathlib.Path, tiny: bool, figure: pathlib.Path | None,
              n_boot: int = 2000) -> None:
  check_piece(piece, tiny)
  if piece.startswith("study:"):
    run_study(int(piece.split(":", 1)[1]), workdir, data, tiny)
  elif piece.startswith("train:"):
    run_train(piece.split(":", 1)[1], workdir, data, tiny)
  elif piece == "table":
    print(table(data, figure, n_boot=n_boot).to_string(max_cols=9), flush=True)
    later = [b for b in blocks(tiny) if b > 1 and done(f"study:{b}", data)]
    if later:                              # hypothesis.md: formed on block 1, tested on the blocks after it
      print(table(data, None, n_boot=n_boot, blocks=later, suffix="_heldout").to_string(max_cols=9), flush=True)


def check_piece(piece: str, tiny: bool) -> None:
  """Raises ValueError naming the pieces when `piece` is not one of them (or "all")."""
  if piece not in ("all", *pieces(tiny)):
    raise ValueError(f"--piece={piece}: use all, table, study:<b> (b in {blocks(tiny)}) or train:<name> (name in "
                     f"{sorted(configurations(tiny))})")


def run_child(cmd: list[str], t0: float) -> tuple[int, float, float]:
  """Run a piece's child process: (exit code, wall seconds since t0, its peak RSS in GiB by os.wait4)."""
  proc = subprocess.Popen(cmd)
  _, status, usage = os.wait4(proc.pid, 0)
  return os.waitstatus_to_exitcode(status), time.time() - t0, usage.ru_maxrss / 2**20   # ru_maxrss: KiB on Linux


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--workdir", required=True)
  ap.add_argument("--data_dir", default=None,
                  help=f"where finished pieces' tables go (default {DATA_DIR}, the committed record; with --tiny "
                  "<workdir>/data, and never the committed folder)")
  ap.add_argument("--piece", default="all", help="all | study:<b> | train:<name> | table")
  ap.add_argument("--tiny", action="store_true", help="random models on the synthetic task (tests)")
  ap.add_argument("--figure", default=None,
                  help=f"the table's figure (default {FIGURE_PATH}; with --tiny <workdir>/validation_training.png; "
                  "--figure= for none)")
  ap.add_argument("--n_boot", type=int, default=2000)
  ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
  args = ap.parse_args(argv)
  workdir = pathlib.Path(args.workdir)
  data = pathlib.Path(args.data_dir) if args.data_dir else workdir / "data" if args.tiny else DATA_DIR
  figure = (None if args.figure == "" else pathlib.Path(args.figure) if args.figure
            else workdir / "validation_training.png" if args.tiny else FIGURE_PATH)
  if args.child:
    run_piece(args.piece, workdir, data, args.tiny, figure, args.n_boot)
    return 0
  try:
    check_piece(args.piece, args.tiny)                     # one line, before any child starts
    if args.tiny and (data.resolve() == DATA_DIR.resolve()
                      or (figure is not None and figure.resolve() == FIGURE_PATH.resolve())):
      raise ValueError(f"--tiny writes random models' rows: --data_dir={data} / --figure={figure} is the committed "
                       "record; drop them (tables and figure in <workdir>) or give other paths")
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  todo = pieces(args.tiny) if args.piece == "all" else [args.piece]
  data.mkdir(parents=True, exist_ok=True)
  return locked(workdir, lambda: _drive(todo, workdir, data, args, figure))


def locked(workdir: pathlib.Path, drive: Callable[[], int]) -> int:
  """drive()'s exit code, run while this driver holds `<workdir>/lock.0.json` (`claim.workdir_lock`: one driver per
  workdir; each run holds its own folder's lock, the trainer's); a lock another live driver holds is one error
  line, exit 2, and nothing runs. The v1 and v2 drivers both call it."""
  workdir.mkdir(parents=True, exist_ok=True)
  with contextlib.ExitStack() as held:
    try:
      held.enter_context(claim.workdir_lock(workdir, 0))
    except claim.WorkdirInUse as e:
      print(f"error: {e}", file=sys.stderr)
      return 2
    return drive()


def _drive(todo: list[str], workdir: pathlib.Path, data: pathlib.Path, args, figure: pathlib.Path | None) -> int:
  """main's loop over the pieces, under the driver's workdir lock."""
  for piece in todo:
    if done(piece, data):
      print(f"{piece}: done ({data}); not rerun", flush=True)
      continue
    t0 = time.time()
    cmd = [sys.executable, os.path.abspath(__file__), "--child", f"--piece={piece}", f"--workdir={workdir}",
           f"--data_dir={data}", f"--figure={figure or ''}", f"--n_boot={args.n_boot}"] + (["--tiny"] if args.tiny
                                                                                         else [])
    code, wall, peak = run_child(cmd, t0)
    print(f"{piece}: exit {code}, {wall:.0f} s, peak RSS {peak:.2f} GiB", flush=True)
    if code:
      return code
    if piece.startswith("train:"):
      print(add_run_row(workdir / "train" / piece.split(":", 1)[1], data, wall, peak), flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
