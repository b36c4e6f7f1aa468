"""The weighted design at confident nodes, against the documented design computed exactly (issue 49, item 6).

Reference: `allocation.weights` and `allocation.weighted_counts` per their docstrings, written out here one node
at a time in `decimal` arithmetic (every float input converted exactly; logits through Decimal.exp to 50
digits) with enough significant digits that the formula as written, 1 - p_k and sum_j p_j^2 - p_k^2 included,
keeps 40 digits beyond the node's smallest squared probability (`_context`), the clipped Neyman allocation solved
by water-filling over its breakpoints (no bisection), and largest remainders taken exactly. The nodes are random,
a third of them with a top candidate leading by 20 to 5000 nats, with zero probabilities, NaN entries, teachers
equal to p or without mass, fixed slots and padding.
"""
import decimal
import math

import numpy as np
import pytest

from opd_jax.study import allocation

D = decimal.Decimal
ZERO, ONE = D(0), D(1)
EXP = decimal.Context(prec=50, Emin=-10 ** 8, Emax=10 ** 8)


def _context(xs, log):
  """A decimal context for one node: 40 significant digits beyond the decimal span of its squared probabilities
  (the formula as written subtracts p_k^2 ~ 1 from sum_j p_j^2 and 1 - p_k from 1)."""
  with np.errstate(divide="ignore", invalid="ignore"):
    ls = [np.asarray(x, np.float64) if log else np.log(np.asarray(x, np.float64)) for x in xs]
  span = max((np.ptp(v[np.isfinite(v)]) for v in ls if np.isfinite(v).any()), default=0.0)
  return decimal.Context(prec=40 + int(2 * span / math.log(10)), Emin=-10 ** 8, Emax=10 ** 8)


def _probs(x, valid, log):
  """Renormalised probabilities over `valid` (NaN, -inf log and non-positive values read as 0), or None."""
  ok = [bool(v) and not math.isnan(u) and (u > -math.inf if log else u > 0) for u, v in zip(x, valid)]
  if log:
    top = max((float(u) for u, o in zip(x, ok) if o), default=0.0)
    with decimal.localcontext(EXP):      # each exp to 50 digits (a 1e-50 change of the input); what follows keeps
      raw = [(D(float(u)) - D(top)).exp() if o else ZERO for u, o in zip(x, ok)]     # the node's full precision
  else:
    raw = [D(float(u)) if o else ZERO for u, o in zip(x, ok)]
  total = sum(raw, ZERO)
  return None if total == 0 else [r / total for r in raw]


def _share(x):
  total = sum(x, ZERO)
  return None if total == 0 else [v / total for v in x]


def _weights(p, qs, valid, log):
  K = len(p)
  pn = _probs(p, valid, log) or [ZERO] * K
  sq = sum((v * v for v in pn), ZERO)
  j2 = [pn[k] ** 2 * ((1 - pn[k]) ** 2 + sq - pn[k] ** 2) if valid[k] else ZERO for k in range(K)]
  terms = [s for s in [_share(j2)] if s is not None]
  adv = []
  for q in qs:
    qn = _probs(q, valid, log)
    s = None if qn is None else _share([(qn[k] - pn[k]) ** 2 if valid[k] else ZERO for k in range(K)])
    if s is not None:
      adv.append(s)
  if adv:
    terms.append([sum((a[k] for a in adv), ZERO) / len(adv) for k in range(K)])
  if not terms:
    return [ZERO] * K
  return [(sum((t[k] for t in terms), ZERO) / len(terms)).sqrt() for k in range(K)]


def exact_weights(p, qs, valid, log=False):
  """w_k of the `allocation.weights` docstring, one node, Decimal [K] (0 off `valid`)."""
  with decimal.localcontext(_context([p, *qs], log)):
    return _weights(p, qs, valid, log)


def _water_fill(w, budget, minimum, r_max):
  """x_k = clip(c w_k, minimum, r_max) summing to budget, exactly; c -> infinity where no c reaches it."""
  fill = lambda c: [min(max(c * v, D(minimum)), D(r_max)) for v in w]
  if sum(fill(ZERO), ZERO) >= budget:
    return fill(ZERO)
  marks = sorted({D(b) / v for v in w if v > 0 for b in (minimum, r_max)})
  if sum(fill(marks[-1]), ZERO) < budget:                   # every positive weight at the cap: c = infinity
    return [D(r_max) if v > 0 else D(minimum) for v in w]
  lo = ZERO
  for hi in marks:                                          # the sum is linear between consecutive breakpoints
    if sum(fill(hi), ZERO) >= budget:
      mid = (lo + hi) / 2
      free = [v for v in w if minimum < mid * v < r_max]
      held = sum((x for x, v in zip(fill(mid), w) if not minimum < mid * v < r_max), ZERO)
      return fill((budget - held) / sum(free, ZERO)) if free else fill(hi)
    lo = hi
  raise AssertionError("unreachable")


