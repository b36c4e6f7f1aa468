"""The router (issue 14, item 4): a per-token choice among the study's configurations from the predictors only,
trained and scored with cross-validation by question, against the best single configuration and the per-token
oracle (max over configurations per node).

Per configuration c, a logistic model of P(alignment_c > 0) from the predictors of c's own row at the node
(records.PREDICTORS of c's (teacher, context) view); each held-out node is routed to the configuration with
the highest predicted probability among those with a defined alignment there. Nothing of the held-out
questions enters the models (folds over question_id).

The oracle - router gap is not headroom by itself: the per-node max of noisy alignments exceeds any routed
choice even when there is nothing to route (issue 25: +0.467 with interchangeable configurations and useless
predictors). `route` therefore reports it beside its permutation null: the same cross-validated pipeline refit
on alignments permuted among the configurations defined at each node (a Fisher-Pitman randomisation test of
"the configurations are interchangeable at each node": the oracle is unchanged, the router can learn nothing).
"""
import math

import numpy as np
import pandas as pd

from opd_jax import records
from opd_jax.estimators import stats
from opd_jax.report import common


def fit_logistic(x: np.ndarray, y: np.ndarray, *, l2: float = 1.0, max_iter: int = 50,
                 tol: float = 1e-10) -> np.ndarray:
  """L2-penalised logistic regression by Newton / IRLS steps.

  Minimises sum_i [log(1 + exp(z_i)) - y_i z_i] + l2 / 2 |w|^2 with z = b + x w (the intercept b is not
  penalised, so the penalty keeps separable or constant columns finite).

  Args:
    x: float [N, D] features (finite).
    y: [N] labels in {0, 1} (bool or numeric).
    l2: penalty weight (>= 0; > 0 keeps the Hessian invertible for constant columns).
  Returns:
    float64 [D + 1]: (b, w_1..w_D).
  Raises:
    ValueError: shapes disagree, x is not finite or l2 < 0.
  """
  x = np.asarray(x, np.float64)
  y = np.asarray(y, np.float64)
  if x.ndim != 2 or y.shape != (x.shape[0],):
    raise ValueError(f"x must be [N, D] and y [N], got {x.shape} and {y.shape}")
  if not np.all(np.isfinite(x)):
    raise ValueError("x has non-finite values; impute them before fitting (router.features does)")
  if l2 < 0:
    raise ValueError(f"l2 must be >= 0, got {l2}")
  design = np.concatenate([np.ones((x.shape[0], 1)), x], axis=1)
  penalty = np.full(design.shape[1], float(l2))
  penalty[0] = 1e-8                                    # the intercept: (almost) unpenalised
  w = np.zeros(design.shape[1])
  for _ in range(max_iter):
    prob = 1.0 / (1.0 + np.exp(-(design @ w)))
    grad = design.T @ (prob - y) + penalty * w
    hess = (design * (prob * (1 - prob))[:, None]).T @ design + np.diag(penalty)
    step = np.linalg.solve(hess, grad)
    w = w - step
    if np.max(np.abs(step)) < tol:
      break
  return w


def _transform(x: np.ndarray) -> np.ndarray:
  """sign(x) log(1 + |x|) with non-finite values -> NaN (predictors are heavy-tailed; log ratios can be inf)."""
  x = np.where(np.isfinite(x), x, np.nan)
  return np.sign(x) * np.log1p(np.abs(x))


class _Model:
  """Standardise (training mean / sd; NaN -> the mean), then fit_logistic."""

  def __init__(self, x: np.ndarray, y: np.ndarray, l2: float):
    x = _transform(x)
    self.mean = np.nan_to_num(np.nanmean(x, axis=0)) if x.size else np.zeros(x.shape[1])
    sd = np.nanstd(x, axis=0) if x.size else np.ones(x.shape[1])
    self.sd = np.where(np.isfinite(sd) & (sd > 0), sd, 1.0)
    self.w = fit_logistic(self._standardise(x), y, l2=l2)

  def _standardise(self, x):
    return np.nan_to_num((x - self.mean) / self.sd, nan=0.0)

  def predict(self, x: np.ndarray) -> np.ndarray:
    z = self.w[0] + self._standardise(_transform(x)) @ self.w[1:]
    return 1.0 / (1.0 + np.exp(-z))


