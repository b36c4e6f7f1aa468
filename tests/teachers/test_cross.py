"""Teachers with another tokenizer (opd_jax/teachers/cross.py, cross_tree.py, models/token_bytes.py).

References: a brute-force enumeration over the whole teacher vocabulary with full forwards (`models.logits`,
no cache, no sorted spans, no shared prefix), in float64, of each candidate's event directly (the continuation
begins with its bytes and with none of the longer candidates' that begin with them), not by subtracting nested
sums; the shared-tokenizer path (`nodes.at_nodes`) for the identity. tests/teachers/test_cross_bytes.py: the events'
algebra, the boundary against real pre-tokenizers, normalizing teachers.
"""
import dataclasses
import math
import types

import jax
import numpy as np
import pytest
from tokenizers import AddedToken, Tokenizer, decoders, models as tk_models, pre_tokenizers, trainers

from opd_jax.teachers import cross
from opd_jax.teachers import cross_tree
from opd_jax.teachers import cross_view
from opd_jax.estimators import gradients
from opd_jax import models
from opd_jax.study import nodes
from opd_jax.study import preflight
from opd_jax.decode import sampling
from opd_jax.estimators import success
from opd_jax.models import token_bytes
from opd_jax.models import tokenizer as tokenizer_lib
from configs import smoke

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = ["The answer is 42. The answer is 1234.", "hello world, héllo wörld", "ab abc abcd 12 123",
          "<answer>47</answer> <answer>105</answer>", "x = 12 + 30 = 42"] * 4


def bpe_tokenizer(vocab_size: int = 300):
  """A tiny byte-level BPE (GPT-2 alphabet, digits one by one like Qwen's split) with ChatML specials."""
  tok = Tokenizer(tk_models.BPE())
  tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=False),
                                               pre_tokenizers.ByteLevel(add_prefix_space=False)])
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False,
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
  tok.train_from_iterator(CORPUS, trainer)
  return tokenizer_lib.wrap(tok, bos=None, eos="<|im_end|>", pad="<|endoftext|>", unk=None,
                            chat_template=tokenizer_lib.CHATML_TEMPLATE)


def model(seed: int, tok):
  cfg = models.Config(arch="qwen2", vocab_size=len(tok), d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                      head_dim=8, d_ff=64, qkv_bias=True, max_seq_len=512)
  params = models.init_params(jax.random.key(seed), cfg, scale=0.1)
  return models.with_layout(models.Model(config=cfg, params=params, tokenizer=tok,
                                         stop_ids=(int(tok.eos_token_id),), name=f"r{seed}", sha256=None,
                                         source="random"))


@pytest.fixture(scope="module")
def pair():
  bpe = bpe_tokenizer()
  return {"byte": model(0, models.byte_tokenizer()), "bpe": model(1, bpe)}


_WIDTH = 96


_SEEN: dict = {}


def _next_logq(teacher, context: tuple[int, ...]) -> np.ndarray:
  """float64 [V] log-probs after `context` by a full causal forward (right-padded to one width: one compile)."""
  key = (id(teacher), context)
  if key not in _SEEN:
    row = np.zeros((1, _WIDTH), np.int32)
    row[0, :len(context)] = context
    z = np.asarray(models.logits(teacher, row), np.float64)[0, len(context) - 1]
    _SEEN[key] = z - np.logaddexp.reduce(z)
  return _SEEN[key]


def reference(teacher, context: list[int], data: bytes, then) -> float:
  """log P(the teacher's continuation of `context` begins with data [then one of `then`]), by enumeration."""
  tv = token_bytes.byte_vocab(teacher.tokenizer)
  logq = _next_logq(teacher, tuple(context))
  if not data:
    return 0.0 if then is None else np.logaddexp.reduce(logq[list(then)])
  terms = []
  for w, piece in enumerate(tv.pieces):
    if not piece:
      continue
    if then is None and piece.startswith(data):
      terms.append(logq[w])
    elif data.startswith(piece) and (then is not None or len(piece) < len(data)):
      terms.append(logq[w] + reference(teacher, context + [w], data[len(piece):], then))
  return np.logaddexp.reduce(terms) if terms else -math.inf


