"""An external Flax NNX teacher with the google/tunix call (models/flax_adapter.py): scoring with it equals numpy
over the module's own full logits (log-probs, predictors, node log-probs), whether it returns or sows its hidden
states; a module or tokenizer that breaks the contract gives one clear ValueError."""
import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from opd_jax.estimators import predictors
from opd_jax.decode import scoring
from opd_jax import models
from opd_jax.models import flax_adapter
from tests.tolerance import fp32_atol

TOK = models.byte_tokenizer()
N = 259                                          # byte_tokenizer's real ids
STUDENT = models.Config(arch="qwen2", vocab_size=N, d_model=16, n_layers=1, n_heads=2, n_kv_heads=1, head_dim=8,
                        d_ff=32, qkv_bias=True, max_seq_len=128)


class TinyLM(nnx.Module):
  """A one-layer causal transformer with the tunix call: learned positions, one attention head, a head with 288
  columns (29 past the tokenizer). mode "return": hidden states in place of logits when output_hidden_states;
  "sow": tunix's way (sown, logits returned); "bad": a [B, L] array in place of the hidden states."""

  def __init__(self, rngs: nnx.Rngs, mode: str = "return", d: int = 24):
    self.mode = mode
    self.embed = nnx.Embed(N, d, rngs=rngs)
    self.pos = nnx.Embed(128, d, rngs=rngs)
    self.qkv = nnx.Linear(d, 3 * d, rngs=rngs)
    self.mlp = nnx.Linear(d, d, rngs=rngs)
    self.norm = nnx.RMSNorm(d, rngs=rngs)
    self.lm_head = nnx.Linear(d, 288, rngs=rngs)

  def __call__(self, input_tokens, positions, cache, attention_mask, output_hidden_states=False):
    x = self.embed(input_tokens) * 3.0 + self.pos(positions)
    q, k, v = jnp.split(self.qkv(x), 3, axis=-1)
    scores = jnp.einsum("bid,bjd->bij", q, k) / np.sqrt(q.shape[-1])
    x = x + jax.nn.softmax(jnp.where(attention_mask, scores, -1e30), axis=-1) @ v
    h = self.norm(x + jax.nn.gelu(self.mlp(x)))
    if output_hidden_states and self.mode == "sow":
      self.sow(nnx.Intermediate, "all_hidden_states", h)
    if output_hidden_states and self.mode != "sow":
      return (h[..., 0] if self.mode == "bad" else h), cache
    return self.decode(h), cache

  def decode(self, h):
    return self.lm_head(h) * 4.0


def draw(tree, seed):
  """numpy normal(0, 0.3) values for every leaf of an abstract tree (no random-init compiles); norm scales ~1."""
  gen = np.random.default_rng(seed)
  return jax.tree_util.tree_map_with_path(lambda path, a: jnp.asarray(
      ("norm" in jax.tree_util.keystr(path)) + gen.normal(size=a.shape) * 0.3, a.dtype), tree)


GRAPHDEF, STATE = nnx.split(nnx.eval_shape(lambda: TinyLM(nnx.Rngs(0))))
STATE = draw(STATE, 1)
BASE = nnx.merge(GRAPHDEF, STATE)


def student_model(tokenizer):
  shapes = jax.eval_shape(lambda: models.init_params(jax.random.key(0), STUDENT))
  return models.Model(config=STUDENT, params=draw(shapes, 0), tokenizer=tokenizer, stop_ids=(), name="student",
                      sha256=None, source="random")


def teacher(mode="return", **kw):
  """A FlaxTeacher of BASE's weights (cloned, so every mode has the same weights) in `mode`."""
  module = nnx.clone(BASE)
  module.mode = mode
  return flax_adapter.from_module(module, head="decode", tokenizer=TOK, name=f"tiny-{mode}", source="test", **kw)


rng = np.random.default_rng(0)
S_PROMPTS = [list(rng.integers(0, N, n)) for n in (5, 2, 7)]
T_PROMPTS = [list(rng.integers(0, N, n)) for n in (9, 1, 7)]
RESPONSES = [list(rng.integers(0, N, n)) for n in (13, 0, 6)]


def log_softmax(z):
  z = z - z.max(-1, keepdims=True)
  return z - np.log(np.exp(z).sum(-1, keepdims=True))


W = 24  # reference rows right-padded to W (causal: later tokens change nothing before them): one compile each


@jax.jit
def module_logits(state, seq):
  """BASE's own logits [W, 288] of one row, positions arange(W), a plain causal mask (no adapter)."""
  logits, _ = nnx.merge(GRAPHDEF, state)(seq[None], jnp.arange(W)[None], None, jnp.tril(jnp.ones((1, W, W), bool)))
  return logits[0]



def reference(student, r):
  """Row r alone, no left padding: (log p, log q) fp64 [L_r, 259] from the student's and BASE's full logits."""
  rows = []
  for model_logits, prompt in ((lambda s: models.logits(student, s[None])[0], S_PROMPTS[r]),
                               (lambda s: module_logits(STATE, s), T_PROMPTS[r])):
    seq = np.zeros(W, np.int32)
    seq[:len(prompt) + len(RESPONSES[r])] = prompt + RESPONSES[r]
    logits = np.asarray(model_logits(jnp.asarray(seq)), np.float64)[:, :N]
    rows.append(log_softmax(logits[len(prompt) - 1:len(prompt) - 1 + len(RESPONSES[r])]))
  return rows


