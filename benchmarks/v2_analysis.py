"""Validation v2's primary test (issue 47, item 5): does a predictor rank the training gains within strata?

The statistic is the mean over strata of Spearman's rho between a predictor's value and the gain of the
configurations of that stratum (strata: the teacher held fixed, docs/data/validation_v2/PLAN.md). Its null
distribution permutes the gains within each stratum (exactly, over every within-stratum permutation, when there are
at most `n_perm` of them; else `n_perm` random ones). Its interval resamples, in each draw and independently:
  - the configurations within each stratum (with replacement);
  - the study's questions (the predictor: a ratio of per-question sums, num @ w / den @ w);
  - the evaluation's questions (the same draw for every run: the runs share them, paired);
  - each configuration's seed replicates (the gain: the mean over the drawn replicates).
Spearman's rho is `validate_training.rank_correlations`'s (v1's table); benchmarks/validate_v2.py reads the
committed CSVs into these arrays.
"""
from __future__ import annotations

import itertools
import math
import pathlib

import numpy as np
import pandas as pd
import scipy.stats

from benchmarks import validate_training
from opd_jax.report import validation_note


def stratum_rhos(x: np.ndarray, y: np.ndarray, strata) -> dict:
  """{stratum: Spearman's rho of x and y [C] within it} (strata: [C] labels, in their first-seen order); NaN where
  rho is undefined (`validate_training.rank_correlations`)."""
  strata = np.asarray(strata)
  return {s: validate_training.rank_correlations(x[strata == s], y[strata == s])[0]
          for s in dict.fromkeys(strata.tolist())}


def within_strata(x: np.ndarray, y: np.ndarray, strata) -> float:
  """Mean over strata of Spearman's rho of x and y [C] within each stratum (`stratum_rhos`); strata where rho is
  undefined are left out (NaN when all are)."""
  rhos = [r for r in stratum_rhos(x, y, strata).values() if np.isfinite(r)]
  return float(np.mean(rhos)) if rhos else math.nan


def permutation_p(x: np.ndarray, y: np.ndarray, strata, n_perm: int = 10_000, seed: int = 0) -> tuple[float, int]:
  """(one-sided p of `within_strata` against gains permuted within strata, permutations used; NaN, 0 when the
  statistic is undefined). Exact (every
  within-stratum permutation, p = the share at or above the observed) when their number is at most n_perm, else
  (1 + #{permuted >= observed}) / (1 + n_perm) over n_perm random ones (Phipson & Smyth 2010)."""
  strata = np.asarray(strata)
  groups = [np.flatnonzero(strata == s) for s in dict.fromkeys(strata.tolist())]
  observed = within_strata(x, y, strata)
  total = math.prod(math.factorial(len(g)) for g in groups)
  if not np.isfinite(observed):                # no stratum with a defined rho: no test
    return math.nan, 0
  eps = 1e-12                                  # ties with the observed statistic count as at or above it
  if total <= n_perm:
    count = 0
    for perms in itertools.product(*(itertools.permutations(g) for g in groups)):
      yp = np.array(y, float)
      for g, p in zip(groups, perms):
        yp[g] = np.asarray(y, float)[list(p)]
      count += within_strata(x, yp, strata) >= observed - eps
    return count / total, total
  rng = np.random.default_rng(seed)
  count = 0
  for _ in range(n_perm):
    yp = np.array(y, float)
    for g in groups:
      yp[g] = yp[rng.permutation(g)]
    count += within_strata(x, yp, strata) >= observed - eps
  return (1 + count) / (1 + n_perm), n_perm


def gains(diffs: list[np.ndarray], eidx=None, seeds=None) -> np.ndarray:
  """Each configuration's gain [C]: the mean over its seed replicates (or the drawn ones, `seeds[c]`) of the mean
  over evaluation questions (or the drawn ones, `eidx`) of after - before. diffs[c]: [S_c, E]."""
  out = []
  for c, d in enumerate(diffs):
    d = d if seeds is None else d[seeds[c]]
    out.append(float((d if eidx is None else d[:, eidx]).mean()))
  return np.asarray(out)


