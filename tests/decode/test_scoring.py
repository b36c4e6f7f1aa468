"""Scoring: chunked streaming equals a per-row full forward, teacher alignment, exact self-teacher, masks from
lengths, candidate gathering, and logits memory that stays flat in T."""
import functools
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from opd_jax.estimators import predictors, gradients
from opd_jax.study import nodes, targeted
from opd_jax.decode import sampling, scoring
from opd_jax import models
from opd_jax.models import decoder
from opd_jax.models import param_init

V = 97
STUDENT = decoder.Config(arch="qwen2", vocab_size=V, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8,
                         d_ff=64, qkv_bias=True, max_seq_len=512)
TEACHER = decoder.Config(arch="qwen3", vocab_size=V, d_model=48, n_layers=2, n_heads=2, n_kv_heads=1,
                         head_dim=16, d_ff=64, qk_norm=True, tie_embeddings=True, max_seq_len=512)

rng = np.random.default_rng(0)
# Ragged rows: teacher contexts longer, shorter and equal to the student's; an empty response; pad id 0 inside.
S_PROMPTS = [list(rng.integers(1, V, n)) for n in (5, 3, 9, 1)]
T_PROMPTS = [list(rng.integers(1, V, n)) for n in (12, 1, 4, 6)]
RESPONSES = [list(rng.integers(1, V, n)) for n in (37, 20, 0, 11)]
RESPONSES[0][7] = RESPONSES[0][30] = RESPONSES[1][0] = 0      # the pad id, inside the lengths

W = 64  # the references run each row alone, right-padded to W (causal: later tokens cannot change earlier ones)
BETA, TOP_K = 0.3, 5


def random_model(config, seed):
  """param_init.init_params' layout with numpy values (no compile): normal(0, 0.3) weights (peaked distributions),
  norm scales normal(1, 0.1)."""
  shapes = jax.eval_shape(lambda: param_init.init_params(jax.random.key(0), config))
  gen = np.random.default_rng(seed)

  def draw(path, s):
    is_norm = "norm" in jax.tree_util.keystr(path)
    return jnp.asarray(is_norm + gen.normal(size=s.shape) * (0.1 if is_norm else 0.3), s.dtype)

  return models.Model(config=config, params=jax.tree_util.tree_map_with_path(draw, shapes), tokenizer=None,
                      stop_ids=(), name="test", sha256=None, source="random")


@pytest.fixture(scope="module")
def student():
  return random_model(STUDENT, 0)


@pytest.fixture(scope="module")
def teacher():
  return random_model(TEACHER, 1)


@functools.partial(jax.jit, static_argnames="config")
def full_log_softmax(params, seq, *, config):
  logits, _ = decoder.forward(params, seq[None], jnp.arange(seq.shape[0])[None], config=config)
  return jax.nn.log_softmax(logits[0], axis=-1)


def row_logprobs(model, prompt, response):
  """Reference: one row alone, full causal forward (no cache, no chunks), fp32 log-softmax [len(response), V]
  at the positions predicting the response tokens."""
  seq = np.zeros(W, np.int32)
  seq[:len(prompt) + len(response)] = list(prompt) + list(response)
  out = np.asarray(full_log_softmax(model.params, jnp.asarray(seq), config=model.config))
  return out[len(prompt) - 1:len(prompt) - 1 + len(response)]


def ref_predictors(logp, logq, tokens):
  """predictors.predictors on one row's reference log-probs (padded to W rows: one compile for every row)."""
  L = len(tokens)
  pad = lambda a: np.concatenate([a, np.repeat(a[:1], W - L, 0)])
  ids = np.zeros(W, np.int32)
  ids[:L] = tokens
  out = predictors.predictors(pad(logp), pad(logq), jnp.asarray(ids), beta=BETA, top_k=TOP_K)
  return {k: np.asarray(v)[:L] for k, v in out.items()}


def padded(prompts, width):
  """Left-padded prompts with garbage (not 0) in the pad slots, and their lengths."""
  out = np.asarray(rng.integers(1, V, (len(prompts), width)), np.int32)
  for r, p in enumerate(prompts):
    out[r, width - len(p):] = p
  return out, np.array([len(p) for p in prompts], np.int32)


