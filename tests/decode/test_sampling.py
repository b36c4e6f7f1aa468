"""Sampler: exact distributions, stop handling, padding independence, prefix branching."""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from opd_jax.decode import sampling

from opd_jax.decode import branching
from opd_jax import models
from opd_jax.models import decoder
from opd_jax.models import param_init

CONFIG = decoder.Config(arch="qwen3", vocab_size=48, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                        head_dim=8, d_ff=64, qk_norm=True, max_seq_len=256)


@pytest.fixture(scope="module")
def model():
  params = param_init.init_params(jax.random.key(0), CONFIG, scale=0.3)   # peaked enough to vary lengths
  return models.Model(config=CONFIG, params=params, tokenizer=None, stop_ids=(5,), name="test", sha256=None,
                      source="random")


def full_logprobs(model, seq):
  t = jnp.asarray([seq], jnp.int32)
  logits, _ = decoder.forward(model.params, t, jnp.arange(len(seq))[None], config=model.config)
  return np.asarray(jax.nn.log_softmax(logits[0], axis=-1))


def exact_probs(logits, temperature, top_k, top_p):
  """Independent numpy transcription of temperature -> top-k -> top-p (nucleus incl. the crossing token)."""
  z = np.asarray(logits, np.float64) / temperature
  order = np.argsort(-z, kind="stable")
  keep = np.zeros_like(z, bool)
  keep[order[:top_k] if top_k else order] = True
  p = np.where(keep, np.exp(z - z.max()), 0.0)
  p /= p.sum()
  if top_p < 1:
    cum, kept = 0.0, np.zeros_like(keep)
    for i in order:
      if keep[i] and cum < top_p:
        kept[i] = True
        cum += p[i]
    p = np.where(kept, p, 0.0)
    p /= p.sum()
  return p


@pytest.mark.parametrize("temperature,top_k,top_p", [
    (1.0, 0, 1.0), (0.7, 0, 1.0), (1.0, 3, 1.0), (1.3, 0, 0.7), (1.0, 4, 0.8), (1.0, 0, 0.56)])
def test_first_token_distribution_chi_square(temperature, top_k, top_p):
  # top_p = 0.56 falls strictly inside the third token's mass (0.55 before it: the crossing token is kept); at an
  # exact boundary (0.55) fp32 round-off decides. 0.7 at temperature 1.3 is inside a token's mass too.
  logits = jnp.log(jnp.array([0.30, 0.25, 0.15, 0.10, 0.08, 0.06, 0.04, 0.02]))
  n = 20000
  keys = sampling.row_keys(jax.random.key(1), jnp.arange(n))
  sp = sampling.SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p)
  draws = np.asarray(jax.jit(lambda k: sampling.sample_logits(jnp.tile(logits, (n, 1)), k, sp))(keys))
  expected = exact_probs(logits, temperature, top_k, top_p)
  counts = np.bincount(draws, minlength=8)
  assert np.all(counts[expected == 0] == 0), (counts, expected)
  support = expected > 0
  chi2 = stats.chisquare(counts[support], n * expected[support])
  assert chi2.pvalue > 1e-3, (counts, n * expected)


def test_flat_nucleus_over_many_tokens_is_exact_and_unsorted():
  # A flat distribution over 40 tokens: top_p = 0.9 keeps most of them (the old 256-token prefilter's fallback
  # case); the threshold search finds the nucleus with no sort in the compiled draw.
  logits = jnp.zeros(40).at[:3].set(0.5)
  n = 20000
  keys = sampling.row_keys(jax.random.key(2), jnp.arange(n))
  sp = sampling.SamplingParams(top_p=0.9)
  draws = np.asarray(jax.jit(lambda k: sampling.sample_logits(jnp.tile(logits, (n, 1)), k, sp))(keys))
  expected = exact_probs(logits, 1.0, 0, 0.9)
  counts = np.bincount(draws, minlength=40)
  assert np.all(counts[expected == 0] == 0)
  assert stats.chisquare(counts[expected > 0], n * expected[expected > 0]).pvalue > 1e-3
  np.testing.assert_allclose(np.exp(np.asarray(sampling.policy_logprobs(logits, sp))), expected, atol=1e-6)
  hlo = jax.jit(lambda l, k: sampling._draw(l, k, sp)).lower(jnp.tile(logits, (4, 1)), keys[:4]).compile()
  assert not re.search(r"\b(sort|topk)\(", hlo.as_text())              # no sort op (names in metadata aside)