def draws(predictors: dict, diffs: list[np.ndarray], strata, n_boot: int = 2000, seed: int = 0
          ) -> tuple[dict[str, float], dict[str, np.ndarray]]:
  """({name: statistic}, {name: draws [n_boot]}) of `within_strata` for each predictor of `predictors` (name ->
  (num [C, Q], den [C, Q], sign): the value sign * num @ w / den @ w, per-question sums over the study's questions)
  against the gains (`gains`; diffs[c]: [S_c, E]). Every predictor sees the same draws, each of which resamples
  configurations within strata, study questions, evaluation questions and seed replicates (module docstring), so
  the difference of two predictors' draws is a paired interval. A draw whose statistic is undefined is NaN."""
  strata = np.asarray(strata)
  n_q = next(iter(predictors.values()))[0].shape[1]
  n_e = diffs[0].shape[1]
  with np.errstate(invalid="ignore", divide="ignore"):
    stats = {k: within_strata(sign * num.sum(1) / den.sum(1), gains(diffs), strata)
             for k, (num, den, sign) in predictors.items()}
  groups = [np.flatnonzero(strata == s) for s in dict.fromkeys(strata.tolist())]
  rng = np.random.default_rng(seed)
  out = {k: np.empty(n_boot) for k in predictors}
  for i in range(n_boot):
    w = np.bincount(rng.integers(0, n_q, n_q), minlength=n_q).astype(float)
    eidx = rng.integers(0, n_e, n_e)
    seeds = [rng.integers(0, len(d), len(d)) for d in diffs]
    pick = np.concatenate([rng.choice(g, len(g)) for g in groups])
    y = gains(diffs, eidx, seeds)[pick]
    for k, (num, den, sign) in predictors.items():
      with np.errstate(invalid="ignore", divide="ignore"):
        out[k][i] = within_strata((sign * (num @ w) / (den @ w))[pick], y, strata[pick])
  return stats, out


def percentile_interval(values: np.ndarray, level: float = 0.95) -> tuple[float, float]:
  """(lo, hi): the percentile interval of the finite `values` (NaN, NaN when none is)."""
  values = np.asarray(values, float)
  values = values[np.isfinite(values)]
  a = (1 - level) / 2
  return tuple(float(v) for v in np.quantile(values, [a, 1 - a])) if len(values) else (math.nan, math.nan)


def interval(num: np.ndarray, den: np.ndarray, diffs: list[np.ndarray], strata, n_boot: int = 2000, seed: int = 0,
             level: float = 0.95) -> tuple[float, float, float]:
  """(statistic, lo, hi): `within_strata` of the predictor num @ 1 / den @ 1 [C] (num, den: [C, Q] per-question
  sums) and the gains (`gains`), with a percentile interval over `draws`."""
  stats, d = draws({"x": (num, den, 1.0)}, diffs, strata, n_boot, seed)
  return (stats["x"], *percentile_interval(d["x"], level))


# ---------------------------------------------------------------------------------------------------------------
# The committed CSVs (docs/data/validation_v2/) read into the arrays above: stage 2's predictors, stage 3's gains.

PRIMARY = validation_note.PRIMARY      # the primary predictor (hypothesis.md; one name for the report and here)
RESAMPLED = "configurations within strata, study questions, evaluation questions, seed replicates"
COLLAPSED = 0.10                       # a run whose held-out pass@1 after training is below this collapsed


def stratum(configuration: str) -> str:
  """The stage-3 stratum of a v2 study configuration: "external" (the 1.5B teacher) or "self"."""
  return "self" if configuration.startswith("self_") else "external"


def read_questions(data: pathlib.Path, blocks) -> pd.DataFrame:
  """The blocks' study_questions_<b>.csv (question_id, rollouts, success_rate).

  Raises:
    ValueError: a block's file is missing, naming it and the piece that writes it."""
  missing = [b for b in blocks if not (data / f"study_questions_{b}.csv").exists()]
  if missing:
    raise ValueError(f"{data}: no study_questions_<b>.csv for blocks {missing}; the study piece writes it "
                     "(benchmarks/validate_v2.py export_questions, from the block's workdir)")
  return pd.concat([pd.read_csv(data / f"study_questions_{b}.csv", dtype={"question_id": str}) for b in blocks],
                   ignore_index=True)


