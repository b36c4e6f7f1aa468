"""An answer followed by its restatement (issue 49, item 1): parts ("7 dollars and 50 cents"), a conversion ("5000 m
= 5 km"), a restatement in another unit ("2 hours, or 120 minutes", "5 km (5000 m)", "5 km, i.e. 5000 m") or a
justification read as the one quantity they state, in each of its units, or refused with a reason; never as one of
their parts.

Cases are generated (seeded) from unit pairs whose ratios this file states by definition (1 km = 1000 m, 1 hour = 60
minutes, 1 foot = 12 inches, ...), so the right readings are computed here, with Fraction, independently of the
grader's unit table.
"""
import fractions
import random

import pytest

from opd_jax import tasks
from opd_jax.tasks import answers
from opd_jax.tasks import quantities

Fraction = fractions.Fraction
# (larger unit, smaller unit, how many smaller units make one larger), as written in responses (plural forms)
PAIRS = [("dollars", "cents", 100), ("hours", "minutes", 60), ("minutes", "seconds", 60), ("km", "m", 1000),
         ("meters", "centimeters", 100), ("feet", "inches", 12), ("pounds", "ounces", 16), ("weeks", "days", 7),
         ("kg", "g", 1000), ("gallons", "quarts", 4), ("yards", "feet", 3), ("days", "hours", 24)]
FORMS = ["The answer is {s}.", "#### {s}", "So the result is \\boxed{{{s}}}.", "Altogether it is {s}.",
         "**Answer:** {s}"]
JOINS = [" = ", ", or ", " or ", " (", ", i.e. ", ", which is "]
TAILS = ["", " because 3 + 4 = 7", " (since the rate is 12)", ", not 9"]


def gold_of(v: Fraction) -> str | None:
  """A gold answer for value `v`: its exact decimal, or None when it has none (1309/60)."""
  d = v.denominator
  while d % 2 == 0 or d % 5 == 0:
    d //= 2 if d % 2 == 0 else 5
  if d != 1:
    return None
  whole, rest = divmod(abs(v.numerator) * 10**20 // v.denominator, 10**20)
  text = f"{'-' if v < 0 else ''}{whole}" + (f".{rest:020d}".rstrip("0") if rest else "")
  assert Fraction(text) == v
  return text


def number(v: Fraction) -> str:
  return str(v.numerator) if v.denominator == 1 else format(float(v), "g") if v.denominator in (2, 4, 5) else None


def generated(n: int, seed: int):
  """(text, readings the statement states, values it must never be read as) for `n` generated statements."""
  rng = random.Random(seed)
  out = []
  while len(out) < n:
    big, small, per = rng.choice(PAIRS)
    form, tail = rng.choice(FORMS), rng.choice(TAILS)
    if form.startswith("So the result") or form.startswith("####"):
      tail = tail if "(" not in tail else ""
    if form.startswith("Altogether"):
      tail = ""                     # no answer statement: the last number decides (rule 4; answers.py docstring)
    kind = rng.choice(["parts", "conversion", "reverse", "wrong"])
    if kind == "parts":                                        # x big and y small, y < per
      x, y = rng.randint(1, 40), rng.randint(1, per - 1)
      join = rng.choice([" and ", ", ", " ", ", and "])
      s = f"{x} {big}{join}{y} {small}"
      total = Fraction(x) + Fraction(y, per)
      out.append((form.format(s=s + tail), {total, total * per}, {Fraction(x), Fraction(y)}))
      continue
    x = Fraction(rng.randint(1, 40)) + rng.choice([0, Fraction(1, 2), Fraction(1, 4)])
    w = x * per + (rng.randint(1, 3) if kind == "wrong" else 0)
    if number(x) is None or number(w) is None:
      continue
    first, second = (f"{number(x)} {big}", f"{number(w)} {small}")
    if kind == "reverse":
      first, second = second, first
    join = rng.choice(JOINS)
    s = first + join + second + (")" if join == " (" else "")
    if kind == "wrong":
      out.append((form.format(s=s + tail), None, {x, w}))
    else:
      out.append((form.format(s=s + tail), {x, w}, set()))
  return out


def test_a_stated_quantity_reads_in_each_of_its_units_and_never_as_a_part():
  """Every generated statement: the extracted readings are exactly the quantity in its two units (so a gold in
  either unit grades 1), never a part or a neighbour (grade 0); a conversion that disagrees grades 0 against both
  of its numbers and says why."""
  counts = {"read": 0, "refused": 0}
  for text, want, never in generated(400, seed=49):
    got = answers.extract_number(text)
    if want is None:
      assert got is None, text
      reason = answers.read_answer(text)
      assert isinstance(reason, quantities.Refused) and "disagrees" in reason, (text, reason)
      counts["refused"] += 1
    else:
      assert set(answers.readings(got)) == want, (text, got, want)
      for value in want:
        assert gold_of(value) is None or answers.numbers_equal(gold_of(value), got), (text, value)
      counts["read"] += 1
    for value in never - (want or set()):
      assert gold_of(value) is None or not answers.numbers_equal(gold_of(value), got), (text, value)
    for value in want or set():
      assert gold_of(value + 1) is None or value + 1 in want or not answers.numbers_equal(gold_of(value + 1), got)
  assert counts["read"] > 250 and counts["refused"] > 60


@pytest.mark.parametrize("text, gold, reward", [
    ("The answer is 7 dollars and 50 cents.", "7.5", 1.0), ("The answer is 7 dollars and 50 cents.", "750", 1.0),
    ("The answer is 7 dollars and 50 cents.", "7", 0.0), ("The answer is 7 dollars and 50 cents.", "50", 0.0),
    ("The answer is 5000 m = 5 km.", "5", 1.0), ("The answer is 5000 m = 5 km.", "5000", 1.0),
    ("The answer is 5000 m = 5 km.", "4", 0.0), ("The answer is 5000 m = 500 km.", "5", 0.0),
    ("The answer is 5000 m = 500 km.", "500", 0.0), ("The answer is 3 dozen = 36 eggs.", "36", 0.0),
])
def test_the_listed_restatements(text, gold, reward):
  """Issue 49's cases: "7 dollars and 50 cents" was refused (a false 0 against 7.5); "5000 m = 5 km" read 5000."""
  problem = tasks.Problem(id="p", question="q", answer=gold)
  task = tasks.Task(name="gsm8k", problems=[problem], template="{question}", extractor=answers.extract_number,
                    grader=lambda p, a: answers.numbers_equal(p.answer, a))
  assert task.reward(problem, text) == reward
  if reward == 0.0 and answers.extract_number(text) is None:
    assert isinstance(answers.read_answer(text), quantities.Refused)      # refused with a reason


def test_a_reasoning_gym_scorer_sees_each_reading():
  """gsm_symbolic's own scorer reads the first number of what it gets: a quantity reaches it once per reading, so
  "g*100 cents = g dollars" is credited for the gold g, and a disagreeing conversion is not."""
  task = tasks.load_task("reasoning_gym:gsm_symbolic", num_problems=3, seed=0)
  problem = task.problems[0]
  g = int(problem.answer)
  assert task.reward(problem, f"<answer>{g * 100} cents = {g} dollars</answer>") == 1.0
  assert task.reward(problem, f"<answer>{g} hours, or {g * 60} minutes</answer>") == 1.0
  assert task.reward(problem, f"<answer>{g * 100} cents = {g + 1} dollars</answer>") == 0.0
  assert task.reward(problem, f"<answer>{g} dollars and 50 cents</answer>") == 0.0
