"""Grading cases (issue 26, item 3, "Answers misread"): the reward of natural answer statements, per grader.

Each case is (gold, response, expected reward) and says why; both directions: answers that must be credited
(true positives) and answers that must not be (hedges, an operand or numerator instead of the result, a value
changed after a restatement, a list). The expected rewards are reasoned from the answer statement alone (rules
and precedence: the module docstring of opd_jax.tasks.answers), not read off the grader.

The kinds of cases were learned from other graders (our own strings; no code or text copied): OpenAI
grade-school-math (`#### x`), lm-evaluation-harness gsm8k / gsm8k-cot ("strict-match" takes the first number
after "The answer is", "flexible-extract" the last number), the MATH `is_equiv` tests of hendrycks/math (units,
`\\$`, `10\\%` = 10, `\\tfrac`, `1/2`), math-verify's tests (last `=` counts, percent, sets), the answer parser of
ZubinGou/math-evaluation-harness (unit words, `x =` prefixes), reasoning-gym's gsm_symbolic scorer (first number
of the extracted string), and hedged answers rewarded in RL (Liuziyu77/Visual-RFT#79: `A or B or C`).
"""
import json

import pytest

from opd_jax import tasks
from opd_jax.tasks import answers
from opd_jax.tasks import files

# ----- GSM8K: answers.extract_number + answers.numbers_equal (the loader's wiring) -----

GSM8K_CREDITED = [
    ("42", "So the answer is 12 + 30 = 42.", "an equation's result, after its last ="),
    ("293", "Answer: m+n = 256+37 = 293", "a chain of equations: the value after the last ="),
    ("1024", "The answer is 2^{10} = 1024.", "a power, then its value"),
    ("18", "She sells 16 - 3 - 4 = 9 eggs a day.\nShe makes 9 * 2 = $18 every day.\n#### 18", "GSM8K's format"),
    ("18", "#### 18 dollars", "a unit after ####"),
    ("1250", "The total comes to $1,250.00.", "currency, thousands separator and zero decimals"),
    ("25", "The answer is 25%.", "a percent reads as its number (GSM8K and MATH convention)"),
    ("10", "The side is \\boxed{10\\text{ cm}}.", "a LaTeX unit inside the box"),
    ("0.75", "The answer is 3/4.", "a fraction is its exact value"),
    ("0.75", "So each gets \\boxed{\\dfrac{3}{4}} of the pie.", "a LaTeX fraction is its exact value"),
    ("2.5", "It takes 2 1/2 hours.", "a mixed number"),
    ("3", "The answer is 6/2 = 3.", "a division, then its value"),
    ("42", "The answer is 40.\nWait, I forgot the 2 extra ones. The answer is 42.", "the last restatement wins"),
    ("42", "6 * 7 = 42 apples in all, 40 red.\n\nAnswer: 42", "a final 'Answer:' after the working"),
    ("42", "The answer is 42 (since 12 + 30 = 42).", "a justification after the value is not the answer"),
    ("8", "The answer is 8, not 7.", "a rejected value after the answer"),
    ("42", "**Final Answer:**\n42", "the statement on the line after a bare 'Final Answer:'"),
    ("10", "#### Step 1: add the boxes\n5 + 5 = 10", "a Markdown heading '#### Step 1' is not an answer"),
    ("-3", "The answer is \u22123.", "a Unicode minus"),
    ("1000", "The total is \\boxed{1\\,000}.", "a LaTeX thin space as thousands separator"),
    ("4", "There is 32 - 28 = $4 million left for parks.", "a scale word is a unit, as GSM8K's golds use"),
    ("2", "The answer is 2 hours, or 120 minutes.", "an 'or' restating the value in another unit"),
    ("94", "The answer is at least 94.", "a non-strict bound states its value (a minimum question)"),
    ("72", "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips.",
     "calculator annotations dropped, then the last number"),
    ("190", "He would get $30 + $160 or $190.", "an 'or' after an expression restates its value"),
    ("60", "She saved 210/350 = 0.60 or 60% off.", "0.60 or 60%: one value twice"),
    ("25", "The area is 25 m^2.", "a unit with an exponent"),
]