def excluding(teacher, context: list[int], need: bytes, avoid: list[bytes]) -> float:
  """log P(the continuation of `context` begins with `need` and with none of `avoid`, each of which begins with
  need), by enumeration; a special token writes nothing (a path through one begins with no string)."""
  tv = token_bytes.byte_vocab(teacher.tokenizer)
  logq = _next_logq(teacher, tuple(context))
  terms = []
  for w, piece in enumerate(tv.pieces):
    if piece is None or (need and not need.startswith(piece) and not piece.startswith(need)):
      if piece is None and not need:
        terms.append(logq[w])
      continue
    if need and len(piece) < len(need):                          # a token inside need: recurse
      terms.append(logq[w] + excluding(teacher, context + [w], need[len(piece):], [a[len(piece):] for a in avoid]))
    elif not any(piece.startswith(a) for a in avoid):              # need met: what of avoid the token leaves open
      live = [a[len(piece):] for a in avoid if a.startswith(piece)]
      terms.append(logq[w] + (excluding(teacher, context + [w], b"", live) if live else 0.0))
  return np.logaddexp.reduce(terms) if terms else -math.inf


def path_excluding(teacher, context: list[int], path: list[int], avoid: list[list[int]]) -> float:
  """log P(the continuation begins with the token path and with none of `avoid` (paths extending it))."""
  lp = sum(_next_logq(teacher, tuple(context + path[:i]))[w] for i, w in enumerate(path))

  def none_of(ctx, rem):
    if not rem:
      return 0.0
    logq = _next_logq(teacher, tuple(ctx))
    terms = [logq[w] + none_of(ctx + [w], [r[1:] for r in rem if r[0] == w and len(r) > 1])
             for w in range(len(logq)) if [w] not in rem]
    return np.logaddexp.reduce(terms)

  return float(lp + none_of(context + path, [a[len(path):] for a in avoid]))


def expected(teacher, mode, context, tail, candidates, sv, special) -> list[float]:
  """The candidates' log q by enumeration: each candidate's event less the longer candidates' (exact: byte
  strings; canonical: token paths, tv.encode's) over the exact log P(tail); equal events shared; a special
  candidate's are its teacher ids' (the tail, then the id), each shared by the candidates mapped to it."""
  tv = token_bytes.byte_vocab(teacher.tokenizer)
  denom = reference(teacher, context, tail, None)
  pieces = [sv.pieces[k] for k in candidates]
  ids = [special.get(k, ()) if p is None else () for k, p in zip(candidates, pieces)]
  out = []
  for p, then in zip(pieces, ids):
    if p is not None:
      same = sum(x == p for x in pieces)
      if mode == "exact":
        lp = excluding(teacher, context, tail + p, sorted({tail + x for x in pieces if x and x != p and
                                                          x.startswith(p)}))
      else:
        mine = tv.encode(tail + p)
        longer = {tuple(tv.encode(tail + x)) for x in pieces if x is not None}
        lp = path_excluding(teacher, context, mine, [list(a) for a in longer if len(a) > len(mine) and
                                                     list(a[:len(mine)]) == mine])
      out.append(lp - math.log(same) - denom)
    elif then:
      holders = lambda i: sum(i in x for x in ids)
      one = ((lambda i: reference(teacher, context, tail, (i,))) if mode == "exact" else
             (lambda i: path_excluding(teacher, context, tv.encode(tail) + [i], [])))
      out.append(np.logaddexp.reduce([one(i) - math.log(holders(i)) for i in then]) - denom)
    else:
      out.append(-math.inf)
  return out


