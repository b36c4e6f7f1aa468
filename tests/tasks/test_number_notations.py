"""Numbers as people write them (issue 49, item 1): every common notation of a number reads as the number it means
or is refused, in text and in LaTeX, under the numeric grader and the math grader (math-verify).

Values come from a seeded generator as exact Fractions (the truth); each is written in many notations (signs,
fractions incl. vulgar fractions and the fraction slash, exponents, digit groups) and must grade 1 against its own
value and 0 against nearby wrong values and against the parts a misreading would take (a numerator, the whole of a
mixed number, a mantissa, the first digit group). The LaTeX notations are checked against math-verify's own reading
(unmodified: `math_verify.parse`) wherever it reads that notation, and every expected value against Python's
Fraction / Decimal, never against our own outputs.
"""
import decimal
import fractions
import random

import math_verify
import pytest
import sympy

from opd_jax.tasks import answers
from opd_jax.tasks import quantities

Fraction = fractions.Fraction
SUPER = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")
SUB = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")
VULGAR = {Fraction(1, 2): "½", Fraction(1, 4): "¼", Fraction(3, 4): "¾", Fraction(1, 3): "⅓", Fraction(2, 3): "⅔",
          Fraction(1, 8): "⅛", Fraction(5, 8): "⅝", Fraction(1, 5): "⅕", Fraction(5, 6): "⅚", Fraction(1, 7): "⅐"}


def decimal_text(value: Fraction) -> str:
  """The plain decimal of a value with a finite expansion, by Decimal (an independent writer: 0.00000025)."""
  with decimal.localcontext() as ctx:
    ctx.prec = 400
    out = decimal.Decimal(value.numerator) / decimal.Decimal(value.denominator)
  assert Fraction(out) == value
  text = format(out, "f")
  return text.rstrip("0").rstrip(".") if "." in text else text


def finite(value: Fraction) -> bool:
  """Whether a value has a finite decimal expansion (its denominator has no prime but 2 and 5)."""
  return all(p in (2, 5) for p in sympy.primefactors(value.denominator))


def grouped(digits: str, sep: str) -> str:
  """`1234567` -> `1<sep>234<sep>567`."""
  head = len(digits) % 3 or 3
  return sep.join([digits[:head]] + [digits[i:i + 3] for i in range(head, len(digits), 3)])


