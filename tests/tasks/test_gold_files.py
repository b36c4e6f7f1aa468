"""Gold answers read from the file's literal text, exactly (issue 49, item 1): JSON numbers never pass through a
float, repeated keys, NaN and bytes that are not UTF-8 are refused naming the line, and a math gold answer that
math-verify would read as another number is refused when the file is loaded. References: Python's Decimal and
Fraction on the literal text, and math-verify."""
import decimal
import fractions
import json
import random

import pytest

from opd_jax import tasks
from opd_jax.tasks import answers
from opd_jax.tasks import files

Fraction = fractions.Fraction


def write_jsonl(path, answers_text: list[str]) -> None:
  """One row per answer, each answer a raw JSON text (a number literal or a quoted string)."""
  path.write_text("".join(f'{{"question": "q{i}", "answer": {a}}}\n' for i, a in enumerate(answers_text)))


def plain(value: Fraction) -> str:
  """The plain decimal of a finite decimal value, by Decimal."""
  with decimal.localcontext() as ctx:
    ctx.prec = 300
    text = format(decimal.Decimal(value.numerator) / decimal.Decimal(value.denominator), "f")
  return text.rstrip("0").rstrip(".") if "." in text else text


def json_literals(n: int, seed: int) -> list[str]:
  """JSON number literals as files write them: integers beyond 2^53, long fractions, exponents in every form."""
  rng = random.Random(seed)
  out = ["0.00001", "1e21", "2.5e-7", "3.14159265358979323846", "9007199254740993.0", "9007199254740993", "0.1",
         "1E+2", "-0.0", "123456789012345678901234567890"]
  while len(out) < n:
    digits = str(rng.randrange(1, 10 ** rng.randint(1, 25)))
    cut = rng.randint(0, len(digits))
    mantissa = (digits[:cut] or "0") + ("." + digits[cut:] if cut < len(digits) else "")
    exponent = rng.choice(["", f"e{rng.randint(-30, 30)}", f"E+{rng.randint(0, 30)}", f"e-{rng.randint(0, 30)}"])
    out.append(rng.choice(["", "-"]) + mantissa + exponent)
  return out


@pytest.mark.parametrize("grader", ["numeric", "math"])
def test_json_numbers_are_the_exact_numbers_their_text_writes(tmp_path, grader):
  """Every literal's gold is Decimal(literal) exactly: its plain decimal grades 1, the float's rounding of it (when
  that differs) and the value plus a tenth of its last place grade 0."""
  literals = json_literals(60, seed=49)
  path = tmp_path / "golds.jsonl"
  write_jsonl(path, literals)
  task = tasks.load_task(f"jsonl:{grader}", path=str(path))
  rounded_differs = 0
  for literal, problem in zip(literals, task.problems):
    exact = Fraction(decimal.Decimal(literal))
    assert Fraction(decimal.Decimal(problem.answer)) == exact, (literal, problem.answer)
    right = f"\\boxed{{{plain(exact)}}}" if grader == "math" else f"#### {plain(exact)}"
    assert task.reward(problem, right) == 1.0, (literal, right)
    by_float = Fraction(float(literal))
    wrongs = [exact + Fraction(1, 10 ** max(len(plain(exact).partition(".")[2]), 0) * 10)]
    if by_float != exact:
      rounded_differs += 1
      wrongs.append(Fraction(decimal.Decimal(repr(float(literal)))))
    for wrong in wrongs:
      if wrong != exact:
        text = f"\\boxed{{{plain(wrong)}}}" if grader == "math" else f"#### {plain(wrong)}"
        assert task.reward(problem, text) == 0.0, (literal, text)
  assert rounded_differs > 10                    # the kind is real: a float changes many of these golds


def test_the_listed_gold_answers(tmp_path):
  """Issue 49's cases: 0.00001, 1e21 and 2.5e-7 under jsonl:math (were "1e-05", read by math-verify as e - 5);
  3.14159265358979323846 and 9007199254740993.0 under jsonl:numeric (a float credited a wrong answer)."""
  path = tmp_path / "m.jsonl"
  write_jsonl(path, ["0.00001", "1e21", "2.5e-7"])
  task = tasks.load_task("jsonl:math", path=str(path))
  small, big, tiny = task.problems
  assert [p.answer for p in task.problems] == ["0.00001", "1000000000000000000000", "0.00000025"]
  for response, want in (("\\boxed{0.00001}", 1.0), ("\\boxed{10^{-5}}", 1.0), ("\\boxed{1e-5}", 1.0),
                         ("\\boxed{e - 5}", 0.0), ("\\boxed{0.0001}", 0.0)):
    assert task.reward(small, response) == want, response
  assert task.reward(big, "\\boxed{10^{21}}") == 1.0 and task.reward(big, "\\boxed{10^{20}}") == 0.0
  assert task.reward(tiny, "\\boxed{2.5 \\times 10^{-7}}") == 1.0 and task.reward(tiny, "\\boxed{2.5}") == 0.0
  path = tmp_path / "n.jsonl"
  write_jsonl(path, ["3.14159265358979323846", "9007199254740993.0"])
  task = tasks.load_task("jsonl:numeric", path=str(path))
  pi, big = task.problems
  assert task.reward(pi, f"#### {float('3.14159265358979323846')!r}") == 0.0
  assert task.reward(pi, "#### 3.14159265358979323846") == 1.0
  assert task.reward(big, "#### 9007199254740992") == 0.0 and task.reward(big, "#### 9007199254740993") == 1.0


