"""A group-sequential design for the decision (issue 33): look after blocks of questions, stop once decided.

The study looks at the data when looks[0], looks[1], ... questions are selected and stops at the first look whose
verdict is decided (decision.decide with `design` and `look`), or at the last look (the cap). Optional stopping
does not inflate the error rates because each look's intervals are repeated confidence intervals (Jennison &
Turnbull 1989, JRSS B 51(3); Jennison & Turnbull 2000, Group Sequential Methods, ch. 9): their levels come from
an alpha-spending function, so that over all looks together each pair's intervals all hold with probability
>= 1 - alpha / M, and, Bonferroni over the M = K (K - 1) / 2 pairs of the K configurations (a family fixed in
advance, whatever pairs are comparable at a look: `pair_nominal`, issue 49 item 3), every interval of every look
holds with probability >= 1 - alpha. A pair that becomes comparable only at a later look spends, at its first
look, what the spending function allows by then, and its boundaries follow its own shared questions. Every claim
read from them inherits that:
  - distinguishable: the interval excludes 0;
  - equivalent within the margin: the interval lies inside (-margin, +margin) (interval inclusion, the two
    one-sided tests of Schuirmann 1987, J. Pharmacokinet. Biopharm. 15(6); read from the same simultaneous family,
    their joint error is the family's non-coverage);
  - "use X": X is the only configuration that could be best; "equivalent": every pair of the configurations that
    could be best is equivalent (so any of them is within the margin of the true best, which the set holds).

Spending (Lan & DeMets 1983, Biometrika 70(3)): alpha*(t) over the information fraction t_k = looks[k] / looks[-1]
(the share of the planned questions; the last look, or a look declared final because the pool ran out, is t = 1
and spends all that is left). O'Brien-Fleming type alpha*(t) = 2 - 2 Phi(z_{1 - alpha / 2} / sqrt(t)) (the
default: almost nothing spent early, so the last look's level is close to the fixed design's and the cap costs
little power) or Pocock type alpha*(t) = alpha log(1 + (e - 1) t). The two-sided boundaries c_k on |Z_k| solve
P(|Z_1| < c_1, ..., |Z_{k-1}| < c_{k-1}, |Z_k| >= c_k) = alpha*(t_k) - alpha*(t_{k-1}) for cumulative z statistics
with corr(Z_i, Z_j) = sqrt(t_i / t_j), by recursive numerical integration on a grid (Armitage, McPherson & Rowe
1969, JRSS A 132(2); Jennison & Turnbull 2000, ch. 19), deterministic (no Monte Carlo). Each look's z boundary is
used as a t quantile at the pair's Bell-McCaffrey df by matching its tail probability: the interval at look k is
the t interval at level 1 - 2 (1 - Phi(c_k)) (Jennison & Turnbull 2000, section 3.8, for t statistics).

The default margin, MARGIN = 0.05 in mean alignment (a difference of two per-node cosines): the paper's whole mean
alignment on incorrect rollouts is about 0.05 (paper.md), so a smaller difference between two configurations is
smaller than the signal the study exists to find; in the one-hour study (docs/results.md) the same context under
three divergences, one update to within its noise, differed by 0.003 and 0.022, and the contexts by about 0.055.
It is a choice of scale, not a measured change of a training outcome.

Futility (optional, `Design.futility` > 0; off by default): at a look before the cap whose verdict is undecided, the
study also stops when the verdict is unlikely to be decided even at the cap. For each comparison that blocks a
decision (a configuration that could be best, not equivalent to the best), the conditional probability that it
is resolved at the cap, distinguishable or equivalent, is computed under the current estimate taken as the truth
(the "current trend" conditional power of stochastic curtailment: Lan, Simon & Halperin 1982, Commun. Stat. C
1(3); Jennison & Turnbull 2000, ch. 10): with f the look's share of the cap's questions, the cap's estimate is
N(d, se^2 f (1 - f)) given the data so far, its standard error se sqrt(f), its interval half-width a = t se
sqrt(f) at the last look's per-pair level (t at the df scaled by 1 / f), and the pair stays unresolved when
max(margin - a, 0) <= |d_cap| <= a. p_decided is the smallest of these over the blocking comparisons (a decision
needs each of them resolved while the best stays the best; a heuristic, not a bound, when the best may change).
The study stops ("futile") when p_decided < futility. The rule is non-binding (Jennison & Turnbull 2000, ch. 10):
it only ever replaces a later claim by no claim, so every error rate above still holds; what it can cost is a
decision the cap would have reached (benchmarks/verdict_calibration.py --futility measures it).
"""
import dataclasses
import functools
import math

