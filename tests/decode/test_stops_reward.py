"""The answer stop never changes a reward (issue 49, item 2): the stop and the grader share one definition of "the
reward is now known" (`opd_jax.tasks.spans`), checked on generated texts against reasoning-gym's own extractor and
scorer, and on token sequences whose bytes split the tags, the whitespace and invalid UTF-8."""
import random

import numpy as np
import pytest
from reasoning_gym import utils as rg_utils

from opd_jax import tasks
from opd_jax.decode import stops
from opd_jax.tasks import answers
from opd_jax.tasks import base
from opd_jax.tasks import generators
from opd_jax.tasks import spans

SPAN = generators.ANSWER_SPAN
# Pieces of generated responses: tags whole and split, every character str.strip removes, characters it keeps
# that look blank (U+200B, U+FEFF), text, answers right and wrong ({g} the gold, {w} a wrong value).
WHITE = list(spans.WHITESPACE)
PIECES = (["<answer>", "</answer>", "<answer>", "</answer>", "<", "</", "answer", ">", "ans", "wer>", "<answer",
           "answer>", "<answer><answer>", "</answer></answer>"] + WHITE + ["\u200b", "\ufeff", "\ufffd", "é", "x",
           "The answer is ", "=", " or ", "{g}", "{g}", "{w}", "{g} dollars", "wait, ", "Put it in <answer></answer>.",
           "<answer>{g}</answer>", "<answer> {w} </answer>", "<answer>{g} or {w}</answer>", "<answer>\n{g}\n</answer>"])


def generated_texts(n: int, seed: int, gold: int) -> list[str]:
  """`n` texts from PIECES (seeded), a third of them opening with the template's echo, ending empty or not."""
  rng = random.Random(seed)
  out = []
  for i in range(n):
    text = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 16)))
    if i % 3 == 0:
      text = f"Put only the final answer inside <answer>{rng.choice(['', ' ', chr(10), chr(0x3000)])}</answer> " + text
    out.append(text.replace("{g}", str(gold)).replace("{w}", str(gold + 1)))
  return out


def reference_end(text: str) -> int | None:
  """Where the reward is known by reasoning-gym's own `extract_answer` (its last match, stripped): the shortest
  prefix ending with a close tag whose extracted answer is not empty (the regex's matches of a prefix are those of
  the text that end in it)."""
  for end in range(len(SPAN[1]), len(text) + 1):
    if text.endswith(SPAN[1], 0, end) and rg_utils.extract_answer(text[:end]):
      return end
  return None


def test_the_deciding_span_is_reasoning_gyms_first_non_empty_answer():
  """`spans.answer_end` (the automaton over UTF-8 bytes) against reasoning-gym's extractor on generated texts; its
  whitespace is exactly what str.strip removes, over all of Unicode."""
  assert set(spans.WHITESPACE) == {c for c in map(chr, range(0x110000)) if not c.strip()}
  texts = generated_texts(3000, seed=0, gold=42)
  found = 0
  for text in texts:
    end = spans.answer_end(text)
    assert end == reference_end(text), text
    if end is not None:
      found += 1
      assert spans.answer_content(text) == rg_utils.extract_answer(text[:end]), text
  assert 600 < found < len(texts) - 600                     # both kinds are common


@pytest.fixture(scope="module")
def gsm_symbolic():
  """The task, its first problem, and reasoning-gym's own grading of a full response: its `extract_answer`, then
  the dataset's `score_answer` on the same generated entry."""
  import reasoning_gym  # pylint: disable=g-import-not-at-top
  task = tasks.load_task("reasoning_gym:gsm_symbolic", num_problems=2, seed=0)
  dataset = reasoning_gym.create_dataset("gsm_symbolic", size=2, seed=0)
  problem, entry = task.problems[0], dataset[0]
  assert str(entry["answer"]) == problem.answer
  return task, problem, lambda text: float(dataset.score_answer(rg_utils.extract_answer(text), entry) == 1.0)


