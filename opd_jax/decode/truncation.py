"""Top-k / top-p truncation of next-token logits without sorting the vocabulary (no sort, no lax.top_k).

`kept(scaled, top_k=, top_p=)` is the set of tokens that temperature -> top-k -> top-p sampling may draw, the
rule of `sampling._truncate` (paper.md, "Policy"):

- top-k: the k largest values of `scaled`, ties toward the lower id.
- top-p: within what top-k left (renormalised), the most likely tokens in descending order (ties toward the
  lower id) up to and including the one whose cumulative mass crosses top_p: a token is kept iff the mass
  strictly before it is < top_p * Z (Z = mass of the set).

How: each threshold is found by a multi-way (radix) search on the values. fp32 values map to a monotone uint32
key (the bit pattern, flipped for negatives; -0 = +0); pass i evaluates 2**b - 1 thresholds evenly spaced in
the current key interval [t, t + 2**(shift + b)) at once (a compare-and-reduce over [B, V, 2**b - 1]: one
read of the logits where XLA fuses it, as on GPU), keeps the largest that passes and narrows the interval to
one step: ceil(32 / b) passes end on a single key. top-k: the largest key t with #{x >= t} >= k (the k-th
largest value). top-p: the largest t with S(t) = sum{exp(x - max) : x >= t, x in the set} >= top_p * Z (the
value of the token that crosses top_p). Every token above the threshold is kept; of the tokens equal to it, the
lowest ids, as many as the rule allows (top-k: k - #above; top-p: the r-th tie while S(> t) + r * p_t <
top_p * Z), found by one pass of per-block tie counts (`_first_ids`; no cumsum over V).

Passes over [B, V], with P = ceil(32 / b): top-k P + 1 (ties); top-p 1 (max) + 1 (exp, Z) + P + 1 (ties);
both: the sum. The mask is elementwise and fuses into its consumer. `default_bits`: b = 6 (P = 6) off CPU,
where a fused pass costs about one memory read for up to ~2**6 thresholds (not measured here); b = 1 (P = 32)
on CPU, where XLA does not fuse the compare into the reduction (each pass writes, then reduces, a
[B, V, 2**b - 1] array) and the cost grows with 2**b: at [32, 151936] one pass takes ~2.6 ms with b = 1,
~13 ms with b = 2, ~110 ms with b = 4.

Round-off: masses are fp32 sums of exp(x - max) in XLA's reduction order, where `sampling._truncate` takes a
cumsum of exp(x - logsumexp) over the sorted values. top-k and the order of tokens are exact (fp32 compares,
counts exact below 2**24 tokens); a top-p set may differ from the sort-based one only by a token whose
cumulative mass lies within fp32 round-off (~1e-6 relative) of top_p * Z. Values compare as fp32 numbers:
-0 == +0 (a tie; lax.top_k, hence `sampling._truncate`, puts +0 first) and, on XLA:CPU, denormals == 0.
Logits must be finite or -inf (NaN / +inf unsupported); -inf tokens are never kept. top_k / top_p are static.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

_NEG_MAX = np.uint32(0x00800000)   # key of -FLT_MAX (-inf is 0x007FFFFF): lower keys act as -FLT_MAX
_POS_INF = np.uint32(0xFF800000)   # key of +inf: higher keys are NaN patterns, no value reaches them


def default_bits() -> int:
  """log2(thresholds per search pass + 1): 1 on CPU (compute-bound, measured), 6 elsewhere (not measured)."""
  return 1 if jax.default_backend() == "cpu" else 6


def key_of(x: jax.Array) -> jax.Array:
  """fp32 [...] -> uint32 [...], monotone: x <= y iff key(x) <= key(y) (-0 and +0 share the key of +0)."""
  b = jax.lax.bitcast_convert_type(jnp.where(x == 0, 0.0, x).astype(jnp.float32), jnp.uint32)
  return jnp.where(b >> 31 == 1, ~b, b | np.uint32(0x80000000))


def value_of(key: jax.Array) -> jax.Array:
  """uint32 [...] -> fp32 [...], the inverse of `key_of`, with keys below -FLT_MAX's read as -FLT_MAX and keys
  above +inf's as NaN (x >= NaN is False): so #{x >= value_of(t)} is #{finite x : key(x) >= t}."""
  k = jnp.maximum(key, _NEG_MAX)
  v = jax.lax.bitcast_convert_type(jnp.where(k >> 31 == 1, k & np.uint32(0x7FFFFFFF), ~k), jnp.float32)
  return jnp.where(key > _POS_INF, jnp.nan, v)


