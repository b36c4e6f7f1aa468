"""Random params for a `decoder.Config` (`init_params`: tests, smoke runs, `random:<seed>` models) and the two
layer layouts of a params tree, "stacked" and "layered" (`stack_layers`, `unstack_layers`; models/decoder.py's
module docstring gives the layout)."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from opd_jax.models import decoder


def init_params(key: jax.Array, config: decoder.Config, dtype=jnp.float32, scale: float = 0.02) -> decoder.Params:
  """Random params (normal(0, scale) matrices, unit norms) with the layout of the module docstring."""
  c, L = config, config.n_layers
  qd, kd = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
  shapes = {"wq": (L, c.d_model, qd), "wk": (L, c.d_model, kd), "wv": (L, c.d_model, kd),
            "wo": (L, qd, c.d_model), "w_gate": (L, c.d_model, c.d_ff), "w_up": (L, c.d_model, c.d_ff),
            "w_down": (L, c.d_ff, c.d_model)}
  if c.qkv_bias:
    shapes.update(bq=(L, qd), bk=(L, kd), bv=(L, kd))
  keys = jax.random.split(key, len(shapes) + 2)
  drawn = _normals(keys, tuple(shapes.values()) + ((c.vocab_size, c.d_model), (c.d_model, c.vocab_size)), scale,
                   jnp.dtype(dtype))
  layers = dict(zip(shapes, drawn))
  layers["attn_norm"] = jnp.ones((L, c.d_model), dtype)
  layers["mlp_norm"] = jnp.ones((L, c.d_model), dtype)
  if c.qk_norm:
    layers["q_norm"] = jnp.ones((L, c.head_dim), dtype)
    layers["k_norm"] = jnp.ones((L, c.head_dim), dtype)
  params = {"embed": drawn[-2], "final_norm": jnp.ones((c.d_model,), dtype), "layers": layers}
  if not c.tie_embeddings:
    params["lm_head"] = drawn[-1]
  return params


def _normals(keys: jax.Array, shapes: tuple, scale: float, dtype) -> list[jax.Array]:
  """[(scale * jax.random.normal(k, s)).astype(dtype) for k, s in zip(keys, shapes)], bitwise.

  Small models (tests, smoke runs): in one compile (`_prefix_normals`); separate draws cost a compile each (~1 s
  on a CPU, the bulk of a tiny model's loading). Real-size models (a benchmark's random Qwen3) draw each matrix
  alone, as written above: len(shapes) x the largest would not fit."""
  sizes = [int(np.prod(s)) for s in shapes]
  if jax.config.jax_threefry_partitionable and len(sizes) * max(sizes) <= 2**24:
    return _prefix_normals(keys, shapes, scale, dtype)
  return [(scale * jax.random.normal(k, s)).astype(dtype) for k, s in zip(keys, shapes)]


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def _prefix_normals(keys: jax.Array, shapes: tuple, scale: float, dtype) -> list[jax.Array]:
  """`_normals` as one vmapped draw of the largest size, each cut to its own: with partitionable threefry (the
  default) element i of a draw depends on the key and i alone, so a prefix of a longer draw is the shorter draw."""
  sizes = [int(np.prod(s)) for s in shapes]
  flat = jax.vmap(lambda k: jax.random.normal(k, (max(sizes),)))(keys)
  return [(scale * flat[i, :n].reshape(s)).astype(dtype) for i, (n, s) in enumerate(zip(sizes, shapes))]


def unstack_layers(params: decoder.Params) -> decoder.Params:
  """"stacked" -> "layered": params["layers"] becomes a tuple of L per-layer dicts (copies each slice)."""
  if decoder.is_layered(params):
    return params
  layers = params["layers"]
  L = next(iter(layers.values())).shape[0]
  return {**params, "layers": tuple({k: v[i] for k, v in layers.items()} for i in range(L))}


def stack_layers(params: decoder.Params) -> decoder.Params:
  """"layered" -> "stacked"."""
  if not decoder.is_layered(params):
    return params
  layers = params["layers"]
  return {**params, "layers": {k: jnp.stack([lp[k] for lp in layers]) for k in layers[0]}}
