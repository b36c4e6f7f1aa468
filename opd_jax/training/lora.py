"""LoRA on any param pytree (Hu et al. 2021, arXiv 2106.09685): W' = W + (alpha / rank) A B.

Adapters are a separate pytree {path: {"a": [..., Din, r], "b": [..., r, Dout]}}, keyed by the "/"-joined
param path of each adapted matrix; leading axes (the stacked layers' L) are kept, so a stacked [L, Din, Dout]
weight gets one adapter per layer. Init as in the paper: A ~ normal(0, 1 / Din) (HF peft's default is
Kaiming-uniform; both keep W' = W at step 0 because B = 0).

Two ways to hand W' to a forward:

  adapt(params, adapters, scale=)  what the trainer differentiates and samples from (training/step.py, loop.py,
      lookahead.py). A matrix stored in fp32 is merged (W + s A B in fp32: one rounding at 2^-24 of W). A bf16 /
      fp16 matrix of `decoder.Block` stays unmerged, an `Adapted(W, A, B, s)`, and the Block's `h @ w` computes
      h W + s (h A) B (the paper's forward, eq. 3, and peft's LoraLayer.forward), accumulated in fp32 and rounded
      once to the activation dtype. Merging there would round the update away: bf16 keeps 8 significant bits,
      so an entry of s A B below half an ulp of W (2^-9 to 2^-8 of |W|) leaves W' = W. On random models with
      d_model 1024 and the trainer's default AdamW (lr 1e-4, rank 16, alpha 32), 75% of the adapted entries did
      not change in the first step and the loss moved 0.59x what the fp32 model of the adapters moves; unmerged,
      1.00x (issue 26, item 5; peft#1388, unsloth#3091, torchtune#1101).
  merge(params, adapters, scale=, dtype=)  plain arrays W + s A B summed in fp32 and cast once, to W's dtype (for
      references) or to `dtype`. The trainer's export (training/loop.py, `export_student`) keeps the merged
      matrices in fp32 (dtype=float32): cast back to bf16 they would lose the update as a bf16 merge does
      (issue 34, item 4).

Gradients reach A and B through either; the base weights are an input, never updated. Unmerged costs
2 r (Din + Dout) extra FLOPs per token per matrix (~2 r / D of the matmul; 3% at r 16, D 1024) and needs no
merged copy of the adapted weights.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any

import jax
import jax.numpy as jnp

# q/k/v/o and the MLP (tinker-cookbook and peft's "all-linear" minus the head).
DEFAULT_TARGETS = r"(^|/)(wq|wk|wv|wo|w_gate|w_up|w_down)(/|$)"
# The matrices decoder.Block reads only as `h @ w` (its dense matmuls): the ones `adapt` can keep unmerged.
BLOCK_MATMULS = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Adapted:
  """A weight with its LoRA update kept apart; `x @ Adapted(w, a, b, scale)` is x W + scale (x A) B (`dense`).

  w [..., Din, Dout] the frozen base (any float dtype); a [..., Din, r], b [..., r, Dout] the adapters (fp32 from
  `init`), leading axes (stacked layers) equal. A pytree of three arrays (scale static): jit, the decoder's scan
  over stacked layers and the sampler's param shardings handle it as they do any param. `decoder.Block` writes
  `h @ w`; a jax array defers `@` to an operand type it does not know, so Python calls `__rmatmul__`.
  """
  w: jax.Array
  a: jax.Array
  b: jax.Array
  scale: float = dataclasses.field(metadata=dict(static=True))

  def __getitem__(self, index):
    """`param[...]` (how an nnx.Variable reads its value): the weight itself.

    Raises:
      TypeError: any other index (slice the arrays themselves: `jax.tree.map(lambda x: x[i], adapted)`).
    """
    if index is not Ellipsis:
      raise TypeError(f"an Adapted weight supports only [...], got [{index!r}]")
    return self

  def __rmatmul__(self, x):
    return dense(x, self)


def dense(x: jax.Array, w: Adapted) -> jax.Array:
  """x [..., Din] @ (W + scale A B) without forming W + scale A B: x W + scale (x A) B (Hu et al. eq. 3).

  x W runs in the dtypes of x and W (a bf16 matmul stays one) with an fp32 result; x A and (x A) B in fp32 (x is
  promoted; the platform's default matmul precision; r columns, ~2 r / D of the FLOPs); their sum is rounded once
  to result_type(x, W) (bf16 for a bf16 model, as `h @ w` was). Returns [..., Dout].
  """
  y = jnp.matmul(x, w.w, preferred_element_type=jnp.float32)
  xa = jnp.matmul(x, w.a, preferred_element_type=jnp.float32)
  delta = jnp.matmul(xa, w.b, preferred_element_type=jnp.float32)
  return (y + w.scale * delta).astype(jnp.result_type(x, w.w))


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
      raise ValueError(f"config.train.lora.rank={rank} exceeds {path}'s shape {shape}; use a rank <= "
                       f"{min(d_in, d_out)}")
    a = jax.random.normal(jax.random.fold_in(key, i), (*lead, d_in, rank), dtype) / jnp.sqrt(d_in).astype(dtype)
    out[path] = {"a": a, "b": jnp.zeros((*lead, rank, d_out), dtype)}
  return out


def _leaves(params, adapters):
  leaves, treedef = jax.tree_util.tree_flatten_with_path(params)
  paths = [_path(k) for k, _ in leaves]
  missing = sorted(set(adapters) - set(paths))
  if missing:
    raise ValueError(f"LoRA adapters for {missing[:3]} do not match this model's params; were they trained on "
                     "another base model?")
  return paths, [w for _, w in leaves], treedef


def _merged(w, ad, scale, dtype=None):
  delta = jnp.matmul(ad["a"], ad["b"], preferred_element_type=jnp.float32) * scale
  return (w.astype(jnp.float32) + delta).astype(w.dtype if dtype is None else dtype)


def merge(params, adapters: dict[str, Any], *, scale: float, dtype=None):
  """params with W + scale * A B at every adapted path (scale = alpha / rank), summed in fp32 and cast once to
  `dtype` (None: W's own dtype); other leaves as they are.

  With dtype None a bf16 W rounds small updates away (module docstring), so forwards use `adapt`; dtype=float32
  keeps W + s A B to one fp32 rounding (2^-24 of |W'|) whatever W's dtype: the trainer's export. The result then
  mixes dtypes (bf16 leaves beside fp32 merged matrices): `models/export.write_hf` writes such params, a jitted
  forward of them would promote activations to fp32.

  Raises:
    ValueError: an adapter path that is not a param of `params` (adapters of another model).
  """
  paths, leaves, treedef = _leaves(params, adapters)
  return jax.tree_util.tree_unflatten(
      treedef, [_merged(w, adapters[p], scale, dtype) if p in adapters else w for p, w in zip(paths, leaves)])


def adapt(params, adapters: dict[str, Any], *, scale: float, keep_apart: bool = False):
  """params as the forward should read them (module docstring): every adapted fp32 matrix merged (exactly `merge`:
  fp32 runs compute what they did before), every adapted narrower one (bf16, fp16) an `Adapted(W, A, B, scale)`
  that `decoder.Block`'s `h @ w` computes unmerged.

  keep_apart: fp32 matrices of BLOCK_MATMULS unmerged too (the trainer's step, training/step.py): no merged copy
  of the adapted weights inside the step (the 0.5B student: ~1.4 GB) and no [Din, Dout] gradient of W' per
  matrix; the same function up to fp32 round-off (x W + s (x A) B summed in fp32 against x (W + s A B)).

  In the "layered" layout (paths layers/<i>/<name>) a name adapted in some layers is `Adapted` in all of them, with
  zero adapters where it has none (h W + 0, the same value): the decoder stacks the layers' params for a remat scan
  and needs one structure. Other leaves are returned as they are.

  Raises:
    ValueError: adapters of another model (as `merge`), or an adapted bf16 / fp16 matrix that decoder.Block does
      not read as `h @ w` (not one of BLOCK_MATMULS, e.g. the embedding or the head): merging it would round the
      update away.
  """
  paths, leaves, treedef = _leaves(params, adapters)
  layer_key = lambda p: re.sub(r"(^|/)layers/\d+/", r"\1layers/*/", p)
  by_layer_key = {layer_key(p): ad for p, ad in adapters.items()}
  new = []
  for p, w in zip(paths, leaves):
    name = p.rsplit("/", 1)[-1]
    narrow = jnp.issubdtype(w.dtype, jnp.floating) and jnp.finfo(w.dtype).bits < 32
    apart = narrow or (keep_apart and name in BLOCK_MATMULS)
    if p in adapters and not apart:
      w = _merged(w, adapters[p], scale)
    elif p in adapters and name not in BLOCK_MATMULS:
      raise ValueError(f"LoRA target {p} is {jnp.dtype(w.dtype).name}: merged, its update would round away "
                       f"(decoder.Block keeps only {BLOCK_MATMULS} unmerged); adapt those (config.train.lora.targets) "
                       "or load the model in float32")
    elif p in adapters:
      w = Adapted(w, adapters[p]["a"], adapters[p]["b"], scale)
    elif apart and layer_key(p) != p and layer_key(p) in by_layer_key:
      ad = by_layer_key[layer_key(p)]
      w = Adapted(w, jnp.zeros_like(ad["a"]), jnp.zeros_like(ad["b"]), scale)
    new.append(w)
  return jax.tree_util.tree_unflatten(treedef, new)


def count(adapters: dict[str, Any]) -> int:
  """Number of trainable adapter parameters."""
  return sum(int(x.size) for x in jax.tree.leaves(adapters))