def _search(stat, target: jax.Array, bits: int) -> tuple[jax.Array, jax.Array]:
  """Largest key t (uint32 [B]) with stat(t) >= target [B], for stat non-increasing in t, and stat(t + 1) [B].

  stat: uint32 candidate keys [B, n] -> fp32 [B, n] (counts or masses): one pass over the data.
  Pass i evaluates t + c * 2**shift, c = 1 .. 2**bits - 1 (shift = 32 - (i + 1) * bits, clipped at the top)
  and keeps the largest c that passes: ceil(32 / bits) passes (a fori_loop, unrolled up to 8 passes). stat(0)
  >= target is assumed (t = 0 if nothing passes); keys beyond 2**32 - 1 count as stat 0. Taking the largest
  passing c, fp32 sums that are not exactly monotone still give a t with stat(t) >= target.
  """
  n = -(-32 // bits)
  c = jnp.arange(1, 2**bits, dtype=jnp.uint32)

  def body(i, carry):
    t, above = carry                                                        # above = stat(upper end of interval)
    shift = ((n - 1 - i) * bits).astype(jnp.uint32)
    room = (np.uint32(0xFFFFFFFF) - t) >> shift                             # largest c that stays in 32 bits
    s = stat(t[:, None] + (c << shift))                                     # [B, 2**bits - 1]
    j = jnp.max(jnp.where((c <= room[:, None]) & (s >= target[:, None]), c, 0), axis=-1)
    s_next = jnp.take_along_axis(s, jnp.minimum(j, 2**bits - 2)[:, None].astype(jnp.int32), axis=-1)[:, 0]
    return t + (j << shift), jnp.where((j < 2**bits - 1) & (j < room), s_next, above)

  zero = jnp.zeros(target.shape, jnp.uint32)
  return jax.lax.fori_loop(0, n, body, (zero, jnp.zeros_like(target)), unroll=n <= 8)


def _first_ids(tie: jax.Array, n_keep: jax.Array, block: int = 512) -> jax.Array:
  """Id cut-off int32 [B]: the id of the n_keep[b]-th lowest id of tie[b] (bool [B, V]; n_keep int32 [B] >= 1),
  so the ties kept are those with id <= cut-off (>= V - 1 when n_keep >= the number of ties).

  One pass over [B, V] (tie counts per block of `block` ids), then prefix sums over the blocks and over the
  ids of the one block holding that tie as small triangular matmuls (exact: integers < 2**24), as
  `sampling.categorical`.
  """
  B, V = tie.shape
  W = min(block, V)
  nb = -(-V // W)
  t = jnp.pad(tie, ((0, 0), (0, nb * W - V))).reshape(B, nb, W).astype(jnp.float32)
  prefix = lambda a: jnp.matmul(a, jnp.triu(jnp.ones((a.shape[-1],) * 2, a.dtype)), precision="highest")
  need = n_keep.astype(jnp.float32)[:, None]
  cum = prefix(jnp.sum(t, axis=-1))                                          # [B, nb] ties up to each block
  blk = jnp.minimum(jnp.sum(cum < need, axis=-1), nb - 1)
  before = jnp.where(blk > 0, jnp.take_along_axis(cum, jnp.maximum(blk - 1, 0)[:, None], axis=-1)[:, 0], 0.0)
  inner = prefix(jnp.take_along_axis(t, blk[:, None, None], axis=1)[:, 0])   # [B, W] ties up to each id
  pos = jnp.minimum(jnp.sum(inner + before[:, None] < need, axis=-1), W - 1)
  return (blk * W + pos).astype(jnp.int32)


def kept(scaled: jax.Array, *, top_k: int, top_p: float, bits: int | None = None) -> jax.Array:
  """The tokens top-k then top-p keep (module docstring): bool [B, V].

  Args:
    scaled: fp32 [B, V] logits / temperature (-inf = excluded).
    top_k: keep the k largest (ties toward the lower id); 0 (or >= V) = off.
    top_p: nucleus mass in (0, 1] within the top-k set; 1 = off.
    bits: log2 of the thresholds per search pass (default `default_bits()`).
  Returns:
    bool [B, V]; never a -inf token. Matches `sampling._truncate` (up to top-p round-off, see module doc).
  """
  bits = bits or default_bits()
  x = scaled.astype(jnp.float32)
  B, V = x.shape
  ids = jnp.arange(V, dtype=jnp.int32)
  mask = x > -jnp.inf
  if 0 < top_k < V:
    def count(cand):
      thr = value_of(cand)
      return jnp.sum(x[:, :, None] >= thr[:, None, :], axis=1, dtype=jnp.float32)   # exact below 2**24
    t, n_gt = _search(count, jnp.full((B,), top_k, jnp.float32), bits)
    v = value_of(t)[:, None]
    cut = _first_ids(x == v, top_k - n_gt.astype(jnp.int32))
    mask = (x > v) | ((x == v) & (ids <= cut[:, None]))
  if top_p < 1.0:
    mx = jnp.max(x, axis=-1, keepdims=True)
    mx = jnp.where(mx > -jnp.inf, mx, 0.0)
    p = jnp.where(mask, jnp.exp(x - mx), 0.0)
    total = jnp.sum(p, axis=-1)
    target = jnp.float32(top_p) * total

    def mass(cand):
      thr = value_of(cand)
      return jnp.sum(jnp.where(x[:, :, None] >= thr[:, None, :], p[:, :, None], 0.0), axis=1)

    t, s_gt = _search(mass, target, bits)
    v = value_of(t)[:, None]
    tie = mask & (x == v)
    p_t = jnp.exp(v[:, 0] - mx[:, 0])
    room = jnp.ceil((target - s_gt) / jnp.where(p_t > 0, p_t, 1.0))       # ties r = 0.. with s_gt + r p_t < target
    cut = _first_ids(tie, jnp.clip(room, 1, V).astype(jnp.int32))
    mask = mask & ((x > v) | (tie & (ids <= cut[:, None])))
  return mask


def kept_logits(scaled: jax.Array, *, top_k: int, top_p: float, bits: int | None = None) -> jax.Array:
  """`scaled` fp32 [B, V] with the tokens outside `kept` set to -inf (log_softmax of it = the policy)."""
  return jnp.where(kept(scaled, top_k=top_k, top_p=top_p, bits=bits), scaled, -jnp.inf)
