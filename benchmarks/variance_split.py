"""A pilot study's variance split, for the dry run's design by cost (issue 48, item 2; opd_jax/cost/design.py).

  python benchmarks/variance_split.py --workdir=/work/runs/hour --out=docs/data/variance_split/hour.json
  python -m opd_jax.main --config=configs/teacher_sweep.py:paper --dry_run --cost_model=h200 \\
      --variance_split=docs/data/variance_split/hour.json
  python benchmarks/variance_split.py --estimand=projection --r=4 \\
      --nodes_csv='docs/data/validation/study_nodes_*.csv' --out=docs/data/variance_split/validation.json
  python benchmarks/variance_split.py --estimand=projection \\
      --records='docs/data/validation_v2/study_records_[12].parquet' --out=docs/data/variance_split/v2_blocks12.json \\
      --explain=docs/data/variance_split/v2_blocks12 --boot=200

For every pair of configurations, the paired difference of the estimand at each node of the target group where
both are defined, from all its continuations and from each half (`success.halves`), gives the three components
(`estimators.variance.components`: questions, nodes, continuations). Writes one JSON: estimand, target, the
records' R, the source, the alignment ratio's scale S of the target group ("scale", with rewards only: the dry
run's floor is in the verdict's units, cost/design.py) and per pair the components. The split is the pilot's (its
task, models and node rule): a design priced with it for another study assumes that study's split is alike.

`--records` reads committed node records with rewards instead of a workdir: a glob of parquet files, each a study
block's node records as written (benchmarks/validate_v2.py's study_records_<b>.parquet, question ids prefixed
"<b>:"), pooled: the same split as from a workdir holding the same rows. Blocks must not share a node (a question
id in two files is refused).

`--explain=<prefix>` (with --records or --workdir) also writes <prefix>_binding.csv and <prefix>_criteria.csv: which
pairs set the hours of the design the dry run chooses for `--config` (default configs/teacher_sweep.py:paper) on
`--cost_model` (default h200), and its hours under other criteria (benchmarks/design_binding.py).

`--nodes_csv` reads node rows without rewards (the validation study's committed docs/data/validation/
study_nodes_<b>.csv: one row per configuration and node with its projection and teacher advantage, R = 4 by
configs/validation.py): the question component and the within-question one, s2_node + s2_continuation / R, are
measured, the continuation share of the latter is not (no halves), and each pair says so ("continuation": null,
"within"); the design then holds at both ends of that share (cost/design.py). The alignment ratio is the
projection over one scale per node group, so its split is the projection's over that scale squared and its
design (a ratio of variances) the projection's.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from opd_jax import records  # pylint: disable=g-import-not-at-top,wrong-import-position
from opd_jax.cost import design  # pylint: disable=g-import-not-at-top,wrong-import-position
from opd_jax.estimators import variance  # pylint: disable=g-import-not-at-top,wrong-import-position
from opd_jax.report import common  # pylint: disable=g-import-not-at-top,wrong-import-position

ESTIMANDS = ("alignment_ratio", "projection", "teacher_advantage")


def differences(rows, estimand: str, target: str):
  """(wide, configs, r, scale) of node rows with `rewards`: `wide` has one row per node of the target group (index
  common.NODE_KEY, question first) and columns ("v" | "a" | "b", config_id): the estimand's value with all of a
  node's continuations and with each half (`success.halves`); r the records' median continuations per candidate;
  scale the alignment ratio's S (common.ratio_scale: the projection over S is the ratio)."""
  key = list(zip(rows["question_id"], rows["rollout_id"], rows["position"]))
  rewards = {k: [np.asarray(x, np.float64) for x in rw] for k, rw in zip(key, rows["rewards"])}
  halves = [{k: [x[i::2] for x in rw] for k, rw in rewards.items()} for i in (0, 1)]
  est = [records.estimates_from_rows(rows, rewards=rw) for rw in (rewards, *halves)]
  scale = common.ratio_scale(rows, est[0]["g_ideal_norm2"], target)
  if estimand == "alignment_ratio":
    vals = [e["projection"] / scale for e in est]
  else:
    vals = [e[estimand] for e in est]
  in_group = common.group_mask(rows, target)
  frame = rows.loc[in_group, ["config_id", *common.NODE_KEY]].assign(
      v=vals[0][in_group], a=vals[1][in_group], b=vals[2][in_group])
  wide = frame.pivot_table(index=list(common.NODE_KEY), columns="config_id", values=["v", "a", "b"], aggfunc="first")
  r = float(np.median([x.size for rw in rewards.values() for x in rw]))
  return wide, list(dict.fromkeys(rows["config_id"])), r, scale