def test_tied_maxima_top_k1_and_temperature0_are_greedy():
  logits = jnp.array([[0.1, 2.0, 2.0, -1.0], [3.0, 3.0, 3.0, 3.0]])
  keys = sampling.row_keys(jax.random.key(3), jnp.arange(2))
  greedy = sampling.sample_logits(logits, keys, sampling.SamplingParams(temperature=0.0))
  top1 = sampling.sample_logits(logits, keys, sampling.SamplingParams(top_k=1))
  np.testing.assert_array_equal(greedy, [1, 0])
  np.testing.assert_array_equal(top1, [1, 0])


def test_logprobs_stop_and_padding(model):
  prompts = [[1, 2, 3, 4, 6, 7, 8], [9, 10], [11, 12, 13, 14, 15]]
  out = sampling.sample(model, prompts, key=jax.random.key(4), max_new_tokens=24)
  assert out.tokens.shape == (3, 24) and out.tokens.dtype == np.int32
  assert out.finished.any() or (out.lengths == 24).all()
  for r, prompt in enumerate(prompts):
    L = out.lengths[r]
    gen = out.tokens[r, :L].tolist()
    # Stops exactly at the first stop id, pads after it, and `finished` says whether a stop was sampled.
    assert (5 in gen) == bool(out.finished[r])
    if out.finished[r]:
      assert gen.index(5) == L - 1
    else:
      assert L == 24
    assert np.all(out.tokens[r, L:] == 0) and np.all(out.logprobs[r, L:] == 0)
    # Returned log-probs are log_softmax of a full forward at the sampled tokens.
    lp = full_logprobs(model, prompt + gen)
    ref = lp[np.arange(len(prompt) - 1, len(prompt) - 1 + L), gen]
    np.testing.assert_allclose(out.logprobs[r, :L], ref, atol=1e-5)
    # The same row alone (no left padding, other batch) samples exactly the same tokens.
    alone = sampling.sample(model, [prompt], key=jax.random.key(4), max_new_tokens=24, row_ids=[r])
    np.testing.assert_array_equal(alone.tokens[0], out.tokens[r])
    np.testing.assert_allclose(alone.logprobs[0], out.logprobs[r], atol=1e-5)


def test_no_recompile_within_a_bucket(model):
  key = jax.random.key(5)
  sampling.sample(model, [[1, 2, 3]], key=key, max_new_tokens=8)
  before = (sampling._prefill_rows._cache_size(), sampling.decode._cache_size())
  sampling.sample(model, [[1, 2, 3, 4, 6]], key=key, max_new_tokens=8)
  sampling.sample(model, [[7, 8]], key=jax.random.key(6), max_new_tokens=8)
  assert (sampling._prefill_rows._cache_size(), sampling.decode._cache_size()) == before


def test_repeated_prompts_prefill_once_and_per_row_keys(model):
  prompts = [[1, 2, 3]] * 3 + [[4, 5, 6, 7, 8]] * 2
  key, ids = jax.random.key(9), [10, 11, 12, 13, 14]
  sampling.COUNTERS.clear()
  out = sampling.sample(model, prompts, key=key, max_new_tokens=12, stop_ids=(), row_ids=ids)
  assert sampling.COUNTERS["prefill_rows"] == 2 and sampling.COUNTERS["prefill_calls"] == 1
  assert len({tuple(t) for t in out.tokens}) == 5                     # copies of one prompt sample apart
  for j, p in enumerate(prompts):                                      # = each row sampled alone
    alone = sampling.sample(model, [p], key=key, max_new_tokens=12, stop_ids=(), row_ids=[ids[j]])
    np.testing.assert_array_equal(alone.tokens[0], out.tokens[j])
    np.testing.assert_allclose(alone.logprobs[0], out.logprobs[j], atol=1e-5)
  keys = sampling.row_keys(key, jnp.asarray(ids, jnp.uint32))
  np.testing.assert_array_equal(sampling.sample(model, prompts, keys=keys, max_new_tokens=12, stop_ids=()).tokens, out.tokens)
  with pytest.raises(ValueError, match="exactly one of key"):
    sampling.sample(model, prompts, key=key, keys=keys, max_new_tokens=12, stop_ids=())
  with pytest.raises(ValueError, match="one key per prompt"):
    sampling.sample(model, prompts, keys=keys[:2], max_new_tokens=12, stop_ids=())