import numpy as np
from scipy import optimize
from scipy import stats as sp_stats

MARGIN = 0.05            # the default equivalence margin in mean alignment (see the module docstring)
SPENDING = ("obrien_fleming", "pocock")
_GRID_STEP = 0.01        # grid spacing of the recursive integration, in z units
_Z_MAX = 12.0            # the continuation region is cut to |z| <= _Z_MAX (P(|Z| > 12) ~ 4e-33)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Design:
  """A group-sequential design (see the module docstring).

  Attributes:
    looks: the numbers of selected questions at which the study looks, ascending; the last is the cap. () or one
      look: the fixed design (today's decide()).
    alpha: the family-wise error rate over every comparable pair and every look, in (0, 1).
    margin: the equivalence margin in mean alignment (> 0; MARGIN).
    spending: "obrien_fleming" (Lan-DeMets O'Brien-Fleming type) or "pocock" (Lan-DeMets Pocock type).
    futility: stop at a look before the cap when p_decided < futility (module docstring), in [0, 1); 0: never.
  Raises:
    ValueError: looks not strictly ascending positive integers, alpha outside (0, 1), margin <= 0, an unknown
      spending, futility outside [0, 1).
  """
  looks: tuple[int, ...] = ()
  alpha: float = 0.05
  margin: float = MARGIN
  spending: str = "obrien_fleming"
  futility: float = 0.0

  def __post_init__(self):
    looks = tuple(self.looks)
    if any(int(x) != x or x < 1 for x in looks) or any(b <= a for a, b in zip(looks, looks[1:])):
      raise ValueError(f"Design.looks must be ascending positive integers (questions), got {self.looks}")
    object.__setattr__(self, "looks", tuple(int(x) for x in looks))
    if not 0.0 < self.alpha < 1.0:
      raise ValueError(f"Design.alpha must lie in (0, 1), got {self.alpha}; e.g. 0.05")
    if not (math.isfinite(self.margin) and self.margin > 0):
      raise ValueError(f"Design.margin must be > 0 (a difference in mean alignment), got {self.margin}")
    if self.spending not in SPENDING:
      raise ValueError(f"Design.spending must be one of {SPENDING}, got {self.spending!r}")
    if not 0.0 <= self.futility < 1.0:
      raise ValueError(f"Design.futility must lie in [0, 1) (0: never stop for futility), got {self.futility}")

  @property
  def n_looks(self) -> int:
    return max(len(self.looks), 1)

  def fractions(self, look: int, final: bool = False) -> tuple[float, ...]:
    """Information fractions t_1 .. t_look of looks 1 .. look (1-based); t_look = 1 at the last look or when
    `final` (the pool ran out: spend what is left). Raises ValueError for a look outside 1 .. n_looks."""
    if not 1 <= look <= self.n_looks:
      raise ValueError(f"look must be in 1 .. {self.n_looks} (the look number), got {look}")
    if look == self.n_looks or final:
      return tuple(x / self.looks[-1] for x in self.looks[:look - 1]) + (1.0,)
    return tuple(x / self.looks[-1] for x in self.looks[:look])


def spent(t, alpha: float, spending: str = "obrien_fleming") -> np.ndarray:
  """alpha*(t): the two-sided error spent by information fraction t in [0, 1] (Lan & DeMets 1983); alpha*(1) =
  alpha, alpha*(0) = 0. O'Brien-Fleming type 2 - 2 Phi(z_{1 - alpha / 2} / sqrt(t)); Pocock type
  alpha log(1 + (e - 1) t). float64 array of t's shape."""
  t = np.clip(np.asarray(t, np.float64), 0.0, 1.0)
  if spending == "obrien_fleming":
    with np.errstate(divide="ignore"):
      return np.where(t >= 1.0, alpha, 2.0 * sp_stats.norm.sf(sp_stats.norm.isf(alpha / 2.0) / np.sqrt(t)))
  if spending == "pocock":
    return np.where(t >= 1.0, alpha, alpha * np.log1p((math.e - 1.0) * t))
  raise ValueError(f"spending must be one of {SPENDING}, got {spending!r}")


def _simpson(n: int) -> np.ndarray:
  w = np.ones(n)
  w[1:-1:2], w[2:-1:2] = 4.0, 2.0
  return w / 3.0


