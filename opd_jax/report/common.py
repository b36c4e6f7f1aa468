"""What every report module shares: the node groups, the input checks, the power rule, and small formatting
helpers. The NaN reasons and predictor columns are records.NAN_REASONS and records.PREDICTORS."""
import math

import numpy as np
import pandas as pd


GROUPS = ("correct", "incorrect", "all")
TRAINED = "trained"  # the verdict's group of all nodes as training weighs them (`trained_rows`)
TARGETS = ("incorrect", "correct", "all", TRAINED)    # the verdict's target groups (config.report.target)
BOTH_GROUPS = ("all", TRAINED)  # the targets that read both groups' nodes (correct and incorrect)
NODE_KEY = ("question_id", "rollout_id", "position")
REQUIRED_COLUMNS = ("config_id", "question_id", "rollout_id", "position", "teacher", "context", "divergence",
                    "correct", "alignment", "alignment_nan_reason", "degenerate", "teacher_advantage")
MIN_NODES = 10       # fewer defined alignments in a group: underpowered
MIN_QUESTIONS = 10   # fewer questions: underpowered (a 95% cluster interval over 3 questions covers ~71%)
MIN_SHARED_QUESTIONS = 5   # fewer questions behind a paired difference: not comparable (no test, no veto)
# What the verdict compares per node (issue 33: docs/results.md, "How many continuations per candidate").
ESTIMANDS = {
    "alignment": "cos(g*, g_D), the paper's (the records' column); undefined on degenerate nodes",
    "projection": "<g*, g_D> / |g_D| (gradients.projection): linear in P_succ, so unbiased at any number of "
                  "continuations; 0 on a degenerate node; in units of V per unit step of the logits",
    "alignment_ratio": "the projection over the root mean square of |g*| on the target group's nodes, "
                       "mean <g*, g_D> / |g_D| / sqrt(mean |g*|^2), |g*|^2 cross-fitted from two halves of the "
                       "continuations: a cosine's scale ([-1, 1]; the mean alignment when every |g*| is equal) "
                       "whose expectation does not move with the number of continuations (>= 2)",
}


def sampled_group(node_group: str, target: str) -> str:
  """The node group whose rollouts a study draws nodes from: the verdict's target under budget.node_group "target"
  when it is a single group ("correct" or "incorrect"); otherwise "all" (both, balanced: "all" and "trained" read
  both groups)."""
  return "all" if node_group != "target" or target in BOTH_GROUPS else target


def duplicate_nodes(rows) -> tuple[int, dict | None]:
  """(how many node rows repeat a (config_id, question_id, rollout_id, position) key, the first repeated key as a
  dict, or None)."""
  key = ["config_id", *NODE_KEY]
  duplicated = rows.duplicated(subset=key)
  return int(duplicated.sum()), (rows.loc[duplicated, key].iloc[0].to_dict() if duplicated.any() else None)


def check_nodes(nodes: pd.DataFrame) -> None:
  """Raises ValueError when the node records miss columns, repeat a node, or contradict themselves."""
  if len(nodes) == 0:
    raise ValueError("nodes is empty: no node was scored; check the study's budget and its records/nodes")
  missing = [c for c in REQUIRED_COLUMNS if c not in nodes.columns]
  if missing:
    raise ValueError(f"nodes is missing columns {missing} (has {list(nodes.columns)}); pass the node records "
                     "written by opd_jax.records (pandas.read_parquet('<workdir>/records/nodes'))")
  if nodes["correct"].isna().any():
    raise ValueError("nodes.correct has missing values; every node needs its rollout's correctness (reward == 1)")
  count, first = duplicate_nodes(nodes)
  if count:
    raise ValueError(f"nodes has {count} duplicate rows for (config_id, question_id, rollout_id, "
                     f"position), e.g. {first}; records of two studies were mixed in one workdir: remove the "
                     "stale part files")
  defined_degenerate = nodes["degenerate"].astype(bool) & nodes["alignment"].notna()
  if defined_degenerate.any():
    raise ValueError(f"{int(defined_degenerate.sum())} nodes are marked degenerate but have a defined alignment; "
                     "a degenerate node has g* = 0 and alignment NaN: the records are inconsistent")