def pair_components(wide, configs: list[str], r: float) -> dict[str, variance.Components]:
  """{"a - b": Components} of every pair of `configs` in `wide` (`differences`; its index's first level is the
  question), a before b in `configs`' order; a pair without 2 questions or a question with 2 nodes left out."""
  out = {}
  questions = wide.index.get_level_values(0)
  for i, c1 in enumerate(configs):
    for c2 in configs[i + 1:]:
      if ("v", c1) not in wide or ("v", c2) not in wide:
        continue
      d = {f: (wide[(f, c1)] - wide[(f, c2)]).to_numpy(float) for f in ("v", "a", "b")}
      try:
        out[f"{c1} - {c2}"] = variance.components(d["v"], d["a"], d["b"], questions, r)
      except ValueError:
        continue
  return out


def split(rows, estimand: str, target: str, diffs=None) -> dict:
  """{"estimand", "target", "r", "scale", "pairs": {"a - b": Components as a dict}} of node rows with `rewards`;
  `diffs`: their `differences(rows, estimand, target)` when the caller has it already."""
  wide, configs, r, scale = diffs if diffs is not None else differences(rows, estimand, target)
  pairs = {k: v.__dict__ for k, v in pair_components(wide, configs, r).items()}
  return {"estimand": estimand, "target": target, "r": r, "scale": scale, "pairs": pairs}


def read_node_records(pattern: str):
  """(rows, paths): the node records of every parquet file matching the glob `pattern`, in path order, as one
  DataFrame (the rows of `split`).

  Raises:
    ValueError: no file matches, a file has no `rewards` column, or two rows share (config_id, question_id,
      rollout_id, position) (blocks whose question ids are not distinct, or one file matched twice).
  """
  import glob  # pylint: disable=g-import-not-at-top
  import pandas as pd  # pylint: disable=g-import-not-at-top
  paths = sorted(glob.glob(pattern))
  if not paths:
    raise ValueError(f"--records={pattern}: no file matches; give a glob of node-record parquet files, e.g. "
                     "--records='docs/data/validation_v2/study_records_*.parquet'")
  frames = [pd.read_parquet(p) for p in paths]
  for p, f in zip(paths, frames):
    if "rewards" not in f.columns:
      raise ValueError(f"--records={pattern}: {p} has no rewards column (not node records with every "
                       "continuation's reward); for node rows without rewards use --nodes_csv with --r")
  rows = pd.concat(frames, ignore_index=True)
  count, first = common.duplicate_nodes(rows)
  if count:
    raise ValueError(f"--records={pattern}: {count} rows repeat a (config_id, question_id, rollout_id, "
                     f"position) across {len(paths)} files, e.g. {first}; blocks pooled must have distinct question "
                     "ids (validate_v2.export_study prefixes them '<block>:')")
  return rows, paths


def split_without_rewards(rows, estimand: str, target: str, r: float) -> dict:
  """The split of node rows that hold `estimand`'s value but no rewards: per pair {"question", "within" (s2_node +
  s2_continuation / r), "node": None, "continuation": None, "questions", "nodes", "r"}.

  Raises:
    ValueError: `estimand` not a column of the rows (naming the columns there are).
  """
  if estimand not in rows.columns:
    raise ValueError(f"--estimand={estimand}: the rows have no such column (they have {list(rows.columns)}); "
                     "without rewards only a recorded estimand can be split (e.g. --estimand=projection)")
  in_group = common.group_mask(rows, target)
  frame = rows.loc[in_group, ["config_id", *common.NODE_KEY]].assign(v=rows.loc[in_group, estimand].to_numpy(float))
  wide = frame.pivot_table(index=list(common.NODE_KEY), columns="config_id", values="v", aggfunc="first")
  configs = list(dict.fromkeys(rows["config_id"]))
  out = {}
  for i, c1 in enumerate(configs):
    for c2 in configs[i + 1:]:
      if c1 not in wide or c2 not in wide:
        continue
      try:
        comp = variance.components((wide[c1] - wide[c2]).to_numpy(float), None, None,
                                   wide.index.get_level_values(0), r)
      except ValueError:
        continue
      out[f"{c1} - {c2}"] = {"question": comp.question, "within": comp.node, "node": None, "continuation": None,
                             "questions": comp.questions, "nodes": comp.nodes, "r": float(r)}
  return {"estimand": estimand, "target": target, "r": float(r), "pairs": out}