def test_chunked_stream_matches_per_row_reference(student, teacher):
  T = 37                                                      # not a multiple of the chunk
  response = np.asarray(rng.integers(1, V, (4, T)), np.int32)  # garbage beyond each length
  for r, y in enumerate(RESPONSES):
    response[r, :len(y)] = y
  lengths = np.array([len(y) for y in RESPONSES], np.int32)
  args = (*padded(S_PROMPTS, 11), *padded(T_PROMPTS, 16), response, lengths)
  got = scoring.score_arrays(student.params, teacher.params, *args, s_graphdef=student.graphdef,
                             t_graphdef=teacher.graphdef, chunk=8,
                             top_k=TOP_K, beta=BETA)
  got = {k: np.asarray(v) for k, v in got.items()}
  np.testing.assert_array_equal(got["mask"], np.arange(T)[None] < lengths[:, None])
  for r, y in enumerate(RESPONSES):
    L = len(y)
    for k in scoring.DENSE_KEYS:                              # masked positions are exactly 0
      assert np.all(got[k][r, L:] == 0.0), k
    if not L:
      continue
    logp, logq = row_logprobs(student, S_PROMPTS[r], y), row_logprobs(teacher, T_PROMPTS[r], y)
    ids = np.asarray(y)[:, None]
    np.testing.assert_allclose(got["logp"][r, :L], np.take_along_axis(logp, ids, 1)[:, 0], atol=1e-5)
    np.testing.assert_allclose(got["logq"][r, :L], np.take_along_axis(logq, ids, 1)[:, 0], atol=1e-5)
    want = ref_predictors(logp, logq, y)
    for k in predictors.PREDICTORS:
      np.testing.assert_allclose(got[k][r, :L], want[k], atol=1e-5, err_msg=k)
  assert got["kl_pq"][0, :37].min() > 1e-3                    # a real teacher: the check above is not vacuous
  # The pad id 0 inside a length is scored like any token (its log-prob is finite and not the masked 0).
  assert got["logp"][0, 7] < 0 and got["logp"][1, 0] < 0
  # Masks come from the lengths: other garbage beyond them and in the prompt pads changes nothing, bitwise.
  response2 = np.where(got["mask"], response, 0).astype(np.int32)
  args2 = (*padded(S_PROMPTS, 11), *padded(T_PROMPTS, 16), response2, lengths)
  got2 = scoring.score_arrays(student.params, teacher.params, *args2, s_graphdef=student.graphdef,
                              t_graphdef=teacher.graphdef, chunk=8,
                              top_k=TOP_K, beta=BETA)
  for k in scoring.DENSE_KEYS:
    np.testing.assert_array_equal(np.asarray(got2[k]), got[k], err_msg=k)


def test_self_teacher_plain_is_exactly_zero_and_privileged_context_is_aligned(student):
  plain = scoring.score(student, student, S_PROMPTS, S_PROMPTS, RESPONSES, chunk=8, top_k=TOP_K,
                        beta=BETA, return_hidden=True)
  context = scoring.score(student, student, S_PROMPTS, T_PROMPTS, RESPONSES, chunk=8, top_k=TOP_K, beta=BETA)
  for r, y in enumerate(RESPONSES):
    assert all(len(plain[k][r]) == len(y) for k in scoring.DENSE_KEYS)
    if not y:
      continue
    np.testing.assert_array_equal(plain["logp"][r], plain["logq"][r])          # bitwise
    np.testing.assert_array_equal(plain["h_p"][r], plain["h_q"][r])            # so p = q at nodes too
    np.testing.assert_array_equal(plain["entropy_p"][r], plain["entropy_q"][r])
    for k in ("kl_pq", "kl_qp", "js", "jsd_beta", "tv", "logq_minus_logp"):
      assert np.all(plain[k][r] == 0.0), (k, plain[k][r])
    assert np.all(plain["cosine"][r] == 1.0) and np.all(plain["topk_overlap"][r] == 1.0)
    # Same model, another context of another length: q_c follows the teacher's own prompt, token for token.
    logp, logq = row_logprobs(student, S_PROMPTS[r], y), row_logprobs(student, T_PROMPTS[r], y)
    ids = np.asarray(y)[:, None]
    np.testing.assert_allclose(context["logp"][r], np.take_along_axis(logp, ids, 1)[:, 0], atol=1e-5)
    np.testing.assert_allclose(context["logq"][r], np.take_along_axis(logq, ids, 1)[:, 0], atol=1e-5)
    np.testing.assert_allclose(plain["entropy_p"][r], -np.sum(np.exp(logp) * logp, -1), atol=1e-5)
    want = ref_predictors(logp, logq, y)
    for k in predictors.PREDICTORS:
      np.testing.assert_allclose(context[k][r], want[k], atol=1e-5, err_msg=k)
    assert context["kl_pq"][r].max() > 1e-3