def on_nodes(target: str) -> str:
  """The verdict's words for its target group: "on incorrect nodes", ..., "on all nodes as training weighs them"."""
  return "on all nodes as training weighs them" if target == TRAINED else f"on {target} nodes"


def success_rates(rollouts: pd.DataFrame) -> pd.Series:
  """Each question's base success rate s_q [question_id -> float]: the mean reward of its base rollouts (the
  rollouts table's question_id and reward columns)."""
  return rollouts.assign(question_id=rollouts["question_id"].astype(str)).groupby("question_id")["reward"].mean()


def trained_rows(nodes: pd.DataFrame, rates: pd.Series, columns=("alignment", "teacher_advantage")) -> pd.DataFrame:
  """The verdict's "trained" group: one row per configuration and question whose `columns` hold the mean over the
  question's nodes as training weighs them, s_q x (mean over its correct-rollout nodes) + (1 - s_q) x (mean over its
  incorrect ones), s_q = rates[question_id] (`success_rates`); where one group has no defined value, the other's mean
  (NaN where neither has); over the nodes each configuration defines (a node undefined for one configuration,
  e.g. its context unavailable, leaves the others' values as they are). Training updates on the student's own rollouts, correct ones at the rate s_q, where a
  study's node rollouts are balanced between the two (docs/data/validation_v2/hypothesis.md: v2's primary
  predictor, `alignment_trained`, is the mean of the alignment column over questions).

  Args:
    nodes: node records (check_nodes) with a question_id in `rates`.
    rates: [question_id -> s_q in [0, 1]].
  Returns:
    config_id, question_id, rollout_id (-1), position (-1), correct (s_q >= 0.5, a placeholder), degenerate (no
    defined alignment), alignment_nan_reason ("" or "degenerate") and `columns`, in nodes' configuration order.
  Raises:
    ValueError: a question of `nodes` without a rate, naming it.
  """
  q = nodes["question_id"].astype(str)
  missing = sorted(set(q) - set(rates.index.astype(str)))
  if missing:
    raise ValueError(f"no base success rate for questions {missing[:3]} ({len(missing)} in all): the 'trained' "
                     "target weighs a question's correct and incorrect nodes by it (its rollout records)")
  s = rates.set_axis(rates.index.astype(str))
  key = [nodes["config_id"], q]
  out = None
  for col in columns:
    by = nodes[col].groupby([*key, nodes["correct"].astype(bool)], sort=False).mean().unstack()
    good = by[True] if True in by.columns else pd.Series(np.nan, by.index)
    bad = by[False] if False in by.columns else pd.Series(np.nan, by.index)
    w = s.loc[by.index.get_level_values(1)].to_numpy(float)
    both = w * good.to_numpy(float) + (1 - w) * bad.to_numpy(float)
    value = np.where(good.notna() & bad.notna(), both, good.fillna(bad).to_numpy(float))
    col_frame = pd.DataFrame({col: value}, index=by.index)
    out = col_frame if out is None else out.join(col_frame)
  out = out.reset_index(names=["config_id", "question_id"])
  undefined = out["alignment"].isna()
  return out.assign(rollout_id=-1, position=-1, correct=s.loc[out["question_id"]].to_numpy() >= 0.5,
                    degenerate=undefined, alignment_nan_reason=np.where(undefined, "degenerate", ""))


def group_mask(nodes: pd.DataFrame, group: str) -> np.ndarray:
  """bool [N]: the nodes of "correct", "incorrect" or "all". Raises ValueError for another name."""
  if group not in GROUPS:
    raise ValueError(f"group must be one of {GROUPS}, got {group!r}")
  if group == "all":
    return np.ones(len(nodes), bool)
  return nodes["correct"].astype(bool).to_numpy() == (group == "correct")


def underpowered(n_defined: int, n_questions: int, *, min_nodes: int = MIN_NODES,
                 min_questions: int = MIN_QUESTIONS) -> bool:
  """The power rule: a group with fewer than `min_nodes` defined alignments or `min_questions` questions is
  underpowered; its intervals are indicative only and no decision is taken from it."""
  return bool(n_defined < min_nodes or n_questions < min_questions)