@pytest.mark.parametrize("student_kind,teacher_kind", [("bpe", "byte"), ("byte", "bpe")])
def test_candidates_against_enumeration(pair, student_kind, teacher_kind):
  """Both modes against the enumeration, at boundary cases: a candidate that merges with the text before it
  ("ab" + "c"), a space-prefixed token, a multi-byte character cut between tokens (é, ö), the stop token, a
  control token of the chat template (<|im_start|>), positions right after a number's digits, and candidates
  whose bytes begin one another's (the byte tokens "a", "b" of "ab", " a" of " ab")."""
  student, teacher = pair[student_kind], pair[teacher_kind]
  sv, tv = (token_bytes.byte_vocab(m.tokenizer) for m in (student, teacher))
  text = "héllo wörld, ab abc 123".encode()
  response = sv.encode(text) + [int(student.tokenizer.eos_token_id)]
  if student_kind == "byte":                      # é and ö are two byte tokens each: a node between them
    assert len(response) == len(text) + 1
  prompt = models.chat_ids(teacher.tokenizer, [{"role": "user", "content": "Say it."}])
  candidates = sorted({*response, *sv.encode(b"c"), *sv.encode(b" a"), *sv.encode(b"\xa9"), *sv.encode(b"a"),
                       *sv.encode(b"b"), int(student.tokenizer.convert_tokens_to_ids("<|im_start|>"))})
  pieces = [sv.pieces[k] for k in candidates if sv.pieces[k]]
  assert any(x != y and y.startswith(x) for x in pieces for y in pieces) == (student_kind == "bpe")  # nested
  positions = list(range(len(response)))
  queries = [[(t, candidates) for t in positions]]
  special = cross.specials(sv, tv, set(student.stop_ids), tuple(teacher.stop_ids))
  roll = cross._rollout(sv, tv, response, special)   # pylint: disable=protected-access
  for mode in ("exact", "canonical"):
    got = cross.candidate_logprobs(student, teacher, [prompt], [response], queries, mode=mode, prune=math.inf)
    assert got.too_many == 0 and got.pruned_bound == 0 and got.clipped < 1e-9
    if teacher_kind == "bpe" and mode == "exact":      # branches off the cached pass (the per-row limit) ran
      assert got.branch_rows > 0
    for j, t in enumerate(positions):
      b, tail = cross.boundary(tv, roll, t)
      text = roll.text[:roll.offsets[t]]
      assert text.endswith(tail) and tv.decode(roll.ids[:b]) + tail == text
      want = expected(teacher, mode, prompt + roll.ids[:b], tail, candidates, sv, special)
      for c, k in enumerate(candidates):
        have = got.logq[0][j][0, c]
        if want[c] == -math.inf:
          assert have == -math.inf, (mode, t, k)
        else:
          assert abs(have - want[c]) < 2e-5, (mode, t, k, have, want[c])
      assert np.logaddexp.reduce(got.logq[0][j][0]) <= 1e-9                # disjoint events: sum q <= 1


def test_stop_and_control_tokens_share_their_events(pair):
  """Two student stop tokens (Qwen students stop on <|im_end|> and <|endoftext|>) are one teacher event: each
  gets half of it. Here the teacher also stops on <|im_start|>, which the student's <|im_start|> maps to by text,
  so that teacher id is held by three candidates: a third each. Bytes candidates beside them, one beginning the
  other's bytes, are disjoint from them. Against the enumeration (tests/teachers/test_cross.py); the q sum to <= 1."""
  bpe = bpe_tokenizer()
  ids = {s: int(bpe.convert_tokens_to_ids(s)) for s in ("<|im_end|>", "<|endoftext|>", "<|im_start|>")}
  student = types.SimpleNamespace(tokenizer=bpe, stop_ids=(ids["<|im_end|>"], ids["<|endoftext|>"]))  # text only
  teacher = dataclasses.replace(pair["byte"], stop_ids=(258, 257))
  sv, tv = (token_bytes.byte_vocab(m.tokenizer) for m in (student, teacher))
  response = sv.encode(b"ab abc 12")
  prompt = models.chat_ids(teacher.tokenizer, [{"role": "user", "content": "Q"}])
  words = [sv.exact(x)[0] for x in (b" ab", b" abc") if sv.exact(x)]
  assert len(words) == 2                                            # " ab" begins " abc"
  cands = [ids["<|im_end|>"], ids["<|endoftext|>"], ids["<|im_start|>"], *words]
  positions = [i for i, y in enumerate(response) if sv.pieces[y].startswith(b" ")][:2]
  got = cross.candidate_logprobs(student, teacher, [prompt], [response], [[(t, cands) for t in positions]],
                                 prune=math.inf)
  special = cross.specials(sv, tv, set(student.stop_ids), (258, 257))
  assert special[cands[0]] == special[cands[1]] == (258, 257) and special[cands[2]] == (257,)
  roll = cross._rollout(sv, tv, response, special)   # pylint: disable=protected-access
  for j, t in enumerate(positions):
    b, tail = cross.boundary(tv, roll, t)
    ctx = prompt + roll.ids[:b]
    den = reference(teacher, ctx, tail, None)
    p258, p257 = (np.exp(reference(teacher, ctx, tail, (i,)) - den) for i in (258, 257))
    p_ab, p_abc = (np.exp(reference(teacher, ctx, tail + x, None) - den) for x in (b" ab", b" abc"))
    want = [p258 / 2 + p257 / 3, p258 / 2 + p257 / 3, p257 / 3, p_ab - p_abc, p_abc]
    np.testing.assert_allclose(np.exp(got.logq[0][j][0]), want, rtol=1e-5)
    assert got.reasons[0][j] == "" and np.exp(got.logq[0][j][0]).sum() <= 1 + 1e-9