def main(argv=None) -> int:
  import glob  # pylint: disable=g-import-not-at-top
  import pandas as pd  # pylint: disable=g-import-not-at-top
  from opd_jax.report import build  # pylint: disable=g-import-not-at-top
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--workdir", help="a study's workdir (its node records, with rewards)")
  ap.add_argument("--records", help="instead: a glob of node-record parquet files with rewards (validate_v2.py's "
                  "study_records_<b>.parquet), pooled")
  ap.add_argument("--nodes_csv", help="instead: a glob of node-row CSVs without rewards (validate_training.py's "
                  "study_nodes_<b>.csv); needs --r")
  ap.add_argument("--r", type=float, default=0.0, help="with --nodes_csv: the continuations per candidate behind them")
  ap.add_argument("--out", required=True)
  ap.add_argument("--estimand", default="alignment_ratio", choices=ESTIMANDS)
  ap.add_argument("--target", default="incorrect", choices=("incorrect", "correct", "all"))
  ap.add_argument("--explain", default="", help="also write <this>_binding.csv and <this>_criteria.csv: which "
                  "pairs set the design's hours (benchmarks/design_binding.py); needs --records or --workdir")
  ap.add_argument("--config", default="configs/teacher_sweep.py:paper", help="with --explain: the study config "
                  "whose design is chosen")
  ap.add_argument("--cost_model", default="h200", help="with --explain: the accelerator that prices it")
  ap.add_argument("--floor_fraction", type=float, default=design.FLOOR_FRACTION, help="with --explain: the floor "
                  "on a pair's fixed-design standard error, as a fraction of config.report.min_effect")
  ap.add_argument("--boot", type=int, default=0, help="with --explain: resamples of the pilot's questions")
  ap.add_argument("--seed", type=int, default=0)
  args = ap.parse_args(argv)
  if sum(map(bool, (args.workdir, args.records, args.nodes_csv))) != 1:
    ap.error("give one of --workdir or --records (node records with rewards) or --nodes_csv (node rows without them)")
  if args.explain and args.nodes_csv:
    ap.error("--explain needs the continuation share: give --records or --workdir (node records with rewards)")
  if args.nodes_csv:
    paths = sorted(glob.glob(args.nodes_csv))
    if not paths or not args.r >= 2:
      ap.error(f"--nodes_csv={args.nodes_csv} matched {len(paths)} files; it needs >= 1 and --r >= 2 (the "
               "continuations per candidate behind the rows)")
    rows = pd.concat([pd.read_csv(p, dtype={"question_id": str}) for p in paths], ignore_index=True)
    got = split_without_rewards(rows, args.estimand, args.target, args.r)
    got["source"] = f"{args.nodes_csv} ({len(paths)} files, {rows['question_id'].nunique()} questions)"
  else:
    if args.records:
      try:
        rows, paths = read_node_records(args.records)
      except ValueError as e:
        ap.error(str(e))
      source = f"{args.records} ({len(paths)} files, {rows['question_id'].nunique()} questions)"
    else:
      rows, source = build.read_records(args.workdir), args.workdir
    diffs = differences(rows, args.estimand, args.target)
    wide, configs, r, scale = diffs
    got = {**split(rows, args.estimand, args.target, diffs), "source": source}
  os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
  with open(args.out, "w") as f:
    json.dump(got, f, indent=1)
  for k, v in got["pairs"].items():
    inside = (f"within {v['within']:.3g} (continuation share unknown)" if v["continuation"] is None else
              f"node {v['node']:.3g}, continuation {v['continuation']:.3g}")
    print(f"{k}: question {v['question']:.3g}, {inside} ({v['questions']} questions, {v['nodes']} nodes)")
  print(f"wrote {args.out}: {len(got['pairs'])} pairs, R = {got['r']:g}")
  if args.explain:
    from ml_collections.config_flags import config_flags  # pylint: disable=g-import-not-at-top
    from benchmarks import design_binding  # pylint: disable=g-import-not-at-top
    config = config_flags.ConfigFileFlagParser(name="config").parse(args.config)
    table, crit = design_binding.explain(rows, wide, configs, r, scale, got, config, args.cost_model, args.explain,
                                         args.floor_fraction, args.boot, args.seed)
    print(f"wrote {args.explain}_binding.csv ({len(table)} pairs) and {args.explain}_criteria.csv; S = {scale:.4g}")
    for c in crit.itertuples():
      print(f"{c.criterion} ({c.pairs} pairs): {c.questions} questions, nodes_per_rollout {c.nodes_per_rollout}, "
            f"r = {c.r}: {c.hours:.3g} h ({c.fraction:.3g} of {c.fixed_hours:.3g}); binding {c.binding}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