def exact_design(p, qs, valid, fixed, *, mean, minimum, r_max, min_mass, log=False):
  """(w_k of `allocation.weights` as floats [K], continuations per candidate of the `allocation.weighted_counts`
  docstring [K] ints), one node."""
  K = len(p)
  with decimal.localcontext(_context([p, *qs], log)):
    fixed = [bool(f and v) for f, v in zip(fixed, valid)]
    pn = _probs(p, valid, log) or [ZERO] * K
    mass = list(pn)
    for q in qs:
      mass = [max(a, b) for a, b in zip(mass, _probs(q, valid, log) or [ZERO] * K)]
    order = sorted((k for k in range(K) if valid[k]), key=lambda k: (-mass[k], k))
    kept = [bool(valid[k]) and (mass[k] >= D(min_mass) or k in order[:2] or fixed[k]) for k in range(K)]
    open_ = [kept[k] and not fixed[k] for k in range(K)]
    weights = _weights(p, qs, valid, log)
    w = [v if o else ZERO for v, o in zip(weights, open_)]
    if not any(w):
      w = [ONE if o else ZERO for o in open_]
    budget = round(D(mean) * sum(valid)) - minimum * sum(fixed)          # round half to even, as np.round
    idx = [k for k in range(K) if open_[k]]
    x = dict(zip(idx, _water_fill([w[k] for k in idx], D(budget), minimum, r_max))) if idx else {}
    n = {k: int(v) for k, v in x.items()}                                 # floor: every x >= minimum >= 1
    short = max(min(budget, round(sum(x.values(), ZERO))) - sum(n.values()), 0)
    # Largest remainders, rounded to 9 decimals, equal ones to the lower slot.
    rem = sorted(((round(x[k] - n[k], 9), k) for k in idx if n[k] < r_max), key=lambda t: (-t[0], t[1]))
    for _, k in rem[:short]:
      n[k] += 1
    return [float(v) for v in weights], [n.get(k, minimum if fixed[k] and kept[k] else 0) for k in range(K)]


def random_node(rng, log):
  """(p, qs, valid, fixed, options) of one node: often confident (a lead of 20 to 5000 nats), teachers confident
  on the same candidate or another, zeros, NaN, padding, fixed slots, teachers equal to p or without mass;
  probabilities (exp of the logits less their maximum, which underflows past 745 nats) or, with `log`, logits."""
  K = int(rng.integers(2, 9))
  lead = rng.choice([0.0, 5.0, 20.0, 25.0, 30.0, 40.0, 60.0, 200.0, 700.0, 5000.0])
  z = rng.normal(size=K) * rng.choice([0.5, 2.0, 6.0])
  z[rng.integers(K)] += lead
  z[rng.random(K) < 0.1] = -np.inf                           # probability exactly 0
  z[rng.random(K) < 0.05] = np.nan                            # reads as 0
  if rng.random() < 0.02:
    z[:] = -np.inf                                            # a student without mass on C(u): teachers only
  valid = rng.random(K) < 0.85
  valid[np.argsort(-z)[:2]] = True                            # at least two valid candidates
  qs = []
  for _ in range(int(rng.integers(0, 4))):
    kind = rng.integers(6)
    if kind == 0:
      qs.append(z.copy())                                     # a teacher equal to the student: no say
      continue
    zq = z + rng.normal(size=K) * rng.choice([0.1, 1.0, 4.0]) if kind <= 2 else rng.normal(size=K) * 3
    if kind == 3:
      zq[rng.integers(K)] += rng.choice([20.0, 40.0, 300.0])  # confident on another candidate
    zq[rng.random(K) < 0.15] = np.nan
    if kind == 4:
      zq[:] = np.nan                                          # no mass at all on this node: left out
    qs.append(zq)
  fixed = (rng.random(K) < 0.08) & valid
  opts = dict(mean=float(rng.choice([2, 3, 4, 6.5])), minimum=int(rng.choice([1, 2])),
              min_mass=float(rng.choice([0.0, 0.01, 0.05])))
  opts["r_max"] = int(max(math.ceil(opts["mean"]), rng.choice([8, 16, 64])))
  if log:
    return z, qs, valid, fixed, opts
  to_p = lambda x: np.exp(x - np.nanmax(np.where(np.isfinite(x), x, np.nan)) if np.isfinite(x).any() else x)
  return to_p(z), [to_p(q) for q in qs], valid, fixed, opts


