"""Sort-free top-k / top-p (opd_jax/decode/truncation.py): exact sets vs a numpy reference, the sampler's policy, no sort."""
import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from opd_jax.decode import sampling, truncation

TOP_K, TOP_P = (0, 1, 3, 50), (1.0, 0.9, 0.5, 0.05)
COMBOS = [(k, p) for k in TOP_K for p in TOP_P]
NEAR = 1e-6   # skip rows with a cumulative mass this close to top_p: kept's fp32 sums may put it on either side


def reference(z32: np.ndarray, top_k: int, top_p: float) -> tuple[np.ndarray, bool]:
  """(kept bool [V], near): argsort with ties by id (stable), cumsum in float64 of the fp32 values."""
  z = z32.astype(np.float64)
  order = np.argsort(-z, kind="stable")                               # -inf last; -0 and +0 tie
  keep = np.zeros(z.shape, bool)
  keep[order[:top_k] if top_k else order] = True
  keep &= z > -np.inf
  near = False
  if top_p < 1.0 and keep.any():
    p = np.where(keep, np.exp(z - z[keep].max()), 0.0)
    cum = np.cumsum(p[order]) / p.sum()
    near = bool(np.any(np.abs(cum[keep[order]] - top_p) < NEAR))
    nucleus = np.zeros_like(keep)
    nucleus[order] = cum - p[order] / p.sum() < top_p                 # mass strictly before < top_p
    keep &= nucleus
  return keep, near


def rows(V: int, seed: int) -> np.ndarray:
  """fp32 [R, V] logits / temperature: smooth and peaked rows, rounded (exact ties), uniform, -inf, +-0."""
  rng = np.random.default_rng(seed)
  out = []
  for scale in (0.3, 1.0, 3.0, 10.0):
    for T in (0.5, 1.0, 1.7):
      z = rng.standard_normal((4, V)).astype(np.float32) * np.float32(scale)
      z[1] = np.round(z[1] * 2) / 2                                    # bf16-like: many exact ties
      z[2][rng.random(V) < 0.3] = -np.inf
      z[3] = np.round(z[3]) * (rng.random(V) < 0.5)                    # ties, zeros of both signs
      out.append(z / np.float32(T))
  few = np.full((3, V), -np.inf, np.float32)
  few[0, :2] = [1.0, 0.5]                                              # fewer finite tokens than top_k
  few[1, :] = 0.0                                                      # uniform
  few[2, ::2] = np.float32(-3.25)                                      # half the ids tie, the rest -inf
  return np.concatenate(out + [few])


@functools.lru_cache(maxsize=None)
def all_combos(bits):
  return jax.jit(lambda x: jnp.stack([truncation.kept(x, top_k=k, top_p=p, bits=bits) for k, p in COMBOS]))


@pytest.mark.parametrize("V,bits", [(100, 3), (1000, None)])
def test_kept_equals_sorted_reference(V, bits):
  x = rows(V, seed=V)
  if V == 100:                                                         # + rows of V = 7, -inf padded (one compile)
    x = np.concatenate([x, np.pad(rows(7, seed=7), ((0, 0), (0, V - 7)), constant_values=-np.inf)])
  got = np.asarray(all_combos(bits)(x))                                # [combos, R, V]
  checked = partial_ties = 0
  for (k, p), mask in zip(COMBOS, got):
    for r in range(len(x)):
      want, near = reference(x[r], k, p)
      if near:
        continue
      np.testing.assert_array_equal(mask[r], want, err_msg=f"V={V} top_k={k} top_p={p} row {r}: {x[r][:12]}")
      checked += 1
      kept_vals = x[r][want]
      if want.any() and 0 < np.sum(x[r][~want] == kept_vals.min()):
        partial_ties += 1                                              # part of a tie group kept (by id)
  assert checked >= 0.9 * len(COMBOS) * len(x)
  assert partial_ties >= 10