GSM8K_REFUSED = [
    ("12", "So the answer is 12 + 30 = 42.", "the first operand of the equation"),
    ("256", "Answer: m+n = 256+37 = 293", "an operand of the chain"),
    ("2", "The answer is 2^{10} = 1024.", "the base of the power"),
    ("3", "The answer is 3/4 of a pizza.", "the numerator of the stated fraction"),
    ("3", "So each gets \\boxed{\\frac{3}{4}}.", "the numerator of a boxed fraction"),
    ("4", "Each friend gets 3/4 of a pizza.", "the denominator, the last digits of the text"),
    ("3", "He needs 2 or 3 bolts.", "a hedge: two values"),
    ("3", "It must be between 2 and 3.", "a hedge: a range in words"),
    ("3", "The number could be 1, 2, 3", "a hedge: a list"),
    ("2", "3 or 2", "a hedge, whichever value comes last"),
    ("3", "The answer is either 2 or 3.", "a hedge with 'either'"),
    ("3", "The answer is 2-3 hours.", "a hedge: a range"),
    ("3", "The answer is 3 (or maybe 4).", "a hedge in parentheses"),
    ("3", "x = 3 or x = 4", "a hedge restating the variable"),
    ("3", "The answer is \\boxed{\\pm 3}.", "two values, +3 and -3"),
    ("3", "#### 2 or 3", "a hedge after ####: no answer, and no later rule is tried"),
    ("3", "\\boxed{2, 3}", "a hedge in the box"),
    ("3", "The answer is 2 or 3.\nCounting again, 3", "a hedged statement is not rescued by the last number"),
    ("47", "The answer is 32 + 15.", "an unfinished expression is not evaluated"),
    ("32", "The answer is 32 + 15.", "the first operand of an unfinished expression"),
    ("40", "The answer is 40. Recounting, the answer is 42.", "the value was changed in a restatement"),
    ("5", "\\boxed{5} is wrong; the result is \\boxed{6}.", "the last box decides"),
    ("2151", "#### 2 1 5 1", "a list is not one number"),
    ("0.33", "The answer is 1/3.", "exact: 1/3 is not 0.33"),
    ("1", "The answer is 1/3.", "the numerator"),
    ("3000", "He has 3 thousand dollars.", "a scale word is a unit: this reads 3 (GSM8K's convention)"),
    ("8", "The answer is more than 8.", "a strict bound excludes its value"),
    ("7", "It is 8, not 7.", "the negated last number"),
    ("30", "The answer is 2:30 pm.", "a time is not one number"),
    ("2", "The answer is \\sqrt{2}.", "the argument of a root"),
    ("2", "The answer is 2\\pi.", "a product with a symbol"),
]


@pytest.fixture(scope="module")
def gsm8k(tmp_path_factory):
  """The GSM8K task as files.load_gsm8k builds it, one problem per gold answer of the cases."""
  golds = sorted({c[0] for c in GSM8K_CREDITED + GSM8K_REFUSED} | {"9"})
  path = tmp_path_factory.mktemp("gsm8k") / "gsm8k_test.jsonl"
  path.write_text("".join(json.dumps({"question": f"q{i}", "answer": f"#### {g}"}) + "\n"
                          for i, g in enumerate(golds)))
  task = files.load_gsm8k(path=str(path))
  return task, {p.answer: p for p in task.problems}


@pytest.mark.parametrize("gold, response, why", GSM8K_CREDITED, ids=[c[2] for c in GSM8K_CREDITED])
def test_gsm8k_credits(gsm8k, gold, response, why):
  task, by_gold = gsm8k
  assert task.reward(by_gold[gold], response) == 1.0, (why, task.extract(response))


@pytest.mark.parametrize("gold, response, why", GSM8K_REFUSED, ids=[c[2] for c in GSM8K_REFUSED])
def test_gsm8k_refuses(gsm8k, gold, response, why):
  task, by_gold = gsm8k
  assert task.reward(by_gold[gold], response) == 0.0, (why, task.extract(response))


def test_extract_number_values_and_no_answer():
  """What the extractor returns: canonical exact values, fractions without a finite decimal as p/q, and None
  for a statement without a single value (so that no grader can read a part of it)."""
  assert answers.extract_number("So the answer is 12 + 30 = 42.") == "42"
  assert answers.extract_number("\\boxed{\\frac{6}{8}}") == "0.75"
  assert answers.extract_number("The answer is -2/6.") == "-1/3"
  assert answers.extract_number("The answer is 1.5e3 grams.") == "1500"
  for hedge in ("2 or 3 bolts", "between 2 and 3", "1, 2, 3", "2-3", "either 2 or 3", "The answer is 7, 8"):
    assert answers.extract_number(hedge) is None, hedge
  assert answers.numbers_equal("0.5", "1/2") and not answers.numbers_equal("1/2", "1/2")  # gold: one number
  assert not answers.numbers_equal("0.33", "1/3") and not answers.numbers_equal("3", None)


def test_degenerate_responses_grade_0_without_raising(gsm8k):
  """A random model's response may be thousands of digits (int("9" * 5000) printed back raised ValueError: Python's
  4300-digit limit) or thousands of repeated phrases; each grades 0, and quickly."""
  task, by_gold = gsm8k
  problem = by_gold["9"]
  for response in ("9" * 5000, "1e999999999", "answer is " * 5000, "####\n" * 20000, "2 or " * 20000 + "9"):
    assert task.reward(problem, response) == 0.0, response[:40]