def test_pruning_stays_within_its_bound(pair):
  """Pruning (here at 2 nats below the canonical path, so that it cuts) changes no log q by more than its reported
  bound."""
  student, teacher = pair["byte"], pair["bpe"]
  sv = token_bytes.byte_vocab(student.tokenizer)
  response = sv.encode("abc héllo 12".encode())
  prompt = models.chat_ids(teacher.tokenizer, [{"role": "user", "content": "Q"}])
  queries = [[(t, [response[t]]) for t in range(len(response))]]
  full = cross.candidate_logprobs(student, teacher, [prompt], [response], queries, prune=math.inf)
  for prune in (2.0,):
    cut = cross.candidate_logprobs(student, teacher, [prompt], [response], queries, prune=prune)
    assert cut.states <= full.states
    err = max(abs(a[0, 0] - b[0, 0]) for a, b in zip(cut.logq[0], full.logq[0]))
    # log q = log P(tail + k) - log P(tail): each side off by at most log(1 + bound).
    assert err <= 2 * math.log1p(cut.pruned_bound) + 1e-9, (prune, err, cut.pruned_bound)
  assert cut.pruned_bound > 0 and cut.states < full.states         # 2 nats does cut here


def test_exact_masses_sum_to_one_over_single_bytes(pair):
  """Exact mode: the 256 one-byte strings and the stop token partition every continuation, so their q sum to 1
  (a check of the definition that needs no reference)."""
  student, teacher = pair["byte"], pair["bpe"]
  sv = token_bytes.byte_vocab(student.tokenizer)
  response = sv.encode(b"ab 12")
  prompt = models.chat_ids(teacher.tokenizer, [{"role": "user", "content": "Q"}])
  cands = [k for k in range(len(sv.pieces)) if sv.pieces[k] is not None] + [int(student.tokenizer.eos_token_id)]
  got = cross.candidate_logprobs(student, teacher, [prompt], [response], [[(3, cands), (5 - 1, cands)]])
  for q in got.logq[0]:
    total = np.exp(np.logaddexp.reduce(q[0]))
    # Special tokens other than the stop (<|im_start|>, <|endoftext|>) hold the rest of the mass.
    assert 0.5 < total <= 1 + 1e-6