def notations(value: Fraction, rng: random.Random) -> list[tuple[str, bool, list[Fraction]]]:
  """(written, latex?, parts a misreading would take) for `value` in every notation that fits it."""
  sign = "-" if value < 0 else ""
  mag = abs(value)
  out = []
  minus = rng.choice(["-", "\u2212", "\uff0d"]) if value < 0 else rng.choice(["", "+"])
  if finite(mag):
    plain = decimal_text(mag)
    whole, _, frac = plain.partition(".")
    out.append((minus + plain, False, []))
    out.append((f"{sign}\\${plain}" if rng.random() < 0.5 else f"{sign}{plain}", True, []))
    if len(whole) > 3:
      tail = "." + frac if frac else ""
      first = Fraction(whole[:len(whole) % 3 or 3]) * (-1 if value < 0 else 1)
      for sep, latex in ((",", False), ("{,}", True), ("\\,", True), ("\u202f", False), ("\u2009", False),
                         ("\u00a0", False), ("_", False), ("'", False)):
        out.append((sign + grouped(whole, sep) + tail, latex, [first]))
    digits = (whole + frac).lstrip("0")
    if digits:                                                     # scientific: d.ddd x 10^e
      exponent = len(whole.lstrip("0")) - 1 if whole.strip("0") else -(len(frac) - len(frac.lstrip("0")) + 1)
      mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
      m = Fraction(mantissa) * (-1 if value < 0 else 1)
      out += [(f"{sign}{mantissa}e{exponent}", False, [m]), (f"{sign}{mantissa}E{exponent:+d}", False, [m]),
              (f"{sign}{mantissa} × 10^{exponent}", False, [m]),
              (f"{sign}{mantissa}\\times10^{{{exponent}}}", True, [m]),
              (f"{sign}{mantissa} \\cdot 10^{{{exponent}}}", True, [m]),
              (f"{sign}{mantissa}·10{str(exponent).translate(SUPER)}", False, [m])]
  if mag.denominator > 1 and mag.denominator <= 64:
    num, den = mag.numerator, mag.denominator
    parts = [Fraction(num), Fraction(den)]
    out += [(f"{minus}{num}/{den}", False, parts), (f"{sign}\\frac{{{num}}}{{{den}}}", True, parts),
            (f"{sign}\\dfrac{{{num}}}{{{den}}}", True, parts), (f"{minus}{num}\u2044{den}", False, parts),
            (f"{minus}{num}\u2215{den}", False, parts)]
    w, rest = divmod(num, den)
    if w:
      whole_part = [Fraction(w) * (-1 if value < 0 else 1), Fraction(rest)]
      r = Fraction(rest, den)
      out += [(f"{sign}{w} {r.numerator}/{r.denominator}", False, whole_part),
              (f"{sign}{w}\\frac{{{r.numerator}}}{{{r.denominator}}}", True, whole_part),
              (f"{sign}{w}{str(r.numerator).translate(SUPER)}\u2044{str(r.denominator).translate(SUB)}", False,
               whole_part)]
      if r in VULGAR:
        out += [(f"{sign}{w}{VULGAR[r]}", False, whole_part), (f"{sign}{w} {VULGAR[r]}", False, whole_part)]
    elif mag in VULGAR:
      out.append((sign + VULGAR[mag], False, []))
  return out


def generated_values(n: int, seed: int) -> list[Fraction]:
  rng = random.Random(seed)
  out = []
  for i in range(n):
    kind = i % 5
    if kind == 0:
      v = Fraction(rng.randrange(1, 10 ** rng.randint(1, 12)))
    elif kind == 1:
      v = Fraction(rng.randrange(1, 10**7), 10 ** rng.randint(1, 9))
    elif kind == 2:
      v = Fraction(rng.randrange(1, 200), rng.choice([2, 3, 4, 5, 6, 7, 8, 12, 16]))
    elif kind == 3:
      v = Fraction(rng.randrange(1, 1000)) * Fraction(10) ** rng.randint(-9, 21)
    else:
      v = rng.choice(list(VULGAR)) + rng.randrange(0, 30)
    out.append(-v if rng.random() < 0.3 else v)
  return out


FORMS = ["#### {s}", "The answer is {s}.", "So the result is \\boxed{{{s}}}.", "Altogether that makes {s}.",
         "**Final Answer:** {s}"]


def wrong_values(value: Fraction) -> list[Fraction]:
  """Nearby wrong values: off by one, by a unit in the last place, and the value's negation."""
  step = Fraction(1, value.denominator) if value.denominator > 1 else Fraction(1)
  return [value + 1, value - step, value + step / 10, -value]


def test_every_notation_reads_as_its_number_under_the_numeric_grader():
  """Each generated value in each notation and statement form: extract_number reads exactly the value (grade 1 with
  its decimal as gold, when it has one), never a nearby value nor a part (grade 0)."""
  rng = random.Random(49)
  checked = 0
  for value in generated_values(160, seed=49):
    for written, _, parts in notations(value, rng):
      form = rng.choice(FORMS)
      text = form.format(s=written)
      got = answers.readings(answers.extract_number(text))
      assert got == [value], (text, got, value)
      if finite(value):
        assert answers.numbers_equal(decimal_text(value), answers.extract_number(text)), text
        for wrong in wrong_values(value) + [p for p in parts if p != value]:
          if finite(wrong):
            assert not answers.numbers_equal(decimal_text(wrong), answers.extract_number(text)), (text, wrong)
      checked += 1
  assert checked > 2000