@functools.lru_cache(maxsize=256)
def boundaries(fractions: tuple[float, ...], alpha: float, spending: str = "obrien_fleming",
               info: tuple[float, ...] | None = None) -> np.ndarray:
  """Two-sided z boundaries c_1 .. c_K of a design spending alpha*(t) at information fractions t_1 < ... < t_K.

  Solves P(no crossing before k, |Z_k| >= c_k) = alpha*(t_k) - alpha*(t_{k-1}) look by look (module docstring):
  the sub-density of Z_{k-1} on its continuation region (-c, c) is carried on a grid of step 0.01 with Simpson
  weights; Z_k given Z_{k-1} = u is N(u sqrt(t_{k-1} / t_k), 1 - t_{k-1} / t_k); the crossing probability is in
  closed form given the grid, and c_k is its root (brentq). A look that spends nothing has c_k = inf.

  Args:
    fractions: the spending times t_k (the looks' questions over the cap's), strictly ascending in (0, 1].
    alpha: the error to spend, in (0, 1) (per pair: the family's alpha / m).
    spending: "obrien_fleming" or "pocock".
    info: the statistic's information at each look (e.g. a pair's shared questions), strictly ascending, for the
      correlations sqrt(I_{k-1} / I_k) between looks; None: the fractions themselves (information proportional
      to questions). Spending follows `fractions` either way (Lan & DeMets 1983; Jennison & Turnbull 2000, ch. 7).
  Returns:
    float64 [K] boundaries (read-only; cached). K = 1 and t = 1: z_{1 - alpha / 2}.
  Raises:
    ValueError: fractions not ascending in (0, 1], or alpha outside (0, 1).
  """
  t = np.asarray(fractions, np.float64)
  if t.ndim != 1 or t.size == 0 or np.any(np.diff(t) <= 0) or t[0] <= 0 or t[-1] > 1:
    raise ValueError(f"fractions must be strictly ascending in (0, 1], got {fractions}")
  corr_t = t if info is None else np.asarray(info, np.float64)
  if corr_t.shape != t.shape or np.any(np.diff(corr_t) <= 0) or corr_t[0] <= 0:
    raise ValueError(f"info must be strictly ascending and > 0, one per fraction, got {info}")
  if not 0.0 < alpha < 1.0:
    raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
  increments = np.diff(spent(t, alpha, spending), prepend=0.0)
  c = np.empty(t.size)
  z = w = None                                         # grid and sub-density x Simpson weights of the last look
  for k, inc in enumerate(increments):
    if k == 0:
      c[0] = sp_stats.norm.isf(inc / 2.0) if inc > 0 else np.inf
      cross = None
    else:
      r, s = math.sqrt(corr_t[k - 1] / corr_t[k]), math.sqrt(1.0 - corr_t[k - 1] / corr_t[k])

      def cross(ck, z=z, w=w, r=r, s=s):
        return float(w @ (sp_stats.norm.sf((ck - r * z) / s) + sp_stats.norm.cdf((-ck - r * z) / s)))

      if inc <= 0:
        c[k] = np.inf
      else:
        hi = 1.0
        while cross(hi) > inc:
          hi *= 2.0
        c[k] = optimize.brentq(lambda x: cross(x) - inc, 0.0, hi, xtol=1e-12, rtol=1e-12)
    if k == t.size - 1:
      break
    edge = min(c[k], _Z_MAX)
    n = 2 * math.ceil(edge / _GRID_STEP) + 1                 # odd: Simpson
    grid = np.linspace(-edge, edge, n)
    if k == 0:
      dens = sp_stats.norm.pdf(grid)
    else:
      r, s = math.sqrt(corr_t[k - 1] / corr_t[k]), math.sqrt(1.0 - corr_t[k - 1] / corr_t[k])
      dens = sp_stats.norm.pdf((grid[:, None] - r * z[None, :]) / s) @ w / s
    z, w = grid, dens * _simpson(n) * (grid[1] - grid[0])
  c.setflags(write=False)
  return c


def nominal_alpha(design: Design, look: int, *, pairs: int = 1, final: bool = False) -> float:
  """The two-sided nominal level of each pair's test at `look` (1-based): 2 (1 - Phi(c_look)) of the boundaries
  spending design.alpha / pairs (Bonferroni over the comparable pairs); the pair's interval at that look is the t
  interval at level 1 - nominal_alpha (module docstring). One look: exactly design.alpha / pairs (the fixed
  design). `final`: this look is the last one (the pool ran out), it spends all that is left.
  Raises ValueError for a look outside 1 .. design.n_looks."""
  per_pair = design.alpha / max(int(pairs), 1)
  fractions = design.fractions(look, final)
  if len(fractions) == 1 and fractions[0] == 1.0:
    return per_pair
  return float(2.0 * sp_stats.norm.sf(boundaries(fractions, per_pair, design.spending)[-1]))


