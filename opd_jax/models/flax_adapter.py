"""An external Flax NNX model as a teacher for scoring: the google/tunix call, its hidden states, a chunked head.

  teacher = flax_adapter.from_module(my_module, head="lm_head", tokenizer=student.tokenizer, name="my-teacher",
                                      source="gs://bucket/ckpt", max_seq_len=8192)
  out = scoring.score(student, teacher, student_prompts, teacher_prompts, responses, return_hidden=True)
  at_nodes = scoring.head_logprobs(teacher, out["h_q"][r][positions], candidates)    # the study's node path

The contract (checked when the teacher is built, with `jax.eval_shape`, and at every trace):
- Call: `module(input_tokens, positions, cache, attention_mask, output_hidden_states=True)` with
    input_tokens   int32 [B, L]     the row's tokens: [left-padded prompt; response], pad slots hold id 0;
    positions      int32 [B, L]     0, 1, .. over each row's real tokens (prompt token i at i, response token t
                                    at prompt_len + t, as the student reads them); 0 at pad slots;
    cache          None             one full forward, no KV cache (the module may return any cache; it is dropped);
    attention_mask bool [B, L, L]   mask[b, i, j]: query i may attend key j, i.e. j <= i and slot j is a real
                                    token; a pad query sees only itself (no row is fully masked);
  and returns `(x, cache)`.
- Hidden states: the final-normed hidden states h [B, L, D] (the input of the output head), either returned as
  `x` in place of the logits when output_hidden_states=True, or sown with `self.sow(nnx.Intermediate,
  "all_hidden_states", h)` (as tunix's Gemma / Llama / Qwen do; `x` is then the logits, which the adapter
  ignores: inside jit they are never computed). D is read from the module (eval_shape); a sown value wins.
- Head: `head` is a callable `head(module, h) -> logits [..., V']` or the dotted name of a method of the module
  called as `head(h)` (e.g. "lm_head", or "embedder.decode" for a tied embedding). V' >= the tokenizer's real
  ids V (`tokenizer.real_vocab_size`); logits past V are dropped. The head runs on C positions at a time
  (scoring's chunk) or on the node rows (`scoring.head_logprobs`): no [B, T, V] array exists; the log-softmax
  is in fp32.
- Tokenizer: the student's (scoring.score checks it with `tokenizer_difference`, `FlaxTeacher.check_student`).

Memory: the forward over [prompt; response] is the module's own (e.g. B H L^2 attention scores), not scoring's
chunked KV-cache stream; the hidden states are kept for the whole row ([B, L, D]).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
from flax import nnx

from opd_jax.models import tokenizer as tokenizer_lib
from opd_jax.models import tokenizer_compare

SOWN = "all_hidden_states"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config:
  """What scoring reads of a teacher's architecture (the names of `decoder.Config`); static under jit."""
  vocab_size: int                 # V': columns of the head's logits
  n_real_ids: int                 # V: the tokenizer's real ids (`real_vocab_size`)
  d_model: int                    # D of the hidden states
  max_seq_len: int                # prompt + response longer than this are refused

  @property
  def real_vocab_size(self) -> int:
    return self.n_real_ids


def _contract_error(name: str, what: str) -> ValueError:
  return ValueError(
      f"flax teacher {name!r}: {what}. The module must be called as module(input_tokens [B, L], positions [B, L], "
      "None, attention_mask [B, L, L], output_hidden_states=True) and return (h, cache) with h the final-normed "
      f"hidden states [B, L, D] (or sow them as nnx.Intermediate {SOWN!r}); the head maps h [..., D] to logits "
      "[..., V'] with V' >= the tokenizer's ids (opd_jax/models/flax_adapter.py)")


