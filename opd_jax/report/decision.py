"""The decision: which configuration to train with on a target group of nodes, how sure, and what it would take.

Every configuration of a study is scored on the same nodes with the same P_succ estimates, so configurations are
compared by paired differences on the nodes both define (issue 14, item 1). Issue 25 made the verdict's error rates
what it says, with few questions and a best chosen from the data (benchmarks/verdict_calibration.py measures them):
  - a paired difference is a node-weighted mean with a CR2 cluster-robust standard error by question and
    Bell-McCaffrey degrees of freedom (stats.cr2_mean), not a percentile bootstrap (which covered 0.89 at 10
    questions): its t interval keeps its level at 10 questions with very unequal nodes per question;
  - the family is every pairwise comparison of comparable configurations, Bonferroni over all m pairs: it holds for
    any subset chosen from the data, so for the comparisons with the best whichever configuration that turns out to
    be (Holm over the K - 1 comparisons with a data-chosen best did not: 38% false flags with 6 equal ones);
  - a pair sharing fewer than MIN_SHARED_QUESTIONS questions is "not comparable": untested, outside the family, no
    veto on the verdict;
  - the bootstrap P(best) (unpaired and overconfident) is replaced by the confidence set of the best: the
    configurations that no comparable configuration is distinguishably better than (it holds the true best with
    probability >= level);
  - power: the smallest difference detectable with 80% power at this budget, and the questions a smallest effect
    of interest (min_effect) needs; "not estimable" when the data cannot say.
Issue 33: with a `sequential.Design` the study looks after blocks of questions; each look's intervals are at the
level the design's alpha spending gives that look (sequential.nominal_alpha), the verdict says whether it is
decided ("use" one configuration, or "equivalent" within the margin) or the study goes on, and the power statement
averages over the sampling error of the estimated standard error (sample_size.expected_t_power). Without a design the
outputs are those of issue 25.
"""
import math

import numpy as np
import pandas as pd
from statsmodels.stats.multitest import multipletests

from opd_jax.estimators import sample_size
from opd_jax.estimators import stats
from opd_jax.report import common
from opd_jax.report import sequential
from opd_jax.report import verdict_text

MIN_SHARED_QUESTIONS = common.MIN_SHARED_QUESTIONS   # pairs sharing fewer questions: not comparable
POWER = 0.8                # the power of the detectable difference and of the questions needed