def trained_alignment(nodes: pd.DataFrame, rates: pd.DataFrame, confs: list[str], questions: list[str]) -> tuple:
  """(num [C, Q], den [C, Q], 1.0): the alignment over all nodes as training weighs them. Training updates on the
  student's own rollouts, correct ones at the question's success rate s_q; the study's nodes are balanced between
  correct and incorrect rollouts. So per question the value is s_q * (mean alignment on correct nodes) + (1 - s_q) *
  (mean on incorrect nodes), or the one group's mean where the other has no defined node (num: that value, den: 1;
  den 0 where neither has), and over questions their mean."""
  s = rates.set_index("question_id").success_rate
  num, den = np.zeros((len(confs), len(questions))), np.zeros((len(confs), len(questions)))
  col = {q: j for j, q in enumerate(questions)}
  row = {c: i for i, c in enumerate(confs)}
  ok = nodes[np.isfinite(nodes.alignment.to_numpy(float)) & nodes.config_id.isin(confs)]
  means = ok.groupby(["config_id", "question_id", ok.correct.astype(bool)]).alignment.mean()
  for (c, q), g in means.groupby(level=[0, 1]):
    by = dict(zip(g.index.get_level_values(2), g.to_numpy(float)))
    if True in by and False in by:
      value = s.loc[q] * by[True] + (1 - s.loc[q]) * by[False]
    else:
      value = next(iter(by.values()))
    num[row[c], col[q]], den[row[c], col[q]] = value, 1.0
  return num, den, 1.0


def study_predictors(data: pathlib.Path, confs: list[str], study=None) -> tuple[list[str], dict]:
  """(questions, {predictor: (num [C, Q], den [C, Q], sign)}) of the study blocks in `data`: v1's
  (`validate_training.predictor_sums`) and `trained_alignment`. `study`: `validate_training.read_study(data)`'s
  result when the caller has read it already (else read here)."""
  nodes, views, found = study if study is not None else validate_training.read_study(data)
  questions, sums = validate_training.predictor_sums(validate_training.question_sums(nodes), views, confs)
  sums["alignment_trained"] = trained_alignment(nodes, read_questions(data, found), confs, questions)
  return questions, sums


def read_gains(data: pathlib.Path, specs: dict[str, str]) -> tuple[list[str], list[np.ndarray], list[np.ndarray],
                                                                  pd.DataFrame]:
  """(configurations [C], diffs: [S_c, E] held-out after - before per replicate and evaluation question, gold: the
  same for log p(gold answer) (NaN for a run without it), the stage-3 rows of runs.csv with their study
  configuration) from runs.csv and eval_<run>.csv; `specs`: study
  configuration -> spec (configs/validation.py V2_CONFIGURATIONS).

  Raises:
    ValueError: no stage-3 row, a run whose spec is no study configuration's, or runs evaluated on other
      questions."""
  runs = pd.read_csv(data / "runs.csv")
  runs = runs[runs.stage == 3].copy()
  if runs.empty:
    raise ValueError(f"{data / 'runs.csv'}: no stage-3 run yet (benchmarks/validate_v2.py --piece=train:s3_...)")
  of_spec = {v: k for k, v in specs.items()}
  unknown = sorted(set(runs.spec) - set(of_spec))
  if unknown:
    raise ValueError(f"runs.csv: stage-3 specs {unknown} are no study configuration's; the study scored "
                     f"{sorted(of_spec)}")
  runs["study"] = runs.spec.map(of_spec)
  runs = runs.sort_values(["study", "train_seed"])
  confs = sorted(runs.study.unique(), key=lambda c: (stratum(c), c))
  ids, diffs, gold = None, [], []
  for c in confs:
    reps, golds = [], []
    for name in runs[runs.study == c].configuration:
      e = pd.read_csv(data / f"eval_{name}.csv", dtype={"question_id": str})
      if ids is not None and e.question_id.tolist() != ids:
        raise ValueError(f"eval_{name}.csv holds other evaluation questions than the other stage-3 runs")
      ids = e.question_id.tolist()
      reps.append((e.after - e.before).to_numpy(float))
      golds.append((e.gold_after - e.gold_before).to_numpy(float) if "gold_after" in e else
                   np.full(len(e), np.nan))
    diffs.append(np.stack(reps))
    gold.append(np.stack(golds))
  return confs, diffs, gold, runs