@pytest.mark.parametrize("log, nodes", [(False, 3000), (True, 300)])
def test_weights_and_counts_equal_the_exact_design_at_random_and_confident_nodes(log, nodes):
  """Every weight within 1e-10 (relative; 0 exactly where the design's is 0) and every count equal, on nodes of
  which a third lead by >= 20 nats. The plain float64 formula failed here at a lead of >= 20 nats."""
  rng = np.random.default_rng(49 + log)
  confident = 0
  for _ in range(nodes):
    p, qs, valid, fixed, opts = random_node(rng, log)
    want_w, want_n = exact_design(p, qs, valid, fixed, log=log, **opts)
    got_w = allocation.weights(p[None], [q[None] for q in qs], valid[None], log=log)[0]
    got_n = allocation.weighted_counts(p[None], [q[None] for q in qs], valid[None], fixed=fixed[None], log=log,
                                       **opts)[0]
    case = (p, qs, valid, fixed, opts)
    assert np.all(np.isfinite(got_w)) and np.array_equal(got_w == 0, np.array(want_w) == 0), case
    np.testing.assert_allclose(got_w, want_w, rtol=1e-10, atol=0, err_msg=str(case))
    assert got_n.tolist() == want_n, (got_n, want_n, case)
    lz = p if log else np.log(np.where(p > 0, p, np.nan))
    srt = np.sort(lz[valid & np.isfinite(lz)])
    confident += len(srt) >= 2 and srt[-1] - srt[-2] >= 20
  assert confident >= nodes // 3, confident


@pytest.mark.parametrize("lead", [20.0, 25.0, 30.0, 40.0, 100.0, 700.0])
def test_a_confident_node_and_its_teacher_get_the_exact_design(lead):
  """A top candidate leading by `lead` nats, a teacher confident on the same one; then the same node with its top
  candidate fixed (a stop token), where the others' weights, all ~e^-lead, must still split the budget."""
  z = np.array([0.0, -lead, -lead - 0.5, -lead - 1.0])
  zq = np.array([0.0, -lead - 1.0, -lead, -lead - 2.0])
  valid = np.ones(4, bool)
  opts = dict(mean=4.0, minimum=2, r_max=64, min_mass=0.0)
  for fixed in (np.zeros(4, bool), np.array([True, False, False, False])):
    for log, p, q in ((True, z, zq), (False, np.exp(z), np.exp(zq))):
      want_w, want_n = exact_design(p, [q], valid, fixed, log=log, **opts)
      got = allocation.weighted_counts(p[None], [q[None]], valid[None], fixed=fixed[None], log=log, **opts)[0]
      np.testing.assert_allclose(allocation.weights(p[None], [q[None]], valid[None], log=log)[0], want_w, rtol=1e-10)
      assert got.tolist() == want_n, (lead, fixed, log, got, want_n)
  assert len(set(want_n[1:])) > 1                            # proportional to the weights, not all at the floor


def test_a_teacher_without_mass_or_equal_to_p_is_left_out():
  rng = np.random.default_rng(7)
  p = np.exp(np.array([0.0, -22.0, -23.5, -30.0, -np.inf]))
  valid = np.array([True, True, True, True, False])
  none = np.full(5, np.nan)
  want_w, _ = exact_design(p, [], valid, np.zeros(5, bool), mean=4, minimum=1, r_max=16, min_mass=0.0)
  for qs in ([none], [p.copy()], [none, p.copy()]):
    np.testing.assert_allclose(allocation.weights(p[None], [q[None] for q in qs], valid[None])[0], want_w,
                               rtol=1e-12)
  q = rng.dirichlet(np.ones(5))
  want_w, _ = exact_design(p, [q], valid, np.zeros(5, bool), mean=4, minimum=1, r_max=16, min_mass=0.0)
  np.testing.assert_allclose(allocation.weights(p[None], [q[None], none[None]], valid[None])[0], want_w, rtol=1e-12)


def test_the_adaptive_allocators_jacobian_is_exact_at_confident_nodes():
  """`allocation._terms`' |J_k|^2 (the adaptive loss model), absolute values, against the formula in decimal."""
  rng = np.random.default_rng(3)
  for _ in range(200):
    p, _, valid, _, _ = random_node(rng, False)
    terms = allocation._terms  # pylint: disable=protected-access
    got = terms(p[None], np.zeros((1, len(p))), np.ones((1, len(p))), valid[None], 0.5)[0][0]
    with decimal.localcontext(_context([p], False)):
      pn = _probs(p, valid, False)
      if pn is None:
        continue
      sq = sum((v * v for v in pn), ZERO)
      want = [float(v ** 2 * ((1 - v) ** 2 + sq - v ** 2)) if ok else 0.0 for v, ok in zip(pn, valid)]
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-300)
