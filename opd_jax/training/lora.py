"""LoRA on any param pytree (Hu et al. 2021, arXiv 2106.09685): W' = W + (alpha / rank) A B.

Adapters are a separate pytree {path: {"a": [..., Din, r], "b": [..., r, Dout]}}, keyed by the "/"-joined
param path of each adapted matrix; leading axes (the stacked layers' L) are kept, so a stacked [L, Din, Dout]
weight gets one adapter per layer. `merge` builds the effective weights inside the jitted step: gradients reach
A and B through it, the base weights stay frozen, and the sampler runs on the merged weights unchanged. The cost
of merging (Din x r x Dout per matrix per step) is small next to a forward over a batch of rollouts.

Init as in the paper: A ~ normal(0, 1 / Din) (HF peft's default is Kaiming-uniform; both keep W' = W at
step 0 because B = 0).
"""
from __future__ import annotations

import re
from typing import Any

import jax
import jax.numpy as jnp

# q/k/v/o and the MLP (tinker-cookbook and peft's "all-linear" minus the head).
DEFAULT_TARGETS = r"(^|/)(wq|wk|wv|wo|w_gate|w_up|w_down)(/|$)"


def _path(keys) -> str:
  parts = []
  for k in keys:
    name = getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))
    if name != "value":          # nnx.Variable leaves flatten to ".../value"
      parts.append(str(name))
  return "/".join(parts)


def targets(params, pattern: str = DEFAULT_TARGETS) -> dict[str, tuple[int, ...]]:
  """{path: shape} of the matrices `pattern` selects (regex searched in the "/"-joined path; ndim >= 2)."""
  leaves = jax.tree_util.tree_flatten_with_path(params)[0]
  found = {_path(k): tuple(v.shape) for k, v in leaves if v.ndim >= 2 and re.search(pattern, _path(k))}
  if not found:
    raise ValueError(f"config.train.lora.targets={pattern!r} matches no matrix; param paths look like "
                     f"{[_path(k) for k, _ in leaves][:6]}")
  return found


def init(params, key: jax.Array, *, rank: int, pattern: str = DEFAULT_TARGETS, dtype=jnp.float32) -> dict[str, Any]:
  """Adapters for every matrix `pattern` selects: a ~ normal(0, 1/Din), b = 0, so the merged model equals the base.

  Raises:
    ValueError: rank <= 0 or above a selected matrix's smaller side; no matrix selected.
  """
  if rank <= 0:
    raise ValueError(f"config.train.lora.rank must be > 0, got {rank} (0 means full fine-tuning: set "
                     "config.train.lora.enabled=False)")
  out = {}
  for i, (path, shape) in enumerate(sorted(targets(params, pattern).items())):
    *lead, d_in, d_out = shape
    if rank > min(d_in, d_out):
      raise ValueError(f"config.train.lora.rank={rank} exceeds {path}'s shape {shape}; use a rank <= {min(d_in, d_out)}")
    a = jax.random.normal(jax.random.fold_in(key, i), (*lead, d_in, rank), dtype) / jnp.sqrt(d_in).astype(dtype)
    out[path] = {"a": a, "b": jnp.zeros((*lead, rank, d_out), dtype)}
  return out


def merge(params, adapters: dict[str, Any], *, scale: float):
  """params with W + scale * A B at every adapted path (scale = alpha / rank); other leaves as they are.

  Raises:
    ValueError: an adapter path that is not a param of `params` (adapters of another model).
  """
  leaves, treedef = jax.tree_util.tree_flatten_with_path(params)
  paths = [_path(k) for k, _ in leaves]
  missing = sorted(set(adapters) - set(paths))
  if missing:
    raise ValueError(f"LoRA adapters for {missing[:3]} do not match this model's params; were they trained on "
                     "another base model?")
  new = []
  for path, (_, w) in zip(paths, leaves):
    if path in adapters:
      ad = adapters[path]
      delta = jnp.matmul(ad["a"], ad["b"], preferred_element_type=jnp.float32) * scale
      w = (w.astype(jnp.float32) + delta).astype(w.dtype)
    new.append(w)
  return jax.tree_util.tree_unflatten(treedef, new)


def count(adapters: dict[str, Any]) -> int:
  """Number of trainable adapter parameters."""
  return sum(int(x.size) for x in jax.tree.leaves(adapters))
