"""Prefix branching (docs/decode.md): continuations that share a rollout prefix decode from one prefill of it.
`prefill_sequences` fills a cache with the node rollouts once; `branch` starts every (node, candidate, replicate)
row from its node's cut in that cache with the candidate forced, then decodes them with `sampling`'s compacting
loop (rows that stop leave the batch)."""
from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from opd_jax.decode import sampling
from opd_jax.models import decoder
from opd_jax.models import sharding
from opd_jax.models.sharding import CACHE, PARAMS, REPLICATED, ROWS


@sharding.sharded_jit(in_specs=(PARAMS, CACHE, REPLICATED, REPLICATED, ROWS, ROWS, ROWS),
                      out_specs=(CACHE, ROWS, ROWS, ROWS),
                      static_argnames=("graphdef", "slots", "prefix_slots", "stop_ids"))
def _branch_start(params, base_cache, node_row, node_cut, group, cut_pos, forced, *, graphdef, slots: int,
                  prefix_slots: int, stop_ids):
  """Jitted start of `branch`: each node's prefix once, then the forced tokens.

  The G nodes' prefixes are gathered once into a shared prefix (`decoder.with_prefix`): node g's is the first
  `prefix_slots` >= node_cut[g] slots of base row node_row[g]'s tokens (rows are left-padded: its real slots
  are the last ones; a window that would run past the row ends at it), with the slots at positions
  >= node_cut[g] masked. Branch b (group[b] its node, cut_pos[b] = node_cut[group[b]]) gets its own cache of
  `slots` slots for its suffix and reads the prefix through shared-prefix attention.

  Returns the decode state: cache, logits fp32 [NB, V], next positions [NB], and done [NB] (a forced stop ends
  the rollout at once).
  """
  model = decoder.merge(graphdef, params)
  pos = base_cache["pos"][node_row]                                            # [G, S_base]
  first = pos.shape[1] - jnp.sum(pos >= 0, axis=-1)                            # the first real slot of each row
  window = jax.vmap(lambda a, i: jax.lax.dynamic_slice_in_dim(a, i, prefix_slots, axis=-2))   # clamped at the end
  prefix = {"k": tuple(window(a[node_row], first) for a in base_cache["k"]),
            "v": tuple(window(a[node_row], first) for a in base_cache["v"])}
  pos = jax.vmap(lambda a, i: jax.lax.dynamic_slice_in_dim(a, i, prefix_slots))(pos, first)
  prefix["pos"] = jnp.where(pos >= node_cut[:, None], -1, pos)
  cache = decoder.with_prefix(model.init_cache(forced.shape[0], slots), prefix, group)
  logits, cache = model(forced[:, None], cut_pos[:, None], cache)
  stops = jnp.asarray(stop_ids if stop_ids else (-1,), jnp.int32)
  return cache, logits[:, 0], cut_pos + 1, jnp.any(forced[:, None] == stops[None, :], axis=-1)


def prefill_sequences(model, sequences: Sequence[Sequence[int]]):
  """One sampling.prefill of whole base rollouts (prompt + response ids) for later `branch` calls.

  Returns the KV cache (rows = len(sequences), left-padded; each row's tokens sit at positions 0..).
  """
  B, P = len(sequences), sampling.bucket(max(len(s) for s in sequences), 16)
  tokens, positions = sampling.left_pad(sequences, P, 0)
  sampling.COUNTERS["prefill_calls"] += 1
  sampling.COUNTERS["prefill_rows"] += B
  _, cache = sampling.prefill(model.params, tokens, positions, graphdef=model.graphdef, cache_size=P)
  return cache