def folds_by_question(questions: np.ndarray, n_folds: int, seed: int) -> np.ndarray:
  """int [N] fold of each node: the distinct questions (np.unique order) are permuted with
  np.random.default_rng(seed) and dealt round-robin into min(n_folds, G) folds."""
  labels, inverse = np.unique(questions, return_inverse=True)
  k = max(1, min(int(n_folds), labels.size))
  fold_of_label = np.empty(labels.size, int)
  fold_of_label[np.random.default_rng(seed).permutation(labels.size)] = np.arange(labels.size) % k
  return fold_of_label[inverse]


def _cv_choice(align: np.ndarray, feats: np.ndarray, fold: np.ndarray, l2: float) -> np.ndarray:
  """int [N]: the routed configuration of each node (`route`'s protocol: per fold and configuration a logistic
  model of alignment > 0 on the other folds' defined rows; the highest predicted probability among the defined
  configurations wins, ties to the first)."""
  score = np.full(align.shape, -np.inf)
  for f in np.unique(fold):
    test, train = fold == f, fold != f
    for j in range(align.shape[1]):
      fit = train & np.isfinite(align[:, j])
      y = align[fit, j] > 0
      todo = test & np.isfinite(align[:, j])
      if not todo.any():
        continue
      if y.size == 0 or y.all() or not y.any():
        score[todo, j] = y.mean() if y.size else 0.5
      else:
        score[todo, j] = _Model(feats[fit, j], y, l2).predict(feats[todo, j])
  return np.argmax(score, axis=1)                         # first maximum: configuration order


def permute_within_nodes(align: np.ndarray, rng: np.random.Generator) -> np.ndarray:
  """align [N, C] with each row's defined (finite) values shuffled among its defined slots (NaNs stay put)."""
  out = align.copy()
  for i in range(len(align)):
    at = np.flatnonzero(np.isfinite(align[i]))
    out[i, at] = align[i, rng.permutation(at)]
  return out


def gap_null(align: np.ndarray, feats: np.ndarray, fold: np.ndarray, l2: float, *, n_perm: int,
             seed: int) -> np.ndarray:
  """float [n_perm]: mean(oracle - router) over the nodes with the alignments permuted within nodes
  (`permute_within_nodes`, np.random.default_rng(seed)) and the router refit on them (`_cv_choice`); features,
  folds and the oracle (a per-node max) are unchanged."""
  rng = np.random.default_rng(seed)
  oracle = np.nanmax(align, axis=1)
  out = np.empty(n_perm)
  for b in range(n_perm):
    perm = permute_within_nodes(align, rng)
    choice = _cv_choice(perm, feats, fold, l2)
    out[b] = np.mean(oracle - perm[np.arange(len(perm)), choice])
  return out