def stage3_tables(data: pathlib.Path, specs: dict[str, str], n_boot: int = 2000, n_perm: int = 10_000,
                  seed: int = 0, out: pathlib.Path | None = None) -> dict[str, pd.DataFrame]:
  """Stage 4 (issue 47, item 5) from the committed CSVs in `data`; writes (into `out`, default `data`) and returns:
    stage3_gains.csv: per configuration trained, its stratum, replicates, gain (mean over replicates of the mean
      held-out after - before) with a 95% interval resampling evaluation questions and replicates, gold_gain (the
      same mean of the change of log p(gold answer), nats; NaN for runs without it), the lowest gain of one of its
      runs (lowest_run_gain), the lowest after over its replicates and whether it collapsed (below COLLAPSED: any
      of its runs), and every predictor's value;
    stage3.csv: per predictor, the mean within-stratum Spearman with the gain (each stratum's rho too), its interval
      (`draws`: RESAMPLED), its one-sided permutation p within strata, and its difference from PRIMARY's with the
      paired interval of the same draws, and the same statistic against gold_gain with its permutation p (a
      secondary outcome); the row `primary` is the primary test (hypothesis.md);
    stage3_pairs.csv: per view and pair of divergences both trained, each predictor's difference against the gain's
      and whether their signs agree (what the view-level proxies cannot see: their difference is 0);
    stage3_regret.csv: the gain lost by a rule named before training against the best configuration trained in
      the stratum: the study's verdict among the stratum's configurations planned for stage 3
      (study_verdict_<stratum>.csv, stage 2), PRIMARY's top configuration among those trained, and the
      no-study rule "the 1.5B teacher, plain, reverse KL";
    and `secondary_tables`' stage3_pairs_summary.csv, stage3_collapse.csv and stage3_noise.csv.
  """
  confs, diffs, gold_diffs, runs = read_gains(data, specs)
  out = data if out is None else out
  strata = np.array([stratum(c) for c in confs])
  _, sums = study_predictors(data, confs)
  values = validate_training.predictor_values(sums, np.ones(next(iter(sums.values()))[0].shape[1]))
  g = gains(diffs)
  rng = np.random.default_rng(seed)
  boot = np.array([gains(diffs, rng.integers(0, diffs[0].shape[1], diffs[0].shape[1]),
                         [rng.integers(0, len(d), len(d)) for d in diffs]) for _ in range(n_boot)])
  after = runs.groupby("study").after.min()
  gold = gains(gold_diffs)
  table = pd.DataFrame({"configuration": confs, "stratum": strata, "replicates": [len(d) for d in diffs], "gain": g,
                        "lo": np.quantile(boot, 0.025, axis=0), "hi": np.quantile(boot, 0.975, axis=0),
                        "gold_gain": gold, "lowest_run_gain": [float(d.mean(axis=1).min()) for d in diffs],
                        "lowest_after": [after[c] for c in confs],
                        "collapsed": [bool(after[c] < COLLAPSED) for c in confs],
                        **values})
  table.to_csv(out / "stage3_gains.csv", index=False)
  stats, d = draws(sums, diffs, strata, n_boot, seed)
  rows = []
  for k in sums:
    p, n = permutation_p(values[k], g, strata, n_perm, seed)
    lo, hi = percentile_interval(d[k])
    dlo, dhi = percentile_interval(d[k] - d[PRIMARY])
    per = {f"rho_{s}": r for s, r in stratum_rhos(values[k], g, strata).items()}
    p_gold, _ = permutation_p(values[k], gold, strata, n_perm, seed)
    rows.append(dict(predictor=k, primary=k == PRIMARY, statistic=stats[k], lo=lo, hi=hi, p_value=p, permutations=n,
                     **per, minus_primary=stats[k] - stats[PRIMARY], minus_primary_lo=dlo, minus_primary_hi=dhi,
                     statistic_gold=within_strata(values[k], gold, strata), p_value_gold=p_gold,
                     configurations=len(confs), draws=n_boot, resampled=RESAMPLED))
  tests = pd.DataFrame(rows).sort_values(["primary", "predictor"], ascending=[False, True])
  tests.to_csv(out / "stage3.csv", index=False)
  pairs = []
  view = [c.rsplit("_", 1)[0] for c in confs]
  for i, a in enumerate(confs):
    for j in range(i + 1, len(confs)):
      if view[j] == view[i]:
        for k in sums:
          dx, dg = values[k][i] - values[k][j], g[i] - g[j]
          pairs.append(dict(view=view[i], a=a, b=confs[j], predictor=k, predictor_diff=dx, gain_diff=dg,
                            agree=bool(np.sign(dx) == np.sign(dg)) if np.isfinite([dx, dg]).all() and dx and dg
                            else None))           # no contrast (0) or no value (NaN): no sign to agree
  pairs = pd.DataFrame(pairs, columns=["view", "a", "b", "predictor", "predictor_diff", "gain_diff", "agree"])
  pairs.to_csv(out / "stage3_pairs.csv", index=False)
  rules = []
  for s in dict.fromkeys(strata.tolist()):
    idx = np.flatnonzero(strata == s)
    best = idx[np.argmax(g[idx])]
    verdict = data / f"study_verdict_{s}.csv"
    named = pd.read_csv(verdict).query("named").configuration.tolist() if verdict.exists() else []
    candidates = {f"{PRIMARY}'s top": confs[idx[np.nanargmax(values[PRIMARY][idx])]],
                  "the study's verdict": named[0] if named else None,
                  "no study: the 1.5B teacher, plain, reverse KL": "ext_plain_rkl" if s == "external" else None}
    for rule, c in candidates.items():
      if c is not None and c in confs:
        rules.append(dict(stratum=s, rule=rule, named=c, gain=g[confs.index(c)], best=confs[best], best_gain=g[best],
                          regret=g[best] - g[confs.index(c)]))
  regret = pd.DataFrame(rules, columns=["stratum", "rule", "named", "gain", "best", "best_gain", "regret"])
  regret.to_csv(out / "stage3_regret.csv", index=False)
  return {"gains": table, "tests": tests, "pairs": pairs, "regret": regret,
          **secondary_tables(table, pairs, diffs, out)}


