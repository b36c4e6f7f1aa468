"""One decoder-only transformer family: Llama, Qwen2 / Qwen2.5 and Qwen3, as pure functions.

Switches instead of one module per family: attention bias on q/k/v (Qwen2), RMSNorm on q and k per head
before RoPE (Qwen3), tied or untied output head, grouped-query attention, rotate-half RoPE (HF layout) with
optional per-frequency scaling factors (Llama 3.1 "llama3", "linear").

Params are a nested dict of arrays; the layers are stacked along a leading axis `L` and run with
`jax.lax.scan`, so a 24-layer model compiles as fast as a 1-layer one:

  embed         [V, D]        token embedding (also the output head when `config.tie_embeddings`)
  final_norm    [D]           RMSNorm scale before the head
  lm_head       [D, V]        output head (only when not tied)
  layers/attn_norm [L, D]     RMSNorm scale before attention
  layers/wq     [L, D, H*Dh]  layers/bq [L, H*Dh]   (bias only when `config.qkv_bias`)
  layers/wk     [L, D, K*Dh]  layers/bk [L, K*Dh]
  layers/wv     [L, D, K*Dh]  layers/bv [L, K*Dh]
  layers/q_norm [L, Dh]       layers/k_norm [L, Dh] (only when `config.qk_norm`)
  layers/wo     [L, H*Dh, D]
  layers/mlp_norm [L, D]
  layers/w_gate [L, D, F]     layers/w_up [L, D, F]   layers/w_down [L, F, D]   (SwiGLU MLP)

Two layouts of the same weights (`stack_layers` / `unstack_layers` convert): "stacked" (above: one array per
name with a leading L axis, run with `lax.scan`: a 24-layer model compiles in seconds; the accelerator default)
and "layered" (`params["layers"]` a tuple of L per-layer dicts without the L axis, run with a Python loop:
slower to compile, but no per-layer slice copies; on CPU a decode step is 1.7x faster: `models.load` picks it
on CPU). The KV cache follows the params' layout (`init_cache(..., layered=...)`).

The KV cache is a dict {"k": [L, B, S, K, Dh], "v": [L, B, S, K, Dh], "pos": [B, S] int32, "end": [] int32}
(layered: "k" and "v" are tuples of L arrays [B, S, K, Dh]):
slot s of row b holds the keys/values of the token at position `pos[b, s]` (-1: empty or masked out); new
tokens are written at slots [end, end + T). Attention is decided by positions alone: a query at position p
sees the slots with 0 <= pos <= p. So left padding (pad tokens get position -1), ragged batches and
prefix branching (mask the slots at positions >= t) need no other bookkeeping.

Numerics: activations in the params' dtype (fp32 on CPU, bf16 on GPU/TPU), RMSNorm statistics, attention
logits and softmax in fp32, logits returned in fp32.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

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


def init_params(key: jax.Array, config: Config, dtype=jnp.float32, scale: float = 0.02) -> Params:
  """Random params (normal(0, scale) matrices, unit norms) with the layout of the module docstring."""
  c, L = config, config.n_layers
  qd, kd = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
  shapes = {"wq": (L, c.d_model, qd), "wk": (L, c.d_model, kd), "wv": (L, c.d_model, kd),
            "wo": (L, qd, c.d_model), "w_gate": (L, c.d_model, c.d_ff), "w_up": (L, c.d_model, c.d_ff),
            "w_down": (L, c.d_ff, c.d_model)}
  if c.qkv_bias:
    shapes.update(bq=(L, qd), bk=(L, kd), bv=(L, kd))
  keys = jax.random.split(key, len(shapes) + 2)
  layers = {n: (scale * jax.random.normal(k, s)).astype(dtype) for k, (n, s) in zip(keys, shapes.items())}
  layers["attn_norm"] = jnp.ones((L, c.d_model), dtype)
  layers["mlp_norm"] = jnp.ones((L, c.d_model), dtype)
  if c.qk_norm:
    layers["q_norm"] = jnp.ones((L, c.head_dim), dtype)
    layers["k_norm"] = jnp.ones((L, c.head_dim), dtype)
  params = {"embed": (scale * jax.random.normal(keys[-2], (c.vocab_size, c.d_model))).astype(dtype),
            "final_norm": jnp.ones((c.d_model,), dtype), "layers": layers}
  if not c.tie_embeddings:
    params["lm_head"] = (scale * jax.random.normal(keys[-1], (c.d_model, c.vocab_size))).astype(dtype)
  return params


def is_layered(params: Params) -> bool:
  """True for the "layered" layout (a tuple of per-layer dicts), False for "stacked"."""
  return isinstance(params["layers"], (list, tuple))


def unstack_layers(params: Params) -> Params:
  """"stacked" -> "layered": params["layers"] becomes a tuple of L per-layer dicts (copies each slice)."""
  if is_layered(params):
    return params
  layers = params["layers"]
  L = next(iter(layers.values())).shape[0]
  return {**params, "layers": tuple({k: v[i] for k, v in layers.items()} for i in range(L))}


def stack_layers(params: Params) -> Params:
  """"layered" -> "stacked"."""
  if not is_layered(params):
    return params
  layers = params["layers"]
  return {**params, "layers": {k: jnp.stack([lp[k] for lp in layers]) for k in layers[0]}}


def init_cache(config: Config, batch: int, size: int, dtype=jnp.float32, *, layered: bool = False) -> Cache:
  """An empty KV cache of `size` slots per row (see the module docstring for the layout)."""
  one = (batch, size, config.n_kv_heads, config.head_dim)
  if layered:
    k = tuple(jnp.zeros(one, dtype) for _ in range(config.n_layers))
    v = tuple(jnp.zeros(one, dtype) for _ in range(config.n_layers))
  else:
    k = v = jnp.zeros((config.n_layers, *one), dtype)
  return {"k": k, "v": v, "pos": jnp.full((batch, size), -1, jnp.int32), "end": jnp.zeros((), jnp.int32)}


def map_cache_rows(fn, cache: Cache) -> Cache:
  """Apply fn to every per-row array of a cache (batch axis first: each layer's k and v, and pos), e.g. to
  gather rows or pad slots; either layout."""
  def kv(a):
    return tuple(fn(x) for x in a) if isinstance(a, (list, tuple)) else jax.vmap(fn)(a)
  return {"k": kv(cache["k"]), "v": kv(cache["v"]), "pos": fn(cache["pos"]), "end": cache["end"]}


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


def _attention(q, k, v, q_pos, k_pos):
  """q [B, T, H, Dh]; k, v [B, S, K, Dh]; q_pos [B, T]; k_pos [B, S] -> [B, T, H, Dh]."""
  B, T, H, Dh = q.shape
  K = k.shape[2]
  q = q.reshape(B, T, K, H // K, Dh)
  scores = jnp.einsum("btkgd,bskd->bkgts", q, k, preferred_element_type=jnp.float32) / jnp.sqrt(Dh)
  visible = (k_pos[:, None, :] >= 0) & (k_pos[:, None, :] <= q_pos[:, :, None])   # [B, T, S]
  scores = jnp.where(visible[:, None, None], scores, _NEG)
  probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
  out = jnp.einsum("bkgts,bskd->btkgd", probs, v, preferred_element_type=jnp.float32)
  return out.reshape(B, T, H, Dh).astype(q.dtype)


def _layer(x, p, positions, cache_kv, k_pos, end, config: Config):
  """One block. x [B, T, D]; cache_kv None or (k, v) [B, S, K, Dh]. Returns (x, new (k, v) or None)."""
  c = config
  B, T, _ = x.shape
  h = _rms_norm(x, p["attn_norm"], c.norm_eps)
  q, k, v = h @ p["wq"], h @ p["wk"], h @ p["wv"]
  if c.qkv_bias:
    q, k, v = q + p["bq"], k + p["bk"], v + p["bv"]
  q = q.reshape(B, T, c.n_heads, c.head_dim)
  k = k.reshape(B, T, c.n_kv_heads, c.head_dim)
  v = v.reshape(B, T, c.n_kv_heads, c.head_dim)
  if c.qk_norm:
    q, k = _rms_norm(q, p["q_norm"], c.norm_eps), _rms_norm(k, p["k_norm"], c.norm_eps)
  q = _rope(q, positions, c.rope_theta, c.rope_freq_factors)
  k = _rope(k, positions, c.rope_theta, c.rope_freq_factors)
  if cache_kv is None:
    keys, values, new_kv = k, v, None
  else:
    keys = jax.lax.dynamic_update_slice(cache_kv[0], k.astype(cache_kv[0].dtype), (0, end, 0, 0))
    values = jax.lax.dynamic_update_slice(cache_kv[1], v.astype(cache_kv[1].dtype), (0, end, 0, 0))
    new_kv = (keys, values)
  attn = _attention(q, keys.astype(q.dtype), values.astype(q.dtype), positions, k_pos)
  x = x + attn.reshape(B, T, -1) @ p["wo"]
  h = _rms_norm(x, p["mlp_norm"], c.norm_eps)
  x = x + (jax.nn.silu(h @ p["w_gate"]) * (h @ p["w_up"])) @ p["w_down"]
  return x, new_kv


def hidden_states(params: Params, tokens: jax.Array, positions: jax.Array, cache: Cache | None = None,
                  *, config: Config) -> tuple[jax.Array, Cache | None]:
  """Final-normed hidden states [B, T, D] (params' dtype) and the updated cache; see `forward`."""
  x = params["embed"][tokens]
  if cache is None:
    k_pos, end = positions, None
  else:
    end = cache["end"]
    k_pos = jax.lax.dynamic_update_slice(cache["pos"], positions.astype(jnp.int32), (0, end))

  def body(x, layer_in):
    p, kv = layer_in
    x, new_kv = _layer(x, p, positions, kv, k_pos, end, config)
    return x, new_kv

  kv_in = None if cache is None else (cache["k"], cache["v"])
  if is_layered(params):
    outs = []
    for i, p in enumerate(params["layers"]):
      x, new_kv = body(x, (p, None if kv_in is None else (kv_in[0][i], kv_in[1][i])))
      outs.append(new_kv)
    kv_out = None if cache is None else (tuple(o[0] for o in outs), tuple(o[1] for o in outs))
  else:
    x, kv_out = jax.lax.scan(body, x, (params["layers"], kv_in))
  x = _rms_norm(x, params["final_norm"], config.norm_eps)
  if cache is None:
    return x, None
  new_cache = {"k": kv_out[0], "v": kv_out[1], "pos": k_pos, "end": end + tokens.shape[1]}
  return x, new_cache


def head(params: Params, h: jax.Array, *, config: Config) -> jax.Array:
  """Output head: h [..., D] -> fp32 logits [..., V] (the embedding when tied).

  Ids >= config.n_real_ids (embedding padding past the tokenizer's tokens) get logit -inf: the one rule that
  keeps them out of every softmax, the sampler's and scoring's alike.
  """
  w = params["embed"].T if config.tie_embeddings else params["lm_head"]
  logits = jnp.matmul(h, w.astype(h.dtype), preferred_element_type=jnp.float32)
  if config.real_vocab_size < logits.shape[-1]:
    logits = jnp.where(jnp.arange(logits.shape[-1]) < config.real_vocab_size, logits, -jnp.inf)
  return logits


def forward(params: Params, tokens: jax.Array, positions: jax.Array, cache: Cache | None = None,
            *, config: Config) -> tuple[jax.Array, Cache | None]:
  """Logits of a decoder-only transformer (Llama / Qwen2 / Qwen3).

  Args:
    params: nested dict of arrays, layout in the module docstring.
    tokens: int32 [B, T] token ids (any id at pad slots).
    positions: int32 [B, T] position of each token; -1 marks padding (never attended to).
    cache: None for a full causal forward over `tokens`, or a KV cache (`init_cache`) of S slots with
      `end + T <= S`; the tokens are appended at slots [end, end + T) and attend to every earlier slot of
      their row whose position is in [0, own position].
    config: static architecture.
  Returns:
    (logits fp32 [B, T, V], updated cache or None). Logits at pad slots are finite and meaningless; logits of
    ids >= config.n_real_ids are -inf (`head`).
  """
  h, cache = hidden_states(params, tokens, positions, cache, config=config)
  return head(params, h, config=config), cache