def one_line_error(load, match: str):
  with pytest.raises(ValueError, match=match) as info:
    load()
  assert "\n" not in str(info.value)
  return str(info.value)


def test_bad_rows_are_refused_naming_the_file_and_line(tmp_path):
  """Repeated keys (json keeps the last silently), NaN, a bool answer, bytes that are not UTF-8: one line each,
  naming the file and the line."""
  path = tmp_path / "bad.jsonl"
  load = lambda grader="numeric": tasks.load_task(f"jsonl:{grader}", path=str(path))
  path.write_text('{"question": "q", "answer": 1}\n\n{"question": "q", "answer": 1, "answer": 2}\n')
  one_line_error(load, r"bad.jsonl: line 3 repeats the key 'answer' in one object .*keep one")
  path.write_text('{"question": "q", "answer": NaN}\n')
  one_line_error(load, r"bad.jsonl: line 1 holds NaN")
  path.write_text('{"question": "q", "answer": 1}\n{"question": "q", "answer": true}\n')
  one_line_error(load, r"bad.jsonl: line 2: 'answer' must be a string or a number, got a JSON bool")
  path.write_bytes(b'{"question": "q", "answer": 1}\n{"question": "q", "answer": 2}\n{"question": "caf\xe9", '
                   b'"answer": 3}\n')
  one_line_error(load, r"bad.jsonl: line 3 is not UTF-8 \(byte 0xe9 at byte 18 of the line")
  path.write_bytes(b'\xef\xbb\xbf{"question": "q", "answer": 1}\n')       # a BOM is not an error
  assert load().problems[0].answer == "1"
  math = tmp_path / "math500_test.json"
  math.write_bytes(b'[{"problem": "p", "answer": "1"},\n {"problem": "\xff", "answer": "2"}]')
  one_line_error(lambda: files.load_math500(path=str(math)), r"math500_test.json: line 2 is not UTF-8")
  math.write_text('[{"problem": "p", "answer": "1", "answer": "2"}]')
  one_line_error(lambda: files.load_math500(path=str(math)), r"repeats the key 'answer'")


@pytest.mark.parametrize("gold, why", [
    ("1 000", "digit groups that are ambiguous"), ("1.000.000", "digit groups that are ambiguous"),
    ("0.\\overline{3}", "only as text"), ("0.333...", "only as text"), ("1'0000", "digit groups that are ambiguous"),
])
def test_a_math_gold_the_grader_would_misread_is_refused_at_load(tmp_path, gold, why):
  path = tmp_path / "golds.jsonl"
  path.write_text(json.dumps({"question": "q", "answer": "1"}) + "\n" + json.dumps({"question": "q", "answer": gold})
                  + "\n")
  message = one_line_error(lambda: tasks.load_task("jsonl:math", path=str(path)), f"golds.jsonl: line 2: .*{why}")
  assert "write" in message                       # says what to write instead


@pytest.mark.parametrize("gold, value", [("1e-05", "0.00001"), ("7½", "7.5"), ("¾", "0.75"), ("1⁄2", "0.5"),
                                         ("2 1/2", "2.5"), ("1\\,000", "1000"), ("−5", "-5"), ("10²", "100")])
def test_a_math_gold_in_any_notation_is_read_as_its_number(tmp_path, gold, value):
  """A gold written as people write numbers is kept as written and graded as the number it means: its plain decimal
  (math-verify's exact reading of it) grades 1, a neighbour 0."""
  path = tmp_path / "golds.jsonl"
  path.write_text(json.dumps({"question": "q", "answer": gold}) + "\n")
  task = tasks.load_task("jsonl:math", path=str(path))
  problem = task.problems[0]
  assert problem.answer == gold and tasks.check_answers(task) is task
  assert task.reward(problem, f"\\boxed{{{value}}}") == 1.0
  assert task.reward(problem, f"\\boxed{{{Fraction(value) + 1}}}") == 0.0
  assert answers.math_equal(value, gold)
