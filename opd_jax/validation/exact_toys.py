"""An exactly solvable environment for validating the estimators (paper.md, "Exact validation").

A tabular policy over a vocabulary of V tokens and a horizon of H tokens: the next-token logits depend on
(position, previous token), with a start symbol at position 0. A verifier on the full sequence (default:
"sum of tokens = 0 mod 3") gives the reward. Because V^H is small, P_succ(k | u) is computed exactly by
enumerating every continuation, so the Monte Carlo estimators of `opd_jax.study.targeted` can be checked against
exact answers. `ToyPolicy` implements the same `targeted.Policy` protocol as the real student.
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np


def sum_mod_verifier(modulus: int = 3) -> Callable[[Sequence[int]], float]:
  """Reward 1 when the sum of the tokens is 0 mod `modulus`."""
  return lambda seq: float(sum(int(t) for t in seq) % modulus == 0)


@functools.partial(jax.jit, static_argnames=("horizon",))
def _continue(logits, seqs, starts, keys, *, horizon: int):
  """Sample positions > starts[b] of seqs [B, H] from the table logits [H, V+1, V]; step i of row b uses
  fold_in(keys[b], i) with i counted from the first sampled position (as `opd_jax.decode.sampling` does)."""
  V = logits.shape[-1]
  for pos in range(horizon):
    prev = seqs[:, pos - 1] if pos > 0 else jnp.full((seqs.shape[0],), V, seqs.dtype)
    step = pos - starts - 1
    step_keys = jax.vmap(jax.random.fold_in)(keys, jnp.maximum(step, 0))
    draw = jax.vmap(lambda k, z: jax.random.categorical(k, z))(step_keys, logits[pos, prev])
    seqs = seqs.at[:, pos].set(jnp.where(pos > starts, draw.astype(seqs.dtype), seqs[:, pos]))
  return seqs


@dataclasses.dataclass(frozen=True, eq=False)
class ToyPolicy:
  """Tabular policy: logits [H, V + 1, V] indexed by (position, previous token or V at the start)."""
  logits: np.ndarray

  @classmethod
  def random(cls, *, vocab: int = 4, horizon: int = 6, scale: float = 2.5, seed: int = 0) -> "ToyPolicy":
    """Logits ~ N(0, scale^2) per (position, previous token), numpy seed `seed`."""
    rng = np.random.default_rng(seed)
    return cls(rng.normal(0.0, scale, (horizon, vocab + 1, vocab)))

  @property
  def vocab(self) -> int:
    return self.logits.shape[-1]

  @property
  def horizon(self) -> int:
    return self.logits.shape[0]

  def probs(self, prefix: Sequence[int]) -> np.ndarray:
    """Next-token distribution p(. | prefix), float64 [V] (the prefix: response tokens so far)."""
    t = len(prefix)
    prev = prefix[-1] if t else self.vocab
    z = self.logits[t, prev]
    e = np.exp(z - z.max())
    return e / e.sum()

  def exact_p_succ(self, prefix: Sequence[int], verify: Callable[[Sequence[int]], float]) -> np.ndarray:
    """Exact P_succ(k | prefix) for every token k, float64 [V], by enumerating all continuations."""
    out = np.zeros(self.vocab)
    rest = self.horizon - len(prefix) - 1
    for k in range(self.vocab):
      for tail in itertools.product(range(self.vocab), repeat=rest):
        seq = list(prefix) + [k] + list(tail)
        prob = 1.0
        for pos in range(len(prefix) + 1, self.horizon):
          prob *= self.probs(seq[:pos])[seq[pos]]
        out[k] += prob * verify(seq)
    return out

  def sample(self, n: int, *, key: jax.Array) -> np.ndarray:
    """n rollouts from scratch, int32 [n, H]; row r uses fold_in(key, r)."""
    seqs = jnp.zeros((n, self.horizon), jnp.int32)
    keys = jax.vmap(lambda r: jax.random.fold_in(key, r))(jnp.arange(n))
    return np.asarray(_continue(jnp.asarray(self.logits, jnp.float32), seqs, jnp.full((n,), -1), keys,
                                horizon=self.horizon))

  def continue_branches(self, prompt, responses, bases, positions, forced, *, key, row_ids, max_response_len):
    """`targeted.Policy`: force `forced[j]` at position `positions[j]` of `responses[bases[j]]`, sample on."""
    del prompt  # the toy has no prompt: position 0 is the first response token
    if max_response_len != self.horizon:
      raise ValueError(f"the toy's rollouts have exactly H={self.horizon} tokens, got cap {max_response_len}")
    n = len(positions)
    B = 1 << max(0, (n - 1).bit_length())                               # bucketed: few compiles
    seqs = np.zeros((B, self.horizon), np.int32)
    starts = np.full((B,), self.horizon, np.int32)
    for j, (b, t, f) in enumerate(zip(bases, positions, forced)):
      seqs[j, :t] = responses[b][:t]
      seqs[j, t] = f
      starts[j] = t
    ids = np.concatenate([np.asarray(row_ids), np.zeros(B - n)]).astype(np.uint32)
    keys = jax.vmap(lambda r: jax.random.fold_in(key, r))(jnp.asarray(ids))
    out = np.asarray(_continue(jnp.asarray(self.logits, jnp.float32), jnp.asarray(seqs), jnp.asarray(starts),
                               keys, horizon=self.horizon))
    return [(out[j].tolist(), True) for j in range(n)]


def task_verifier(verify: Callable[[Sequence[int]], float]) -> Callable[[list[int], bool], float]:
  """Adapts a sequence verifier to `targeted.estimate_successes`'s (response, finished) -> reward."""
  return lambda response, finished: verify(response) if finished else 0.0