# ----- reasoning_gym:gsm_symbolic (the default task): <answer> tags read as a statement, else the numeric rules;
# its scorer takes the first number of the extracted string. {g} is the gold, {g1} = g + 1, {g2} = g + 2,
# {a} + {b} = g. -----

RG_CREDITED = [
    ("<answer>x = {g}</answer>", "an equation in the tag"),
    ("<answer>{a} + {b} = {g}</answer>", "an equation's result in the tag, not its first operand"),
    ("The answer is {a} + {b} = {g}.", "untagged: the 'answer is' statement's result"),
    ("<answer>{g} dollars</answer>", "a unit in the tag"),
    ("<answer>\n{g}\n</answer>", "line breaks in the tag"),
    ("<answer>The answer is {g}.</answer>", "a sentence in the tag"),
    ("<answer>{g}/1</answer>", "a fraction equal to the gold"),
]

RG_REFUSED = [
    ("<answer>{g} or {g1}</answer>", "a hedge (the scorer would read {g})"),
    ("<answer>between {g} and {g1}</answer>", "a hedge in words"),
    ("<answer>{g}, {g1}, {g2}</answer>", "a list"),
    ("<answer>{g}/4</answer>", "a fraction whose numerator is the gold"),
    ("<answer>{g}-{g2}</answer>", "a range"),
    ("<answer>{g} {g1}</answer>", "two numbers side by side"),
    ("<answer>{g} + 1</answer>", "an unfinished expression"),
    ("The answer is {g} or {g1}.", "untagged hedge"),
    ("<answer>{a}</answer>\nThe answer is {a} + {b} = {g}.", "the tag decides over the text"),
]


@pytest.fixture(scope="module")
def gsm_symbolic():
  task = tasks.load_task("reasoning_gym:gsm_symbolic", num_problems=3, seed=0)
  problem = next(p for p in task.problems if int(p.answer) >= 4)
  g = int(problem.answer)
  values = {"g": g, "g1": g + 1, "g2": g + 2, "a": g // 2, "b": g - g // 2}
  return task, problem, values


@pytest.mark.parametrize("template, why", RG_CREDITED, ids=[c[1] for c in RG_CREDITED])
def test_gsm_symbolic_credits(gsm_symbolic, template, why):
  task, problem, values = gsm_symbolic
  response = template.format(**values)
  assert task.reward(problem, response) == 1.0, (why, response, task.extract(response))


@pytest.mark.parametrize("template, why", RG_REFUSED, ids=[c[1] for c in RG_REFUSED])
def test_gsm_symbolic_refuses(gsm_symbolic, template, why):
  task, problem, values = gsm_symbolic
  response = template.format(**values)
  assert task.reward(problem, response) == 0.0, (why, response, task.extract(response))


# ----- MATH-500: the last \boxed{} + math-verify (answers.math_equal); a hedge parses as a set -----

MATH_CASES = [
    ("\\frac{3}{4}", "so \\boxed{0.75}", 1.0, "a decimal equal to the gold fraction"),
    ("3", "so \\boxed{x = 3}", 1.0, "an equation's value"),
    ("10", "\\boxed{10\\text{ cm}}", 1.0, "a unit"),
    ("28", "\\boxed{28\\%}", 1.0, "a percent reads as its number (MATH's is_equiv)"),
    ("-2, 1", "\\boxed{1, -2}", 1.0, "all solutions, in another order"),
    ("3", "\\boxed{2 \\text{ or } 3}", 0.0, "a hedge"),
    ("3", "\\boxed{\\frac{3}{4}}", 0.0, "the numerator of a fraction"),
    ("3", "\\boxed{2, 3}", 0.0, "a list"),
    ("3", "\\boxed{[2, 3]}", 0.0, "an interval"),
    ("3", "\\boxed{\\pm 3}", 0.0, "two values"),
    ("12", "\\boxed{12 + 30 = 42}", 0.0, "an operand of the equation"),
]


@pytest.fixture(scope="module")
def math500(tmp_path_factory):
  path = tmp_path_factory.mktemp("math") / "math500_test.json"
  golds = sorted({c[0] for c in MATH_CASES})
  path.write_text(json.dumps([{"problem": f"q{i}", "answer": g} for i, g in enumerate(golds)]))
  task = files.load_math500(path=str(path))
  return task, {p.answer: p for p in task.problems}


@pytest.mark.parametrize("gold, response, expected, why", MATH_CASES, ids=[c[3] for c in MATH_CASES])
def test_math500_cases(math500, gold, response, expected, why):
  task, by_gold = math500
  assert task.reward(by_gold[gold], response) == expected, why