def pair_nominal(design: Design, look: int, *, pairs: int, tested: tuple[int, ...], info: tuple[float, ...],
                 final: bool = False) -> float:
  """The two-sided nominal level at `look` of a pair with its own history (issue 49, item 3): tested (comparable)
  at the looks `tested` (1-based, ascending, the last = `look`) with information `info` there (its shared
  questions). It spends design.alpha / pairs on the design's question fractions: at its first tested look all that
  the spending function allows by then, alpha*(t), and after it the increments, with boundaries from the recursion
  at its own correlations sqrt(I_i / I_j) (`boundaries` with `info`). Questions only accumulate, so a look where
  its information did not grow sees the same shared questions, hence the same statistic, as the first look with
  that information: it gets that look's level (no new test, no new spending). Whatever looks a pair enters,
  leaves or re-enters, P(it crosses at some tested look) <= alpha*(1) / pairs, so Bonferroni over a family fixed
  in advance (`pairs`) keeps the family-wise error <= alpha.

  Raises:
    ValueError: `tested` not ascending within 1 .. look ending at look, or info of another length.
  """
  if (not tested or tested[-1] != look or any(b <= a for a, b in zip(tested, tested[1:])) or tested[0] < 1
      or len(info) != len(tested)):
    raise ValueError(f"tested must be ascending looks ending at look {look}, one info each; got {tested}, {info}")
  if any(b < a for a, b in zip(info, info[1:])):
    raise ValueError(f"info must not decrease (questions accumulate), got {info}")
  per_pair = design.alpha / max(int(pairs), 1)
  t_all = design.fractions(look, final)
  keep = [i for i in range(len(info)) if i == 0 or info[i] > info[i - 1]]    # the first look of each information
  keep = [i for i in keep if info[i] < info[-1]] + [next(i for i in keep if info[i] == info[-1])]
  t = tuple(t_all[tested[i] - 1] for i in keep)
  if len(t) == 1:
    return float(spent(t[0], per_pair, design.spending))
  return float(2.0 * sp_stats.norm.sf(boundaries(t, per_pair, design.spending,
                                                 tuple(float(info[i]) for i in keep))[-1]))


def alpha_spent(design: Design, look: int, *, final: bool = False) -> float:
  """The family's error spent by `look` (1-based) inclusive: alpha*(t_look) (all of design.alpha at the last or a
  final look)."""
  return float(spent(design.fractions(look, final)[-1], design.alpha, design.spending))


PREDICTIVE = True        # p_resolved averages over the estimate's uncertainty (False: the current-trend version)


def p_resolved(diff, se, df, fraction: float, margin: float, alpha: float,
               predictive: bool | None = None) -> np.ndarray:
  """The conditional probability that a pair is resolved at the cap (distinguishable or equivalent within
  `margin`), its current estimate taken as the truth (module docstring, "Futility").

  Args:
    diff, se, df: float arrays (broadcast): the pair's paired difference, its CR2 standard error and
      Bell-McCaffrey df at this look.
    fraction: this look's questions over the cap's, in (0, 1).
    margin: the equivalence margin (> 0).
    alpha: the two-sided per-pair level of the cap's look (nominal_alpha at the last look).
  Returns:
    float64 array in [0, 1]; 1 where se or df is not finite and positive (nothing to project: never futile).
  """
  diff, se, df = (np.asarray(x, np.float64) for x in (diff, se, df))
  ok = np.isfinite(diff) & np.isfinite(se) & (se > 0) & np.isfinite(df) & (df > 0)
  se, df = np.where(ok, se, 1.0), np.where(ok, df, 1.0)
  half = sp_stats.t.isf(alpha / 2.0, df / fraction) * se * math.sqrt(fraction)      # the cap's half-width
  predictive = PREDICTIVE if predictive is None else predictive
  # The cap's estimate given the data: N(d, se^2 f (1 - f)) with the true difference taken as d (current trend);
  # averaged over the true difference's flat-prior posterior N(d, se^2): N(d, se^2 (1 - f)) (predictive power).
  sd = se * math.sqrt((1.0 - fraction) if predictive else fraction * (1.0 - fraction))
  lo, hi = np.maximum(margin - half, 0.0), half
  d = np.where(ok, diff, 0.0)
  inside = np.where(hi > lo, sp_stats.norm.cdf((hi - d) / sd) - sp_stats.norm.cdf((lo - d) / sd)
                    + sp_stats.norm.cdf((-lo - d) / sd) - sp_stats.norm.cdf((-hi - d) / sd), 0.0)
  return np.where(ok, np.clip(1.0 - inside, 0.0, 1.0), 1.0)