def test_latex_notations_agree_with_math_verify_and_the_math_grader_reads_them_all():
  """The LaTeX notations, as math-verify itself reads them (`math_verify.parse`, no rewriting), are the generated
  values (the generator is right where math-verify reads the notation: fractions, `\\times 10^{e}`, `{,}`); and the
  math grader (`math_equal`) reads
  every notation, Unicode ones included, as the value: 1 against its `\\frac` or decimal gold, 0 against a wrong
  value and a part."""
  rng = random.Random(7)
  agreed = graded = 0
  for value in generated_values(40, seed=7):
    gold = f"\\frac{{{value.numerator}}}{{{value.denominator}}}" if value.denominator > 1 else str(value)
    cases = notations(value, rng)
    for written, latex, parts in cases:
      if latex and "\\," not in written:       # math-verify alone reads `1\\,000` as 0 (a product): fixed, not a check
        parsed = [p for p in math_verify.parse(f"$\\boxed{{{written}}}$") if isinstance(p, sympy.Basic)]
        if parsed and parsed[0].is_Rational:
          assert sympy.Rational(parsed[0]) == sympy.Rational(value.numerator, value.denominator), (written, parsed)
          agreed += 1
    for written, _, parts in rng.sample(cases, min(4, len(cases))):
      assert answers.math_equal(gold, written), (gold, written)
      for wrong in [value + 1] + [p for p in parts if p != value][:1]:
        assert not answers.math_equal(f"\\frac{{{wrong.numerator}}}{{{wrong.denominator}}}", written), (wrong, written)
      graded += 1
  assert agreed > 60 and graded > 100


# Notations the numeric grader refuses (no number, or an expression it never evaluates), with the values a misreading
# would take: neither grader reads those (the math grader evaluates `10²` as 100 and `3·5` as 15, as LaTeX means,
# and reads `1_0000` as math-verify reads a base subscript, `52_8`).
REFUSED = [
    ("1.000.000", [1, 1000000]), ("12.345.678", [Fraction("12.345"), 12345678]), ("1 000", [1, 1000, 0]),
    ("10²", [10]), ("2^{10}", [2]), ("0.\\overline{3}", [0, Fraction(3, 10)]),
    ("0.333...", [Fraction(333, 1000)]), ("0.333…", [Fraction(333, 1000)]), ("3·5", [3, 5, Fraction(35, 10)]),
    ("1'0000", [1, 10000]), ("1_0000", [10000]), ("1,00,000", [1, 100000]), ("1.5 × 10", [Fraction(3, 2)]),
]


@pytest.mark.parametrize("written, misreadings", REFUSED, ids=[r[0] for r in REFUSED])
def test_ambiguous_notations_are_refused_with_a_reason(written, misreadings):
  for form in FORMS:
    text = form.format(s=written)
    assert answers.extract_number(text) is None, text
    reason = answers.read_answer(text)
    assert isinstance(reason, quantities.Refused) and len(reason) > 10, (text, reason)
  for wrong in misreadings:
    gold = f"\\frac{{{Fraction(wrong).numerator}}}{{{Fraction(wrong).denominator}}}"
    assert not answers.math_equal(gold, written), (written, wrong)


def test_the_listed_unicode_fractions_read_as_their_values():
  """Issue 49's cases: "#### 7½" was read as 7, "1⁄2" as 1, "¾" as nothing."""
  assert answers.extract_number("#### 7½") == "7.5" and answers.extract_number("The answer is 1⁄2.") == "0.5"
  assert answers.extract_number("#### ¾") == "0.75"
  assert not answers.numbers_equal("7", answers.extract_number("#### 7½"))
  assert answers.math_equal("7.5", "7½") and answers.math_equal("\\frac{1}{2}", "1⁄2")
  assert answers.math_equal("0.75", "¾")
  assert not answers.math_equal("7", "7½") and not answers.math_equal("1", "1⁄2")
