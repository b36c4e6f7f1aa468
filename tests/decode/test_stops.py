"""Stopping continuations where their reward is known: the task's rule against its grader, the token automaton
against the text, and the on-device stop against full decodes cut on the host (generated texts:
test_stops_reward.py)."""
import jax
import numpy as np
import pytest

from opd_jax import models
from opd_jax.decode import stops
from opd_jax.study import targeted
from opd_jax.models import decoder
from opd_jax.models import param_init
from opd_jax.models import token_bytes
from opd_jax.tasks import answers
from opd_jax.tasks import base
from opd_jax.tasks import generators

SPAN = generators.ANSWER_SPAN
GOLD = base.Problem(id="p", question="q", answer="42")


def tagged_task(extractor):
  grade = lambda p, a: answers.numbers_equal(p.answer, a) if extractor is answers.extract_tagged_number else a == "42"
  return base.Task(name="t", problems=[GOLD], template="{question}", extractor=extractor, grader=grade,
                   answer_span=SPAN)


# Full response texts; the cut text is graded as the whole, whatever follows its deciding span (issue 49, item 2).
CASES = [
    "<answer>42</answer>",
    "<answer>42</answer>\nThe answer is 7.",                        # text after the closing tag
    "So 40 + 2 = 42. <answer> 42 </answer>. #### 7",
    "<answer>4</answer> wait, <answer>42</answer>",                 # a second answer: the first decides
    "<answer>42</answer> then <answer>7",                           # an unclosed second tag reads nothing
    "</answer> 7 <answer>42</answer> x",                            # a stray close before the first open
    "<answer>x <answer>42</answer> </answer>",                      # a nested open: the leftmost one counts
    "<answer>\n42\n</answer><|im_end|>",
    "<answer>7</answer>",
    "Format: <answer></answer>. So <answer>42</answer> <answer>7</answer>",   # the template echoed first
    "<answer> \n</answer><answer>\u3000</answer>42 <answer>42</answer>",      # only whitespace: no answer
]


@pytest.mark.parametrize("extractor", [answers.extract_tagged_number, answers.answer_tag])
@pytest.mark.parametrize("text", CASES)
def test_cut_text_is_graded_as_the_full_text(extractor, text):
  task = tagged_task(extractor)
  end = task.answer_closed(text)
  cut = text[:end]
  assert cut.endswith(SPAN[1]) and text.startswith(cut)
  assert task.reward(GOLD, cut) == task.reward(GOLD, text)
  # finished both ways (a stop token after the cut): equal; the full response at the cap gets 0, the cut not
  full = task.rollout_reward(GOLD, text, finished=True, grade_truncated=False)
  assert task.rollout_reward(GOLD, cut, finished=True, grade_truncated=False) == full


def test_no_span_no_cut():
  task = tagged_task(answers.extract_tagged_number)
  assert task.answer_closed("#### 42") is None and task.answer_closed("<answer>42") is None
  assert base.Task(name="t", problems=[GOLD], template="{question}", extractor=answers.extract_number,
                   grader=lambda p, a: True).answer_closed("<answer>42</answer>") is None


def first_done(table, ids):
  """Host reference walk: index of the token after which the automaton is DONE, else None."""
  hit = np.flatnonzero(stops.states(table, ids)[1:] == table.shape[0] - 1)
  return int(hit[0]) if hit.size else None


@pytest.mark.parametrize("text", CASES + ["no tag at all", "<answer>42</answ", "<answer></answer>"])
def test_byte_tokenizer_table_stops_where_the_text_closes(text):
  tok = models.byte_tokenizer()
  table = stops.span_table(token_bytes.byte_vocab(tok).pieces, SPAN, 259)
  ids = tok(text, add_special_tokens=False)["input_ids"]
  i = first_done(table, ids)
  end = tagged_task(answers.answer_tag).answer_closed(tok.decode(ids, skip_special_tokens=True))
  if end is None:
    assert i is None
  else:
    assert tok.decode(ids[:i + 1], skip_special_tokens=True) == tok.decode(ids, skip_special_tokens=True)[:end]


# A 48-token vocabulary whose pieces split the tags in several ways (`</` + `answer>`, `>\n` after `</answer`, ...).
PIECES = [None, b"<answer>", b"</answer>", b"<", b"/", b"answer", b">", b"</", b"ans", b"wer>", b">\n", b"4",
          b"2", b" ", b"x", b"</answer", b"<answer", b"answer>", b"\xe2\x82", b"\xac"] + [b"y"] * 27 + [None]
CONFIG = decoder.Config(arch="qwen3", vocab_size=48, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                        head_dim=8, d_ff=64, qk_norm=True, max_seq_len=256)