def test_one_student_pass_serves_every_view(student, teacher, monkeypatch):
  """score(..., student_hidden=h_p of a first view) runs only the student's head and equals a full score of the
  view: an external teacher, a self-teacher in another context, and the self:plain view (no body at all)."""
  first = scoring.score(student, teacher, S_PROMPTS, T_PROMPTS, RESPONSES, chunk=8, top_k=TOP_K, beta=BETA,
                        return_hidden=True)
  layers = []
  original = decoder.Decoder.hidden_states
  monkeypatch.setattr(decoder.Decoder, "hidden_states", lambda self, *a, **k: (layers.append(self.embed.shape),
                                                                               original(self, *a, **k))[1])
  views = ((teacher, T_PROMPTS, [teacher.params["embed"].shape]),     # external: the teacher's body only
           (student, T_PROMPTS, [student.params["embed"].shape]),     # self, other context: one body (teacher side)
           (student, S_PROMPTS, []))                                  # self:plain: no body at all
  for t_model, t_prompts, bodies in views:
    want = first if t_model is teacher else scoring.score(student, t_model, S_PROMPTS, t_prompts, RESPONSES,
                                                          chunk=8, top_k=TOP_K, beta=BETA)
    layers.clear()
    got = scoring.score(student, t_model, S_PROMPTS, t_prompts, RESPONSES, chunk=8, top_k=TOP_K, beta=BETA,
                        student_hidden=first["h_p"])
    for k in scoring.DENSE_KEYS:
      for r in range(len(RESPONSES)):
        np.testing.assert_allclose(got[k][r], want[k][r], atol=1e-5, err_msg=k)
    assert sorted(set(layers)) == bodies                      # traced model bodies of the reuse call
  plain = got
  for r, y in enumerate(RESPONSES):
    np.testing.assert_array_equal(plain["logp"][r], plain["logq"][r])
  with pytest.raises(ValueError, match="student_hidden"):
    scoring.score(student, teacher, S_PROMPTS, T_PROMPTS, RESPONSES, student_hidden=first["h_p"][:2])


def test_a_prompt_shared_by_rows_is_prefilled_once(student, teacher, monkeypatch):
  """The rollouts of a question share the student's prompt and most teacher contexts: `score` prefills each
  distinct prompt of a batch once (U = 2 per side for 4 rows here) and copies its KV cache to its rows, and every
  row still equals its own reference (full forward of that row alone)."""
  s_prompts = [S_PROMPTS[0], S_PROMPTS[2], S_PROMPTS[0], S_PROMPTS[0]]
  t_prompts = [T_PROMPTS[3], T_PROMPTS[3], T_PROMPTS[0], T_PROMPTS[3]]
  responses = [RESPONSES[1], RESPONSES[3], RESPONSES[0], RESPONSES[1][:5]]
  seen, original = [], scoring._prefill
  monkeypatch.setattr(scoring, "_prefill", lambda model, prompt, *a, **k: (
      seen.append((model.config.d_model, prompt.shape[0])), original(model, prompt, *a, **k))[1])
  got = scoring.score(student, teacher, s_prompts, t_prompts, responses, chunk=7, top_k=TOP_K, beta=BETA)  # new trace
  assert sorted(seen) == [(STUDENT.d_model, 2), (TEACHER.d_model, 2)]
  for r, y in enumerate(responses):
    logp, logq = row_logprobs(student, s_prompts[r], y), row_logprobs(teacher, t_prompts[r], y)
    ids = np.asarray(y)[:, None]
    np.testing.assert_allclose(got["logp"][r], np.take_along_axis(logp, ids, 1)[:, 0], atol=1e-5)
    np.testing.assert_allclose(got["logq"][r], np.take_along_axis(logq, ids, 1)[:, 0], atol=1e-5)
    want = ref_predictors(logp, logq, y)
    for k in predictors.PREDICTORS:
      np.testing.assert_allclose(got[k][r], want[k], atol=1e-5, err_msg=k)


