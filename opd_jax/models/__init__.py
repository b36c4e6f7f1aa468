"""Models: load a checkpoint (preset, HF folder or GGUF file) and run it.

  model = models.load("qwen2.5-coder-0.5b-instruct")          # or an HF folder, or a .gguf path
  tokens = np.asarray([models.chat_ids(model.tokenizer, messages)])   # int [1, T]: the template's BOS only
  logits = models.logits(model, tokens)                        # fp32 [1, T, V]; -inf past the real ids

Prompts are built by `chat_ids` only (the study's `contexts.render_chat` calls it): the chat template writes the
special tokens and the tokenizer adds none. (`tokenizer(apply_chat_template(..., tokenize=False))` would add a
second BOS for tokenizers that add one and whose template writes it too.)

`Model` fields: config (decoder.Config; n_real_ids = the tokenizer's real tokens, `tokenizer.real_vocab_size`,
where the embedding is padded past them), graphdef and params (`nnx.split` of `decoder.Decoder`: jitted functions
take the state and merge it with the static graphdef inside; `model.module` merges eagerly), tokenizer (transformers
PreTrainedTokenizerFast), stop_ids, name, sha256 (checkpoint file checksum where known), source.
Presets (offline weights in pip packages): qwen2.5-coder-0.5b-instruct (student), qwen2.5-coder-1.5b-instruct
(teacher), smollm2-135m-instruct (own tokenizer); see checkpoints.py for the modules and cache.py for the
cache under $OPD_JAX_CACHE.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from opd_jax.models import checkpoints
from opd_jax.models import decoder
from opd_jax.models import sharding
from opd_jax.models import tokenizer
from opd_jax.models.checkpoints import CONVERTER_VERSION, PRESETS, Model, default_layout, load, peek, with_layout
from opd_jax.models.decoder import Config
from opd_jax.models.param_init import init_params
from opd_jax.models.tokenizer import byte_tokenizer, chat_ids, real_vocab_size
from opd_jax.models.tokenizer_compare import (check_same_tokenizer, same_tokenizer, tokenizer_difference,
                                              tokenizer_differences)

__all__ = ["CONVERTER_VERSION", "PRESETS", "Config", "Model", "byte_tokenizer", "chat_ids", "check_same_tokenizer",
           "checkpoints", "decoder",
           "default_layout", "with_layout", "init_params", "load", "logits", "peek", "random_model", "real_vocab_size",
           "same_tokenizer", "tokenizer", "tokenizer_difference", "tokenizer_differences"]


@sharding.sharded_jit(in_specs=(sharding.PARAMS, sharding.ROWS), out_specs=sharding.ROWS,
                      static_argnames=("graphdef",))
def _logits(params, tokens, *, graphdef):
  positions = jnp.broadcast_to(jnp.arange(tokens.shape[1], dtype=jnp.int32), tokens.shape)
  return decoder.merge(graphdef, params)(tokens, positions)[0]


def logits(model: Model, tokens) -> jax.Array:
  """Full causal forward: int tokens [B, T] (numpy or jax) -> fp32 logits [B, T, V], positions arange(T).

  Jit-compiled once per (config, shape, dtype). V is the checkpoint's vocabulary rows (may exceed the
  tokenizer's size: Qwen pads its embedding); the logits of the padded ids, >= config.n_real_ids, are -inf.

  Raises:
    ValueError: tokens not 2-D, or ids outside [0, config.real_vocab_size).
  """
  tokens = np.asarray(tokens) if not isinstance(tokens, jax.Array) else tokens
  if tokens.ndim != 2:
    raise ValueError(f"tokens must be [B, T], got shape {tuple(tokens.shape)}; add a batch axis with tokens[None]")
  lo, hi, n = int(tokens.min()), int(tokens.max()), model.config.real_vocab_size
  if lo < 0 or hi >= n:
    raise ValueError(f"token ids must be in [0, {n}), got range [{lo}, {hi}]")
  return _logits(model.params, jnp.asarray(tokens, jnp.int32), graphdef=model.graphdef)


def random_model(config: Config, *, seed: int, tokenizer=None, dtype=jnp.float32, layout: str | None = None) -> Model:
  """A randomly initialised model (param_init.init_params) for tests and smoke runs.

  Args:
    config: the architecture; its vocab_size must cover the tokenizer's ids (byte_tokenizer(): 259); set
      n_real_ids to mask padded rows past them (None: every row is a token, whatever the tokenizer).
    seed: PRNG seed of the params.
    tokenizer: None, or a tokenizer (e.g. `byte_tokenizer()`); its eos id becomes the stop id.
    dtype: params dtype.
    layout: "stacked" | "layered" (decoder.py); None = `default_layout()`.
  """
  if tokenizer is not None and len(tokenizer) > config.vocab_size:
    raise ValueError(f"config.vocab_size={config.vocab_size} is smaller than the tokenizer's {len(tokenizer)} "
                     "tokens; raise vocab_size")
  stop = () if tokenizer is None or tokenizer.eos_token_id is None else (int(tokenizer.eos_token_id),)
  params = init_params(jax.random.key(seed), config, dtype=dtype)
  return with_layout(Model(config=config, params=params, tokenizer=tokenizer, stop_ids=stop,
                          name=f"random-{config.arch}-seed{seed}", sha256=None, source="random"), layout)
