"""The real programs of a study, compiled for abstract shapes (no weights, no device): their FLOPs from XLA's cost
analysis and their bytes metered from the optimized HLO (`opd_jax/cost/hlo_bytes.py`), per call kind (prefill,
decode step, branch step, scoring chunk, predictors). `opd_jax/cost/estimate.py` prices a plan's calls with them."""
from __future__ import annotations

import dataclasses
import functools
import os

import jax
import jax.numpy as jnp

from opd_jax import flops
from opd_jax.cost import hlo_bytes
from opd_jax.decode import heads
from opd_jax.decode import sampling
from opd_jax.decode import scoring
from opd_jax.estimators import predictors
from opd_jax.models import decoder


def _abstract(fn, *args):
  return jax.eval_shape(fn, *args)


def _params(cfg: decoder.Config):
  """(graphdef, abstract state) of the model in the "layered" layout."""
  return decoder.abstract(cfg, True)


def _cache(cfg: decoder.Config, rows: int, slots: int):
  return _abstract(lambda: decoder.init_cache(cfg, rows, slots, jnp.float32))


def _i32(*shape):
  return jax.ShapeDtypeStruct(shape, jnp.int32)


def _f32(*shape):
  return jax.ShapeDtypeStruct(shape, jnp.float32)


def _program(kind: str, cfg: decoder.Config, rows: int, tokens: int, slots: int, groups: int = 0, prefix: int = 0):
  """(function, abstract args) of one program call; kinds: "prefill" (sampling.prefill of [rows, tokens] into a
  cache of `slots`), "decode" (one step of sampling.decode: draw + forward of [rows, 1]), "chunk" (one scoring
  chunk of one side: scoring._logprob_step on [rows, tokens]), "prompt" (one prompt-prefill chunk of scoring:
  hidden states into the cache), "head" (the student's head only: log-softmax of the logits of [rows, tokens]
  hidden states), "predictors" (predictors.predictors on two [rows, tokens, V] log-prob arrays)."""
  g, p = _params(cfg)
  V = cfg.real_vocab_size
  if kind == "prefill":
    return (lambda p, t, q: sampling.prefill.fun(p, t, q, graphdef=g, cache_size=slots)), (p, _i32(rows, tokens),
                                                                                            _i32(rows, tokens))
  if kind == "decode":
    keys = _abstract(lambda: jax.random.split(jax.random.key(0), rows))
    fn = lambda p, c, lg, pos, k, d, caps: sampling.decode.fun(
        p, c, lg, pos, k, d, caps, 0, graphdef=g, sp=sampling.SamplingParams(), max_new_tokens=1, stop_ids=(0,),
        early_exit=False)
    cache = _cache(cfg, rows, slots)
    if groups:                                     # a branch batch: node prefixes held once (branching.branch)
      cache = _abstract(lambda c, q: decoder.with_prefix(c, q, jnp.zeros((rows,), jnp.int32)), cache,
                        _cache(cfg, groups, prefix))
    return fn, (p, cache, _f32(rows, cfg.vocab_size), _i32(rows), keys, jax.ShapeDtypeStruct((rows,), jnp.bool_),
                _i32(rows))
  if kind == "chunk":
    fn = lambda p, c, t, q: scoring._logprob_step(decoder.merge(g, p), c, t, q)  # pylint: disable=protected-access
    return fn, (p, _cache(cfg, rows, slots), _i32(rows, tokens), _i32(rows, tokens))
  if kind == "prompt":
    fn = lambda p, c, t, q: decoder.merge(g, p).hidden_states(t, q, c)[1]
    return fn, (p, _cache(cfg, rows, slots), _i32(rows, tokens), _i32(rows, tokens))
  if kind == "head":
    real_logits = heads.real_logits  # pylint: disable=protected-access
    fn = lambda p, h: jax.nn.log_softmax(real_logits(decoder.merge(g, p), h), axis=-1)
    return fn, (p, _f32(rows, tokens, cfg.d_model))
  if kind == "predictors":
    fn = lambda a, b, y: predictors.predictors(a, b, y, beta=0.5, top_k=8)
    return fn, (_f32(rows, tokens, V), _f32(rows, tokens, V), _i32(rows, tokens))
  raise ValueError(f"unknown program kind {kind!r}")