all_predictors = jax.jit(functools.partial(predictors.predictors, beta=0.5, top_k=3))


def test_flax_teacher_scores_like_numpy_on_its_full_logits():
  student = student_model(TOK)
  ext = teacher()
  assert (ext.config.d_model, ext.config.vocab_size, ext.config.real_vocab_size) == (24, 288, N)
  got = scoring.score(student, ext, S_PROMPTS, T_PROMPTS, RESPONSES, chunk=4, top_k=3, return_hidden=True)
  for r, y in enumerate(RESPONSES):
    assert all(len(got[k][r]) == len(y) for k in scoring.DENSE_KEYS)
    if not y:
      continue
    lp, lq = reference(student, r)
    p, q, t = np.exp(lp), np.exp(lq), np.arange(len(y))
    want = {"logp": lp[t, y], "logq": lq[t, y], "kl_pq": (p * (lp - lq)).sum(-1), "kl_qp": (q * (lq - lp)).sum(-1),
            "tv": 0.5 * np.abs(p - q).sum(-1), "entropy_q": -(q * lq).sum(-1)}
    for k, v in want.items():
      np.testing.assert_allclose(got[k][r], v, atol=2e-5, err_msg=k)
    ref = all_predictors(*(np.pad(a, ((0, W - len(y)), (0, 0)), mode="edge").astype(np.float32) for a in (lp, lq)),
                     np.pad(y, (0, W - len(y))))              # padded to W rows: one compile
    for k in predictors.PREDICTORS:                          # every predictor, on the full-vocabulary reference
      np.testing.assert_allclose(got[k][r], np.asarray(ref[k])[:len(y)], atol=2e-5, err_msg=k)
    # The study's node path: the teacher's head at chosen positions (scoring.head_logprobs on "h_q").
    at = [0, len(y) - 1]
    cands = np.array([[y[0], 5, -1], [7, 258, 0]])
    nodes = scoring.head_logprobs(ext, got["h_q"][r][at], cands, top_k=4)
    np.testing.assert_allclose(nodes["logp"][:, :2], [lq[0, [y[0], 5]], lq[-1, [7, 258]]], atol=2e-5)
    np.testing.assert_array_equal(nodes["topk_ids"], np.argsort(-lq[at], axis=-1, kind="stable")[:, :4])
  # One student pass for every view: the student's hidden states reused, and a tunix-style (sown) teacher.
  reused = scoring.score(student, teacher("sow"), S_PROMPTS, T_PROMPTS, RESPONSES, chunk=4, top_k=3,
                         student_hidden=got["h_p"])
  for k in scoring.DENSE_KEYS:
    for r in range(len(RESPONSES)):
      np.testing.assert_allclose(reused[k][r], got[k][r], rtol=0, err_msg=k,   # the same sums, another program
                                 atol=fp32_atol(got[k][r], terms=STUDENT.d_model + STUDENT.d_ff + N))


def test_broken_contract_and_other_tokenizer_raise_one_clear_error():
  with pytest.raises(ValueError, match=r"flax teacher 'tiny-bad': output_hidden_states=True gave shape \(1, 3\), "
                                       r"expected hidden states \[B=1, L=3, D\]"):
    teacher("bad")
  small = lambda module, h: module.decode(h)[..., :100]
  with pytest.raises(ValueError, match=r"the head gave logits \(1, 2, 100\).*V' >= 259"):
    flax_adapter.from_module(nnx.clone(BASE), head=small, tokenizer=TOK, name="small", source="test")
  other = models.byte_tokenizer()
  other.eos_token_id = 257
  student = student_model(other)
  with pytest.raises(ValueError, match="flax teacher 'tiny-return' does not share the student's tokenizer "
                                       r"\(eos_token_id differs"):
    scoring.score(student, teacher(), S_PROMPTS[:1], T_PROMPTS[:1], RESPONSES[:1])
  with pytest.raises(ValueError, match="exceeds the model's context"):
    scoring.score(dataclasses.replace(student, tokenizer=TOK), teacher(max_seq_len=8), S_PROMPTS[:1],
                  T_PROMPTS[:1], RESPONSES[:1])


def smoke_teacher():
  """The factory of a `flax:tests.models.test_flax_adapter:smoke_teacher` spec (a study teacher; see the next test)."""
  module = nnx.merge(GRAPHDEF, draw(STATE, 7))
  return flax_adapter.from_module(module, head="decode", tokenizer=TOK, name="tiny-flax", source="tests",
                                  max_seq_len=128)


def test_a_flax_spec_names_a_study_teacher():
  from opd_jax.study import environment
  teacher = environment.load_model("flax:tests.models.test_flax_adapter:smoke_teacher", None)
  assert isinstance(teacher, flax_adapter.FlaxTeacher) and teacher.name == "tiny-flax"
  for bad, match in (("flax:tests.models.test_flax_adapter", "expected 'flax:<python.module>:<factory>'"),
                     ("flax:tests.no_such_module:f", "cannot import"),
                     ("flax:tests.models.test_flax_adapter:draw_nothing", "cannot import"),
                     ("flax:tests.models.test_flax_adapter:not_a_teacher", "returned")):
    with pytest.raises((ValueError, TypeError), match=match):
      environment.load_model(bad, None)


def not_a_teacher():
  return None