def test_branches_equal_decoding_from_scratch_with_one_prefill(model):
  prompt = [1, 2, 3, 4]
  base = sampling.sample(model, [prompt], key=jax.random.key(7), max_new_tokens=16, stop_ids=())
  response = base.tokens[0].tolist()
  seq = prompt + response
  T = len(response)
  sampling.COUNTERS.clear()
  cache = branching.prefill_sequences(model, [seq])
  ts = [1, T // 2, T - 1]
  forced = [6, 7, 8, 9, 10, 11]
  rows = [(t, f) for t in ts for f in forced[:2]]
  key = jax.random.key(8)
  out = branching.branch(model, cache, base_rows=[0] * len(rows), prefix_lens=[len(prompt) + t for t, _ in rows],
                        forced_tokens=[f for _, f in rows], key=key, max_new_tokens=10,
                        row_ids=list(range(len(rows))))
  assert sampling.COUNTERS["prefill_rows"] == 1 and sampling.COUNTERS["prefill_calls"] == 1
  for j, (t, f) in enumerate(rows):
    scratch = sampling.sample(model, [seq[:len(prompt) + t] + [f]], key=key, max_new_tokens=10, row_ids=[j])
    np.testing.assert_array_equal(out.tokens[j], scratch.tokens[0])
    np.testing.assert_allclose(out.logprobs[j], scratch.logprobs[0], atol=1e-5)
    assert out.lengths[j] == scratch.lengths[0] and out.finished[j] == scratch.finished[0]


def test_compacting_segments_equal_one_decode(model):
  """Rows that stopped leave the batch between segments; every row's tokens stay those of one long decode."""
  prompts = [[1, 2, 3], [4, 5, 6, 7], [8], [9, 10, 11, 12, 13], [2, 2], [3, 1, 4, 1, 5], [6, 6, 6], [7, 9]]
  kw = dict(key=jax.random.key(11), max_new_tokens=20, row_ids=list(range(8)))
  one = sampling.sample(model, prompts, **kw)
  assert len(set(one.lengths.tolist())) > 2                           # rows stop at different steps
  sampling.COUNTERS.clear()
  ticks = []                                                          # a stage bar's updates: tokens per segment
  seg = sampling.sample(model, prompts, segment=3, min_rows=1, progress=ticks.append, **kw)
  assert sampling.COUNTERS["compactions"] >= 1
  assert len(ticks) >= 2 and sum(ticks) == int(one.lengths.sum())
  for a, b in ((one.tokens, seg.tokens), (one.lengths, seg.lengths), (one.finished, seg.finished)):
    np.testing.assert_array_equal(a, b)
  np.testing.assert_allclose(one.logprobs, seg.logprobs, atol=1e-5)
  # Branches too, with per-row caps.
  seq = prompts[3] + one.tokens[3, :one.lengths[3]].tolist()
  cache = branching.prefill_sequences(model, [seq])
  bkw = dict(base_rows=[0] * 6, prefix_lens=[5, 6, 6, 7, 8, 9], forced_tokens=[6, 7, 8, 9, 10, 11],
             key=jax.random.key(12), max_new_tokens=16, row_ids=list(range(6)), caps=[16, 3, 16, 9, 16, 1])
  a = branching.branch(model, cache, **bkw)
  ticks = []
  b = branching.branch(model, cache, segment=2, min_rows=1, progress=ticks.append, **bkw)
  assert sum(ticks) == int(a.lengths.sum())
  np.testing.assert_array_equal(a.tokens, b.tokens)
  np.testing.assert_array_equal(a.lengths, b.lengths)
  assert (a.lengths <= np.array(bkw["caps"])).all()


@pytest.mark.parametrize("early_exit,grow", [(True, 256), (False, 4)])
def test_shared_prefix_branches_of_several_rollouts_equal_decoding_from_scratch(model, early_exit, grow,
                                                                               monkeypatch):
  """Branches of several nodes of two left-padded rollouts share one copy of each node's prefix, with stops,
  caps and compaction (segments of 3 steps), with and without the loop's early exit (a known trip count);
  with GROW = 4 the suffix caches grow as they fill and the prefix window is trimmed to the longest node's."""
  monkeypatch.setattr(sampling, "GROW", grow)
  prompts = [[1, 2, 3, 4], [9, 8]]
  base = sampling.sample(model, prompts, key=jax.random.key(21), max_new_tokens=10, stop_ids=())
  seqs = [p + base.tokens[i].tolist() for i, p in enumerate(prompts)]
  cache = branching.prefill_sequences(model, seqs)                    # 16 slots per row, left-padded
  nodes = [(0, 5), (0, 7), (1, 3), (1, 8)]                           # (base row, prefix length): window 8 of 16
  rows = [(b, c, f, r) for b, c in nodes for f in (6, 5, 7) for r in range(2)]   # 5 is the stop id
  caps = [16 if j % 5 else 2 for j in range(len(rows))]
  sampling.COUNTERS.clear()
  key = jax.random.key(22)
  out = branching.branch(model, cache, base_rows=[b for b, *_ in rows], prefix_lens=[c for _, c, *_ in rows],
                        forced_tokens=[f for _, _, f, _ in rows], key=key, max_new_tokens=16,
                        row_ids=list(range(len(rows))), caps=caps, segment=3, min_rows=1, early_exit=early_exit)
  assert sampling.COUNTERS["branch_prefixes"] == len(nodes) and sampling.COUNTERS["compactions"] >= 1
  assert (sampling.COUNTERS["cache_growths"] >= 1) == (grow == 4)
  assert len(set(out.lengths.tolist())) > 2                          # stops, caps and full lengths
  for j, (b, c, f, _) in enumerate(rows):
    scratch = sampling.sample(model, [seqs[b][:c] + [f]], key=key, max_new_tokens=16, row_ids=[j])
    n = min(caps[j], int(scratch.lengths[0])) if f != 5 else 0
    assert out.lengths[j] == n, (j, out.lengths[j], n)
    np.testing.assert_array_equal(out.tokens[j, :n], scratch.tokens[0, :n])
    np.testing.assert_allclose(out.logprobs[j, :n], scratch.logprobs[0, :n], atol=1e-5)
    assert out.finished[j] == (f == 5 or (scratch.finished[0] and scratch.lengths[0] <= caps[j]))
  # The jitted start holds each prefix once ([G, K, S_base, Dh]) and per branch only its suffix (N + 1 slots).
  start, *_ = branching._branch_start(model.params, cache, np.array([0, 1], np.int32), np.array([5, 3], np.int32),
                                     np.array([0, 1, 1, 0], np.int32), np.array([5, 3, 3, 5], np.int32),
                                     np.array([6, 6, 7, 7], np.int32), graphdef=model.graphdef, slots=17,
                                     prefix_slots=8, stop_ids=(5,))
  K, Dh = CONFIG.n_kv_heads, CONFIG.head_dim
  assert start["prefix"]["k"][0].shape == (2, K, 8, Dh) and start["k"][0].shape == (4, K, 17, Dh)
  # Each window holds its node's prefix positions 0 .. cut - 1 (row 1 is 12 tokens in 16 slots: 4 pad slots).
  for g, cut in enumerate((5, 3)):
    assert sorted(p for p in np.asarray(start["prefix"]["pos"][g]).tolist() if p >= 0) == list(range(cut))


def test_forced_stop_ends_branch_at_once(model):
  cache = branching.prefill_sequences(model, [[1, 2, 3, 4, 6, 7]])
  out = branching.branch(model, cache, base_rows=[0, 0], prefix_lens=[5, 5], forced_tokens=[5, 6],
                        key=jax.random.key(9), max_new_tokens=6, row_ids=[0, 1], stop_ids=(5,))
  assert out.lengths[0] == 0 and out.finished[0] and np.all(out.tokens[0] == 0)
  assert out.lengths[1] > 0


def test_bad_inputs(model):
  with pytest.raises(ValueError, match="top_p"):
    sampling.sample(model, [[1]], key=jax.random.key(0), max_new_tokens=4, top_p=0.0)
  with pytest.raises(ValueError, match="context"):
    sampling.sample(model, [[1] * 250], key=jax.random.key(0), max_new_tokens=10)
  with pytest.raises(ValueError, match="at least one token"):
    sampling.sample(model, [[]], key=jax.random.key(0), max_new_tokens=4)


def test_two_level_categorical_across_blocks_is_exact():
  # Mass on ids at block edges (block 512), the rest spread thin; excluded ids (-inf) must never be drawn.
  N, n = 1500, 40000
  hot = np.array([0, 3, 511, 512, 1023, 1024, 1400, 1499])
  logits = np.full(N, -4.0)
  logits[hot] = np.log([0.2, 0.1, 0.15, 0.1, 0.05, 0.1, 0.08, 0.1]) + 4.0
  logits[700:800] = -np.inf
  keys = sampling.row_keys(jax.random.key(12), jnp.arange(n))
  draws = np.asarray(jax.jit(lambda k: sampling.categorical(jnp.tile(jnp.asarray(logits, jnp.float32), (n, 1)), k))(
      keys))                                                          # one compile, not one per eager op
  p = np.exp(logits - logits.max())
  p /= p.sum()
  assert not np.any((draws >= 700) & (draws < 800))
  counts = np.array([np.sum(draws == h) for h in hot] + [np.sum(~np.isin(draws, hot))])
  expected = n * np.append(p[hot], 1 - p[hot].sum())
  assert stats.chisquare(counts, expected).pvalue > 1e-3, (counts, expected)


def _policy_probs(logits, temperature, top_k, top_p):
  """numpy sampled policy per row; temperature 0 is the point mass on the argmax."""
  rows = np.atleast_2d(np.asarray(logits, np.float64))
  if temperature == 0.0:
    return np.eye(rows.shape[-1])[np.argmax(rows, axis=-1)]
  return np.stack([exact_probs(r, temperature, top_k, top_p) for r in rows])


@pytest.mark.parametrize("temperature,top_k,top_p", [
    (1.0, 0, 1.0), (0.5, 0, 1.0), (1.0, 3, 1.0), (1.3, 0, 0.7), (1.0, 4, 0.8), (0.5, 0, 0.55), (0.0, 0, 1.0)])
def test_policy_logprobs_and_drawn_token_logprobs_are_the_sampled_policy(temperature, top_k, top_p):
  base = np.log([0.30, 0.25, 0.15, 0.10, 0.08, 0.06, 0.04, 0.02])
  logits = jnp.asarray(np.stack([base, base[::-1], np.roll(base, 3)]), jnp.float32)
  sp = sampling.SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p)
  expected = _policy_probs(logits, temperature, top_k, top_p)
  np.testing.assert_allclose(np.exp(sampling.policy_logprobs(logits, sp)), expected, atol=1e-6)
  keys = sampling.row_keys(jax.random.key(7), jnp.arange(3))
  tok, lp = sampling._draw(logits, keys, sp)
  np.testing.assert_array_equal(tok, sampling.sample_logits(logits, keys, sp))
  np.testing.assert_allclose(np.exp(lp), expected[np.arange(3), np.asarray(tok)], rtol=1e-5)