def secondary_tables(table: pd.DataFrame, pairs: pd.DataFrame, diffs: list[np.ndarray],
                     out: pathlib.Path) -> dict[str, pd.DataFrame]:
  """hypothesis.md's prediction 4 and secondary analyses 5 and 7, from `stage3_tables`' gains table, its pairs and
  the replicates' held-out differences (diffs[c]: [S_c, E], replicates in runs.csv's train_seed order); writes and
  returns:
    stage3_pairs_summary.csv: per predictor, the divergence pairs within a view where both differences are
      nonzero, how many agree in sign with the gain's, the share, and a two-sided binomial p against 1/2
      (scipy.stats.binomtest; the pairs of a view share configurations, so they are not independent: a guide);
    stage3_collapse.csv: per configuration that collapsed (`COLLAPSED`), PRIMARY's rank of it in its stratum
      (1 = the highest value; ties: average ranks) and whether it is last (tied for last included);
    stage3_noise.csv: per stratum, the spread of the configurations' gains (SD, ddof 1) against the training
      noise the seed replicates show: per replicated configuration the gains of its runs, and the SD of one run's
      gain pooled over them, sqrt(mean of their variances, ddof 1) (two runs: sqrt(mean(d^2) / 2), d their
      difference).
  """
  rows = []
  for k, g in pairs.groupby("predictor", sort=True):
    agree = g.agree.dropna().astype(bool)
    n, a = len(agree), int(agree.sum())
    rows.append(dict(predictor=k, pairs=n, agree=a, share=a / n if n else np.nan,
                     p_binomial=scipy.stats.binomtest(a, n, 0.5).pvalue if n else np.nan))
  summary = pd.DataFrame(rows, columns=["predictor", "pairs", "agree", "share", "p_binomial"])
  summary.to_csv(out / "stage3_pairs_summary.csv", index=False)
  by = table.groupby("stratum")[PRIMARY]
  rank, lowest = by.rank(ascending=False), by.rank(ascending=False, method="max")   # average ranks, 1 = highest
  size = table.groupby("stratum").configuration.transform("size")
  collapse = table.assign(rank=rank, of=size, last=lowest == size)[table.collapsed][       # last: tied for it too
      ["configuration", "stratum", "lowest_after", PRIMARY, "rank", "of", "last"]]
  collapse.to_csv(out / "stage3_collapse.csv", index=False)
  noise = []
  for s, idx in table.groupby("stratum").groups.items():
    runs_of = {table.configuration[i]: diffs[i].mean(axis=1) for i in idx if len(diffs[i]) > 1}   # [S_c] gains
    noise.append(dict(stratum=s, configurations=len(idx), between_sd=float(table.loc[idx, "gain"].std(ddof=1)),
                      replicated=len(runs_of), replicate_gains="; ".join(
                          f"{c}: " + ", ".join(f"{x:+.3f}" for x in r) for c, r in runs_of.items()),
                      training_sd=float(np.sqrt(np.mean([np.var(r, ddof=1) for r in runs_of.values()])))
                      if runs_of else np.nan))
  noise = pd.DataFrame(noise)
  noise.to_csv(out / "stage3_noise.csv", index=False)
  return {"pairs_summary": summary, "collapse": collapse, "noise": noise}
