"""Log-probabilities from final hidden states, over the ids that exist: the head's logits less the embedding
padding (`real_logits`), their log-softmax, and at the nodes the candidates' and top-k log-probs under the raw
or a processed policy (`node_outputs`); `check_vocab` checks that a student and a teacher share those ids."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from opd_jax.decode import sampling
from opd_jax.models import decoder


def real_logits(model, h):
  """fp32 logits [..., V] over the ids that exist, V = config.real_vocab_size: the head's logits less the
  embedding padding (-inf there, decoder.head), so a student and a teacher padded to different sizes score on the
  same shared ids (check_vocab), and every softmax is the one over the real ids."""
  logits, n = model.head(h), model.config.real_vocab_size
  return logits if logits.shape[-1] == n else logits[..., :n]


def logprobs_of(model, h):
  """fp32 log-softmax [..., V] over the real ids of the next-token logits at final hidden states h [..., D]."""
  return jax.nn.log_softmax(real_logits(model, h), axis=-1)


def node_outputs(model, h, candidates, valid, *, top_k, policy=None):
  """Full-vocabulary log-probs at node hidden states h [B, M, D]: gathered at candidates and top-k.

  policy: None (raw log-softmax) or a `sampling.SamplingParams` whose distribution is taken instead
  (`sampling.policy_logprobs`: temperature, top-k, top-p, renormalised).
  """
  if policy is None:
    logp = logprobs_of(model, h)                                                # [B, M, V]
  else:
    logp = sampling.policy_logprobs(real_logits(model, h), policy)
  ok = valid[..., None] & (candidates >= 0)
  at = jnp.take_along_axis(logp, jnp.where(ok, candidates, 0), axis=-1)
  top_lp, top_ids = jax.lax.top_k(logp, top_k)
  return (jnp.where(ok, at, -jnp.inf), jnp.where(valid[..., None], top_ids, -1).astype(jnp.int32),
          jnp.where(valid[..., None], top_lp, -jnp.inf))


def check_vocab(s_config: decoder.Config, t_config: decoder.Config) -> None:
  """Raises ValueError unless student and teacher have the same number of real ids (paper.md: shared tokenizer;
  `Config.real_vocab_size`). Their embeddings may be padded differently (Qwen2.5 0.5B: 151,936 rows, 7B:
  152,064, one tokenizer of 151,665 ids): scoring uses the shared real ids only."""
  if s_config.real_vocab_size != t_config.real_vocab_size:
    raise ValueError(f"student and teacher must share the tokenizer, but their real vocabularies differ: student "
                     f"{s_config.real_vocab_size} ids, teacher {t_config.real_vocab_size} (embedding rows "
                     f"{s_config.vocab_size} and {t_config.vocab_size}); pick a teacher of the student's family "
                     "with the same tokenizer")
