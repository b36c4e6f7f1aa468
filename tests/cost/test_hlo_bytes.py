"""The HLO bytes meter (opd_jax/cost/hlo_bytes.py) against XLA's cost_analysis, trip counts, and copies in loop bodies."""
import re

import jax
import jax.numpy as jnp
import pytest

from opd_jax.cost import hlo_bytes

S, D = 64, 32


def _compile(f, *args):
  """Compiled for the CPU whatever the default backend: `xla_bytes` reproduces XLA:CPU's cost analysis."""
  cpu = jax.sharding.SingleDeviceSharding(jax.devices("cpu")[0])
  return jax.jit(f).lower(*(jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=cpu) for x in args)).compile()


def _xla(compiled) -> float:
  ca = compiled.cost_analysis()
  return (ca[0] if isinstance(ca, (list, tuple)) else ca)["bytes accessed"]


def _step(n):
  """n steps of c <- tanh(c @ w) + 1 over a [16, 128] carry and a [128, 128] weight."""
  return _compile(lambda x, w: jax.lax.fori_loop(0, n, lambda i, c: jnp.tanh(c @ w) + 1.0, x),
                  jnp.ones((16, 128)), jnp.ones((128, 128)))


def test_loop_free_program_matches_cost_analysis_less_tuple_tables():
  def mlp(x, w1, w2, v):
    h = jax.nn.gelu(x @ w1)
    y = jnp.tanh(h @ w2) * v[:, None] + v[None, :]              # v: one fused operand read by two broadcasts
    return y, (y * x).sum(axis=1)
  compiled = _compile(mlp, jnp.ones((32, 32)), jnp.ones((32, 64)), jnp.ones((64, 32)), jnp.ones(32))
  r = hlo_bytes.analyze(compiled)
  assert not r.loops
  # Same per-op rules as XLA's HloCostAnalysis: equal to the byte, but XLA also counts the root tuple op (two
  # outputs) as its index table, 8 bytes per element, which moves no data and which we count 0.
  assert r.xla_bytes == _xla(compiled)
  assert r.bytes == _xla(compiled) - 16
  assert sum(r.by_op.values()) == r.bytes


def test_loop_body_counts_trip_count_times():
  r2, r5 = hlo_bytes.analyze(_step(2)), hlo_bytes.analyze(_step(5))
  (l2,), (l5,) = r2.loops, r5.loops
  assert (l2.trips, l5.trips) == (2, 5)
  assert l2.bytes_per_iter == l5.bytes_per_iter >= 128 * 128 * 4          # reads the weight every step
  assert r5.bytes - r2.bytes == 3 * l5.bytes_per_iter
  # XLA counts the body once: its number does not move with the trip count; ours with loops once matches it.
  assert _xla(_step(2)) == _xla(_step(5)) == r5.xla_bytes
  assert r5.bytes - r5.xla_bytes > 3 * 128 * 128 * 4


def test_trip_count_inferred_without_known_trip_count():
  text = _step(5).as_text()
  stripped = re.sub(r',?"known_trip_count":\{"n":"\d+"\}', "", text)
  assert '"known_trip_count"' in text and '"known_trip_count"' not in stripped
  a, b = hlo_bytes.analyze(text), hlo_bytes.analyze(stripped)
  assert b.loops == a.loops and b.bytes == a.bytes


def test_unknown_trip_count_raises_unless_given():
  compiled = _compile(lambda x, n: jax.lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * 2.0), (0, x))[1],
                      jnp.ones(S), jnp.asarray(3))
  with pytest.raises(ValueError, match="trip_counts") as e:
    hlo_bytes.analyze(compiled)
  name = re.search(r"while loop (\S+)", str(e.value)).group(1)
  r1, r7 = (hlo_bytes.analyze(compiled, trip_counts={name: n}) for n in (1, 7))
  assert r7.loops[0].trips == 7 and r7.bytes - r1.bytes == 6 * r7.loops[0].bytes_per_iter > 0
  assert hlo_bytes.analyze(compiled, unknown_trips=7).bytes == r7.bytes          # the count for any such loop


def test_transpose_of_carried_array_is_a_copy_in_the_loop():
  compiled = _compile(lambda c: jax.lax.fori_loop(0, 4, lambda i, c: c.T * 2.0, c), jnp.ones((S, S)))
  r = hlo_bytes.analyze(compiled)
  assert r.xla_bytes == _xla(compiled)
  big = [c for c in r.copies if c.bytes == S * S * 4]
  assert big and all(c.computation == r.loops[0].body for c in big), r.copies
  assert r.largest_copy_in_loop == S * S * 4


def test_scan_slicing_xs_reports_the_per_step_slice():
  compiled = _compile(lambda xs: jax.lax.scan(lambda c, x: (c + x.sum(), x), 0.0, xs), jnp.ones((4, S, D)))
  r = hlo_bytes.analyze(compiled)
  assert r.xla_bytes == _xla(compiled)                           # fused dynamic-slice reads: XLA's rule
  assert any("dynamic-slice" in c.kind and c.bytes == S * D * 4 for c in r.copies), r.copies
  assert r.largest_copy_in_loop == S * D * 4                   # a step's slice, never the whole [4, S, D] xs


def test_in_place_cache_update_is_no_copy_and_counts_the_update():
  def decode(cache, q):
    def body(i, carry):
      cache, acc = carry
      cache = jax.lax.dynamic_update_slice(cache, (q * i)[None], (i, 0))
      return cache, acc + cache @ q
    return jax.lax.fori_loop(0, 8, body, (cache, jnp.zeros(S)))
  compiled = _compile(decode, jnp.ones((S, D)), jnp.ones(D))
  r = hlo_bytes.analyze(compiled)
  assert r.xla_bytes == _xla(compiled)                           # in-place update: XLA's rule
  cache_bytes = S * D * 4
  assert r.largest_copy_in_loop < cache_bytes, r.copies          # the guard: no cache-sized copy in the loop
  # The update writes one row per step (+ reads of q and the index), not the [S, D] cache ...
  assert r.by_op["fusion:dynamic-update-slice"] < 8 * 4 * D * 4
  # ... while the dot reads the whole cache every step.
  assert r.loops[0].bytes_per_iter > cache_bytes


def test_fused_gather_counts_the_gathered_rows_not_the_table():
  compiled = _compile(lambda table, ids: jnp.tanh(table[ids]) * 2.0, jnp.ones((1024, 64)), jnp.arange(4))
  r = hlo_bytes.analyze(compiled)
  assert r.xla_bytes == _xla(compiled)                           # XLA: the whole [1024, 64] table per lookup
  assert r.bytes == r.xla_bytes - 1024 * 64 * 4 + 4 * 64 * 4     # ours: the 4 rows gathered