@functools.lru_cache(maxsize=None)
def _compiled(kind: str, cfg: decoder.Config, rows: int, tokens: int, slots: int, groups: int = 0,
              prefix: int = 0) -> tuple[float, float]:
  """(XLA:CPU's FLOPs, metered bytes) of one call, compiled for the CPU whatever the default backend: XLA:GPU's
  cost analysis leaves out the matmuls it hands to cuBLAS (a scoring program on an H200 reported 0.05x its
  matmul FLOPs). Bytes: `hlo_bytes.analyze` of the compiled HLO, the cache and logits donated as in
  `sampling.decode` (operand + output bytes of every op, fp32)."""
  fn, args = _program(kind, cfg, rows, tokens, slots, groups, prefix)
  try:
    cpu = jax.sharding.SingleDeviceSharding(jax.devices("cpu")[0])
    args = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=cpu), args)
  except RuntimeError:                                   # JAX_PLATFORMS without cpu: the default backend's count
    pass
  compiled = jax.jit(fn, donate_argnums=(1, 2) if kind == "decode" else ()).lower(*args).compile()
  return flops.xla_cost(compiled)["flops"], hlo_bytes.analyze(compiled).bytes


def _compiled_flops(*key) -> float:
  return _compiled(*key)[0]


def _flops_keys(kind: str, cfg: decoder.Config, rows: int, tokens: int, slots: int, groups: int = 0,
                prefix: int = 0) -> list[tuple]:
  """The `_compiled` arguments that `program_flops` and `decode_bytes` need."""
  if kind in ("head", "predictors") or cfg.n_layers <= 2:
    return [(kind, cfg, rows, tokens, slots, groups, prefix)]
  return [(kind, dataclasses.replace(cfg, n_layers=n), rows, tokens, slots, groups, prefix) for n in (1, 2)]


def compile_all(cs: list) -> None:
  """Compiles every distinct program of `cs` (`estimate.Call`s) once, in threads (XLA compiles release the GIL)."""
  import concurrent.futures  # pylint: disable=g-import-not-at-top
  todo = list(dict.fromkeys(k for c in cs for k in _flops_keys(c.kind, c.cfg, c.rows, c.tokens, c.slots, c.groups,
                                                                c.prefix)))
  with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1))) as pool:
    list(pool.map(lambda k: _compiled(*k), todo))


def _compiled_bytes(*key) -> float:
  return _compiled(*key)[1]


def _by_depth(of, kind, cfg, rows, tokens, slots, groups, prefix) -> float:
  """`of(key)` (FLOPs or bytes of one compile) at the full depth L, from 1 and 2 layers (`program_flops`)."""
  keys = _flops_keys(kind, cfg, rows, tokens, slots, groups, prefix)
  if len(keys) == 1:                                              # no extrapolation needed: one compile
    return of(*keys[0])
  f1, f2 = (of(*k) for k in keys)
  return f1 + (cfg.n_layers - 1) * (f2 - f1)


def program_flops(kind: str, cfg: decoder.Config, rows: int, tokens: int = 1, slots: int = 0, groups: int = 0,
                  prefix: int = 0) -> float:
  """XLA FLOPs of one call of `_program(kind, ...)` for the full depth L: compiled with 1 and 2 layers,
  f1 + (L - 1) (f2 - f1) (layered layout: no loop that XLA would count once; exact when the layers are
  identical, also where XLA drops the last layer's unused outputs); L <= 2 is compiled as is."""
  return _by_depth(_compiled_flops, kind, cfg, rows, tokens, slots, groups, prefix)


def decode_bytes(cfg: decoder.Config, rows: int, slots: int, bytes_per_el: int, groups: int = 0,
                 prefix: int = 0) -> float:
  """Bytes of one decode step of the compiled program (`sampling.decode`; with `groups` node prefixes of `prefix`
  slots held once, a branch batch): metered on its HLO (`hlo_bytes`) at 1 and 2 layers and extrapolated to L
  as `program_flops`. Compiled in fp32 on the CPU; bytes_per_el 2 (bf16 weights and KV cache on an accelerator)
  halves it, so the fp32 logits and softmax statistics are under-counted 2x there (a few % of a step)."""
  return _by_depth(_compiled_bytes, "decode", cfg, rows, 1, slots, groups, prefix) * bytes_per_el / 4


def program_bytes(kind: str, cfg: decoder.Config, rows: int, tokens: int, slots: int, bytes_per_el: int,
                  groups: int = 0, prefix: int = 0) -> float:
  """HBM bytes of one call. "decode": the compiled program's (`decode_bytes`). Else analytic: the matmul weights
  once and the KV cache over all slots (`flops.decode_bytes_per_step`; the head's weights only for "head", none
  for "predictors") plus the fp32 [rows, tokens, V] log-prob arrays written and read (the last position only for
  "prefill")."""
  if kind == "decode":
    return decode_bytes(cfg, rows, slots, bytes_per_el, groups, prefix)
  V = cfg.real_vocab_size
  logits = 2 * rows * (1 if kind in ("prefill", "decode") else tokens) * V * 4
  if kind == "head":
    return cfg.d_model * cfg.vocab_size * bytes_per_el + logits
  if kind == "predictors":
    return 2 * logits
  body = flops.decode_bytes_per_step(cfg, rows, slots, bytes_per_el)
  return body if kind == "prompt" else body + logits
