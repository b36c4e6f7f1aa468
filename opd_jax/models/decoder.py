"""One decoder-only transformer family: Llama, Qwen2 / Qwen2.5 and Qwen3, as Flax NNX modules.

Switches instead of one module per family: attention bias on q/k/v (Qwen2), RMSNorm on q and k per head
before RoPE (Qwen3), tied or untied output head, grouped-query attention, rotate-half RoPE (HF layout) with
optional per-frequency scaling factors (Llama 3.1 "llama3", "linear").

`Decoder` (an `nnx.Module`; `config` its static architecture) holds `nnx.Param`s, each with its logical axes
as sharding metadata (`out_sharding`; `sharding.RULES` maps them to mesh axes). Module paths (= the state's
keys, = the converted cache's leaf files `layers.wq.npy`, ...; `names.TABLE` maps them to HF / GGUF names):

  embed         [V, D]        ("vocab", "embed")   token embedding (also the head when `config.tie_embeddings`)
  final_norm    [D]           ("norm",)            RMSNorm scale before the head
  lm_head       [D, V]        ("embed", "vocab")   output head (only when not tied)
  layers/attn_norm [L, D]     RMSNorm scale before attention                 (a `Block`; logical axes of the
  layers/wq     [L, D, H*Dh]  layers/bq [L, H*Dh]   (bias only when `config.qkv_bias`)   layer params start
  layers/wk     [L, D, K*Dh]  layers/bk [L, K*Dh]                                         with "layers")
  layers/wv     [L, D, K*Dh]  layers/bv [L, K*Dh]
  layers/q_norm [L, Dh]       layers/k_norm [L, Dh] (only when `config.qk_norm`)
  layers/wo     [L, H*Dh, D]
  layers/mlp_norm [L, D]
  layers/w_gate [L, D, F]     layers/w_up [L, D, F]   layers/w_down [L, F, D]   (SwiGLU MLP)

Two layouts of the same weights: "stacked" (above: `layers` is one `Block` whose params carry a leading L axis;
without a cache (training forwards) it runs as a `jax.lax.scan` over its state) and "layered" (`layers` an
`nnx.List` of L `Block`s without the L axis, paths layers/<i>/wq, run with a Python loop): the default on every
platform (`models.default_layout`). With a KV cache both layouts loop over the layers in Python: a scan would take
the cache as xs and return it as ys, copying every layer's cache (and each weight out of its stack) per step;
the loop reads each layer's buffers in place (benchmarks/decode_bytes.py measures the bytes of both).

Modules are never built with random initialisers: `abstract` gives the shapes (`nnx.eval_shape`) and the
loaders fill the leaves (models/checkpoints.py; random models from `init_params`, a plain nested dict in the
stacked layout above, so their values do not depend on flax). The hot path is pure: jitted functions take the
state (`nnx.State`) as a pytree and the graphdef as a static argument, and call `merge(graphdef, state)`'s
methods (`hidden_states`, `head`, `__call__`).

The KV cache is a dict {"k": (L arrays [B, K, S, Dh]), "v": (the same), "pos": [B, S] int32, "end": [] int32},
the same for both layouts: per layer a k and a v buffer of their own (so the cache can be donated and updated in
place), head-major so that attention reads it without a transpose. Slot s of row b holds the keys/values of
the token at position `pos[b, s]` (-1: empty or masked out); new tokens are written at slots [end, end + T).
Attention is decided by positions alone: a query at position p sees the slots with 0 <= pos <= p. So left
padding (pad tokens get position -1), ragged batches and prefix branching (mask the slots at positions >= t)
need no other bookkeeping. A shared-prefix cache (`with_prefix`) adds "prefix" (G prefixes held once, each
layer [G, K, Sp, Dh], pos [G, Sp]) and "group" [B]: row b also sees prefix group[b] (targeted continuations:
every branch of a node reads the node's prefix from one copy).

Numerics: activations in the params' dtype (fp32 on CPU, bf16 on GPU/TPU), RMSNorm statistics, attention
logits and softmax in fp32, logits returned in fp32.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

Params = dict[str, Any]
Cache = dict[str, jax.Array]

ARCHITECTURES = ("llama", "qwen2", "qwen3")
_NEG = -1e30  # finite "minus infinity": fully masked rows (pad queries) stay finite instead of NaN


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config:
  """Architecture of one checkpoint; frozen and hashable, passed to jit as a static argument."""
  arch: str                     # one of ARCHITECTURES
  vocab_size: int               # V: rows of the embedding / columns of the head
  n_real_ids: int | None = None  # ids of the tokenizer's real tokens, 0..n-1 (None: all V); the head gives the
                                 # padded rows n..V-1 (Qwen2.5: 151,665 of 151,936) logit -inf
  d_model: int                  # D
  n_layers: int                 # L
  n_heads: int                  # H query heads
  n_kv_heads: int               # K key/value heads (GQA: H % K == 0)
  head_dim: int                 # Dh
  d_ff: int                     # F
  rope_theta: float = 10000.0
  rope_freq_factors: tuple[float, ...] | None = None  # [Dh / 2] RoPE scaling: inverse frequency i is divided by
                                # factor i (HF "linear": all = factor; "llama3"; GGUF rope_freqs.weight)
  norm_eps: float = 1e-6
  qkv_bias: bool = False        # Qwen2 / Qwen2.5
  qk_norm: bool = False         # Qwen3
  tie_embeddings: bool = False
  max_seq_len: int = 32768      # the checkpoint's context length (prompts longer than it are refused)

  def __post_init__(self):
    if self.arch not in ARCHITECTURES:
      raise ValueError(f"unknown architecture {self.arch!r}; supported: {ARCHITECTURES}")
    if self.n_heads % self.n_kv_heads:
      raise ValueError(f"n_heads={self.n_heads} must be a multiple of n_kv_heads={self.n_kv_heads}")
    if self.rope_freq_factors is not None:   # a tuple (JSON gives a list): hashable, as a static jit argument
      object.__setattr__(self, "rope_freq_factors", tuple(float(f) for f in self.rope_freq_factors))
      if len(self.rope_freq_factors) != self.head_dim // 2:
        raise ValueError(f"rope_freq_factors has {len(self.rope_freq_factors)} entries; head_dim={self.head_dim} "
                         f"needs head_dim / 2 = {self.head_dim // 2} (one per rotary frequency)")
    if self.n_real_ids is not None and not 0 < self.n_real_ids <= self.vocab_size:
      raise ValueError(f"n_real_ids={self.n_real_ids} must be in [1, vocab_size={self.vocab_size}] (or None)")

  @property
  def real_vocab_size(self) -> int:
    """The number of ids that exist (the tokenizer's real tokens): n_real_ids, else vocab_size."""
    return self.vocab_size if self.n_real_ids is None else self.n_real_ids


def is_layered(params: Params) -> bool:
  """True for the "layered" layout (a tuple of per-layer dicts), False for "stacked"."""
  return isinstance(params["layers"], (list, tuple))


def init_cache(config: Config, batch: int, size: int, dtype=jnp.float32) -> Cache:
  """An empty KV cache of `size` slots per row, the same for both layouts (see the module docstring): per layer
  a k and a v buffer [B, K, S, Dh] of their own (never one array twice, so the cache can be donated)."""
  one = (batch, config.n_kv_heads, size, config.head_dim)
  k = tuple(jnp.zeros(one, dtype) for _ in range(config.n_layers))
  v = tuple(jnp.zeros(one, dtype) for _ in range(config.n_layers))
  return {"k": k, "v": v, "pos": jnp.full((batch, size), -1, jnp.int32), "end": jnp.zeros((), jnp.int32)}


def with_prefix(cache: Cache, prefix: Cache, group: jax.Array, limit: jax.Array | None = None) -> Cache:
  """A cache whose rows also attend to a shared prefix (shared-prefix attention; `branching.branch`).

  Args:
    cache: the rows' own cache (`init_cache`, B rows): their suffixes.
    prefix: {"k", "v": tuples of L [G, K, Sp, Dh], "pos": int32 [G, Sp]}: G prefixes held once (-1 = masked).
    group: int32 [B]: row b attends to prefix group[b] (and to its own slots), never to another group's.
    limit: None, or int32 [B]: row b sees only the prefix slots at positions <= limit[b] (a branch off an
      earlier point of its group's sequence, e.g. a teacher's tokenization of a node's text: `cross.py`).
  """
  out = {**cache, "prefix": {"k": tuple(prefix["k"]), "v": tuple(prefix["v"]), "pos": prefix["pos"]},
         "group": group.astype(jnp.int32)}
  if limit is not None:
    out["limit"] = limit.astype(jnp.int32)
  return out


def map_cache_rows(fn, cache: Cache) -> Cache:
  """Apply fn to every per-row array of a cache (batch axis first: each layer's k and v, pos, and the group of a
  shared-prefix cache), e.g. to gather rows or pad slots; a shared prefix is left as it is."""
  out = {"k": tuple(fn(x) for x in cache["k"]), "v": tuple(fn(x) for x in cache["v"]), "pos": fn(cache["pos"]),
         "end": cache["end"]}
  if "prefix" in cache:
    out["prefix"], out["group"] = cache["prefix"], fn(cache["group"])
  if "limit" in cache:
    out["limit"] = fn(cache["limit"])
  return out


def _rms_norm(x, w, eps):
  x32 = x.astype(jnp.float32)
  y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
  return (y * w.astype(jnp.float32)).astype(x.dtype)


def _rope(x, positions, theta, factors=None):
  """Rotate-half RoPE (HF layout). x [B, T, N, Dh], positions [B, T] (negative: pad, any angle).

  inv_freq_i = theta^(-2i / Dh) / factors_i: `factors` (a static tuple of Dh / 2, or None) is RoPE scaling as
  transformers' "linear" and "llama3" inv_freq and llama.cpp's rope_freqs tensor (ggml_rope_ext freq_factors).
  """
  half = x.shape[-1] // 2
  inv_freq = 1.0 / (theta ** (jnp.arange(half, dtype=jnp.float32) / half))
  if factors is not None:
    inv_freq = inv_freq / jnp.asarray(factors, jnp.float32)
  angles = positions.astype(jnp.float32)[..., None] * inv_freq          # [B, T, half]
  cos, sin = jnp.cos(angles)[:, :, None, :], jnp.sin(angles)[:, :, None, :]
  x1, x2 = x[..., :half].astype(jnp.float32), x[..., half:].astype(jnp.float32)
  return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)