def test_tempered_candidate_policy_gives_the_issue_value_and_ideal_gradient():
  # Raw p on C = (0.6, 0.3, 0.1), P_succ = (0, 1, 1), T = 0.5: the sampled p is (0.7826, 0.1957, 0.0217),
  # V = 0.2174, g* = (-0.1701, 0.1531, 0.0170) (the raw p would give V = 0.4, g* = (-0.24, 0.18, 0.06)).
  from opd_jax.estimators import gradients  # pylint: disable=g-import-not-at-top
  from opd_jax.estimators import success
  tempered = sampling.SamplingParams(temperature=0.5)
  logp = sampling.policy_logprobs(jnp.log(jnp.array([[0.6, 0.3, 0.1]])), tempered)
  p, _ = gradients.restrict(logp, jnp.array([[0, 1, 2]]))
  est = success.node_estimates(np.asarray(p), np.asarray(p), np.array([[0, 4, 4]]), np.array([[4, 4, 4]]),
                                divergence="forward_kl")
  np.testing.assert_allclose(p[0], [0.36 / 0.46, 0.09 / 0.46, 0.01 / 0.46], atol=1e-6)
  np.testing.assert_allclose(est.value, [0.2174], atol=1e-4)
  np.testing.assert_allclose(est.g_ideal[0], [-0.1701, 0.1531, 0.0170], atol=1e-4)