def route(nodes: pd.DataFrame, *, target: str = "incorrect", n_folds: int = 5, l2: float = 1.0,
          n_boot: int = 2000, seed: int = 0, level: float = 0.95, min_nodes: int = common.MIN_NODES,
          min_questions: int = common.MIN_QUESTIONS, n_perm: int = 100) -> dict:
  """Cross-validated router on the target group, with cluster-bootstrap intervals over questions.

  Protocol (the contract; tests recompute parts of it):
    - nodes: the target group's rows (common.group_mask); a node is (question_id, rollout_id, position); the
      routed nodes are those where at least one configuration has a defined alignment;
    - features: the predictor columns (records.PREDICTORS present in `nodes`) of each configuration's own row,
      as sign(x) log(1 + |x|), standardised with the training fold's mean and sd, non-finite -> 0;
    - folds: folds_by_question(question_id, n_folds, seed); for each fold, per configuration, fit_logistic(l2)
      of alignment > 0 on that configuration's defined rows of the other folds (a configuration with only one
      class in training predicts its training rate); each held-out node goes to the configuration with the
      highest predicted probability among those defined there (ties: configuration order of first appearance);
    - router: mean alignment of the routed choice over the routed nodes; oracle: mean of the per-node max over
      defined configurations on the same nodes (router <= oracle node by node); each configuration: its mean
      over its defined routed nodes; best single: the configuration with the highest such mean (in-sample, so
      the comparison favours the baseline);
    - differences: router - best on the nodes where the best is defined, oracle - router on every routed node;
      replicates from stats.ClusterBootstrap(every question of `nodes`, n_boot, seed); percentile intervals;
    - the gap's null (`gap_null`, n_perm permutations, seed): oracle - router with the alignments permuted among
      the defined configurations of each node and the router refit (nothing to route); its mean, 5% and 95%
      quantiles, and the one-sided permutation p-value (1 + #{null <= observed}) / (1 + n_perm) of "the router
      closes no more of the gap than routing with nothing to learn" (small: the router beats chance).
  Args:
    nodes: node records (common.check_nodes).
    target: the node group ("incorrect", "correct" or "all").
    n_folds: folds over questions (capped at the number of questions; the result holds the number used).
    l2: logistic penalty on the standardised predictors.
    n_boot, seed, level: the bootstrap (seed also fixes the folds).
    min_nodes, min_questions: the power rule (common.underpowered) on the routed nodes.
    n_perm: permutations of the gap's null (0: none; the keys are then absent).
  Returns:
    A JSON-ready dict: target, n_folds, l2, predictors, n_nodes, n_questions, underpowered, rows (list of
    {name, kind ("router", "oracle" or "config"), n, mean, ci_lo, ci_hi, share_routed}), best (config id),
    router_minus_best and oracle_minus_router ({n, diff, ci_lo, ci_hi, p_value}), gap_null ({n_perm,
    mean, q05, q95, p_value}), line (a sentence); or
    {"line": ..., "rows": []} when fewer than two configurations or no predictor column.
  Raises:
    ValueError: bad nodes (common.check_nodes) or an unknown target.
  """
  common.check_nodes(nodes)
  names = [p for p in records.PREDICTORS if p in nodes.columns]
  configs = list(pd.unique(nodes["config_id"]))
  out = {"target": target, "n_folds": int(n_folds), "l2": float(l2), "predictors": names, "level": level,
         "rows": []}
  if len(configs) < 2 or not names:
    out["line"] = ("router skipped: " + ("one configuration only" if len(configs) < 2 else
                                         "the node records have no predictor column"))
    return out
  rows = nodes[common.group_mask(nodes, target)]
  key = list(common.NODE_KEY)
  index = pd.MultiIndex.from_frame(rows[key].drop_duplicates()).sort_values()
  align = np.full((len(index), len(configs)), np.nan)
  feats = np.full((len(index), len(configs), len(names)), np.nan)
  for j, c in enumerate(configs):
    sub = rows[rows["config_id"] == c]
    at = index.get_indexer(pd.MultiIndex.from_frame(sub[key]))
    align[at, j] = sub["alignment"].to_numpy(np.float64)
    feats[at, j] = sub[names].to_numpy(np.float64)
  routed = np.isfinite(align).any(axis=1)
  align, feats, index = align[routed], feats[routed], index[routed]
  questions = index.get_level_values("question_id").astype(str).to_numpy()
  boot = stats.ClusterBootstrap(nodes["question_id"].astype(str).to_numpy(), n_boot=n_boot, seed=seed)
  n_q = int(pd.unique(questions).size)
  out.update(n_nodes=int(len(index)), n_questions=n_q,
             underpowered=common.underpowered(int(len(index)), n_q, min_nodes=min_nodes,
                                              min_questions=min_questions))
  if not len(index):
    out["line"] = f"router skipped: no {target} node has a defined alignment"
    return out
  fold = folds_by_question(questions, n_folds, seed)
  out["n_folds"] = int(np.unique(fold).size)
  choice = _cv_choice(align, feats, fold, l2)
  router = align[np.arange(len(align)), choice]
  oracle = np.nanmax(align, axis=1)
  defined = np.isfinite(align)
  means = np.where(defined.any(axis=0), np.sum(np.where(defined, align, 0.0), axis=0)
                   / np.maximum(defined.sum(axis=0), 1), -np.inf)
  best = int(np.argmax(means))                            # first maximum; some configuration is defined

  def row(name, kind, a, share=None):
    est, lo, hi = boot.mean_ci(a, questions, level=level)
    return {"name": name, "kind": kind, "n": int(np.isfinite(a).sum()), "mean": est, "ci_lo": lo, "ci_hi": hi,
            "share_routed": share}

  out["rows"] = [row("router", "router", router), row("oracle", "oracle", oracle)]
  out["rows"] += [row(c, "config", align[:, j], float(np.mean(choice == j))) for j, c in enumerate(configs)]
  out["best"] = configs[best]

  def diff(d):
    reps = boot.mean_replicates(d, questions)
    lo, hi = stats.percentile_interval(reps, level)
    return {"n": int(np.isfinite(d).sum()), "diff": float(np.nanmean(d)) if np.isfinite(d).any() else math.nan,
            "ci_lo": lo, "ci_hi": hi, "p_value": stats.bootstrap_pvalue(reps)}

  out["router_minus_best"] = diff(router - align[:, best])      # NaN where the best is undefined
  out["oracle_minus_router"] = diff(oracle - router)
  gap = out["oracle_minus_router"]["diff"]
  null_text = ""
  if n_perm > 0:
    null = gap_null(align, feats, fold, l2, n_perm=n_perm, seed=seed)
    out["gap_null"] = {"n_perm": int(n_perm), "mean": float(null.mean()), "q05": float(np.quantile(null, 0.05)),
                       "q95": float(np.quantile(null, 0.95)),
                       "p_value": float((1 + np.sum(null <= gap)) / (1 + n_perm))}
    g = out["gap_null"]
    null_text = (f" (with nothing to route, configurations permuted within nodes: {g['mean']:+.4f} on average, "
                 f"90% of {n_perm} permutations in [{g['q05']:+.4f}, {g['q95']:+.4f}]; permutation p = "
                 f"{g['p_value']:.3g} that the router closes no more of it than chance)")
  d = out["router_minus_best"]
  pct = f"{100 * level:g}%"
  weak = "UNDERPOWERED (indicative): " if out["underpowered"] else ""
  verb = "beats" if d["ci_lo"] > 0 else "trails" if d["ci_hi"] < 0 else "is not distinguishable from"
  out["line"] = (f"{weak}the cross-validated router {verb} the best single configuration {configs[best]}: "
                 f"router - {configs[best]} = {d['diff']:+.4f} [{d['ci_lo']:+.4f}, {d['ci_hi']:+.4f}] mean "
                 f"alignment on {target} nodes "
                 f"({pct} cluster bootstrap, {common.counted(n_q, 'question')}, "
                 f"{common.counted(int(len(index)), 'node')}); the per-token oracle is "
                 f"{gap:+.4f} above the router{null_text}")
  return out