def _attention(q, k, v, q_pos, k_pos, prefix=None):
  """q [B, T, H, Dh]; k, v [B, K, S, Dh] (the cache's head-major layout: read without a transpose); q_pos [B, T];
  k_pos [B, S] -> [B, T, H, Dh].

  prefix: None, or (kp, vp [G, K, Sp, Dh], p_pos [G, Sp], group int32 [B][, limit int32 [B]]): shared-prefix
  attention. Row b's queries also attend to prefix group[b] (its slots at positions <= limit[b] when given),
  held once for all its rows: one matmul of every query against the G
  prefixes (FLOPs x G on the prefix, bytes once), the other groups' slots masked, and one softmax over the
  prefix's and the row's own visible slots together, merged by their common max (cascade attention: the same
  weights as attending to one concatenated cache, without concatenating).
  """
  B, T, H, Dh = q.shape
  K = k.shape[1]
  q = q.reshape(B, T, K, H // K, Dh)
  scores = jnp.einsum("btkgd,bksd->bkgts", q, k, preferred_element_type=jnp.float32) / jnp.sqrt(Dh)
  visible = (k_pos[:, None, :] >= 0) & (k_pos[:, None, :] <= q_pos[:, :, None])   # [B, T, S]
  scores = jnp.where(visible[:, None, None], scores, _NEG)
  if prefix is None:
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    # -> [B, K, g, T, Dh], then the small transpose: XLA:CPU has no bf16 x bf16 -> f32 dot with "btkgd" out.
    out = jnp.einsum("bkgts,bksd->bkgtd", probs, v, preferred_element_type=jnp.float32)
    return out.transpose(0, 3, 1, 2, 4).reshape(B, T, H, Dh).astype(q.dtype)
  kp, vp, p_pos, group = prefix[:4]
  G = p_pos.shape[0]
  ps = jnp.einsum("btkgd,Gksd->bkgtGs", q, kp, preferred_element_type=jnp.float32) / jnp.sqrt(Dh)
  seen = ((group[:, None, None, None] == jnp.arange(G)[None, None, :, None]) & (p_pos[None, None] >= 0)
          & (p_pos[None, None] <= q_pos[:, :, None, None]))                          # [B, T, G, Sp]
  if len(prefix) > 4:                                                              # a branch point per row
    seen = seen & (p_pos[None, None] <= prefix[4][:, None, None, None])
  ps = jnp.where(seen[:, None, None], ps, _NEG)
  # One softmax over both parts, merged by their common max (cascade attention): no concatenated scores.
  m = jnp.maximum(jnp.max(ps, axis=(-2, -1)), jnp.max(scores, axis=-1))          # [B, K, g, T]
  ep, es = jnp.exp(ps - m[..., None, None]), jnp.exp(scores - m[..., None])
  total = jnp.sum(ep, axis=(-2, -1)) + jnp.sum(es, axis=-1)
  out = (jnp.einsum("bkgtGs,Gksd->bkgtd", ep.astype(v.dtype), vp, preferred_element_type=jnp.float32)
         + jnp.einsum("bkgts,bksd->bkgtd", es.astype(v.dtype), v, preferred_element_type=jnp.float32))
  return (out / total[..., None]).transpose(0, 3, 1, 2, 4).reshape(B, T, H, Dh).astype(q.dtype)


def _attention_blocked(q, k, v, q_pos, k_pos, block: int):
  """`_attention` over blocks of `block` queries (`lax.map`, each block `jax.checkpoint`ed): the same values per
  query, with [B, K, G, block, S] scores alive at once in the forward and backward passes instead of
  [B, K, G, T, S] (memory O(T) instead of O(T^2) per layer for long training sequences)."""
  B, T, H, Dh = q.shape
  if T <= block:
    return _attention(q, k, v, q_pos, k_pos)
  n = -(-T // block)
  q = jnp.pad(q, ((0, 0), (0, n * block - T), (0, 0), (0, 0)))
  q_pos = jnp.pad(q_pos, ((0, 0), (0, n * block - T)), constant_values=-1)   # padded queries see nothing
  one = jax.checkpoint(lambda qi, pi: _attention(qi, k, v, pi, k_pos))
  out = jax.lax.map(lambda a: one(*a), (jnp.moveaxis(q.reshape(B, n, block, H, Dh), 1, 0),
                                        jnp.moveaxis(q_pos.reshape(B, n, block), 1, 0)))
  return jnp.moveaxis(out, 0, 1).reshape(B, n * block, H, Dh)[:, :T]


# ----------------------------------------------------------------------------------------------------------
# NNX modules.

def _param(shape, axes: tuple[str, ...], dtype, fill=0.0) -> nnx.Param:
  """A Param of `shape` with logical axes `axes` (sharding metadata only: placement is the loader's, so no mesh
  context is needed, under `nnx.eval_shape` or not). Its value is a placeholder the loaders overwrite."""
  return nnx.Param(jnp.full(shape, fill, dtype), eager_sharding=False, out_sharding=axes)


class Block(nnx.Module):
  """One pre-norm block (attention + SwiGLU MLP). With `n_layers`, every param has a leading L axis ("layers")
  and the block stands for all L of them (the "stacked" layout: `Decoder` scans over its state).

  The dense matrices (wq, wk, wv, wo, w_gate, w_up, w_down) are read only as `h @ w`, so a weight may also be an
  object that defines `__rmatmul__`: `training.lora.Adapted` (a bf16 matrix with its LoRA update unmerged)."""

  def __init__(self, config: Config, *, n_layers: int | None = None, dtype=jnp.float32):
    c = self.config = config
    lead, ax = ((n_layers,), ("layers",)) if n_layers else ((), ())
    p = lambda axes, *shape, fill=0.0: _param(lead + shape, ax + axes, dtype, fill)
    qd, kd = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
    self.attn_norm = p(("norm",), c.d_model, fill=1.0)
    self.wq, self.wk, self.wv = (p(("embed", "q_heads"), c.d_model, qd), p(("embed", "kv_heads"), c.d_model, kd),
                                 p(("embed", "kv_heads"), c.d_model, kd))
    if c.qkv_bias:
      self.bq, self.bk, self.bv = p(("q_heads",), qd), p(("kv_heads",), kd), p(("kv_heads",), kd)
    if c.qk_norm:
      self.q_norm, self.k_norm = p(("head_dim",), c.head_dim, fill=1.0), p(("head_dim",), c.head_dim, fill=1.0)
    self.wo = p(("q_heads", "embed"), qd, c.d_model)
    self.mlp_norm = p(("norm",), c.d_model, fill=1.0)
    self.w_gate, self.w_up = p(("embed", "mlp"), c.d_model, c.d_ff), p(("embed", "mlp"), c.d_model, c.d_ff)
    self.w_down = p(("mlp", "embed"), c.d_ff, c.d_model)

  def attention(self, x, positions, cache_kv, k_pos, end, q_block: int | None = None, prefix=None):
    """Attention of x [B, T, D] (pre-norm, no residual); cache_kv None or (k, v) [B, K, S, Dh] (the new keys and
    values are written in place at slots [end, end + T)); q_block: attend in blocks of this many queries
    (`_attention_blocked`); prefix: a shared prefix (`_attention`). Returns (out [B, T, D], new (k, v) or None)."""
    c = self.config
    B, T, _ = x.shape
    h = _rms_norm(x, self.attn_norm[...], c.norm_eps)
    q, k, v = h @ self.wq[...], h @ self.wk[...], h @ self.wv[...]
    if c.qkv_bias:
      q, k, v = q + self.bq[...], k + self.bk[...], v + self.bv[...]
    q = q.reshape(B, T, c.n_heads, c.head_dim)
    k = k.reshape(B, T, c.n_kv_heads, c.head_dim)
    v = v.reshape(B, T, c.n_kv_heads, c.head_dim)
    if c.qk_norm:
      q, k = _rms_norm(q, self.q_norm[...], c.norm_eps), _rms_norm(k, self.k_norm[...], c.norm_eps)
    q = _rope(q, positions, c.rope_theta, c.rope_freq_factors)
    k = _rope(k, positions, c.rope_theta, c.rope_freq_factors)
    k, v = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)               # [B, K, T, Dh]: T rows, not the cache
    if cache_kv is None:
      keys, values, new_kv = k, v, None
    else:
      keys = jax.lax.dynamic_update_slice(cache_kv[0], k.astype(cache_kv[0].dtype), (0, 0, end, 0))
      values = jax.lax.dynamic_update_slice(cache_kv[1], v.astype(cache_kv[1].dtype), (0, 0, end, 0))
      new_kv = (keys, values)
    keys, values = keys.astype(q.dtype), values.astype(q.dtype)
    if prefix is not None:
      prefix = (prefix[0].astype(q.dtype), prefix[1].astype(q.dtype)) + tuple(prefix[2:])
    attn = (_attention(q, keys, values, positions, k_pos, prefix) if q_block is None
            else _attention_blocked(q, keys, values, positions, k_pos, q_block))
    return attn.reshape(B, T, -1) @ self.wo[...], new_kv

  def mlp(self, x):
    """SwiGLU MLP of x [B, T, D] (pre-norm, no residual)."""
    h = _rms_norm(x, self.mlp_norm[...], self.config.norm_eps)
    return (jax.nn.silu(h @ self.w_gate[...]) * (h @ self.w_up[...])) @ self.w_down[...]

  def __call__(self, x, positions, cache_kv, k_pos, end, q_block: int | None = None, prefix=None):
    """One block: x [B, T, D] -> (x, new (k, v) or None); see `attention`."""
    attn, new_kv = self.attention(x, positions, cache_kv, k_pos, end, q_block, prefix)
    x = x + attn
    return x + self.mlp(x), new_kv


class Decoder(nnx.Module):
  """The model: embedding, L `Block`s ("stacked": one Block with an L axis; "layered": a list), final norm, head."""

  def __init__(self, config: Config, *, layered: bool = False, dtype=jnp.float32):
    c = self.config = config
    self.embed = _param((c.vocab_size, c.d_model), ("vocab", "embed"), dtype)
    self.final_norm = _param((c.d_model,), ("norm",), dtype, 1.0)
    if not c.tie_embeddings:
      self.lm_head = _param((c.d_model, c.vocab_size), ("embed", "vocab"), dtype)
    self.layers = (nnx.List([Block(c, dtype=dtype) for _ in range(c.n_layers)]) if layered
                   else Block(c, n_layers=c.n_layers, dtype=dtype))

  @property
  def layered(self) -> bool:
    return isinstance(self.layers, nnx.List)

  def init_cache(self, batch: int, size: int) -> Cache:
    """An empty KV cache of `size` slots per row in this model's layout and params' dtype (`init_cache`)."""
    return init_cache(self.config, batch, size, self.embed.dtype)

  def hidden_states(self, tokens: jax.Array, positions: jax.Array, cache: Cache | None = None, *,
                    remat: bool = False, q_block: int | None = None) -> tuple[jax.Array, Cache | None]:
    """Final-normed hidden states [B, T, D] (params' dtype) and the updated cache; see `__call__`.

    remat: recompute each layer's activations in the backward pass (`jax.checkpoint` per layer) instead of
    storing them: training memory O(one layer) instead of O(L layers), for one more forward. Without a cache only.
    q_block: attend over blocks of this many queries (`_attention_blocked`): scores of [B, H, q_block, S] at a
    time instead of [B, H, T, S] (the same values per query; for long training forwards).
    """
    if remat and cache is not None:
      raise ValueError("remat is for training forwards without a KV cache")
    x = self.embed[...][tokens]
    if cache is None:
      k_pos, end = positions, None
    else:
      end = cache["end"]
      k_pos = jax.lax.dynamic_update_slice(cache["pos"], positions.astype(jnp.int32), (0, end))
    if cache is not None:   # a Python loop over the layers, each with its own k / v buffers: written in place,
      # read without a copy (a scan would take the cache as xs and copy it into ys: benchmarks/hlo_bytes.py)
      if self.layered:
        blocks = list(self.layers)
      else:                 # stacked params: each layer's slice (the accelerator default is layered)
        graphdef, state = nnx.split(self.layers)
        blocks = [nnx.merge(graphdef, jax.tree.map(lambda a, i=i: a[i], state)) for i in range(self.config.n_layers)]
      pre = cache.get("prefix")
      ks, vs = [], []
      for i, block in enumerate(blocks):
        layer_prefix = None if pre is None else ((pre["k"][i], pre["v"][i], pre["pos"], cache["group"])
                                                 + ((cache["limit"],) if "limit" in cache else ()))
        x, (k, v) = block(x, positions, (cache["k"][i], cache["v"][i]), k_pos, end, q_block, layer_prefix)
        ks.append(k)
        vs.append(v)
      x = _rms_norm(x, self.final_norm[...], self.config.norm_eps)
      out = {**cache, "k": tuple(ks), "v": tuple(vs), "pos": k_pos, "end": end + tokens.shape[1]}
      return x, out
    if self.layered and not remat:
      for block in self.layers:
        x, _ = block(x, positions, None, k_pos, end, q_block)
    else:
      if self.layered:   # remat: a scan over the layers stacked on the fly. A checkpointed call per unrolled
        # layer saved nothing (XLA:CPU ran every recomputation before the backward pass: the same memory as no
        # remat); a scan's loop keeps one layer's activations at a time.
        splits = [nnx.split(block) for block in self.layers]
        graphdef, state = splits[0][0], jax.tree.map(lambda *xs: jnp.stack(xs), *(st for _, st in splits))
      else:
        graphdef, state = nnx.split(self.layers)

      def body(x, st):
        return nnx.merge(graphdef, st)(x, positions, None, k_pos, end, q_block)[0], None

      x, _ = jax.lax.scan(jax.checkpoint(body) if remat else body, x, state)
    return _rms_norm(x, self.final_norm[...], self.config.norm_eps), None

  def head(self, h: jax.Array) -> jax.Array:
    """Output head: h [..., D] -> fp32 logits [..., V] (the embedding when tied).

    Ids >= config.n_real_ids (embedding padding past the tokenizer's tokens) get logit -inf: the one rule that
    keeps them out of every softmax, the sampler's and scoring's alike.
    """
    c = self.config
    w = self.embed[...].T if c.tie_embeddings else self.lm_head[...]
    logits = jnp.matmul(h, w.astype(h.dtype), preferred_element_type=jnp.float32)
    if c.real_vocab_size < logits.shape[-1]:
      logits = jnp.where(jnp.arange(logits.shape[-1]) < c.real_vocab_size, logits, -jnp.inf)
    return logits

  def __call__(self, tokens: jax.Array, positions: jax.Array,
               cache: Cache | None = None) -> tuple[jax.Array, Cache | None]:
    """Logits of a decoder-only transformer (Llama / Qwen2 / Qwen3).

    Args:
      tokens: int32 [B, T] token ids (any id at pad slots).
      positions: int32 [B, T] position of each token; -1 marks padding (never attended to).
      cache: None for a full causal forward over `tokens`, or a KV cache (`init_cache`) of S slots with
        `end + T <= S`; the tokens are appended at slots [end, end + T) and attend to every earlier slot of
        their row whose position is in [0, own position].
    Returns:
      (logits fp32 [B, T, V], updated cache or None). Logits at pad slots are finite and meaningless; logits of
      ids >= config.n_real_ids are -inf (`head`).
    """
    h, cache = self.hidden_states(tokens, positions, cache)
    return self.head(h), cache


# ----------------------------------------------------------------------------------------------------------
# Graphdef / state.

@functools.lru_cache(maxsize=64)
def abstract(config: Config, layered: bool = False, dtype: str = "float32") -> tuple[nnx.GraphDef, nnx.State]:
  """(graphdef, abstract state) of `Decoder(config)`: ShapeDtypeStructs with their logical axes, no memory."""
  return nnx.split(nnx.eval_shape(lambda: Decoder(config, layered=layered, dtype=jnp.dtype(dtype))))


def merge(graphdef: nnx.GraphDef, state: nnx.State) -> Decoder:
  """The module of a (graphdef, state) split; inside jit, the state's leaves are the traced arrays."""
  return nnx.merge(graphdef, state)


def leaf_key(path: tuple) -> tuple[str, int | None]:
  """A state path -> (stacked key as in the module docstring, layer index or None): ("layers", 3, "wq") ->
  ("layers/wq", 3); ("layers", "wq") -> ("layers/wq", None); ("embed",) -> ("embed", None)."""
  index = next((p for p in path if isinstance(p, int)), None)
  return "/".join(str(p) for p in path if not isinstance(p, int)), index


def fill(config: Config, value, *, layered: bool, dtype: str = "float32") -> tuple[nnx.GraphDef, nnx.State]:
  """(graphdef, state) of `Decoder(config)` with every leaf `value(path, abstract leaf)` (a jax array, placed
  by the caller), made one leaf at a time: the loaders never hold a second copy of the model.

  Raises:
    ValueError: a value whose shape or dtype differs from the abstract leaf's.
  """
  graphdef, abstract_state = abstract(config, layered, jnp.dtype(dtype).name)
  flat = []
  for path, var in nnx.to_flat_state(abstract_state):
    x = value(path, var.get_value())
    want = var.get_value()
    if tuple(x.shape) != tuple(want.shape) or x.dtype != want.dtype:
      raise ValueError(f"param {'/'.join(map(str, path))}: got {x.dtype}{list(x.shape)}, the config implies "
                       f"{want.dtype}{list(want.shape)}")
    flat.append((path, var.replace(x)))
  return graphdef, nnx.from_flat_state(flat)


def from_arrays(config: Config, params: Params) -> tuple[nnx.GraphDef, nnx.State]:
  """(graphdef, state) of a nested dict in the module docstring's layout (`init_params`; "layered" when
  params["layers"] is a tuple of per-layer dicts), or an `nnx.State` of `Decoder`: the same arrays, no copy
  (works under a trace too)."""
  if isinstance(params, nnx.State):
    params = nnx.to_pure_dict(params)
    if 0 in params["layers"]:
      params = {**params, "layers": tuple(params["layers"][i] for i in range(len(params["layers"])))}
  def value(path, _):
    key, i = leaf_key(path)
    if not key.startswith("layers/"):
      return params[key]
    layers = params["layers"]
    return layers[i][key[7:]] if i is not None else layers[key[7:]]
  layered = is_layered(params)
  dtype = jnp.dtype(params["embed"].dtype).name
  return fill(config, value, layered=layered, dtype=dtype)


def forward(params: Params, tokens: jax.Array, positions: jax.Array, cache: Cache | None = None,
            *, config: Config) -> tuple[jax.Array, Cache | None]:
  """`Decoder.__call__` of a nested dict of arrays (`from_arrays`): a reference for tests and notebooks."""
  return merge(*from_arrays(config, params))(tokens, positions, cache)