def test_head_logprobs_at_nodes_gather_full_log_softmax_and_top_k(student, teacher):
  """The study's node path: `head_logprobs` on the hidden states of `score(..., return_hidden=True)` gives p and
  q_c at candidates and their top-k, equal to a per-row full forward (and renormalised on C(u) like
  gradients.restrict on the full vocabulary)."""
  nodes = [[0, 36, 7, 20], [19], [], [3, 4]]
  candidates = [[[1, 2, 3], [RESPONSES[0][36]], [], [0, 96, 5, 6, 50]], [[9, 8]], [], [[4], [11, 12]]]
  scored = scoring.score(student, teacher, S_PROMPTS, T_PROMPTS, RESPONSES, chunk=8, top_k=TOP_K, beta=BETA,
                         return_hidden=True)
  for r, y in enumerate(RESPONSES):
    if not nodes[r]:
      continue
    cand = np.full((len(nodes[r]), 5), -1)
    for m, c in enumerate(candidates[r]):
      cand[m, :len(c)] = c
    for model, h, ref in ((student, scored["h_p"][r], row_logprobs(student, S_PROMPTS[r], y)),
                          (teacher, scored["h_q"][r], row_logprobs(teacher, T_PROMPTS[r], y))):
      got = scoring.head_logprobs(model, h[nodes[r]], cand, top_k=6)
      assert got["logp"].shape == (len(nodes[r]), 5) and got["topk_ids"].shape == (len(nodes[r]), 6)
      for m, t in enumerate(nodes[r]):
        c = candidates[r][m]
        np.testing.assert_allclose(got["logp"][m, :len(c)], ref[t, c], atol=1e-5)
        assert np.all(got["logp"][m, len(c):] == -np.inf)
        np.testing.assert_array_equal(got["topk_ids"][m], np.argsort(-ref[t], kind="stable")[:6])
        np.testing.assert_allclose(got["topk_logp"][m], np.sort(ref[t])[::-1][:6], atol=1e-5)
      # Renormalising the gathered values equals gradients.restrict on the full vocabulary. The tolerance follows
      # from the one above, not from a host: log-probs within d = 1e-5 give log p_c within 2d (a softmax of them)
      # and log mass within d, so |p_c - p_ref| <= p_ref (e^{2d} - 1) and |mass - mass_ref| <= mass_ref (e^d - 1),
      # plus fp32 rounding of the exp (a few ulp of values <= 1).
      slots = np.where(cand >= 0, np.arange(5), -1)
      p_c, mass = gradients.restrict(jnp.asarray(got["logp"]), jnp.asarray(slots))
      p_ref, mass_ref = gradients.restrict(jnp.asarray(ref[nodes[r]]), jnp.asarray(cand))
      d, ulps = 1e-5, 4 * np.finfo(np.float32).eps
      np.testing.assert_allclose(np.asarray(p_c), np.asarray(p_ref), rtol=np.expm1(2 * d) + ulps, atol=ulps)
      np.testing.assert_allclose(np.asarray(mass), np.asarray(mass_ref), rtol=np.expm1(d) + ulps, atol=ulps)


def test_nodes_of_several_rollouts_share_one_head_call_per_model_and_distribution(student, teacher, monkeypatch):
  """nodes.at_nodes over 3 rollouts: C(u) and p, q_v at C(u) equal head_logprobs of each rollout alone, with the
  student's sampled policy on p, the scaled teacher on every q_v (the student's self-teacher view too), and one
  head call per (model, distribution) and phase for all rollouts: 2 + 3 calls, not 3 x (3 + 3)."""
  gen = np.random.default_rng(5)
  h = lambda L, D: gen.normal(size=(L, D)).astype(np.float32)
  ext, own = ("ext", "plain"), ("self", "solution")
  views = [ext, own]
  rollouts = []
  for i, L in enumerate((6, 9, 4)):
    teachers = {ext: (teacher, h(L, TEACHER.d_model))}
    if i != 1:                                                # rollout 1 has no context for the self view
      teachers[own] = (student, h(L, STUDENT.d_model))
    rollouts.append(nodes.NodeInputs(h(L, STUDENT.d_model), teachers, list(gen.integers(1, V, L)),
                                     sorted(gen.choice(L, 3, replace=False).tolist())))
  pol, t_pol = sampling.SamplingParams(temperature=0.7), sampling.SamplingParams(temperature=1.3)
  calls, original = [], scoring.head_logprobs
  monkeypatch.setattr(scoring, "head_logprobs", lambda *a, **k: (calls.append(1), original(*a, **k))[1])
  got = nodes.at_nodes(student, rollouts, views, student_top_k=2, teacher_top_k=1, policy=pol, teacher_policy=t_pol)
  assert len(calls) == 5
  for x, at in zip(rollouts, got):
    pos = x.positions
    top = lambda model, hh: original(model, hh[pos], top_k=2)["topk_ids"]
    s_top = top(student, x.h_p)
    t_tops = [top(*x.teachers[v])[:, :1] for v in views if v in x.teachers]
    want = np.stack([targeted.candidate_set(x.response[t], s_top[m], [tt[m] for tt in t_tops], 1 + 2 + len(views))
                     for m, t in enumerate(pos)])
    np.testing.assert_array_equal(at.candidates, want)
    np.testing.assert_allclose(at.p_at, original(student, x.h_p[pos], want, policy=pol)["logp"], atol=1e-5)
    for v in views:
      if v not in x.teachers:
        assert at.q_at[v] is None
        continue
      model, hq = x.teachers[v]
      np.testing.assert_allclose(at.q_at[v], original(model, hq[pos], want, policy=t_pol)["logp"], atol=1e-5)
  assert not np.allclose(got[0].q_at[own], original(student, rollouts[0].teachers[own][1][rollouts[0].positions],
                                                     got[0].candidates, policy=pol)["logp"])   # t_pol, not pol