class Adapter(nnx.Module):
  """The user's module with its head and `Config`: what scoring merges inside jit (`decoder.merge`)."""

  def __init__(self, module: nnx.Module, head: str | Callable, config: Config | None, name: str):
    self.module, self.head_fn, self.config, self.name = module, head, config, name

  def hidden(self, tokens: jax.Array, positions: jax.Array, mask: jax.Array) -> jax.Array:
    """The module's final-normed hidden states [B, L, D] (contract in the module docstring)."""
    (x, _), sown = nnx.capture(self.module, nnx.Intermediate)(tokens, positions, None, mask,
                                                              output_hidden_states=True)
    sown = [v.get_value() for path, v in nnx.to_flat_state(sown) if path[-1] == SOWN]
    h = sown[-1] if sown else x
    h = h[-1] if isinstance(h, (tuple, list)) else h
    B, L = tokens.shape
    want = "D" if self.config is None else self.config.d_model
    if getattr(h, "ndim", 0) != 3 or h.shape[:2] != (B, L) or (self.config is not None and h.shape[2] != want):
      raise _contract_error(self.name, f"output_hidden_states=True gave shape {getattr(h, 'shape', type(h))}, "
                                       f"expected hidden states [B={B}, L={L}, {want}]")
    return h

  def head(self, h: jax.Array) -> jax.Array:
    """fp32 logits [..., V'] at hidden states h [..., D]."""
    if callable(self.head_fn):
      logits = self.head_fn(self.module, h)
    else:
      fn = self.module
      for part in self.head_fn.split("."):
        fn = getattr(fn, part)
      logits = fn(h)
    if self.config is not None and (logits.shape[:-1] != h.shape[:-1] or logits.shape[-1] < self.config.n_real_ids):
      raise _contract_error(self.name, f"the head gave logits {logits.shape} for h {h.shape}, expected "
                                       f"[..., V' >= {self.config.n_real_ids}]")
    return logits.astype(jnp.float32)

  def feed_hidden(self, prompt, prompt_len, response, lengths, width: int) -> jax.Array:
    """Hidden states [B, width, D] that predict response tokens 0..width-1 (scoring's feed columns: the last
    prompt token, then response tokens 0..width-2), from one forward over [prompt; response[:, :width - 1]].

    prompt int32 [B, P] left-padded with prompt_len [B] real tokens; response int32 [B, T] right-padded with
    lengths [B] real tokens (garbage beyond: masked).
    """
    B, P = prompt.shape
    response = jnp.pad(response, ((0, 0), (0, max(0, width - 1 - response.shape[1]))))[:, :width - 1]
    tokens = jnp.concatenate([prompt, response], axis=1).astype(jnp.int32)           # [B, L]
    col = jnp.arange(tokens.shape[1], dtype=jnp.int32)[None, :]
    real = (col >= P - prompt_len[:, None]) & (col < P + lengths[:, None])
    positions = jnp.where(real, jnp.cumsum(real, axis=1, dtype=jnp.int32) - 1, 0)
    causal = col[:, :, None] >= col[:, None, :]                                       # [1, L, L]: j <= i
    mask = (causal & real[:, None, :]) | jnp.eye(tokens.shape[1], dtype=bool)[None]
    h = self.hidden(jnp.where(real, tokens, 0), positions, mask)
    return h[:, P - 1:]


@dataclasses.dataclass(frozen=True, eq=False)
class FlaxTeacher:
  """A `models.Model`-like teacher for `scoring.score` / `scoring.head_logprobs` (build it with `from_module`).

  `graphdef` and `params` are `nnx.split` of an `Adapter` (the user's module, its head, `config`): scoring merges
  them inside jit like a `decoder.Decoder`. Compared and hashed by identity.
  """
  config: Config
  params: Any                     # nnx.State of the Adapter (the user's module's variables under "module")
  tokenizer: Any                  # the student's tokenizer (`check_student`)
  name: str
  source: str                     # where the weights came from (for the manifest)
  graphdef: Any
  sha256: str | None = None
  stop_ids: tuple[int, ...] = ()
  _checked: set = dataclasses.field(default_factory=set, repr=False, compare=False)

  @property
  def dtype(self):
    """The dtype of the first floating-point param (for the manifest)."""
    return next((x.dtype for x in jax.tree.leaves(self.params) if jnp.issubdtype(x.dtype, jnp.floating)), None)

  def check_student(self, student) -> None:
    """Raises ValueError unless the student's tokenizer is this teacher's (`tokenizer_difference`; once per
    student tokenizer). A student without a tokenizer (bare random models) is checked by vocabulary size only
    (`heads.check_vocab`)."""
    tok = getattr(student, "tokenizer", None)
    if tok is None or tok is self.tokenizer or id(tok) in self._checked:
      return
    diff = tokenizer_compare.tokenizer_difference(tok, self.tokenizer)
    if diff is not None:
      raise ValueError(f"flax teacher {self.name!r} does not share the student's tokenizer ({diff}); build it "
                       "with the student's tokenizer (per-token distillation needs identical ids)")
    self._checked.add(id(tok))