def compare_arrays(align, questions, *, level: float = 0.95, min_nodes: int = common.MIN_NODES,
                   min_questions: int = common.MIN_QUESTIONS,
                   min_shared_questions: int = MIN_SHARED_QUESTIONS, design: sequential.Design | None = None,
                   look: int | None = None, final: bool = False, history=None) -> dict:
  """Every pairwise paired comparison of K configurations, the best, its confidence set and the verdict's code.

  Protocol (the contract of `decide`; tests and the calibration benchmark recompute it):
    - pair (i, j): the nodes where both are defined; diff[i, j] = their mean of a_i - a_j, with a CR2 standard
      error by question and Bell-McCaffrey df (stats.cr2_mean); comparable when they share >= min_shared_questions
      questions;
    - the family: the m comparable pairs; each gets a t interval at level 1 - (1 - level) / m (cut to [-2, 2],
      what a difference of two cosines can be) and a p-value,
      Bonferroni-adjusted (statsmodels multipletests); distinguishable: adjusted p <= 1 - level (the interval
      excludes 0);
    - best: the most pairwise wins minus losses (sign of diff) over comparable pairs; ties: the larger sum of its
      comparable diffs, then one comparable with some configuration, then (for one comparable with none) the larger
      own mean, then the first configuration. With every configuration defined on the same nodes this is the
      configuration with the highest mean;
    - order: the best, then the configurations comparable with it by diff against it (largest first), then the
      others by their own mean; configurations without a defined node last;
    - could_be_best[k]: defined and no comparable configuration is distinguishable from k and ahead of it;
    - verdict: "no_data" (nothing defined); "underpowered" (the best has < min_nodes defined nodes or
      < min_questions questions with one: common.underpowered, or no configuration is comparable with it);
      "use" (each comparable configuration is distinguishable from the best and behind it); else
      "indistinguishable" (also when a single configuration has data).
  With a design (sequential.Design) of several looks, at look `look`: the family is fixed in advance, every pair
  of the K configurations (M = K (K - 1) / 2, whether comparable now or not: a pair that becomes comparable at a
  later look cannot push the family-wise error above alpha, issue 49 item 3), and each pair spends alpha / M. A
  pair's interval is at level 1 - its nominal alpha at this look: with `history`, from its own history
  (sequential.pair_nominal: the looks where it was comparable and its shared questions there); without, as if it
  were comparable at every look with shared questions in proportion to the looks' (sequential.nominal_alpha).
  p_adjusted = min(1, p (1 - level) / nominal alpha) (so distinguishable is still p_adjusted <= 1 - level: the
  interval excludes 0), and sequential.read adds the decision. A one-look design gives the fixed design's numbers
  exactly (m: the pairs comparable at that one look).

  Args:
    align: [N, K] float, alignment of configuration k at node n (NaN: undefined).
    questions: [N] int, the question of each node (codes 0 .. G - 1).
    level: the family-wise confidence level.
    min_nodes, min_questions: the power rule of the best (common.underpowered).
    min_shared_questions: the comparability rule of a pair.
    design: the sequential design, or None (the fixed design of issue 25); its alpha must be 1 - level.
    look: the look number, 1 .. len(design.looks) (None: 1); only with a design.
    final: this look is the last (the pool of questions ran out before the cap): it spends all alpha left.
    history: with a design, per earlier look 1 .. look - 1 the [K (K - 1) / 2] shared questions of each pair
      (np.triu_indices(K, 1) order; `decide` builds it from the question order), or None.
  Returns:
    dict of numpy arrays: n_defined, n_questions [K] (questions with a defined node), mean [K], underpowered [K],
    n_shared, n_shared_questions, comparable, diff, se, df, ci_lo, ci_hi, p_value, p_adjusted, distinguishable
    [K, K] (row minus column; NaN off the family), m, ci_level, best (int or -1), order [K], could_be_best [K],
    runner_up (int or -1: the comparable configuration closest to the best), verdict (str); with a design also
    look, nominal_alpha (per pair at this look: of a pair comparable at every look; pair_nominal [K, K] each pair's
    own), alpha_spent (the family's, by this look), last (bool),
    equivalent [K, K], decision ("use", "equivalent", "continue", "futile", "cap"), decided, stop, blocking,
    p_decided (sequential.read).
  Raises:
    ValueError: shapes do not match, level outside (0, 1) or not 1 - design.alpha, a look without a design or
      outside the design's looks.
  """
  align = np.asarray(align, np.float64)
  questions = np.asarray(questions).astype(np.int64)
  if align.ndim != 2 or questions.shape != align.shape[:1]:
    raise ValueError(f"align must be [N, K] and questions [N], got {align.shape} and {questions.shape}")
  if not 0.0 < level < 1.0:
    raise ValueError(f"level must lie in (0, 1), got {level}; e.g. 0.95")
  if design is None and (look is not None or final):
    raise ValueError(f"look={look} and final={final} need a design (sequential.Design)")
  if design is not None:
    look = 1 if look is None else look
    design.fractions(look, final)                                               # raises for a bad look
    if not math.isclose(level, 1.0 - design.alpha):
      raise ValueError(f"level must be 1 - design.alpha = {1.0 - design.alpha:g} with a design, got {level}")
  n, k = align.shape
  onehot = np.zeros((n, int(questions.max()) + 1 if n else 0))
  onehot[np.arange(n), questions] = 1.0
  defined = ~np.isnan(align)
  per_q = onehot.T @ defined                                                    # [G, K]
  out = {"n_defined": defined.sum(0), "n_questions": (per_q > 0).sum(0)}
  with np.errstate(invalid="ignore", divide="ignore"):
    out["mean"] = np.nansum(align, 0) / out["n_defined"]
  out["underpowered"] = np.array([common.underpowered(int(a), int(b), min_nodes=min_nodes, min_questions=min_questions)
                                  for a, b in zip(out["n_defined"], out["n_questions"])], bool)
  i, j = np.triu_indices(k, 1)
  d = align[:, i] - align[:, j]                                                 # [N, P]: a_i - a_j
  ok = ~np.isnan(d)
  d = np.where(ok, d, 0.0)
  res = stats.cr2_mean((onehot.T @ d).T, (onehot.T @ d ** 2).T, (onehot.T @ ok).T)
  comparable = res.n_clusters >= min_shared_questions
  m = int(comparable.sum())
  alpha = 1.0 - level
  sequential_looks = design is not None and design.n_looks > 1
  if sequential_looks:
    m = k * (k - 1) // 2                                 # the family fixed in advance: every pair of configurations
    nominal = sequential.nominal_alpha(design, look, pairs=m, final=final)
    per_pair = sequential.pair_levels(design, look, final, m, res.n_clusters, comparable, history, min_shared_questions,
                            nominal)
  else:
    nominal = alpha / max(m, 1)
    per_pair = np.full(res.mean.shape, nominal)
  ci_level = 1.0 - nominal
  lo, hi, p = (np.full(res.mean.shape, np.nan) for _ in range(3))
  for level_p in np.unique(per_pair):
    at = per_pair == level_p
    lo[at], hi[at], p[at] = sample_size.t_test(res.mean[at], res.se[at], res.df[at], 1.0 - level_p)
  lo, hi = np.maximum(lo, -2.0), np.minimum(hi, 2.0)    # a difference of two cosines lies in [-2, 2]
  p_adj = np.full(p.shape, np.nan)
  if comparable.any() and sequential_looks:
    p_adj[comparable] = np.minimum(1.0, p[comparable] * alpha / per_pair[comparable])
  elif m:
    p_adj[comparable] = multipletests(p[comparable], alpha=alpha, method="bonferroni")[1]

  def square(upper, lower, fill=np.nan):
    """[K, K] from pair values: row i, column j holds `upper` when i < j and `lower` when i > j."""
    full = np.full((k, k), fill, np.result_type(upper, type(fill)))
    full[i, j], full[j, i] = upper, lower
    return full

  def family(x):
    return np.where(comparable, x, np.nan)

  n_shared, n_q = res.n.astype(np.int64), res.n_clusters.astype(np.int64)
  out.update(n_shared=square(n_shared, n_shared, 0), n_shared_questions=square(n_q, n_q, 0),
             comparable=square(comparable, comparable, False), diff=square(res.mean, -res.mean),
             se=square(family(res.se), family(res.se)), df=square(family(res.df), family(res.df)),
             ci_lo=square(family(lo), family(-hi)), ci_hi=square(family(hi), family(-lo)),
             p_value=square(family(p), family(p)), p_adjusted=square(p_adj, p_adj))
  out["distinguishable"] = out["comparable"] & (np.nan_to_num(out["p_adjusted"], nan=1.0) <= alpha)
  out["m"], out["ci_level"] = m, ci_level
  out["pair_nominal"] = square(family(per_pair), family(per_pair))
  diff = np.where(out["comparable"], out["diff"], 0.0)
  score = (diff > 0).sum(1) - (diff < 0).sum(1)
  has = out["n_defined"] > 0
  linked = out["comparable"].any(1)
  key = [(score[c], diff[c].sum(), linked[c], -np.inf if linked[c] else np.nan_to_num(out["mean"][c], nan=-np.inf), -c)
         for c in range(k)]
  best = max((c for c in range(k) if has[c]), key=lambda c: key[c], default=-1)
  out["best"] = best
  beaten = (out["distinguishable"] & (out["diff"] > 0)).any(0)                  # some j distinguishably ahead of k
  out["could_be_best"] = has & ~beaten
  if best < 0:
    out.update(order=np.arange(k), runner_up=-1, verdict="no_data")
    return _read_look(out, design, look, final, nominal)
  with_best = out["comparable"][best]
  rest = sorted((c for c in range(k) if c != best),
                key=lambda c: (not has[c], not with_best[c],
                               -out["diff"][c, best] if with_best[c] else -np.nan_to_num(out["mean"][c], nan=-np.inf),
                               c))
  out["order"] = np.array([best, *rest])
  out["runner_up"] = rest[0] if rest and with_best[rest[0]] else -1
  wins = out["distinguishable"][best] & (out["diff"][best] > 0)
  if out["underpowered"][best]:
    out["verdict"] = "underpowered"
  elif has.sum() == 1:
    out["verdict"] = "indistinguishable"
  elif not with_best.any():
    out["verdict"] = "underpowered"
  elif np.all(wins[with_best]):
    out["verdict"] = "use"
  else:
    out["verdict"] = "indistinguishable"
  return _read_look(out, design, look, final, nominal)