@pytest.fixture(scope="module")
def model():
  params = param_init.init_params(jax.random.key(0), CONFIG, scale=0.3)   # 20 of the 48 ids are tag pieces
  return models.Model(config=CONFIG, params=params, tokenizer=None, stop_ids=(47,), name="test", sha256=None,
                      source="random")


def text_of(ids):
  return b"".join(PIECES[i] or b"" for i in ids).decode("utf-8", "replace")


def test_table_matches_the_byte_reference_on_split_tags():
  table = stops.span_table(PIECES, SPAN, 48)
  rng = np.random.default_rng(0)
  seen = 0
  for _ in range(300):
    ids = rng.integers(1, 21, size=12).tolist()
    i, end = first_done(table, ids), base.Task.answer_closed(tagged_task(answers.answer_tag), text_of(ids))
    assert (i is None) == (end is None)
    if i is not None:
      seen += 1
      assert text_of(ids[:i + 1]).startswith(text_of(ids)[:end]) and not text_of(ids[:i]).startswith(
          text_of(ids)[:end])
  assert seen > 20


def test_model_policy_stops_where_the_full_response_closes_its_answer(model):
  """On device (ModelPolicy -> branching.branch -> decode) against the host reference: the full continuation
  (no stop; draws are keyed per row and step) cut after the token that closes the first answer span of the
  response (prefix and forced token included), graded finished. Batches of 8 rows: no compaction, one shape."""
  table = stops.span_table(PIECES, SPAN, 48)
  with_stop = targeted.ModelPolicy(model, batch_size=8, answer_span=SPAN)
  with_stop._table = (table, jax.device_put(table))                  # PIECES: the test model has no tokenizer
  plain = targeted.ModelPolicy(model, batch_size=8, answer_span=SPAN)
  never = np.zeros_like(table)                                       # never closes: the full decode, compiled once
  plain._table = (never, jax.device_put(never))
  prompt = [11, 12, 13]
  responses = [[1, 11, 12, 15, 10, 14], [3, 5, 6, 11, 7, 8, 9], [14, 14, 14]]
  rows = [(b, t, f) for b, r in enumerate(responses) for t in (0, len(r) // 2, len(r) - 1) for f in (1, 2, 7, 16)]
  args = (prompt, responses, [b for b, _, _ in rows], [t for _, t, _ in rows], [f for _, _, f in rows])
  kw = dict(key=jax.random.key(3), row_ids=list(range(len(rows))), max_response_len=13)   # segments of 4 steps
  full, cut = plain.continue_branches(*args, **kw), with_stop.continue_branches(*args, **kw)
  stopped = 0
  for (b, t, f), (resp, fin), got in zip(rows, full, cut):
    i = first_done(table, resp)
    if i is not None:
      resp, fin = resp[:max(i + 1, t + 1)], True
      stopped += 1
    assert got == (resp, fin)
  assert 5 < stopped < len(rows) and max(len(r) - t for (r, _), (_, t, _) in zip(full, rows)) > 6


def test_outcomes_count_generated_tokens():
  class Fixed:                                   # continues with (row id % 5) tokens
    stop_ids = (9,)

    def continue_branches(self, prompt, responses, bases, positions, forced, *, key, row_ids, max_response_len):
      return [(list(responses[b][:t]) + [f] + ([] if f in self.stop_ids else [3] * (r % 5)), True)
              for b, t, f, r in zip(bases, positions, forced, row_ids)]

  cands = np.array([[4, 9, -1], [5, 6, 7]])
  rollouts = [(0, [1, 2, 3, 4], np.array([1, 2]), cands)]
  out = targeted.estimate_successes(Fixed(), lambda r, f: 1.0, [0], rollouts, R=3, key=jax.random.key(0),
                                    max_response_len=8)[0]
  ids = lambda m, k: [(m * 3 + k) * 3 + r for r in range(3)]
  want = np.array([[sum(i % 5 for i in ids(m, k)) for k in range(3)] for m in range(2)])
  want[0, 1] = 0                                 # a forced stop: fixed, run once, its continuation is empty
  want[0, 2] = 0                                 # padding
  np.testing.assert_array_equal(out.tokens, want)
  assert out.tokens.dtype == np.int64


def test_tokenizer_table_is_the_span_table_built_once():
  tok = models.byte_tokenizer()
  host, device = stops.tokenizer_table(tok, SPAN, 264)               # a model vocabulary padded past the tokenizer
  np.testing.assert_array_equal(host, stops.span_table(token_bytes.byte_vocab(tok).pieces, SPAN, 264))
  np.testing.assert_array_equal(np.asarray(device), host)
  assert np.array_equal(host[:, 259:], np.tile(np.arange(host.shape[0])[:, None], (1, 5)))   # padding keeps
  assert stops.tokenizer_table(tok, SPAN, 264)[0] is host