def test_kept_matches_sampling_policy():
  # lax.top_k (the sampler's path) orders -0 below +0 where the rule and `kept` see equal values: no -0 here.
  logits = rows(1000, seed=3) * np.float32(1.3) + np.float32(0.0)
  params = [sampling.SamplingParams(temperature=T, top_k=k, top_p=p)
            for T, k, p in [(1.0, 50, 1.0), (0.7, 0, 0.9), (1.3, 40, 0.8), (1.0, 3, 0.5), (0.5, 0, 0.05)]]

  @jax.jit
  def both(logits):
    ours = [jax.nn.log_softmax(truncation.kept_logits(logits / sp.temperature, top_k=sp.top_k, top_p=sp.top_p))
            for sp in params]
    return ours, [sampling.policy_logprobs(logits, sp) for sp in params]

  for sp, ours, want in zip(params, *both(logits)):
    far = [not reference(z, sp.top_k, sp.top_p)[1] for z in logits / np.float32(sp.temperature)]
    assert sum(far) >= len(far) - 3
    np.testing.assert_allclose(np.exp(ours)[far], np.exp(want)[far], rtol=0, atol=1e-6, err_msg=str(sp))


def test_keys_are_monotone_and_invertible():
  x = np.array([-np.inf, -3.4e38, -1.5, -1e-30, -0.0, 0.0, 1e-30, 2.0, 3.4e38, np.inf], np.float32)
  keys = np.asarray(truncation.key_of(jnp.asarray(x)))
  assert keys[4] == keys[5] and np.all(np.diff(keys[:5]) > 0) and np.all(np.diff(keys[5:]) > 0)
  np.testing.assert_array_equal(np.asarray(truncation.value_of(jnp.asarray(keys)))[1:], x[1:])   # -0 == +0
  assert np.asarray(truncation.value_of(keys[:1]))[0] == -3.4028235e38           # -inf reads as -FLT_MAX


def hlo_reads(hlo: str, n_elems: int) -> int:
  """Instructions of a compiled module that read an array of >= n_elems elements, each counted once per run
  (while bodies times their known trip count; a fusion is one instruction however much it computes)."""
  comps, cur = {}, None
  for line in hlo.splitlines():
    head = re.match(r"(ENTRY )?%(\S+) \(", line)
    if head:
      cur = comps.setdefault(("ENTRY" if head.group(1) else head.group(2)), [])
    elif cur is not None and " = " in line:
      cur.append(line.strip())
  size = lambda shape: int(np.prod([int(d) for d in shape.split(",")])) if shape else 1
  total = 0

  def visit(name, mult):
    nonlocal total
    shapes = {}
    for ins in comps[name]:
      lhs, rhs = ins.removeprefix("ROOT ").split(" = ", 1)
      m = re.match(r"\w+\[([\d,]*)\]\S* ([\w-]+)\((.*?)\)", rhs)
      if m is None:                                                    # tuples, get-tuple-element of tuples
        continue
      shapes[lhs] = size(m.group(1))
      op, operands = m.group(2), re.findall(r"%[\w.-]+", m.group(3))
      if op not in ("get-tuple-element", "bitcast", "parameter", "tuple") and any(
          shapes.get(o, 0) >= n_elems for o in operands):
        total += mult
    for ins in comps[name]:
      w = re.search(r"while\(.*body=%([\w.-]+)", ins)
      if w:
        trips = re.search(r'known_trip_count":\{"n":"(\d+)"', ins)
        visit(w.group(1), mult * int(trips.group(1)))

  visit("ENTRY", 1)
  return total


def sorts(hlo: str) -> bool:
  """Whether a compiled module sorts or calls a top-k (op names only: metadata holds Python names)."""
  return re.search(r"\b(sort|topk)\b", re.sub(r"metadata=\{[^}]*\}", "", hlo).lower()) is not None


@pytest.mark.parametrize("top_k,top_p", [(50, 1.0), (0, 0.9), (50, 0.9)])
def test_no_sort_and_pass_count(top_k, top_p):
  x = jax.ShapeDtypeStruct((4, 151936), jnp.float32)
  hlo = jax.jit(functools.partial(truncation.kept, top_k=top_k, top_p=top_p)).lower(x).compile().as_text()
  assert not sorts(hlo)
  sp = sampling.SamplingParams(top_k=top_k, top_p=top_p)
  assert sorts(jax.jit(lambda z: sampling._truncate(z, sp, top_k or 256)).lower(x).compile().as_text())
  P = -(-32 // truncation.default_bits())
  expected = (P + 1 if top_k else 0) + (P + 3 if top_p < 1 else 0)   # searches + tie pass (+ max, exp/Z)
  reads = hlo_reads(hlo, 4 * 151936)
  # One search pass is one fused read on GPU; XLA:CPU materialises the compare then reduces it (2 reads).
  assert expected <= reads <= 3 * expected, (reads, expected)