def underpowered_reason(n_defined: int, n_questions: int, *, min_nodes: int = MIN_NODES,
                        min_questions: int = MIN_QUESTIONS) -> str:
  parts = []
  if n_defined < min_nodes:
    parts.append(f"only {counted(n_defined, 'non-degenerate node')} with a defined alignment (< {min_nodes})")
  if n_questions < min_questions:
    parts.append(f"only {counted(n_questions, 'question')} (< {min_questions}) with a defined alignment")
  return "; ".join(parts)


def fmt(x, digits: int = 4) -> str:
  if x is None or (isinstance(x, (float, np.floating)) and math.isnan(x)):
    return "n/a"
  if isinstance(x, (float, np.floating)):
    return f"{x:.{digits}f}" if np.isfinite(x) else str(x)
  return str(x)


def ci(lo, hi, digits: int = 4) -> str:
  return "n/a" if lo is None or math.isnan(lo) or math.isnan(hi) else f"[{lo:.{digits}f}, {hi:.{digits}f}]"


def table(header: list[str], body: list[list[str]]) -> list[str]:
  """A markdown table as lines."""
  lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
  return lines + ["| " + " | ".join(cells) + " |" for cells in body]


def counted(n: int, word: str) -> str:
  """"1 question", "2 questions": `n` and `word`, plural unless n == 1."""
  return f"{n} {word}" + ("" if n == 1 else "s")


def with_estimand(nodes: pd.DataFrame, estimand: str, target: str = "all") -> pd.DataFrame:
  """`nodes` with its alignment column holding `estimand`'s per-node values (the column the verdict reads) and
  degenerate set where it is undefined; the records' own table for "alignment".

  "alignment_ratio": each node's projection divided by S = sqrt(mean over the `target` group's distinct nodes of
  the cross-fitted |g*|^2) (`records.estimates_from_rows`' g_ideal_norm2), one S for every configuration (g* does
  not depend on the teacher), so a configuration's mean over the group is sum <g*, g_D> / |g_D| / (N S) [ours, issue
  48]: numerator and S^2 are unbiased at any number of continuations >= 2, and the ratio's bias is of order
  1 / nodes, not 1 / continuations. As the continuations grow it is mean(|g*| cos) / sqrt(mean |g*|^2): the mean
  alignment weighted by |g*| / RMS |g*|, in [-1, 1]. Paired differences and their tests are the projection's
  divided by S. Needs the records' `rewards`.

  Raises:
    ValueError: an unknown estimand (naming the known ones); alignment_ratio on rows without `rewards`.
  """
  if estimand not in ESTIMANDS:
    raise ValueError(f"unknown estimand {estimand!r}: one of {', '.join(ESTIMANDS)}")
  if estimand == "alignment":
    return nodes
  from opd_jax import records  # pylint: disable=g-import-not-at-top
  if estimand == "alignment_ratio" and "rewards" not in nodes.columns:
    raise ValueError("the estimand alignment_ratio needs the node records' rewards column (records/nodes as the "
                     "study writes them); these rows have none")
  est = records.estimates_from_rows(nodes)
  values = (est["projection"] / ratio_scale(nodes, est["g_ideal_norm2"], target) if estimand == "alignment_ratio"
            else est[estimand])
  return nodes.assign(alignment=values, degenerate=np.isnan(values) & nodes["degenerate"].to_numpy(bool))


def ratio_scale(nodes: pd.DataFrame, norm2: np.ndarray, target: str) -> float:
  """The alignment ratio's S = sqrt(mean of the cross-fitted |g*|^2 `norm2` [rows] over the target group's distinct
  nodes where it is defined); NaN when that mean is not > 0."""
  in_group = group_mask(nodes, target)
  s = nodes[in_group].assign(s=np.asarray(norm2)[in_group]).drop_duplicates(list(NODE_KEY))["s"]
  s = s.to_numpy(float)[np.isfinite(s.to_numpy(float))]
  return math.sqrt(s.mean()) if s.size and s.mean() > 0 else math.nan
