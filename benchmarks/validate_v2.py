"""Validation v2 (issue 47): does the study predict training beyond who the teacher is? The resumable driver.

  python benchmarks/validate_v2.py --workdir=runs/v2 --piece=train:s1_solution_frozen       # one piece
  python benchmarks/validate_v2.py --workdir=runs/v2 --piece=stage1      # stage 1's table, from the CSVs
  python benchmarks/validate_v2.py --workdir=runs/v2 --piece=study:1,study:2   # stage 2's blocks, in order
  python benchmarks/validate_v2.py --workdir=runs/v2 --piece=stage2      # stage 2's tables, from the CSVs
  python benchmarks/validate_v2.py --workdir=runs/v2 --piece=train:s3_ext_plain_rkl   # a stage-3 run
  python benchmarks/validate_v2.py --workdir=runs/v2 --piece=stage3      # the analysis, once every stage-3 run is in
  python benchmarks/validate_v2.py --workdir=runs/v2 --piece=stage3 --interim    # before: labelled, in runs/v2/interim
  python benchmarks/validate_v2.py --workdir=runs/v2     # every piece not done (pieces()' order: ~20 h of real runs)
  python benchmarks/validate_v2.py --workdir=/tmp/v2tiny --tiny     # random models (tests): tables in <workdir>/data

One real-model job at a time: a second driver on the same workdir is refused (its lock, <workdir>/lock.0.json; a
driver of a commit before the lock takes none).
`--data_dir` (default docs/data/validation_v2/, the committed record) is where finished pieces' tables go; `--tiny`
never writes there (default <workdir>/data).

Stage 1, the mechanism: v1's runs (docs/data/validation/runs.csv: the self-teacher was the current student, as
training moved it) against the same runs with the frozen self-teacher (`config.train.teacher_weights=initial`,
the base student reading its context: what the study diagnoses), and the moving self:solution at a lower learning
rate. v1's protocol otherwise (`configs/validation.py:train`: 40 steps of 4 questions x 2 rollouts, LoRA rank 16,
held-out pass@1 on 40 questions x 8 samples before and at step 40, the same keys: the v1 runs are the paired
comparison). What was expected before any run: docs/data/validation_v2/stage1_expectations.md.

Stage 2, the study first: `study:<b>`, block b of the study on every view of stage 3 (`configs/validation.py:
v2_study<b>`: 27 configurations, 20 questions at R = 12, a pool of its own without the v2 trainer's questions),
exported as v1's study_nodes_<b>.csv and study_views_<b>.csv plus study_records_<b>.parquet (the node records with
every continuation's reward: the alignment ratio's real-records check and the variance split of issue 48 read
them), and study_questions_<b>.csv (each question's base success rate). Stage 3's runs (STAGE3, in its order) use
`:v2_train` (80 held-out questions x 4 samples after steps 10, 20 and 40; a replicate sets config.train.seed); none
starts before docs/data/validation_v2/hypothesis.md exists (the predictions, committed first). `stage3` is the
analysis (benchmarks/v2_analysis.py `stage3_tables`): the primary test and the secondary tables, and
stage3_results.md, their cells as text against hypothesis.md (benchmarks/v2_results.py).

Each piece runs in a child process (benchmarks/validate_training.py's `_job`: what `python -m opd_jax.main` does,
resuming a started run from its checkpoint), its wall time and peak RSS measured by the parent (`os.wait4`); a
finished piece's rows go to docs/data/validation_v2/ (runs.csv, eval_<name>.csv, samples_<name>.jsonl: the last
step's rollouts, where a collapse shows) and are never rerun: commit them as each piece ends.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position
import pandas as pd  # pylint: disable=g-import-not-at-top,wrong-import-position

from benchmarks import v2_analysis  # pylint: disable=g-import-not-at-top,wrong-import-position
from benchmarks import v2_results  # pylint: disable=g-import-not-at-top,wrong-import-position
from benchmarks import validate_training as v1  # pylint: disable=g-import-not-at-top,wrong-import-position
from configs import validation  # pylint: disable=g-import-not-at-top,wrong-import-position

REPO = pathlib.Path(__file__).resolve().parents[1]
DATA_DIR = REPO / "docs" / "data" / "validation_v2"
V1_DIR = REPO / "docs" / "data" / "validation"

# name -> the run: configuration, stage, stratum, the self-teacher's weights, learning rate, seed.
RUNS = {
    **{f"s1_{c}_frozen": dict(spec=f"self:{c}:reverse_kl", stage=1, stratum="self", teacher_weights="initial",
                              learning_rate=1e-4, seed=0, v1=c)
       for c in ("solution", "summary", "answer", "misleading")},
    "s1_solution_moving_lr3e-5": dict(spec="self:solution:reverse_kl", stage=1, stratum="self",
                                      teacher_weights="current", learning_rate=3e-5, seed=0, v1="solution"),
}
# Stage 3 (hypothesis.md, committed before the first of these runs): the configurations trained, in this order (the
# two strata interleaved, so that a run stopped early leaves a balanced design), each with v2's protocol from the
# base model, the self-teacher frozen, lr 1e-4; replicates set config.train.seed (the pool and the evaluation's keys
# stay config.seed's).
STAGE3_CORE = [f"{v}_{d}" for d in ("rkl", "fkl") for v in ("ext_plain", "self_solution", "ext_answer", "self_summary",
                                                            "ext_solution", "self_answer", "ext_summary",
                                                            "self_misleading", "self_contrastive")]
# hypothesis.md's replicates (train_seed 1): `replicate_rule` on stage2.csv (tests/benchmarks/test_v2_stage3.py)
STAGE3_REPLICATES = ["ext_answer_rkl", "ext_plain_rkl", "ext_solution_rkl", "self_summary_rkl", "self_solution_rkl",
                     "self_misleading_rkl"]
STAGE3_LAST = [f"ext_{c}_jsd" for c in ("plain", "answer", "solution", "summary")]
STAGE3 = [(c, -1) for c in STAGE3_CORE] + [(c, 1) for c in STAGE3_REPLICATES] + [(c, -1) for c in STAGE3_LAST]


def replicate_rule(values: pd.DataFrame, primary: str = v2_analysis.PRIMARY) -> list[str]:
  """The stage-3 replicates hypothesis.md names, from stage 2's values (stage2.csv): per stratum, the views ranked
  by `primary` on their reverse-KL configuration, and the reverse-KL configurations of the top view, the bottom one
  and a third: in the external stratum the no-study rule's (ext_plain_rkl: its regret is a secondary result) unless
  it is the top or bottom, else (and in the self stratum) the middle view's (position (n - 1) // 2 of n)."""
  rkl = values[(values.predictor == primary) & (values.divergence == "rkl")]
  out = []
  for name in ("external", "self"):
    ranked = rkl[rkl.stratum == name].sort_values("value", ascending=False).configuration.tolist()
    third = ("ext_plain_rkl" if name == "external" and "ext_plain_rkl" in ranked[1:-1] else
             ranked[(len(ranked) - 1) // 2])
    out += [ranked[0], third, ranked[-1]]
  return out


def stage3_name(configuration: str, train_seed: int) -> str:
  """The run's name: s3_<study configuration>, and _seed<k> for a replicate."""
  return f"s3_{configuration}" + ("" if train_seed < 0 else f"_seed{train_seed}")


RUNS.update({stage3_name(c, k): dict(spec=validation.V2_CONFIGURATIONS[c], stage=3, stratum=v2_analysis.stratum(c),
                                     teacher_weights="initial", learning_rate=1e-4, seed=0, v1=None, protocol="v2",
                                     train_seed=k)
             for c, k in STAGE3})
TINY = {"tiny_frozen": dict(spec="self:solution:reverse_kl", stage=1, stratum="self", teacher_weights="initial",
                            learning_rate=1e-2, seed=0, v1=None),
        "tiny_v2_rep": dict(spec="self:solution:reverse_kl", stage=3, stratum="self", teacher_weights="initial",
                            learning_rate=1e-2, seed=0, v1=None, protocol="v2", train_seed=1)}
RUN_COLUMNS = ("configuration", "spec", "stage", "stratum", "teacher_weights", "seed", "train_seed", "learning_rate",
               "steps",
               "micro_batch_rows", "before", "after", "diff", "lo", "hi", "p_value", "n_questions", "samples",
               "last_loss", "last_train_reward", "last_response_tokens", "wall_s", "peak_rss_gb")


def runs(tiny: bool) -> dict[str, dict]:
  return TINY if tiny else RUNS


def blocks(tiny: bool) -> list[int]:
  return [1] if tiny else list(range(1, validation.V2_BLOCKS + 1))


def planned(stage: int, tiny: bool) -> list[str]:
  """The names of the planned runs of `stage` (RUNS or TINY), in their order."""
  return [n for n, r in runs(tiny).items() if r["stage"] == stage]


def pieces(tiny: bool) -> list[str]:
  """Every piece, in the order `--piece=all` runs them: stage 1's runs and table, stage 2's blocks and tables, stage
  3's runs (only once hypothesis.md is in the data folder: `check_order`) and their analysis."""
  train = lambda stage: [f"train:{n}" for n in planned(stage, tiny)]
  return train(1) + ["stage1"] + [f"study:{b}" for b in blocks(tiny)] + ["stage2"] + train(3) + ["stage3"]


def check_order(piece: str, data: pathlib.Path, tiny: bool) -> None:
  """Raises ValueError when `piece` is a stage-3 run and `data` holds no hypothesis.md: the predictions are committed
  before any stage-3 run (issue 47, item 3)."""
  name = piece.removeprefix("train:")
  if piece.startswith("train:") and runs(tiny)[name]["stage"] == 3 and not (data / "hypothesis.md").exists():
    raise ValueError(f"--piece={piece} is a stage-3 run and {data / 'hypothesis.md'} does not exist: write and "
                     "commit the predictions (hypothesis.md) before any stage-3 run")


def excluded(data: pathlib.Path, tiny: bool) -> dict[str, str]:
  """The stage-3 runs left out by hypothesis.md's rule ("a run that fails twice for a cause of its own (e.g.
  memory) is reported and left out, never replaced by another configuration"): data/excluded.csv, one row per run
  (columns configuration: its STAGE3 name; reason: what failed, both times), committed by hand when it happens; {}
  while the file is absent.

  Raises:
    ValueError: the file lacks a column, names a run that is not a planned stage-3 run or twice, names a run whose
      row is in runs.csv (it finished: nothing to leave out), or gives no reason.
  """
  path = data / "excluded.csv"
  if not path.exists():
    return {}
  table = pd.read_csv(path, dtype=str, keep_default_na=False)
  if not {"configuration", "reason"} <= set(table.columns):
    raise ValueError(f"{path}: needs the columns configuration and reason (one row per stage-3 run left out)")
  done_runs = set(pd.read_csv(data / "runs.csv").configuration) if (data / "runs.csv").exists() else set()
  for name, reason in zip(table.configuration, table.reason):
    if name not in planned(3, tiny):
      raise ValueError(f"{path}: {name!r} is no planned stage-3 run (STAGE3's names)")
    if name in done_runs:
      raise ValueError(f"{path}: {name} has its row in runs.csv: a finished run is not left out (remove its row here)")
    if not reason.strip():
      raise ValueError(f"{path}: {name} has no reason: say what failed, both times (hypothesis.md's rule)")
  if table.configuration.duplicated().any():
    raise ValueError(f"{path}: {sorted(set(table.configuration[table.configuration.duplicated()]))} listed twice")
  return dict(zip(table.configuration, table.reason))


def stage3_due(data: pathlib.Path, tiny: bool) -> list[str]:
  """The stage-3 runs the primary test waits for: the planned ones (STAGE3's names, or --tiny's) less those left out
  (`excluded`)."""
  left_out = excluded(data, tiny)
  return [n for n in planned(3, tiny) if n not in left_out]


def stage3_missing(data: pathlib.Path, tiny: bool) -> list[str]:
  """The runs of `stage3_due` without their row in data/runs.csv."""
  path = data / "runs.csv"
  have = set(pd.read_csv(path).configuration) if path.exists() else set()
  return [n for n in stage3_due(data, tiny) if n not in have]


def check_ready(piece: str, data: pathlib.Path, tiny: bool, interim: bool) -> None:
  """Raises ValueError when `piece` cannot run now: stage1 or stage3 without data/runs.csv, or stage3 before every
  planned stage-3 run is in without --interim (hypothesis.md: the primary test is computed once, at all of them)."""
  if piece in ("stage1", "stage3") and not (data / "runs.csv").exists():
    raise ValueError(f"--piece={piece} reads {data / 'runs.csv'}, which does not exist: run its training pieces "
                     "first (or point --data_dir at the folder that holds them)")
  missing = stage3_missing(data, tiny) if piece == "stage3" else []
  n = len(stage3_due(data, tiny)) if piece == "stage3" else 0
  if piece == "stage3" and len(missing) == n:
    raise ValueError(f"--piece=stage3: no stage-3 run is in {data / 'runs.csv'} yet: nothing to analyse")
  if missing and not interim:
    raise ValueError(f"--piece=stage3: {n - len(missing)} of {n} stage-3 runs are in {data / 'runs.csv'} (next: "
                     f"{missing[0]}); the primary test is computed once, when all are (hypothesis.md); --interim "
                     "computes the tables now, labelled interim, into <workdir>/interim/ (not the data folder)")


def done(piece: str, data: pathlib.Path) -> bool:
  """A piece is done when its rows are in `data` (the committed record), whatever the workdir holds."""
  if piece.startswith("study:"):
    b = piece.split(":", 1)[1]
    return all((data / f"study_{kind}_{b}.{ext}").exists()
               for kind, ext in (("nodes", "csv"), ("views", "csv"), ("records", "parquet")))
  if not piece.startswith("train:"):
    return False
  name, path = piece.split(":", 1)[1], data / "runs.csv"
  return (data / f"eval_{name}.csv").exists() and path.exists() and name in set(pd.read_csv(path).configuration)


def train_config(run: dict, tiny: bool):
  """The run's trainer config: v1's protocol (`:train`; stage 1) or v2's (`:v2_train`; stage 3), with its
  configuration, self-teacher weights, learning rate, seed (the pool and the evaluation's keys) and training seed
  (-1: the seed's)."""
  variant = {"v1": "train", "v2": "v2_train"}[run.get("protocol", "v1")]
  config = validation.get_config(f"tiny_{variant}" if tiny else variant)
  config.train.configuration = run["spec"]
  config.train.teacher_weights = run["teacher_weights"]
  config.train.optim.learning_rate = run["learning_rate"]
  config.seed = run["seed"]
  config.train.seed = run.get("train_seed", -1)
  return config


def run_study(block: int, workdir: pathlib.Path, data: pathlib.Path, tiny: bool) -> None:
  """Study block `block` on a pool without any question of the v2 trainer's pool (a superset of v1's), then its
  exports (`export_study`)."""
  config = validation.get_config(f"{'tiny_' if tiny else ''}v2_study{block}")
  config.task.exclude = v1.train_pool_file(workdir, validation.get_config("tiny_v2_train" if tiny else "v2_train"))
  v1._job(config, workdir / f"study{block}", "study")  # pylint: disable=protected-access
  export_study(workdir / f"study{block}", data, block)


def export_study(study_dir: pathlib.Path, data: pathlib.Path, block: int) -> None:
  """v1's study_nodes_<b>.csv and study_views_<b>.csv, and study_records_<b>.parquet: the block's node records as
  written (question ids prefixed "<block>:", as in the CSVs), every continuation's reward included."""
  v1.export_study(study_dir, data, block)
  nodes = pd.read_parquet(study_dir / "records" / "nodes")
  nodes["question_id"] = f"{block}:" + nodes.question_id.astype(str)
  nodes.to_parquet(data / f"study_records_{block}.parquet", index=False, compression="zstd")
  export_questions(study_dir, data, block)


def export_questions(study_dir: pathlib.Path, data: pathlib.Path, block: int) -> None:
  """study_questions_<b>.csv: per question of the block (ids prefixed "<block>:"), its base rollouts and their mean
  reward (the student's success rate at the question, as training samples it: `trained_alignment` weights by it)."""
  rollouts = pd.read_parquet(study_dir / "records" / "rollouts", columns=["question_id", "reward"])
  table = rollouts.groupby("question_id", sort=True).reward.agg(rollouts="size", success_rate="mean").reset_index()
  table["question_id"] = f"{block}:" + table.question_id.astype(str)
  table.to_csv(data / f"study_questions_{block}.csv", index=False)


def run_train(name: str, workdir: pathlib.Path, data: pathlib.Path, tiny: bool) -> None:
  """One OPD run from the base model; the base model's held-out rewards (same model, same keys) are computed once
  and copied into every later run's workdir of the same seed."""
  run = runs(tiny)[name]
  config = train_config(run, tiny)
  run_dir = workdir / "train" / name
  protocol = run.get("protocol", "v1")                    # v2's evaluation is another [Q, S] than v1's
  shared = workdir / f"eval_before_{'' if protocol == 'v1' else protocol + '_'}seed{run['seed']}.npy"
  if shared.exists() and not (run_dir / "train" / "eval_before.npy").exists():
    (run_dir / "train").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(shared, run_dir / "train" / "eval_before.npy")
  v1._job(config, run_dir, "train")  # pylint: disable=protected-access
  if not shared.exists():
    shutil.copyfile(run_dir / "train" / "eval_before.npy", shared)
  export_train(name, run, config, run_dir, data)


def export_train(name: str, run: dict, config, run_dir: pathlib.Path, data: pathlib.Path) -> None:
  """eval_<name>.csv (with v2's evaluations after every step evaluated, and each question's log p of its gold
  answer before and after: gold_before, gold_after, gold_after_step<N>), samples_<name>.jsonl (the last step's
  rollouts) and row.json (the parent adds wall time and
  peak memory and appends it to runs.csv)."""
  v1.export_train(name, config, run_dir, data)            # eval_<name>.csv and row.json, v1's columns
  steps = sorted(int(p.stem.removeprefix("eval_step")) for p in (run_dir / "train").glob("eval_step*.npy"))
  table = pd.read_csv(data / f"eval_{name}.csv")
  for step in steps[:-1]:                                   # v2: the held-out rewards after every evaluation
    table[f"after_step{step}"] = np.load(run_dir / "train" / f"eval_step{step}.npy").mean(axis=1)
  gold = run_dir / "train" / "eval_gold_before.npy"         # log p(gold answer) [Q], when the trainer wrote it
  if gold.exists():
    table["gold_before"] = np.load(gold)
    table["gold_after"] = np.load(run_dir / "train" / f"eval_gold_step{steps[-1]}.npy")
    for step in steps[:-1]:
      table[f"gold_after_step{step}"] = np.load(run_dir / "train" / f"eval_gold_step{step}.npy")
  table.to_csv(data / f"eval_{name}.csv", index=False)
  row = json.loads((run_dir / "row.json").read_text())
  row.update(stage=run["stage"], stratum=run["stratum"], teacher_weights=run["teacher_weights"],
             train_seed=run.get("train_seed", -1))
  (run_dir / "row.json").write_text(json.dumps(row))
  lines = (run_dir / "train" / "samples.jsonl").read_text().splitlines()
  last = max(json.loads(l)["step"] for l in lines)
  (data / f"samples_{name}.jsonl").write_text("".join(l + "\n" for l in lines if json.loads(l)["step"] == last))


def add_run_row(run_dir: pathlib.Path, data: pathlib.Path, wall_s: float, peak_rss_gb: float) -> dict:
  row = {**json.loads((run_dir / "row.json").read_text()), "wall_s": round(wall_s, 1),
         "peak_rss_gb": round(peak_rss_gb, 2)}
  path = data / "runs.csv"
  table = pd.read_csv(path) if path.exists() else pd.DataFrame(columns=RUN_COLUMNS)
  table = pd.concat([table[table.configuration != row["configuration"]], pd.DataFrame([row])], ignore_index=True)
  table["train_seed"] = table.get("train_seed", pd.Series(-1, index=table.index)).fillna(-1).astype(int)  # rows
  table[list(RUN_COLUMNS)].to_csv(path, index=False)                                         # before the column: -1
  return row


def stage1_table(data: pathlib.Path, v1_dir: pathlib.Path = V1_DIR, tiny: bool = False) -> pd.DataFrame:
  """stage1.csv: each stage-1 run beside its v1 pair (the same configuration with the moving self-teacher at
  lr 1e-4): gains, the paired difference of the two runs' held-out rewards (per question, over the same 40
  questions and keys) with its t interval, and the last step's train reward and response length."""
  from opd_jax.training import evaluate  # pylint: disable=g-import-not-at-top
  table = pd.read_csv(data / "runs.csv")
  v1_runs = pd.read_csv(v1_dir / "runs.csv").set_index("configuration") if not tiny else None
  rows = []
  for r in table[table.stage == 1].itertuples(index=False):
    run = runs(tiny)[r.configuration]
    row = {"configuration": r.configuration, "spec": r.spec, "teacher_weights": r.teacher_weights,
           "learning_rate": r.learning_rate, "diff": r.diff, "lo": r.lo, "hi": r.hi,
           "last_train_reward": r.last_train_reward, "last_response_tokens": r.last_response_tokens}
    if run["v1"] is not None:
      mine = pd.read_csv(data / f"eval_{r.configuration}.csv")
      theirs = pd.read_csv(v1_dir / f"eval_{run['v1']}.csv")
      if mine.question_id.tolist() != theirs.question_id.tolist():
        raise ValueError(f"eval_{r.configuration}.csv and v1's eval_{run['v1']}.csv hold other questions")
      paired = evaluate.paired_difference(theirs.after.to_numpy()[:, None], mine.after.to_numpy()[:, None])
      row.update(v1=run["v1"], v1_diff=v1_runs.loc[run["v1"], "diff"], before_equal_v1=bool(
          np.allclose(mine.before, theirs.before)), minus_v1=paired.diff, minus_v1_lo=paired.lo,
                 minus_v1_hi=paired.hi)
    rows.append(row)
  out = pd.DataFrame(rows)
  out.to_csv(data / "stage1.csv", index=False)
  return out


def stage2_tables(data: pathlib.Path, n_split: int = 200, n_boot: int = 1000, seed: int = 0,
                  planned=None) -> pd.DataFrame:
  """From the study blocks' CSVs in `data` (`v2_analysis.study_predictors`: v1's predictors, alignment, positive
  fraction and projection by node group, teacher advantage, the tokens' cheap divergences, and the alignment as
  training weighs the nodes):
    stage2.csv: each configuration's value of each predictor, with a 95% percentile interval resampling the study's
      questions (`n_boot` draws, the same draws for every configuration);
    stage2_reliability.csv: per stratum and predictor, how well the study's questions fix the ranking of the
      stratum's configurations: the mean Spearman rho between the rankings that two disjoint random halves of the
      questions give (`n_split` splits), and its Spearman-Brown step-up to all the questions, 2 rho / (1 + rho);
    stage2_contrasts.csv: per view, predictor and pair of divergences, the paired difference with its interval and
      the fraction of draws whose sign agrees with the full sample's;
    study_verdict_<stratum>.csv and study_verdict_<stratum>_line.txt: the study's verdict (v1's
      `study_verdict`) among the stratum's configurations of `planned` (stage 3's; default all), named before
      training.
  What is resampled is the study's questions only (the configurations are fixed: every one on the same nodes)."""
  study = v1.read_study(data)
  nodes, _, found = study
  confs = sorted(nodes.config_id.unique())
  questions, sums = v2_analysis.study_predictors(data, confs, study)
  planned = set(confs) if planned is None else set(planned)
  for name in ("external", "self"):                # the verdict named before training, among a stratum's planned
    v1.study_verdict(nodes[nodes.config_id.map(v2_analysis.stratum).eq(name) & nodes.config_id.isin(planned)],
                     data, suffix=f"_{name}")
  point = v1.predictor_values(sums, np.ones(len(questions)))
  rng = np.random.default_rng(seed)
  n_q = len(questions)
  boot = {k: [] for k in point}
  for _ in range(n_boot):
    w = np.bincount(rng.integers(0, n_q, n_q), minlength=n_q).astype(float)
    for k, v in v1.predictor_values(sums, w).items():
      boot[k].append(v)
  boot = {k: np.array(v) for k, v in boot.items()}                             # [draws, C]
  with np.errstate(all="ignore"):
    lo = {k: np.nanpercentile(b, 2.5, axis=0) for k, b in boot.items()}
    hi = {k: np.nanpercentile(b, 97.5, axis=0) for k, b in boot.items()}
  rows = [dict(configuration=c, stratum=v2_analysis.stratum(c), view=c.rsplit("_", 1)[0],
               divergence=c.rsplit("_", 1)[1],
               predictor=k, value=point[k][i], lo=lo[k][i], hi=hi[k][i], blocks=len(found), questions=n_q)
          for k in point for i, c in enumerate(confs)]
  values = pd.DataFrame(rows)
  values.to_csv(data / "stage2.csv", index=False)
  rel = []
  halves = [rng.permutation(n_q) for _ in range(n_split)]
  for name in ("external", "self"):
    idx = [i for i, c in enumerate(confs) if v2_analysis.stratum(c) == name]
    for k in point:
      rhos = []
      for perm in halves:
        a, b = np.zeros(n_q), np.zeros(n_q)
        a[perm[: n_q // 2]], b[perm[n_q // 2:]] = 1.0, 1.0
        rho = v1.rank_correlations(v1.predictor_values({k: sums[k]}, a)[k][idx],
                                   v1.predictor_values({k: sums[k]}, b)[k][idx])[0]
        rhos.append(rho)
      r = float(np.nanmean(rhos)) if np.isfinite(rhos).any() else np.nan
      # Spearman-Brown steps up a reliability >= 0; a negative split-half rho is not stepped up (NaN; tiny: -2)
      rel.append(dict(stratum=name, predictor=k, configurations=len(idx), questions=n_q, split_half_rho=r,
                      spearman_brown=2 * r / (1 + r) if np.isfinite(r) and r >= 0 else np.nan))
  pd.DataFrame(rel).to_csv(data / "stage2_reliability.csv", index=False)
  contrasts = []
  for view in sorted({c.rsplit("_", 1)[0] for c in confs}):
    divs = [c for c in confs if c.rsplit("_", 1)[0] == view]
    for k in point:
      for i, a in enumerate(divs):
        for b in divs[i + 1:]:
          ia, ib = confs.index(a), confs.index(b)
          d, db = point[k][ia] - point[k][ib], boot[k][:, ia] - boot[k][:, ib]
          ok = np.isfinite(db)
          contrasts.append(dict(view=view, predictor=k, a=a, b=b, diff=d,
                                lo=np.percentile(db[ok], 2.5) if ok.any() else np.nan,
                                hi=np.percentile(db[ok], 97.5) if ok.any() else np.nan,
                                sign_agreement=float(np.mean(np.sign(db[ok]) == np.sign(d))) if ok.any() else np.nan))
  pd.DataFrame(contrasts).to_csv(data / "stage2_contrasts.csv", index=False)
  return pd.DataFrame(rel)


def run_piece(piece: str, workdir: pathlib.Path, data: pathlib.Path, tiny: bool, interim: bool = False) -> None:
  check_piece(piece, tiny)
  if piece.startswith("study:"):
    run_study(int(piece.split(":", 1)[1]), workdir, data, tiny)
  elif piece.startswith("train:"):
    run_train(piece.split(":", 1)[1], workdir, data, tiny)
  elif piece == "stage1":
    print(stage1_table(data, tiny=tiny).to_string(), flush=True)
  elif piece == "stage2":
    print(stage2_tables(data, n_split=20 if tiny else 200, n_boot=50 if tiny else 1000,
                        planned=None if tiny else [c for c, _ in STAGE3]).to_string(), flush=True)
  elif piece == "stage3":
    specs = validation.V2_TINY if tiny else validation.V2_CONFIGURATIONS
    check_ready(piece, data, tiny, interim)       # the parent checked; a direct call is refused alike
    missing, n = stage3_missing(data, tiny), len(stage3_due(data, tiny))
    out_dir = data
    if missing:                                   # --interim (check_ready): never the data folder's stage3*.csv
      out_dir = workdir / "interim"
      out_dir.mkdir(parents=True, exist_ok=True)
      print(f"INTERIM: {n - len(missing)} of {n} stage-3 runs; not the primary test (hypothesis.md: computed once, "
            f"at all {n}); tables in {out_dir}", flush=True)
    out = v2_analysis.stage3_tables(data, specs, n_boot=50 if tiny else 2000, n_perm=200 if tiny else 10_000,
                                    out=out_dir)
    label = f"{n - len(missing)} of {n} stage-3 runs; not the primary test (computed once, at all {n})"
    text = v2_results.markdown(out, v2_analysis.PRIMARY, label if missing else "", excluded(data, tiny))
    (out_dir / "stage3_results.md").write_text(text)
    print(text, flush=True)


def check_piece(piece: str, tiny: bool) -> None:
  """Raises ValueError naming the pieces when `piece` (or one of its comma-separated pieces) is not one of them (or
  "all")."""
  for one in piece.split(","):
    if one not in ("all", *pieces(tiny)):
      raise ValueError(f"--piece={one}: use all, stage1, stage2, stage3, study:<b> (b in {blocks(tiny)}) or "
                       f"train:<name> (name in {sorted(runs(tiny))}), or several of them joined by commas")


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--workdir", required=True)
  ap.add_argument("--data_dir", default=None,
                  help=f"where finished pieces' tables go (default {DATA_DIR}, the committed record; with --tiny "
                  "<workdir>/data, and never the committed folder)")
  ap.add_argument("--interim", action="store_true",
                  help="stage3 before every stage-3 run is in: the tables labelled interim, in <workdir>/interim/")
  ap.add_argument("--piece", default="all",
                  help="all | train:<name> | stage1 | study:<b> | stage2 | stage3, or several joined by commas")
  ap.add_argument("--tiny", action="store_true", help="random models on the synthetic task (tests)")
  ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
  args = ap.parse_args(argv)
  workdir = pathlib.Path(args.workdir)
  data = pathlib.Path(args.data_dir) if args.data_dir else workdir / "data" if args.tiny else DATA_DIR
  if args.child:
    run_piece(args.piece, workdir, data, args.tiny, args.interim)
    return 0
  if args.tiny and data.resolve() == DATA_DIR.resolve():
    print(f"error: --tiny writes random models' rows: --data_dir={args.data_dir} is the committed record; drop "
          "--data_dir (tables in <workdir>/data) or give another folder", file=sys.stderr)
    return 2
  todo = pieces(args.tiny) if args.piece == "all" else args.piece.split(",")
  try:
    check_piece(args.piece, args.tiny)                     # one line, before any child starts
    if args.piece == "all" and not (data / "hypothesis.md").exists():
      print(f"stage 3 waits for {data / 'hypothesis.md'} (the predictions, committed before any stage-3 run)")
      todo = todo[:todo.index("stage2") + 1]
    for piece in todo:
      check_order(piece, data, args.tiny)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  data.mkdir(parents=True, exist_ok=True)
  return v1.locked(workdir, lambda: drive(todo, workdir, data, args.tiny, args.interim))


def drive(todo: list[str], workdir: pathlib.Path, data: pathlib.Path, tiny: bool, interim: bool) -> int:
  """Each piece of `todo` not done, in its child process; the exit code of the first that fails, else 0."""
  for piece in todo:
    if done(piece, data):
      print(f"{piece}: done ({data}); not rerun", flush=True)
      continue
    try:
      check_ready(piece, data, tiny, interim)
    except ValueError as e:
      print(f"error: {e}", file=sys.stderr)
      return 2
    t0 = time.time()
    cmd = [sys.executable, os.path.abspath(__file__), "--child", f"--piece={piece}", f"--workdir={workdir}",
           f"--data_dir={data}"] + (["--tiny"] if tiny else []) + (["--interim"] if interim else [])
    code, wall, peak = v1.run_child(cmd, t0)
    print(f"{piece}: exit {code}, {wall:.0f} s, peak RSS {peak:.2f} GiB", flush=True)
    if code:
      return code
    if piece.startswith("train:"):
      print(add_run_row(workdir / "train" / piece.split(":", 1)[1], data, wall, peak), flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