@pytest.mark.parametrize("temperature,top_p", [(0.5, 1.0), (1.0, 0.8)])
def test_returned_logprobs_are_the_sampled_policy_of_a_full_forward(model, temperature, top_p):
  prompts = [[1, 2, 3, 4, 6, 7, 8], [9, 10]]
  out = sampling.sample(model, prompts, key=jax.random.key(8), max_new_tokens=12, temperature=temperature,
                        top_p=top_p)
  for r, prompt in enumerate(prompts):
    L = out.lengths[r]
    gen = out.tokens[r, :L].tolist()
    t = jnp.asarray([prompt + gen], jnp.int32)
    logits = decoder.forward(model.params, t, jnp.arange(t.shape[1])[None], config=model.config)[0][0]
    steps = np.arange(len(prompt) - 1, len(prompt) - 1 + L)
    probs = _policy_probs(np.asarray(logits)[steps], temperature, 0, top_p)
    assert np.all(probs[np.arange(L), gen] > 0)                     # never a token outside the nucleus
    np.testing.assert_allclose(out.logprobs[r, :L], np.log(probs[np.arange(L), gen]), atol=2e-5)


@pytest.mark.parametrize("layered", [True, False])
def test_decode_step_moves_about_the_ideal_bytes_and_copies_no_cache_in_its_loop(layered):
  """Guard (compiled HLO, `hlo_bytes`): a decode step reads the weights and the KV cache about once (<= 1.35x the
  ideal), and no op inside the loop copies a cache-sized buffer, in both layouts."""
  from opd_jax import flops   # pylint: disable=g-import-not-at-top
  from opd_jax.cost import hlo_bytes   # pylint: disable=g-import-not-at-top
  # head_dim 64 as real models (128): the [B, H, S] scores are small beside the [B, K, S, Dh] cache.
  cfg = decoder.Config(arch="qwen3", vocab_size=512, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2,
                       head_dim=64, d_ff=128, qk_norm=True, tie_embeddings=True, max_seq_len=4096)
  B, S, steps = 8, 4096, 4
  g, p = decoder.abstract(cfg, layered)
  cache = jax.eval_shape(lambda: decoder.init_cache(cfg, B, S))
  fn = lambda p, c, lg, pos, k, d: sampling.decode.fun(p, c, lg, pos, k, d, None, 0, graphdef=g,
                                                       sp=sampling.SamplingParams(), max_new_tokens=steps,
                                                       stop_ids=(0,), early_exit=False)
  sds = jax.ShapeDtypeStruct
  keys = jax.eval_shape(lambda: jax.random.split(jax.random.key(0), B))
  compiled = jax.jit(fn).lower(p, cache, sds((B, 512), jnp.float32), sds((B,), jnp.int32), keys,
                               sds((B,), jnp.bool_)).compile()
  report = hlo_bytes.analyze(compiled)
  loop = max(report.loops, key=lambda l: l.bytes_per_iter)  # the decode loop (the others: the PRNG's)
  assert loop.trips == steps
  layer_cache = B * cfg.n_kv_heads * S * cfg.head_dim * 4
  ideal = flops.decode_bytes_per_step(cfg, B, S, 4)
  assert ideal <= loop.bytes_per_iter <= 1.35 * ideal, (loop.bytes_per_iter, ideal)
  assert report.largest_copy_in_loop < layer_cache / 8, report.copies[:3]
  assert compiled.memory_analysis().temp_size_in_bytes < 0.05 * 2 * cfg.n_layers * layer_cache