def test_the_stop_never_changes_a_reward(gsm_symbolic):
  """For every generated text, the reward of the text cut where the stop fires equals the full text's, under the
  real task (reasoning-gym's scorer) and under the plain tag extractor."""
  task, problem, _ = gsm_symbolic
  gold = int(problem.answer)
  plain = base.Task(name="t", problems=[problem], template="{question}", extractor=answers.answer_tag,
                    grader=lambda p, a: a == p.answer, answer_span=SPAN)
  cut_somewhere = 0
  for text in generated_texts(1500, seed=1, gold=gold):
    end = task.answer_closed(text)
    if end is None:
      continue
    cut_somewhere += end < len(text)
    for t in (task, plain):
      assert t.reward(problem, text[:end]) == t.reward(problem, text), (text, end)
  assert cut_somewhere > 200


@pytest.mark.parametrize("echo", ["<answer></answer>", "<answer> </answer>", "<answer>\n</answer>",
                                  "<answer>\u3000\u00a0</answer>", "<answer>\x85</answer>"])
def test_an_echoed_empty_answer_does_not_stop_before_the_answer(gsm_symbolic, echo):
  """The default template ends with "<answer></answer> tags."; a response that echoes it before answering is not
  cut at the echo: the cut text scores what reasoning-gym's own grader gives the uncut text (1 for the gold)."""
  task, problem, reasoning_gym_score = gsm_symbolic
  assert generators.TEMPLATE.endswith("<answer></answer> tags.")
  for answer, want in ((problem.answer, 1.0), (str(int(problem.answer) + 1), 0.0)):
    text = f"I must put only the final answer inside {echo} tags.\nSo <answer>{answer}</answer>, as asked"
    end = task.answer_closed(text)
    assert text[:end].endswith(f"<answer>{answer}</answer>")
    assert task.reward(problem, text[:end]) == task.reward(problem, text) == reasoning_gym_score(text) == want


# Token pieces that split the tags, whitespace characters (U+00A0 as C2 + A0, U+3000 as E3 80 + 80, U+2003 as
# E2 + 80 83) and invalid bytes (a lone E2, FF).
TOKEN_PIECES = [None, b"<answer>", b"</answer>", b"<", b"/", b"answer", b">", b"</", b"ans", b"wer>", b">\n", b"4",
                b"2", b" ", b"\n", b"\xc2", b"\xa0", b"\xe3\x80", b"\x80", b"\xe2", b"\x80\x83", b"\xff", b"x",
                b"<answer", b"</answer", b"\xe2\x80\x8b"]


def test_the_token_automaton_stops_where_the_text_definition_does():
  """On token sequences (special tokens write nothing), the first step the table reaches DONE is the token that
  completes text[:answer_end] of the decoded text (UTF-8 with replacement, as tokenizers decode)."""
  table = stops.span_table(TOKEN_PIECES, SPAN, len(TOKEN_PIECES) + 3)
  decode = lambda ids: b"".join(TOKEN_PIECES[i] or b"" if i < len(TOKEN_PIECES) else b"" for i in ids).decode(
      "utf-8", "replace")
  rng = np.random.default_rng(2)
  weights = np.array([8.0 if p in (b"<answer>", b"</answer>") else 1.0 for p in TOKEN_PIECES] + [1.0] * 3)
  stopped = 0
  for _ in range(3000):
    ids = rng.choice(len(weights), size=int(rng.integers(1, 16)), p=weights / weights.sum()).tolist()
    done = np.flatnonzero(stops.states(table, ids)[1:] == table.shape[0] - 1)
    text = decode(ids)
    end = spans.answer_end(text)
    assert (end is None) == (done.size == 0), (ids, text)
    if end is not None:
      stopped += 1
      i = int(done[0])
      assert decode(ids[:i + 1]).startswith(text[:end]) and not decode(ids[:i]).startswith(text[:end]), (ids, text)
  assert stopped > 300