def branch(model, base_cache, *, base_rows: Sequence[int], prefix_lens: Sequence[int],
           forced_tokens: Sequence[int], key: jax.Array, max_new_tokens: int, row_ids: Sequence[int],
           caps: Sequence[int] | None = None, temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
           stop_ids=None, pad_id: int = 0, pad_to: int = 1, segment: int = sampling.SEGMENT,
           min_rows: int = sampling.MIN_ROWS, progress=None, early_exit: bool | None = None,
           span_states: Sequence[int] | None = None, span_table=None) -> sampling.Samples:
  """Continue base rollouts from prefix positions with forced first tokens (targeted rollouts).

  Branch j reads base row `base_rows[j]` of `base_cache` (from `prefill_sequences`) truncated to its first
  `prefix_lens[j]` tokens (prompt + response prefix: the slots at positions >= prefix_lens[j] are masked),
  appends `forced_tokens[j]` at position prefix_lens[j], then samples up to `max_new_tokens` tokens. A forced
  stop token ends the branch at once (length 0, finished). `caps[j]` <= max_new_tokens (default: all
  max_new_tokens) caps branch j's own length; a row's tokens never depend on the others'. Equal to sampling
  from scratch with the prompt `sequence[:prefix_len] + [forced]` and the same key and row id (up to float
  round-off in the logits). Rows are padded to at least `pad_to` (fixed-size callers compile once); rows that
  stopped leave the batch every `segment` steps, as in `sample` (`progress` and `early_exit` as there).

  Answer stop (optional, `opd_jax.decode.stops`): `span_table` int8 [S, V] (numpy or on device) and `span_states[j]`,
  branch j's automaton state after its prefix and forced token; branch j stops, finished, at the token that
  closes its first answer span (at once, length 0, when its state is already the last one).

  One copy of each node's prefix serves all its branches: the G distinct (base row, prefix length) pairs of the
  call are gathered once into a shared prefix [G, K, Sp, Dh] per layer (G rounded up to a power of two; Sp the
  longest prefix rounded up to a power of two >= sampling.GROW, at most the base width S_base), and each branch holds
  only its own suffix, at most N + 1 slots, grown as it generates (shared-prefix attention,
  `decoder.with_prefix`; `sampling.decode_compacting`). So a call's KV memory is at most G x Sp + NB x (N + 1) slots
  instead of NB x (S_base + N + 1), and each decode step reads each prefix once and the suffix slots written so
  far; the prefix attention costs G x its FLOPs (every query against every prefix, masked).

  Returns:
    `sampling.Samples` of the continuations after the forced token: tokens [NB, N], logprobs, lengths, finished.
  """
  config = model.config
  sp = sampling.SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k)
  stop = tuple(sorted(set(model.stop_ids if stop_ids is None else stop_ids)))
  nb = len(base_rows)
  if not (nb == len(prefix_lens) == len(forced_tokens) == len(row_ids)):
    raise ValueError("base_rows, prefix_lens, forced_tokens and row_ids must have the same length")
  if max(prefix_lens) + 1 + max_new_tokens > config.max_seq_len:
    raise ValueError(f"prefix + 1 + max_new_tokens={max_new_tokens} exceeds the model's context "
                     f"({config.max_seq_len})")
  NB = sharding.pad_rows(max(sampling.bucket(nb, 1), pad_to), sharding.mesh_of(model.params))  # pad_to: one shape
  fill = lambda xs, v: np.concatenate([np.asarray(xs), np.full(NB - nb, v)]).astype(np.int32)
  cut = fill(prefix_lens, 0)
  forced = fill(forced_tokens, stop[0] if stop else 0)                 # dummy rows: forced stop, no work
  ids = np.concatenate([np.asarray(row_ids), np.arange(NB - nb) + 2**30]).astype(np.uint32)
  row_caps = fill([max_new_tokens] * nb if caps is None else caps, 0)
  nodes: dict[tuple[int, int], int] = {}                               # (base row, prefix length) -> group
  group = fill([nodes.setdefault((int(b), int(c)), len(nodes)) for b, c in zip(base_rows, prefix_lens)], 0)
  G = sampling.bucket(len(nodes), 1)                                           # few shapes; extra groups see nothing
  node_row = np.array([b for b, _ in nodes] + [0] * (G - len(nodes)), np.int32)
  node_cut = np.array([c for _, c in nodes] + [0] * (G - len(nodes)), np.int32)
  cut[nb:] = node_cut[0]
  sampling.COUNTERS["branch_calls"] += 1
  sampling.COUNTERS["branch_rows"] += nb
  sampling.COUNTERS["branch_prefixes"] += len(nodes)
  keys = sampling.row_keys(key, jnp.asarray(ids))
  width = base_cache["pos"].shape[1]                                   # prefix window: few shapes, >= every cut
  prefix_slots = min(width, max(sampling.GROW, 1 << (int(node_cut.max()) - 1).bit_length()))
  cache, logits, next_pos, done = _branch_start(
      model.params, base_cache, node_row, node_cut, group, cut, forced, graphdef=model.graphdef,
      slots=sampling.cache_slots(1 + min(segment, max_new_tokens), max_new_tokens + 1), prefix_slots=prefix_slots,
      stop_ids=stop)
  done = np.asarray(done)
  span = None
  if span_table is not None:
    if span_states is None or len(span_states) != nb:
      raise ValueError(f"span_table needs span_states, one per branch ({nb})")
    span = fill(span_states, 0)
    span_table = jnp.asarray(span_table)
    done = done | (span == span_table.shape[0] - 1)                   # the prefix already closed its answer
  out = sampling.decode_compacting(model.params, cache, logits, next_pos, keys, done, row_caps,
                           graphdef=model.graphdef, sp=sp, max_new_tokens=max_new_tokens, stop_ids=stop,
                           pad_id=pad_id, segment=segment, min_rows=min_rows, progress=progress,
                           early_exit=early_exit, span=span, table=span_table)
  return sampling.Samples(*(a[:nb] for a in out))