def from_module(module: nnx.Module, *, head: str | Callable, tokenizer, name: str, source: str,
                max_seq_len: int = 32768, sha256: str | None = None) -> FlaxTeacher:
  """A `FlaxTeacher` of an external `nnx.Module` with the tunix call (contract: module docstring).

  Args:
    module: the model, weights loaded (its variables become the teacher's params; the module is not copied).
    head: `head(module, h) -> logits [..., V']`, or the dotted name of a method of the module taking h.
    tokenizer: the student's tokenizer (a transformers tokenizer: its real ids are V).
    name, source: the teacher's name and where its weights came from (manifest); sha256: a checksum or None.
    max_seq_len: the module's context length (longer prompt + response are refused by scoring).
  Raises:
    ValueError: the module or head breaks the contract (checked with `jax.eval_shape` on a 2-token row: no
      compute), or a head with fewer columns than the tokenizer's ids.
  """
  if not isinstance(module, nnx.Module):
    raise ValueError(f"flax teacher {name!r}: module must be a flax.nnx.Module, got {type(module).__name__}")
  if not (callable(head) or isinstance(head, str)):
    raise ValueError(f"flax teacher {name!r}: head must be a callable head(module, h) or a method name such as "
                     f"'lm_head', got {head!r}")
  n_real = tokenizer_lib.real_vocab_size(tokenizer)
  graphdef, state = nnx.split(Adapter(module, head, None, name))
  ids, one = jnp.zeros((1, 2), jnp.int32), jnp.ones((1,), jnp.int32)

  def probe(state):
    adapter = nnx.merge(graphdef, state)
    h = adapter.feed_hidden(ids, one, ids, one, 2)
    return h, adapter.head(h)
  try:
    h, logits = jax.eval_shape(probe, state)
  except ValueError:
    raise
  except Exception as e:                   # a module that cannot take the call at all
    raise _contract_error(name, f"the call failed with {type(e).__name__}: {e}") from e
  if logits.ndim != 3 or logits.shape[:2] != h.shape[:2] or logits.shape[-1] < n_real:
    raise _contract_error(name, f"the head gave logits {logits.shape} for h {h.shape}, expected [..., V' >= "
                                f"{n_real}] (the tokenizer's real ids)")
  config = Config(vocab_size=logits.shape[-1], n_real_ids=n_real, d_model=h.shape[-1], max_seq_len=max_seq_len)
  graphdef, params = nnx.split(Adapter(module, head, config, name))
  stop = () if tokenizer.eos_token_id is None else (int(tokenizer.eos_token_id),)
  return FlaxTeacher(config=config, params=params, tokenizer=tokenizer, name=name, source=source,
                     graphdef=graphdef, sha256=sha256, stop_ids=stop)


def load(spec: str) -> FlaxTeacher:
  """The teacher of a config spec `flax:<python.module>:<factory>`: imports the module and calls factory(),
  which returns a `FlaxTeacher` (`from_module`). E.g. `--configuration=mine=flax:my_pkg.teachers:gemma:plain:
  reverse_kl` in a study.

  Raises:
    ValueError: a malformed spec, a module or factory that cannot be found, or a factory that does not return a
      FlaxTeacher (naming the spec).
  """
  import importlib  # pylint: disable=g-import-not-at-top
  _, module_name, factory = (str(spec).split(":") + ["", ""])[:3]
  if not (str(spec).startswith("flax:") and module_name and factory):
    raise ValueError(f"flax teacher spec {spec!r}: expected 'flax:<python.module>:<factory>'")
  try:
    fn = getattr(importlib.import_module(module_name), factory)
  except (ImportError, AttributeError) as e:
    raise ValueError(f"flax teacher spec {spec!r}: cannot import {module_name}.{factory} ({e}); put the module on "
                     "PYTHONPATH") from e
  teacher = fn()
  if not isinstance(teacher, FlaxTeacher):
    raise ValueError(f"flax teacher spec {spec!r}: {module_name}.{factory}() returned {type(teacher).__name__}, "
                     "not a FlaxTeacher (build it with flax_adapter.from_module)")
  return teacher
