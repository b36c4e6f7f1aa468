"""Where OPD helps and hurts (issue 14, item 2): alignment and teacher advantage by relative position, student
entropy, whether the sampled token is the student's argmax, and token kind, each split by correct/incorrect.

Every cell's interval uses one shared cluster bootstrap over the study's questions (stats.ClusterBootstrap).
"""
import re
import unicodedata

import numpy as np
import pandas as pd

from opd_jax.estimators import stats
from opd_jax.report import common

KINDS = ("number", "operator", "word", "format")
_OPERATORS = set("+-*/=<>^%()[]{}.,;:!?|&~$#@'\"\\`_")


def token_kind(text: str) -> str:
  """Rule-based kind of a decoded token: "format" (only whitespace / empty / special markers like <|...|>),
  "number" (a digit after stripping spaces), "operator" (only punctuation or math symbols), else "word"."""
  core = text.strip()
  if not core or (core.startswith("<") and core.endswith(">")):
    return "format"
  if any(ch.isdigit() for ch in core) and all(ch.isdigit() or ch in ".,_" for ch in core):
    return "number"
  if all(ch in _OPERATORS or unicodedata.category(ch).startswith(("P", "S")) for ch in core):
    return "operator"
  return "word"


def is_argmax(p_lists: pd.Series) -> np.ndarray:
  """float [N]: 1 where the sampled token (C(u)'s first slot) has the largest p over C(u), 0 where not, NaN where
  p is empty. Exact when C(u) holds the student's top-1 (budget.student_top_k >= 1): C(u) is the sampled token
  then the student's top-k (targeted.candidate_set), and p is monotone in the student's logits."""
  return np.array([np.nan if len(p) == 0 else float(p[0] >= np.max(p)) for p in p_lists])


def node_features(nodes: pd.DataFrame, *, lengths: pd.DataFrame | None = None, decode=None) -> pd.DataFrame:
  """The split columns per node row: rel_position (position / response length, needs `lengths` with
  question_id, rollout_id, length), entropy_p (the raw student entropy column), argmax, kind (needs `decode`:
  token id -> text). A column that cannot be built is left out."""
  out = pd.DataFrame(index=nodes.index)
  if lengths is not None and len(lengths):
    key = ["question_id", "rollout_id"]
    merged = nodes[key].merge(lengths[key + ["length"]].drop_duplicates(key), on=key, how="left")
    out["rel_position"] = nodes["position"].to_numpy(np.float64) / np.maximum(merged["length"].to_numpy(float), 1)
  if "entropy_p" in nodes.columns:
    out["entropy_p"] = nodes["entropy_p"].to_numpy(np.float64)
  if "p" in nodes.columns:
    out["argmax"] = is_argmax(nodes["p"])
  if decode is not None and "sampled_token" in nodes.columns:
    ids = nodes["sampled_token"].to_numpy()
    kinds = {int(t): token_kind(decode(int(t))) for t in np.unique(ids)}
    out["kind"] = [kinds[int(t)] for t in ids]
  return out


def bins(features: pd.DataFrame, split: str, *, n_quantiles: int = 5) -> pd.Series:
  """Bin labels of one split: position deciles ("0.0-0.1", ...), entropy quantiles (q1..qn, edges over the
  distinct nodes), argmax ("argmax" / "not argmax"), kind."""
  if split == "rel_position":
    edge = np.clip(np.floor(features[split].to_numpy() * 10), 0, 9)
    return pd.Series([f"{e / 10:.1f}-{(e + 1) / 10:.1f}" if np.isfinite(e) else None for e in edge],
                     index=features.index)
  if split == "entropy_p":
    x = features[split].to_numpy(np.float64)
    edges = np.nanquantile(x, np.linspace(0, 1, n_quantiles + 1)[1:-1]) if np.isfinite(x).any() else []
    labels = np.searchsorted(edges, x, side="right") + 1
    return pd.Series([f"q{l}" if np.isfinite(v) else None for l, v in zip(labels, x)], index=features.index)
  if split == "argmax":
    return features[split].map({1.0: "argmax", 0.0: "not argmax"})
  return features[split]


def where_table(nodes: pd.DataFrame, features: pd.DataFrame, boot: stats.ClusterBootstrap, *,
                level: float = 0.95, min_nodes: int = common.MIN_NODES,
                min_questions: int = common.MIN_QUESTIONS) -> pd.DataFrame:
  """Long table: split, bin, group (correct / incorrect), config_id, n_defined, n_questions, underpowered,
  mean_alignment (+ ci_lo, ci_hi), mean_teacher_advantage (+ adv_ci_lo, adv_ci_hi)."""
  rows = []
  questions = nodes["question_id"].astype(str).to_numpy()
  align = nodes["alignment"].to_numpy(np.float64)
  adv = nodes["teacher_advantage"].to_numpy(np.float64)
  configs = nodes["config_id"].to_numpy()
  for split in [c for c in ("rel_position", "entropy_p", "argmax", "kind") if c in features.columns]:
    labels = bins(features, split).to_numpy(object)
    names = sorted({l for l in labels if isinstance(l, str)}, key=_bin_order)   # NaN / None: no bin
    for group in ("incorrect", "correct"):
      in_group = common.group_mask(nodes, group)
      for config_id in pd.unique(configs):
        for name in names:
          m = in_group & (configs == config_id) & (labels == name)
          defined = m & ~np.isnan(align)
          n_q = int(pd.unique(questions[defined]).size)
          a = boot.mean_ci(align[m], questions[m], level=level) if m.any() else (np.nan,) * 3
          t = boot.mean_ci(adv[m], questions[m], level=level) if m.any() else (np.nan,) * 3
          rows.append({"split": split, "bin": name, "group": group, "config_id": config_id,
                       "n_defined": int(defined.sum()), "n_questions": n_q,
                       "underpowered": common.underpowered(int(defined.sum()), n_q, min_nodes=min_nodes,
                                                           min_questions=min_questions),
                       "mean_alignment": a[0], "ci_lo": a[1], "ci_hi": a[2],
                       "mean_teacher_advantage": t[0], "adv_ci_lo": t[1], "adv_ci_hi": t[2]})
  return pd.DataFrame(rows)


def _bin_order(name: str):
  if name in KINDS:
    return (1, KINDS.index(name), name)
  match = re.match(r"q(\d+)$", name)
  return (0, int(match.group(1)), name) if match else (0, 0, name)