def test_bad_inputs_raise_clear_errors(student, teacher):
  other = decoder.Config(arch="llama", vocab_size=V + 1, d_model=16, n_layers=1, n_heads=2, n_kv_heads=2,
                         head_dim=8, d_ff=32)
  wrong_vocab = types.SimpleNamespace(config=other, params=None)
  with pytest.raises(ValueError, match="real vocabularies differ: student 97 ids, teacher 98"):
    scoring.score(student, wrong_vocab, [[1]], [[1]], [[2]])
  with pytest.raises(ValueError, match=r"teacher_prompts\[0\] is empty"):
    scoring.score(student, teacher, [[1]], [[]], [[2]])
  with pytest.raises(ValueError, match=r"responses\[0\] has token ids outside \[0, V = 97\)"):
    scoring.score(student, teacher, [[1]], [[1]], [[2, 97]])
  with pytest.raises(ValueError, match="equal length"):
    scoring.score(student, teacher, [[1], [2]], [[1]], [[2]])
  with pytest.raises(ValueError, match="exceeds the model's context"):
    scoring.score(student, teacher, [[1] * 500], [[1]], [[2] * 20])
  with pytest.raises(ValueError, match="chunk must be an int >= 1"):
    scoring.score(student, teacher, [[1]], [[1]], [[2]], chunk=0)


def test_logits_memory_stays_flat_in_T(capsys):
  """Compiled temp memory at growing T with a fixed chunk: far below one [B, T, V] fp32 tensor, and what grows
  with T is the KV cache and one chunk of attention scores (linear), not the logits."""
  Vb, B, P, C = 16384, 2, 16, 64
  cfg = decoder.Config(arch="qwen3", vocab_size=Vb, d_model=32, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=16,
                       d_ff=64, qk_norm=True, max_seq_len=1 << 15)
  graphdef, params = decoder.abstract(cfg)
  i32 = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.int32)

  def temp(T):
    lowered = scoring.score_arrays.lower(params, params, i32(B, P), i32(B), i32(B, P), i32(B), i32(B, T), i32(B),
                                         s_graphdef=graphdef, t_graphdef=graphdef, chunk=C)
    return lowered.compile().memory_analysis().temp_size_in_bytes

  mib = lambda x: f"{x / 2**20:8.1f} MiB"
  rows, got = [], {}
  for T in (512, 2048, 8192):
    got[T] = temp(T)
    S = P - 1 + T
    kv = 2 * 2 * cfg.n_layers * B * S * cfg.n_kv_heads * cfg.head_dim * 4       # both models' caches
    rows.append(f"T={T:5d} chunk={C}: temp {mib(got[T])}   KV caches {mib(kv)}   temp - KV {mib(got[T] - kv)} "
                f"(= {(got[T] - kv) / (B * C * Vb * 4):4.1f} x [B, C, V] fp32)   "
                f"one [B, T, V] fp32 {mib(B * T * Vb * 4)}")
  with capsys.disabled():
    print(f"\nscoring memory, V={Vb}, B={B}, d=32, 2 layers (student and teacher):")
    print("\n".join(rows))
  assert got[8192] < B * 8192 * Vb * 4 / 8
  # Growing T by 7680 positions adds less than 5% of the logits it would add if they were materialised.
  assert got[8192] - got[512] < 0.05 * B * (8192 - 512) * Vb * 4
