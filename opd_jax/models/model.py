"""`Model` (a loaded checkpoint: graphdef, state, tokenizer, stop ids) and how its state is built leaf by leaf.

Every loader (HF folder, GGUF cache, random `init_params`, a layout change) gives `build` one function
(stacked key, layer index) -> array; `build` fills the abstract `decoder.Decoder` (`decoder.fill`) one leaf at a
time and places each leaf directly on its sharding (`placement`: a mesh gives each leaf the NamedSharding of its
logical axes, `sharding.param_spec`), so no host or device ever holds the whole model twice or on one device.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh, NamedSharding

from opd_jax.models import decoder
from opd_jax.models import sharding as sharding_lib
from opd_jax.models import tokenizer as tokenizer_lib

DTYPES = ("float32", "bfloat16", "float16")
LAYOUTS = ("stacked", "layered")


@dataclasses.dataclass(frozen=True, eq=False)
class Model:
  """A loaded checkpoint. Compared and hashed by identity (params are arrays).

  `graphdef` and `params` are `nnx.split(decoder.Decoder(config))`: jitted functions take `params` (an
  `nnx.State`, a pytree of arrays with their logical axes) and `graphdef` (static) and merge them inside
  (`decoder.merge`). Constructed with `params` a nested dict of arrays in decoder.py's layout (e.g.
  `param_init.init_params`) and no graphdef, the dict is converted (`decoder.from_arrays`, no copy). `config` is
  the one source of the architecture: a graphdef built for another config (`dataclasses.replace(model,
  config=...)`) is rebuilt for this one (the modules' static `config`), the arrays unchanged.
  """
  config: decoder.Config
  params: Any                     # nnx.State of decoder.Decoder (paths in decoder.py's docstring)
  tokenizer: Any                  # transformers PreTrainedTokenizerFast (or None for bare random models)
  stop_ids: tuple[int, ...]       # ids that end a generation (config, generation config and tokenizer EOS)
  name: str
  sha256: str | None              # checksum of the checkpoint file where known (GGUF files and presets)
  source: str                     # where it came from: a path, or "random"
  graphdef: Any = None            # nnx.GraphDef of decoder.Decoder(config) in the params' layout

  def __post_init__(self):
    if self.graphdef is None:
      if not isinstance(self.params, dict):
        raise ValueError("Model(params=...) without graphdef needs a nested dict of arrays in decoder.py's layout "
                         f"(param_init.init_params), got {type(self.params).__name__}; "
                         "pass graphdef= with an nnx.State")
      graphdef, state = decoder.from_arrays(self.config, self.params)
      object.__setattr__(self, "graphdef", graphdef)
      object.__setattr__(self, "params", state)
      return
    module = decoder.merge(self.graphdef, self.params)
    if module.config != self.config:        # e.g. dataclasses.replace(model, config=...): the graphdef follows
      for _, node in nnx.iter_graph(module):
        if isinstance(getattr(node, "config", None), decoder.Config):
          node.config = self.config
      graphdef, state = nnx.split(module)
      object.__setattr__(self, "graphdef", graphdef)
      object.__setattr__(self, "params", state)

  @property
  def module(self) -> decoder.Decoder:
    """The `decoder.Decoder` (merged; for eager use and tests: the hot path merges inside jit)."""
    return decoder.merge(self.graphdef, self.params)

  @property
  def layout(self) -> str:
    """"layered" or "stacked" (decoder.py)."""
    return "layered" if 0 in self.params["layers"] else "stacked"

  @property
  def dtype(self):
    return self.params["embed"].dtype


def resolve_dtype(dtype) -> str:
  """The params dtype name: None -> float32 on CPU, bfloat16 on GPU/TPU; else one of DTYPES."""
  if dtype is None:
    return "float32" if jax.default_backend() == "cpu" else "bfloat16"
  try:
    name = jnp.dtype(dtype).name
  except TypeError:
    name = None
  if name not in DTYPES:
    raise ValueError(f"dtype={dtype!r} is not supported; use one of {DTYPES} (or None for the platform default)")
  return name


def default_layout() -> str:
  """"layered" on every platform: each layer's params and KV cache are arrays of their own, so a decode step
  reads them in place (the stacked layout's `lax.scan` copied every layer's weights and cache slices per step:
  benchmarks/hlo_bytes.py). The stacked layout stays for storage (the converted cache, export)."""
  return "layered"


def check_layout(layout: str | None) -> str:
  layout = layout or default_layout()
  if layout not in LAYOUTS:
    raise ValueError(f"layout must be 'stacked' or 'layered', got {layout!r}")
  return layout


def placement(shardings, config: decoder.Config) -> Callable[[tuple, Any], Any]:
  """(state path, abstract leaf) -> the leaf's jax Sharding, or None (default device).

  shardings: None; a `jax.sharding.Mesh` (each leaf on the NamedSharding of its logical axes, `sharding.RULES`,
  replicated where a mesh axis does not divide it); or a function ("/"-joined path, shape) -> Sharding.
  """
  if shardings is None:
    return lambda path, leaf: None
  if isinstance(shardings, Mesh):
    return lambda path, leaf: NamedSharding(shardings, sharding_lib.param_spec(
        leaf_axes(path, config), leaf.shape, shardings, config.head_dim))
  return lambda path, leaf: shardings("/".join(map(str, path)), leaf.shape)


def leaf_axes(path: tuple, config: decoder.Config) -> tuple:
  """Logical axes of the leaf at `path` (its Param's sharding metadata), layout from the path."""
  _, state = decoder.abstract(config, any(isinstance(p, int) for p in path))
  node = state
  for p in path:
    node = node[p]
  return node.get_metadata().get("out_sharding") or ()


def place(x, sharding):
  """An array on `sharding` (None: the default device; jax arrays then stay where they are). A numpy array
  (memory-mapped or not) reaches each device as its own slice only."""
  if sharding is None:
    return x if isinstance(x, jax.Array) else jax.device_put(x)
  if isinstance(x, jax.Array):
    return jax.device_put(x, sharding)
  return jax.make_array_from_callback(x.shape, sharding, lambda idx: x[idx])


def build(config: decoder.Config, read: Callable[[str, int | None, tuple, Any], Any], *, layout: str, dtype: str,
          shardings=None) -> tuple[nnx.GraphDef, nnx.State]:
  """(graphdef, state) of `decoder.Decoder(config)` in `layout`, filled leaf by leaf.

  read(key, index, shape, dtype) returns one leaf (`decoder.leaf_key`: a per-layer key with index None is the
  stacked [L, ...] array), numpy or jax; it is placed at once (`placement`, `place`) and dropped.
  """
  where = placement(shardings, config)

  def value(path, leaf):
    key, index = decoder.leaf_key(path)
    return place(read(key, index, tuple(leaf.shape), leaf.dtype), where(path, leaf))

  return decoder.fill(config, value, layered=check_layout(layout) == "layered", dtype=dtype)


def with_layout(model: Model, layout: str | None = None) -> Model:
  """The model with params in `layout` ("stacked" | "layered"; None = `default_layout()`); no copy if equal.
  The arrays keep their placement (layer slices of a sharded stacked array stay sharded)."""
  layout = check_layout(layout)
  if layout == model.layout:
    return model
  pure = nnx.to_pure_dict(model.params)
  layers = pure["layers"]

  def read(key, index, shape, dtype):
    if not key.startswith("layers/"):
      return pure[key]
    name = key[len("layers/"):]
    if model.layout == "stacked":
      return layers[name][index]
    return jnp.stack([layers[i][name] for i in range(model.config.n_layers)])

  graphdef, state = build(model.config, read, layout=layout, dtype=jnp.dtype(model.dtype).name)
  return dataclasses.replace(model, graphdef=graphdef, params=state)


def ids(value) -> list[int]:
  if value is None:
    return []
  return [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]


def with_real_ids(config: decoder.Config, tok, where: str) -> decoder.Config:
  """config with n_real_ids = the tokenizer's real tokens (`tokenizer.real_vocab_size`) where the embedding is
  padded past them (None where they fill it), so that the head masks the padding (decoder.Decoder.head).

  Raises:
    ValueError: the tokenizer has more real tokens than the checkpoint has embedding rows, or its real tokens are
      not the ids 0..N-1 (`tokenizer.real_vocab_size`).
  """
  n = tokenizer_lib.real_vocab_size(tok)
  if n > config.vocab_size:
    raise ValueError(f"{where}: the tokenizer has {n} tokens but the checkpoint only {config.vocab_size} embedding "
                     "rows; the tokenizer is not this model's: load the model's own tokenizer")
  return dataclasses.replace(config, n_real_ids=n if n < config.vocab_size else None)