def test_identity_with_the_same_tokenizer(pair):
  """Two copies of one tokenizer: the cross path's q on C(u), alignment and teacher advantage equal the shared
  path's (nodes.at_nodes from the scoring pass's hidden states) up to fp32 round-off of two programs."""
  student = pair["byte"]
  teacher = model(2, models.byte_tokenizer())
  sv = token_bytes.byte_vocab(student.tokenizer)
  responses = [sv.encode(b"The answer is 42.") + [258], sv.encode(b"x = 12 + 30")]
  prompt = models.chat_ids(student.tokenizer, [{"role": "user", "content": "What is 12+30?"}])
  from opd_jax.decode import scoring  # pylint: disable=g-import-not-at-top
  got = scoring.score(student, teacher, [prompt] * 2, [prompt] * 2, responses, chunk=8, return_hidden=True)
  positions = [[1, 5, 14], [0, 4, 9]]
  inputs = [nodes.NodeInputs(got["h_p"][i], {("t", "plain"): (teacher, got["h_q"][i])}, responses[i],
                             positions[i]) for i in range(2)]
  tp = sampling.SamplingParams(temperature=0.7)
  at = nodes.at_nodes(student, inputs, [("t", "plain")], student_top_k=3, teacher_top_k=0,
                      policy=sampling.SamplingParams(), teacher_policy=tp)
  queries = [[(t, [int(k) for k in a.candidates[m] if k >= 0]) for m, t in enumerate(positions[i])]
             for i, a in enumerate(at)]
  res = cross.candidate_logprobs(student, teacher, [prompt] * 2, responses, queries, temperatures=(0.7,))
  rng = np.random.default_rng(0)
  for i, a in enumerate(at):
    shared = np.asarray(a.q_at[("t", "plain")], np.float64)
    mine = np.stack([q[0] for q in res.logq[i]])
    slots = np.where(a.candidates >= 0, np.arange(a.candidates.shape[1]), -1)
    q1, _ = gradients.restrict(shared, slots)
    q2, _ = gradients.restrict(mine, slots)
    assert np.max(np.abs(np.asarray(q1) - np.asarray(q2))) < 1e-5
    p, _ = gradients.restrict(a.p_at, slots)
    succ = rng.integers(0, 5, size=a.candidates.shape)
    n = np.where(a.candidates >= 0, 4, 0)
    est = [success.node_estimates(np.asarray(p, np.float64), np.asarray(q, np.float64), succ, n,
                                   divergence="reverse_kl", sampled_index=np.zeros(len(p), np.int64),
                                   advantage=np.zeros(len(p))) for q in (q1, q2)]
    for f in ("alignment", "teacher_advantage"):
      x, y = getattr(est[0], f), getattr(est[1], f)
      assert np.allclose(x, y, atol=1e-5, equal_nan=True), f


# The cross-tokenizer view inside a study (q on C(u), alignment, the sampled token's log q from its text, NaN for
# the predictors without `on_text`): tests/test_registries.py, whose study forces the external teacher through text.


def test_refusals_name_the_field():
  """What the cross path does not support is refused in one line before any weights load."""
  config = smoke.get_config()
  byte = models.byte_tokenizer()
  bpe = bpe_tokenizer()
  assert cross_view.cross_teacher(config, "t", byte, bpe, where="w") is True
  assert cross_view.cross_teacher(config, "t", byte, models.byte_tokenizer(), where="w") is False
  with pytest.raises(ValueError, match="trainer"):
    cross_view.cross_teacher(config, "t", byte, bpe, where="config.train.configuration", cross_ok=False)
  with pytest.raises(ValueError, match="flax"):
    cross_view.cross_teacher(config, "flax:m:f", byte, bpe, where="w")
  word = Tokenizer(tk_models.WordLevel({"▁a": 0, "<unk>": 1}, unk_token="<unk>"))
  word.add_special_tokens([AddedToken("<|im_end|>", special=True)])
  sp = tokenizer_lib.wrap(word, bos=None, eos="<|im_end|>", pad=None, unk="<unk>", chat_template=None)
  with pytest.raises(ValueError, match="byte alphabet"):
    cross_view.cross_teacher(config, "t", byte, sp, where="w")
  config.scoring.cross_tokenizer.mode = "greedy"
  with pytest.raises(ValueError, match="cross_tokenizer.mode"):
    preflight.validate(config)


def test_tree_bound_gives_nan_not_a_wrong_number(pair):
  student, teacher = pair["byte"], pair["bpe"]
  sv = token_bytes.byte_vocab(student.tokenizer)
  response = sv.encode(b"abcdabcd")
  prompt = models.chat_ids(teacher.tokenizer, [{"role": "user", "content": "Q"}])
  got = cross.candidate_logprobs(student, teacher, [prompt], [response], [[(7, [response[7]])]], max_tree_nodes=2)
  assert got.too_many == 1 and np.isnan(got.logq[0][0][0, 0])
  with pytest.raises(cross_tree.TooManyStates):
    cross_tree.needed(token_bytes.byte_vocab(teacher.tokenizer), b"abcdabcd", None, mode="exact", max_nodes=2)