ROUTER_HEADER = ["policy", "nodes", "mean alignment", "CI", "share routed"]


def table_rows(result: dict) -> list[list[str]]:
  """The router table's rows (policy, nodes, mean, CI, share of routed nodes) for summary.md and report.html,
  then the two paired differences."""
  label = {"router": "router (cross-validated)", "oracle": "oracle (per-token max)"}
  body = [[label.get(r["kind"], r["name"]), str(r["n"]), common.fmt(r["mean"]), common.ci(r["ci_lo"], r["ci_hi"]),
           "" if r["share_routed"] is None else common.fmt(r["share_routed"], 3)] for r in result["rows"]]
  for key, label in (("router_minus_best", f"router - {result.get('best')} (paired)"),
                     ("oracle_minus_router", "oracle - router (paired)")):
    if key in result:
      d = result[key]
      body.append([label, str(d["n"]), common.fmt(d["diff"]), common.ci(d["ci_lo"], d["ci_hi"]), ""])
  if "gap_null" in result:
    g = result["gap_null"]
    body.append([f"oracle - router, null (mean, 5-95%: {g['n_perm']} permutations within nodes; "
                 f"p = {g['p_value']:.3g})",
                 str(result["oracle_minus_router"]["n"]), common.fmt(g["mean"]), common.ci(g["q05"], g["q95"]), ""])
  return body


def note(result: dict) -> str:
  """How the router was built, in one sentence."""
  return (f"Router: per configuration a logistic model (L2 {result['l2']:g}) of P(alignment > 0) from the "
          f"predictors ({', '.join(result['predictors'])}) of its own row; each node goes to the configuration with "
          f"the highest predicted probability among those defined there; trained and scored with "
          f"{result['n_folds']}-fold cross-validation by question; best single configuration chosen in-sample.")