def _read_look(out: dict, design: sequential.Design | None, look: int | None, final: bool, nominal: float) -> dict:
  """compare_arrays' output with the design's fields (unchanged without a design)."""
  if design is None:
    return out
  last = final or look == design.n_looks
  futile = {}
  if design.futility > 0 and not last:
    futile = dict(futility=design.futility, fraction=design.looks[look - 1] / design.looks[-1],
                  final_alpha=_final_alpha(design, out["m"], 1.0 - design.alpha))
  out.update(look=look, nominal_alpha=nominal, alpha_spent=sequential.alpha_spent(design, look, final=final),
             last=last, **sequential.read(out, margin=design.margin, last=last, **futile))
  return out


def node_matrix(rows: pd.DataFrame, configs: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """The [N, K] alignment matrix of `rows` (one row per node of common.NODE_KEY, NaN where a configuration is not
  defined), the [N] question code of each node and the [G] question labels (np.unique order)."""
  node = rows.groupby(list(common.NODE_KEY), sort=False).ngroup().to_numpy()
  config = pd.Categorical(rows["config_id"], categories=configs).codes
  align = np.full((int(node.max()) + 1 if len(node) else 0, len(configs)), np.nan)
  align[node, config] = rows["alignment"].to_numpy(np.float64)
  question = np.empty(align.shape[0], object)
  question[node] = rows["question_id"].astype(str).to_numpy()
  labels, codes = np.unique(question.astype(str), return_inverse=True)
  return align, codes.reshape(-1), labels


def decide(nodes: pd.DataFrame, *, target: str = "incorrect", n_boot: int = 2000, seed: int = 0,
           level: float = 0.95, min_nodes: int = common.MIN_NODES, min_questions: int = common.MIN_QUESTIONS,
           min_effect: float | None = None, design: sequential.Design | None = None, look: int | None = None,
           final: bool = False, estimand: str = "alignment", question_order=None,
           unplanned: str | None = None, success_rates: pd.Series | None = None) -> dict:
  """Ranks the configurations on the target group and decides whether the best one is distinguishable.

  `estimand` (common.ESTIMANDS) is what is compared per node: "alignment" (default) or "projection" (`with_estimand`);
  min_effect and a design's margin are in its units. The output's keys keep their names (mean_alignment holds the
  estimand's mean) and out["estimand"] names it.

  The comparisons, the best, its confidence set and the verdict follow `compare_arrays` on the target group's
  nodes with a defined alignment (common.group_mask). Beside them: each configuration's own mean alignment and
  mean teacher advantage with the percentile cluster-bootstrap interval of summary.summarize (the same call, so the
  same numbers: stats.cluster_bootstrap_ci with n_boot, level, seed); and power for the best against the runner-up
  at the family's per-pair level (1 - level) / m: the smallest difference detectable with 80% power at this budget
  (sample_size.detectable_difference) and, given min_effect, the questions needed (sample_size.questions_needed).

  With a design (issue 33), the study loop calls this after each block of questions with look = 1, 2, ... and
  stops when `stop` is true (decided, or the last look):
    design = sequential.Design(looks=(10, 20, 40, 80))
    for look, n in enumerate(design.looks, 1):
      ...select questions up to n, score them...
      verdict = decide(nodes, target=..., design=design, look=look, final=<the pool ran out>)
      if verdict["stop"]: break
  The comparisons are compare_arrays' at that look's level; `decision` is "use" (one configuration could be
  best), "equivalent" (every pair of those that could be best is within +-margin: any of them), "continue",
  "futile" (a design with futility > 0: unlikely to be decided even at the cap; sequential.read) or "cap" (the last
  look, undecided); the power statement is at the level of the design's last look, averaged over
  the sampling error of the standard error (sample_size.detectable_difference and questions_needed with se_df), and
  min_effect is the design's margin.

  Args:
    nodes: node records (common.check_nodes).
    target: "incorrect" (default: where OPD is meant to help), "correct", "all" or "trained" (all nodes as training
      weighs them: per configuration and question, s_q x the correct nodes' mean + (1 - s_q) x the incorrect
      ones', common.trained_rows; its units are questions: a configuration's paired difference is the mean over
      questions with a t interval over them, and the power rule counts questions only, min_questions; each
      configuration's question value is over the nodes it defines, so where one configuration of a pair is
      undefined on some node, the pair's two values weigh different nodes: v2's predictor does the same).
    n_boot, seed: the descriptive bootstrap intervals of each configuration's means.
    level: family-wise confidence level of the comparisons (and level of the descriptive intervals).
    min_nodes, min_questions: the power rule of the best.
    min_effect: the smallest difference in mean alignment worth detecting (> 0), or None; with a design: None
      or design.margin.
    design, look, final: the sequential design, the look number (1-based) and whether the pool of questions ran
      out at this look (compare_arrays); None: the fixed design, outputs exactly those of issue 25.
    question_order: with a design, the question ids in the order the study selected them: look j saw the first
      design.looks[j - 1]; each pair's level then follows its own history of comparability (compare_arrays'
      `history`). None: every comparable pair is taken as comparable at every earlier look.
    success_rates: with target "trained", each question's base success rate [question_id -> s_q]
      (common.success_rates of the rollout records).
    unplanned: why this verdict is not the study's planned test (a look its design did not plan: another study
      already looked at these questions, or the report asks another target or estimand), or None. The verdict is
      then computed as usual but labelled: planned False, decided False, its line prefixed "NOT A DECISION"
      and its first detail saying why.
  Returns:
    A JSON-ready dict: target, level, n_boot, seed, min_nodes, min_questions, min_shared_questions, min_effect,
    n_questions (questions with a defined alignment on the target group), method, family_size (m), ci_level;
    ranking (in order: config_id, n_defined, n_questions (with a defined alignment), mean_alignment, ci_lo, ci_hi,
    mean_teacher_advantage, advantage_ci_lo, advantage_ci_hi, underpowered, short (why underpowered, or ""),
    could_be_best); comparisons (every other configuration against the best, in order: config_id, vs,
    n_shared, n_shared_questions, comparable, diff (config - best), se, df, ci_lo, ci_hi, ci_level, p_value,
    p_adjusted, distinguishable, underpowered); power (vs, diff (best - runner-up), se, df, questions, alpha,
    power, detectable_difference, min_effect, questions_needed, more_questions, estimable, reason; None without
    data); best, runner_up, best_set, not_comparable, verdict ("use", "indistinguishable", "underpowered",
    "no_data"), line (the first line: what to use, or that no configuration is shown better, and the number that
    says how sure; verdict_text.headline), details (the lines after it: the design's state, why, the family of
    intervals, what could be best, what is not comparable). With a design also: look, looks, margin, nominal_alpha,
    alpha_spent, spending, decision, decided, stop, equivalent (the configurations named by an "equivalent"
    decision, else []), undecided (config_id, vs, questions_needed (to detect the margin with 80% expected power;
    None when not estimable): the comparisons with the best that block a decision), and each comparison's
    `equivalent`; with design.futility > 0 also futility and p_decided (None where not computed).
  Raises:
    ValueError: bad nodes (common.check_nodes), an unknown target, level outside (0, 1), min_effect <= 0, or a
      design that disagrees with level or min_effect (compare_arrays).
  """
  common.check_nodes(nodes)
  if min_effect is not None and not min_effect > 0:
    raise ValueError(f"min_effect must be > 0 (a difference in mean alignment) or None, got {min_effect}")
  if design is not None:
    if min_effect is not None and not math.isclose(min_effect, design.margin):
      raise ValueError(f"min_effect must be None or design.margin = {design.margin:g} with a design, got {min_effect}")
    min_effect = design.margin
  trained = target == common.TRAINED
  nodes = common.with_estimand(nodes, estimand, "all" if trained else target)
  if trained:
    if success_rates is None:
      raise ValueError("target 'trained' weighs each question's correct and incorrect nodes by its base success "
                       "rate: pass success_rates (common.success_rates of the study's rollout records)")
    nodes, min_nodes = common.trained_rows(nodes, success_rates), 0        # one row per question: count questions
  in_target = common.group_mask(nodes, "all" if trained else target)
  target_rows = nodes[in_target]
  rows = target_rows[target_rows["alignment"].notna().to_numpy()]
  configs = list(pd.unique(nodes["config_id"]))
  align, questions, labels = node_matrix(rows, configs)
  history = None
  if design is not None and design.n_looks > 1 and question_order is not None and (look or 1) > 1:
    seen = lambda n: rows[rows["question_id"].isin(set(question_order[:n]))]       # what look j saw
    history = [sequential.shared_questions(*node_matrix(seen(n), configs)[:2]) for n in design.looks[:(look or 1) - 1]]
  res = compare_arrays(align, questions, level=level, min_nodes=min_nodes, min_questions=min_questions,
                       design=design, look=look, final=final, history=history)
  out = {"target": target, "estimand": estimand, "level": level, "n_boot": n_boot, "seed": seed, "min_nodes": min_nodes,
         "min_questions": min_questions, "min_shared_questions": MIN_SHARED_QUESTIONS, "min_effect": min_effect,
         "n_questions": int(labels.size), "family_size": res["m"], "ci_level": res["ci_level"],
         "method": (("paired differences of the question values (common.trained_rows)" if trained else
                     "paired differences on shared nodes") + "; CR2 cluster-robust standard errors by question with "
                    "Bell-McCaffrey degrees of freedom; t intervals simultaneous over all comparable pairs "
                    "(Bonferroni)"),
         "ranking": [], "comparisons": [], "power": None}
  boot = dict(n_boot=n_boot, level=level, seed=seed)
  for c in res["order"]:
    sub = target_rows[(target_rows["config_id"] == configs[c]).to_numpy()]
    q = sub["question_id"].astype(str).to_numpy()
    mean, lo, hi = stats.cluster_bootstrap_ci(sub["alignment"].to_numpy(np.float64), q, **boot)
    adv = stats.cluster_bootstrap_ci(sub["teacher_advantage"].to_numpy(np.float64), q, **boot)
    nd, nq = int(res["n_defined"][c]), int(res["n_questions"][c])
    out["ranking"].append({
        "config_id": configs[c], "n_defined": nd, "n_questions": nq, "mean_alignment": mean, "ci_lo": lo,
        "ci_hi": hi, "mean_teacher_advantage": adv[0], "advantage_ci_lo": adv[1], "advantage_ci_hi": adv[2],
        "underpowered": bool(res["underpowered"][c]), "short": _short(nd, nq, min_nodes, min_questions, estimand),
        "could_be_best": bool(res["could_be_best"][c])})
  b = res["best"]
  if b < 0:
    out.update(verdict="no_data", best=None, runner_up=None, best_set=[], not_comparable=[],
               line=f"no configuration has a defined {estimand} {common.on_nodes(target)}: nothing to decide", details=[])
    return _with_design(out, res, design, configs, b) if design is not None else out
  for c in res["order"][1:]:
    under = common.underpowered(int(res["n_shared"][c, b]), int(res["n_shared_questions"][c, b]),
                                min_nodes=min_nodes, min_questions=min_questions)
    out["comparisons"].append({
        "config_id": configs[c], "vs": configs[b], "n_shared": int(res["n_shared"][c, b]),
        "n_shared_questions": int(res["n_shared_questions"][c, b]), "comparable": bool(res["comparable"][c, b]),
        **{name: float(res[name][c, b]) for name in ("diff", "se", "df", "ci_lo", "ci_hi", "p_value", "p_adjusted")},
        "ci_level": res["ci_level"], "distinguishable": bool(res["distinguishable"][c, b]), "underpowered": under})
  ru = res["runner_up"]
  out.update(verdict=res["verdict"], best=configs[b], runner_up=configs[ru] if ru >= 0 else None,
             best_set=[configs[c] for c in res["order"] if res["could_be_best"][c]],
             not_comparable=[c["config_id"] for c in out["comparisons"] if not c["comparable"]])
  out["power"] = _power(res, b, ru, configs, level, min_effect,
                        None if design is None else _final_alpha(design, res["m"], level))
  parts = verdict_text.fixed_parts(out)
  out.update(line=verdict_text.headline(parts["what"], target, parts["number"], how=parts.get("how", "")),
             details=parts["details"])
  out = out if design is None else _with_design(out, res, design, configs, b, parts)
  return out if unplanned is None else _not_a_decision(out, unplanned)


def _not_a_decision(out: dict, why: str) -> dict:
  """A verdict labelled as outside the planned test (decide's `unplanned`)."""
  line = f"NOT A DECISION: {out['line']}"
  if len(line) > verdict_text.HEADLINE_MAX:                   # the interval's level is in the details too
    line = line.replace(f", {100 * out['level']:g}% simultaneous", "")
  return {**out, "planned": False, "unplanned": why, "decided": False, "line": line,
          "details": [f"not a decision ({why}); read as exploratory", *out["details"]]}


def _final_alpha(design: sequential.Design, m: int, level: float) -> float:
  """The per-pair level of the design's last look (the level the cap decides at; one look: compare_arrays')."""
  if design.n_looks == 1:
    return (1.0 - level) / max(m, 1)
  return sequential.nominal_alpha(design, design.n_looks, pairs=m)


def _with_design(out: dict, res: dict, design: sequential.Design, configs: list, b: int,
                 parts: dict | None = None) -> dict:
  """decide's output with the sequential fields, its first line and details (see decide; `parts`: the fixed
  design's words, verdict_text.fixed_parts)."""
  out.update(look=res["look"], looks=list(design.looks), spending=design.spending, margin=design.margin,
             nominal_alpha=res["nominal_alpha"],
             alpha_spent=res["alpha_spent"], decision=res["decision"], decided=res["decided"], stop=res["stop"],
             equivalent=[], undecided=[])
  if design.futility > 0:                    # only then: a design without futility keeps its verdict.json
    out.update(futility=design.futility, p_decided=None if math.isnan(res["p_decided"]) else res["p_decided"])
  one = design.n_looks == 1                  # the fixed design: no look to name, no spending to report
  look_text = ("fixed design" if one else f"look {res['look']} of {design.n_looks}"
               + f" ({design.looks[res['look'] - 1]} questions)"
               + (", the last: the pool of questions ran out" if res["last"] and res["look"] < design.n_looks else ""))
  if b < 0:
    out["details"] = [f"{look_text}, {res['decision']}"]
    return out
  index = {c: i for i, c in enumerate(configs)}
  alpha = _final_alpha(design, res["m"], out["level"])
  for c in out["comparisons"]:
    i = index[c["config_id"]]
    c["equivalent"] = bool(res["equivalent"][i, b])
    if i in res["blocking"]:
      need = sample_size.questions_needed(design.margin, c["se"], c["df"], c["n_shared_questions"], alpha=alpha,
                                    power=POWER, se_df=c["df"]) if c["comparable"] else math.nan
      out["undecided"].append({"config_id": c["config_id"], "vs": c["vs"],
                               "questions_needed": math.ceil(need) if math.isfinite(need) else None})
  members = [configs[c] for c in res["order"] if res["could_be_best"][c]]
  if res["decision"] == "equivalent":
    out["equivalent"] = members
  family = "" if one else f"simultaneous over every look: alpha spent {out['alpha_spent']:.3g} of {design.alpha:g}"
  decision, target, pct = res["decision"], out["target"], f"{100 * out['level']:g}%"
  state = (f"stopped for futility (predictive P(decided by the cap of {design.looks[-1]} questions) = "
           f"{res['p_decided']:.2g} < {design.futility:g}), undecided" if decision == "futile" else
           {"use": "decided", "equivalent": "decided", "continue": "continue"}.get(
               decision, "undecided" if one else "cap reached, undecided"))
  suffix = "" if one else f"look {res['look']} of {design.n_looks}: " + {
      "use": "decided", "equivalent": "decided", "continue": "goes on", "cap": "the last look"}.get(decision, "")
  suffix = suffix.rstrip(": ")
  first = f"{look_text}, {state}" + (f"; {family}" if family else "")
  if decision == "use":
    out.update(line=verdict_text.headline(f"use {configs[b]}", target, parts["number"], suffix, parts.get("how", "")),
               details=[first, *parts["details"]])
    return out
  if decision == "equivalent":
    behind = [c["config_id"] for c in out["comparisons"] if c["config_id"] not in members and c["comparable"]]
    names = ", ".join(members[:3]) + (f" and {len(members) - 3} more" if len(members) > 3 else "")
    out["line"] = verdict_text.headline(f"use any of {names}", target,
                                        f"equivalent within +-{design.margin:g}, {pct} simultaneous", suffix)
    out["details"] = [first, f"equivalent within +-{design.margin:g} {common.on_nodes(target)}: {', '.join(members)} (use any "
                      "of them: every pair of them within the margin; "
                      + (f"{', '.join(behind)} distinguishably behind; " if behind else "")
                      + f"{pct} simultaneous intervals over "
                      f"{common.counted(out['family_size'], 'pairwise comparison')}, paired on shared nodes, "
                      "CR2 by question" + (f", {family})" if family else ")")]
    return out
  at = "" if one else " at the last look's level"
  comparable = {c["config_id"]: c["comparable"] for c in out["comparisons"]}
  need = [f"{u['config_id']} (" + (f"~{u['questions_needed']} questions to detect {design.margin:g}{at}"
                                   if u["questions_needed"] is not None else "not comparable yet"
                                   if not comparable[u["config_id"]] else "not estimable") + ")"
          for u in out["undecided"]]
  number = (f"stopped for futility, P(decided by the cap) = {res['p_decided']:.2g}" if decision == "futile"
            else parts["number"])
  out["line"] = verdict_text.headline(verdict_text.NOT_SHOWN, target, number, suffix,
                                      "" if decision == "futile" else parts.get("how", ""))
  out["details"] = [first, *([f"undecided against {configs[b]}: {', '.join(need)}"] if need else []),
                    *parts["details"]]
  return out


def _short(n_defined: int, n_questions: int, min_nodes: int, min_questions: int, estimand: str = "alignment") -> str:
  """What a configuration is short of under the power rule, in words ("" when it is not)."""
  parts = [f"{common.counted(n_questions, 'question')} with a defined {estimand}, need {min_questions}"] * (
      n_questions < min_questions)
  parts += [f"{common.counted(n_defined, 'node')} with a defined {estimand}, need {min_nodes}"] * (
      n_defined < min_nodes)
  return "; ".join(parts)


def _power(res: dict, b: int, ru: int, configs: list, level: float, min_effect: float | None,
           alpha: float | None = None) -> dict:
  """Power of the best against the runner-up at the family's per-pair level (alpha given: a design's level at this
  look), averaged over the sampling error of se (se_df = df; sample_size.expected_t_power: issue 33 item 3, planting the
  reported difference is detected with 80% power at 10 questions too, benchmarks/verdict_calibration.py
  --cells=planted)."""
  alpha = (1.0 - level) / max(res["m"], 1) if alpha is None else alpha
  out = {"vs": configs[ru] if ru >= 0 else None, "alpha": alpha, "power": POWER, "min_effect": min_effect,
         "diff": math.nan, "se": math.nan, "df": math.nan, "questions": 0, "detectable_difference": math.nan,
         "questions_needed": None, "more_questions": None, "estimable": False, "reason": ""}
  out["expected"] = True              # power averaged over the sampling error of se (sample_size.expected_t_power)
  if ru < 0:
    out["reason"] = f"no configuration shares {MIN_SHARED_QUESTIONS} questions with {configs[b]}"
    return out
  se, df, g = float(res["se"][b, ru]), float(res["df"][b, ru]), int(res["n_shared_questions"][b, ru])
  out.update(diff=float(res["diff"][b, ru]), se=se, df=df, questions=g)
  if g < 3:
    out["reason"] = f"only {g} shared questions"
  elif not se > 0:
    out["reason"] = "the paired differences do not vary between questions (zero variance)"
  elif not df >= 1:
    out["reason"] = f"{df:.2g} degrees of freedom (< 1)"
  else:
    out["estimable"] = True
    se_df = df
    out["detectable_difference"] = sample_size.detectable_difference(se, df, alpha=alpha, power=POWER, se_df=se_df)
    if min_effect is not None:
      need = sample_size.questions_needed(min_effect, se, df, g, alpha=alpha, power=POWER, se_df=se_df)
      out["questions_needed"] = math.ceil(need) if math.isfinite(need) else None
      out["more_questions"] = max(0, math.ceil(need) - g) if math.isfinite(need) else None
  return out
