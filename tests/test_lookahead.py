"""One-step lookahead (training/lookahead.py): the first-order identity and the local change (i) against numpy."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from opd_jax import contexts
from opd_jax import models
from opd_jax import sampling
from opd_jax.training import lookahead
from opd_jax.training import lora


CFG = models.Config(arch="qwen2", vocab_size=48, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8,
                    d_ff=64, qkv_bias=True)


@pytest.fixture(scope="module")
def setup():
  student = models.random_model(CFG, seed=0, layout="stacked")
  base = student.params
  adapters = lora.init(base, jax.random.key(3), rank=4)
  rng = np.random.default_rng(0)
  prompt, response = rng.integers(3, 48, 9).tolist(), rng.integers(3, 48, 6).tolist()
  cands = np.array([response[4]] + [t for t in (17, 22, 31, 40) if t != response[4]][:4], np.int64)
  ref = lookahead.NodeRef(question_id="q", question_index=0, rollout_id=0, position=4, m=0, positions=(4,),
                          correct=False, prompt=prompt, response=response, candidates=cands,
                          p=np.full(5, 0.2), p_succ=np.array([0.25, 1.0, 0.0, 0.5, 0.75]), rewards=[],
                          degenerate=False)
  q = (ref.p_succ + 0.05) / np.sum(ref.p_succ + 0.05)         # a teacher that favours success: a large first-order term
  kw = dict(graphdef=student.graphdef, lora_scale=2.0, policy=sampling.SamplingParams(),
            vocab_size=student.config.real_vocab_size, normalize=True)
  return student, base, adapters, ref, q, kw


def _logits(student, params, tokens):
  """Full-vocabulary logits of the last token: one causal forward of the unpadded sequence (`models.logits`, not
  the lookahead's left-padded batch)."""
  z = models.logits(dataclasses.replace(student, params=params), np.array([tokens]))
  return np.asarray(z[0, -1], np.float64)


def _value(z, ref):
  logp = z - z.max() - np.log(np.sum(np.exp(z - z.max())))
  p = np.exp(logp[ref.candidates])
  return np.sum(p / p.sum() * ref.p_succ)


def test_predicted_change_is_the_first_order_term_of_the_local_change(setup):
  student, base, adapters, ref, q, kw = setup
  conf = contexts.parse("c", "self:solution:reverse_kl")
  rel = []
  for eta in (1e-1, 3e-2, 1e-2):                     # below ~3e-3 fp32 round-off (~1e-4 relative) takes over
    out, _ = lookahead.node_step(student, adapters, base, ref, 5, q, 0.0, conf, eta, **kw)
    assert out["loss_new"] < out["loss"]                    # a descent step on the node's loss
    rel.append(abs(out["local"] - out["predicted"]) / abs(out["predicted"]))
  assert rel[1] < 0.3 * rel[0] and rel[2] < 0.3 * rel[1] and rel[2] < 1e-3, rel      # (i) - predicted = O(eta^2)


def test_local_change_matches_numpy_from_the_new_logits(setup):
  student, base, adapters, ref, q, kw = setup
  conf = contexts.parse("c", "self:solution:reverse_kl")        # the first test's compile (same shapes)
  for eta in (3e-2, 1e-3):
    out, new = lookahead.node_step(student, adapters, base, ref, 5, q, 0.0, conf, eta, **kw)
    tokens = ref.prompt + ref.response[:ref.position]
    v0 = _value(_logits(student, base, tokens), ref)                         # B = 0: the base model
    v1 = _value(_logits(student, lora.merge(base, new, scale=2.0), tokens), ref)
    np.testing.assert_allclose(out["value"], v0, rtol=1e-5)
    np.testing.assert_allclose(out["local"], v1 - v0, rtol=1e-3, atol=1e-7)
    assert abs(out["local"]) > 1e-4 and np.all(np.asarray(new[next(iter(new))]["b"]) != 0)