def read(res: dict, *, margin: float, last: bool, futility: float = 0.0, fraction: float = 1.0,
         final_alpha: float | None = None) -> dict:
  """The decision read from one look's comparisons (decision.compare_arrays' arrays at this look's level).

  equivalent[i, j]: comparable and the interval of i - j inside (-margin, +margin). decision: "use" (the verdict is
  "use" and the best is the only configuration that could be best), "equivalent" (two or more could be best and
  every pair of them is equivalent), else "cap" at the last look; before it "futile" when futility > 0 and
  p_decided < futility (module docstring, "Futility": fraction = this look's share of the cap's questions,
  final_alpha the cap's per-pair level), else "continue". "underpowered" and "no_data" verdicts never decide and
  are never futile.
  Returns:
    {"equivalent": bool [K, K], "decision": str, "decided": bool, "stop": bool (decided, futile or last),
    "blocking": [int] (the configurations that could be best, other than the best, not equivalent to it: the
    comparisons that block a decision), "p_decided": float (NaN when not computed)}.
  """
  lo, hi = np.nan_to_num(res["ci_lo"], nan=-np.inf), np.nan_to_num(res["ci_hi"], nan=np.inf)
  equivalent = res["comparable"] & (lo > -margin) & (hi < margin)
  members = np.flatnonzero(res["could_be_best"])
  decision = "cap" if last else "continue"
  if res["verdict"] == "use" and members.tolist() == [res["best"]]:
    decision = "use"
  elif res["verdict"] not in ("underpowered", "no_data") and members.size > 1 and all(
      equivalent[i, j] for i in members for j in members if i != j):
    decision = "equivalent"
  decided = decision in ("use", "equivalent")
  b = res["best"]
  blocking = [int(i) for i in members if i != b and not equivalent[i, b]]
  p_decided = math.nan
  if decision == "continue" and futility > 0 and res["verdict"] not in ("underpowered", "no_data"):
    p = p_resolved(res["diff"][blocking, b], res["se"][blocking, b], res["df"][blocking, b], fraction, margin,
                   final_alpha)
    p_decided = float(p.min()) if p.size else 1.0
    decision = "futile" if p_decided < futility else decision
  return {"equivalent": equivalent, "decision": decision, "decided": decided,
          "stop": decided or last or decision == "futile", "blocking": blocking, "p_decided": p_decided}


def pair_levels(design, look, final, pairs, n_clusters, comparable, history, min_shared, nominal) -> np.ndarray:
  """[P] each pair's nominal level at this look (compare_arrays): `nominal` without a history, else
  pair_nominal over the earlier looks where it was comparable (>= min_shared shared questions)."""
  out = np.full(n_clusters.shape, nominal)
  if history is None:
    return out
  past = np.asarray(history, np.float64).reshape(len(history), -1)
  if past.shape != (look - 1, n_clusters.size):
    raise ValueError(f"history must hold the {look - 1} earlier looks' shared questions of the {n_clusters.size} "
                     f"pairs, got shape {past.shape}")
  for i in np.flatnonzero(comparable):
    seen = [j for j in range(look - 1) if past[j, i] >= min_shared]
    out[i] = pair_nominal(design, look, pairs=pairs, tested=tuple(j + 1 for j in seen) + (look,),
                                     info=tuple(past[j, i] for j in seen) + (float(n_clusters[i]),), final=final)
  return out


def shared_questions(align, questions) -> np.ndarray:
  """[K (K - 1) / 2] the questions where both configurations of each pair (np.triu_indices order) have a defined
  node: the pair's information, as compare_arrays counts it."""
  align = np.asarray(align, np.float64)
  k = align.shape[1]
  i, j = np.triu_indices(k, 1)
  if not align.shape[0]:
    return np.zeros(i.size)
  onehot = np.zeros((align.shape[0], int(np.max(questions)) + 1))
  onehot[np.arange(align.shape[0]), np.asarray(questions, np.int64)] = 1.0
  both = ~np.isnan(align[:, i]) & ~np.isnan(align[:, j])
  return ((onehot.T @ both) > 0).sum(0).astype(np.float64)
