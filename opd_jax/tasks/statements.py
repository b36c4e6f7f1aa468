"""Reading an answer statement as one value, or as none (the rules of answers.py's module docstring).

`read_statement` reads a statement (rules a-c: its sentence, its answer side of `=`, no hedge, no parts of a
quantity, no unfinished expression, no bound); `read_last_number` the last number of a text without a statement
(rule 4). Both work on `normalize`d text, whose numbers `numbers_in` finds as exact fractions; both return a
Fraction, None (numbers, but no single value) or NO_NUMBER (no number: the next rule is tried). Pure string
functions, no task state.
"""
import decimal
import fractions
import re

Fraction = fractions.Fraction
_DIGITS = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+"
# A number token of the normalised text: a LaTeX fraction of two numbers; another LaTeX fraction (`\\frac{x}{2}`,
# no number: its digits are not read); or a plain number with an optional exponent and an optional
# `/denominator`. A plain number does not start inside a word or another number.
_TOKEN = re.compile(
    r"(?P<lsign>-\s*)?\\[dtc]?frac\s*(?:\{\s*(?P<lnum>-?\d+(?:\.\d+)?)\s*\}|(?P<lnum1>\d))"
    r"\s*(?:\{\s*(?P<lden>-?\d+(?:\.\d+)?)\s*\}|(?P<lden1>\d))"
    r"|(?P<latex>\\[dtc]?frac\s*(?:\{[^{}]*\}|\w)\s*(?:\{[^{}]*\}|\w))"
    r"|(?<![\w.])(?P<sign>-)?(?:[$£€]\s?)?(?P<num>" + _DIGITS + r")(?:[eE](?P<exp>[-+]?\d+)(?![\w]))?"
    r"(?:\s*/\s*(?P<den>\d+)(?!\d|[.,]\d))?")
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)|;|\n")
# After a statement's first number, the start of a justification (dropped): a parenthesis opening words other
# than "(or" ("(since ...)"; "240-(40+84)" and "(12 + 30 = 42)" stay), ", <word>" other than ", or" / ", and" /
# ", x =", and clause words.
_JUSTIFICATION = re.compile(
    r"\((?=\s*[^\W\d_])(?!\s*(?:or|either)\b)|,\s*(?!(?:or|and)\b|[^\W\d_]\w{0,2}\s*=)(?=[^\W\d_])"
    r"|\b(?:since|because|as|which|where|given|if|when|so|but|thus|hence|then|i\.e|e\.g|not|check|verify)\b",
    re.IGNORECASE)
_UNIT = r"(?:[^\W\d_]+\.?|%|°)"
# What may stand between two numbers that are alternatives (a hedge): "2 or 3", "2 bolts or 3 bolts",
# "3 (or 4)", "x = 2 or x = 3", "1, 2, 3", "1, 2, or 3", "2 and 3", "2 to 3", "±".
_GAP_OR = re.compile(r"\s*(?:" + _UNIT + r"\s*){0,2}\(?\s*,?\s*(?:\bor\b|±)(?:\s*[^\W\d_]\w*\s*=)?\s*"
                     r"(?:(?:maybe|possibly|perhaps|even)\s+)?[$£€]?\s*", re.IGNORECASE)
_GAP_LIST = re.compile(r"\s*[%°]?\s*(?:,\s*(?:(?:or|and)\s+)?|\band\b|\bto\b|–)\s*[$£€]?\s*|\s*±\s*|-",
                       re.IGNORECASE)
_GAP_SPAN = re.compile(r"\s*(?:" + _UNIT + r"\s*){0,2}(?:\band\b|\bto\b|–|-)\s*[$£€]?\s*", re.IGNORECASE)
_SPAN_START = re.compile(r"\b(?:between|from)\s*[$£€]?\s*$", re.IGNORECASE)
# An unfinished expression between two numbers: "32 + 15", "5 x 3", "2^{10}", "2:30".
_GAP_OPERATOR = re.compile(r"\s*(?:\*\*|[-+*/×÷^]|x)\s*[({]?\s*[$£€]?\s*|:", re.IGNORECASE)
# Before a value: it is excluded ("not 8", "≠ 8", "more than 8", "< 8") or one of two ("±3"). Non-strict bounds
# ("at least 94", "x ≥ 94") state their value, as a minimum question's answer does. The last-number rule only
# refuses "not", "≠" and "±" ("Because 200 < 220 Lola wins." states 220).
_EXCLUDED = r"[≠±]|\bnot"
_BOUND = re.compile(r"(?:" + _EXCLUDED + r"|(?<![\w/<>])[<>](?![<>])|\b(?:more|less|fewer)\s+than)\s*[$£€]?\s*$",
                    re.IGNORECASE)
_LAST_BOUND = re.compile(r"(?:" + _EXCLUDED + r")\s*[$£€]?\s*$", re.IGNORECASE)
# A number that ends an expression ("30 + 160 or 190": the "or" restates the sum, it offers no alternative).
_OPERAND = re.compile(r"[-+*/×÷^]\s*[$£€]?\s*$")
_UNIT_AFTER = re.compile(r"\s*(%|°|(?!(?:or|and|to|either|maybe|possibly|perhaps|even)\b)[^\W\d_]+)",
                         re.IGNORECASE)
_EQUALS = re.compile(r"=|≈")
# A number that is no value of its own: an exponent ("x^2", "2^{10}") or the argument of a function ("\\sqrt{2}").
_NOT_A_VALUE = re.compile(r"(?:\^|\\(?:sqrt|log|ln|exp|sin|cos|tan|binom|dbinom|tbinom)(?:\s*\[[^\]]*\])?)\s*\{?\s*$")
# After a value: a power or a product with a symbol ("2^{10}", "2\\pi", "3\\sqrt{2}"): not the value.
_TIMES_SYMBOL = re.compile(r"\s*(?:\^|\\(?:pi|sqrt|sin|cos|tan|log|ln|exp|theta|infty)\b)")
# Between the parts of one quantity or a list of quantities ("7 dollars and 50 cents", "5 feet 3 inches"): the first
# number's unit word (never "or": "2 hours or 120 minutes" restates one quantity), then a comma and / or "and",
# within one line.
_GAP_PARTS = re.compile(r"[ \t]*(?:(?!or\b)(?:[^\W\d_]+\.?|%|°)[ \t]*)?(?:,[ \t]*)?(?:and[ \t]+)?[$£€]?[ \t]*",
                        re.IGNORECASE)
# Units of measure by dimension (singular, lower case, as `_unit` returns them): two numbers with units of one
# dimension joined as parts ("1 hour and 30 minutes") state one quantity that no single number of them is.
_DIMENSIONS = {
    "money": "$ dollar cent penny pennie buck euro",
    "time": "second sec minute min hour hr h day week month year yr",
    "length": "inch inche foot feet ft yard yd mile mm cm m km meter metre centimeter centimetre millimeter "
              "millimetre kilometer kilometre",
    "mass": "ounce oz pound lb gram g kg kilogram ton tonne",
    "volume": "cup pint quart gallon ml liter litre milliliter millilitre",
}
_DIMENSION = {unit: name for name, units in _DIMENSIONS.items() for unit in units.split()}
_NORMALIZE = [  # (pattern, replacement), applied in order by `normalize`
    (r"<<[^<>]*>>", ""),                                            # GSM8K calculator annotations
    (r"\u2212", "-"), (r"\u2014", "–"), (r"\{,\}", ","), (r"(?<=\d)\\,(?=\d{3}(?!\d))", ","), (r"\\!", ""),
    (r"\\(?:text\w*|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}", r" \1 "), (r"\\left|\\right", ""),
    (r"\\%", "%"), (r"\\\$", "$"), (r"\\(?:cdot|times)\b", " × "), (r"\\div\b", " ÷ "), (r"\\approx\b", "≈"),
    (r"\\(?:leq?|leqslant)\b|<=", "≤"), (r"\\(?:geq?|geqslant)\b|>=", "≥"), (r"\\(?:neq?)\b|!=", "≠"),
    (r"\\lt\b", "<"), (r"\\gt\b", ">"), (r"\\pm\b", "±"), (r"\^\s*\{?\\circ\}?", "°"), (r"==", "="),
    (r"\\[,;:]|\\q?quad\b|\\ |\\[()\[\]]", " "), (r"(?<!\d)\*\*|\*\*(?!\d)", ""),
]
_NORMALIZE = [(re.compile(p), r) for p, r in _NORMALIZE]
_MAX_DIGITS = 300       # a longer digit string (a degenerate response) is no number: no gold has as many
NO_NUMBER = object()   # a statement without any number: the next rule is tried


class _Number:
  """A number token of a normalised text: its span and exact value (None: not a number, e.g. `3/0`)."""

  def __init__(self, start: int, end: int, value: Fraction | None, integral: bool, fraction: bool,
               value_of_its_own: bool = True):
    self.start, self.end, self.value, self.integral, self.fraction = start, end, value, integral, fraction
    self.value_of_its_own = value_of_its_own        # False: an exponent or a function's argument


def normalize(text: str) -> str:
  """Unicode minus to ASCII, LaTeX spacing, text, relations and thousands separators to plain characters."""
  for pattern, replacement in _NORMALIZE:
    text = pattern.sub(replacement, text)
  return text


def numbers_in(text: str) -> list[_Number]:
  """The number tokens of a normalised text, in order; a mixed number (`2 1/2`, `2\\frac{1}{2}`) is one token."""
  out = []
  for m in _TOKEN.finditer(text):
    if m.group("latex"):
      out.append(_Number(m.start(), m.end(), None, False, False))
      continue
    if m.group("num") is None:
      num, den = m.group("lnum") or m.group("lnum1"), m.group("lden") or m.group("lden1")
      ok = len(num) + len(den) <= _MAX_DIGITS and float(den) != 0
      value = Fraction(decimal.Decimal(num)) / Fraction(decimal.Decimal(den)) if ok else None
      if value is not None and m.group("lsign"):
        value = -value
      out.append(_Number(m.start(), m.end(), value, False, True))
      continue
    digits, exponent, den = m.group("num").replace(",", ""), m.group("exp") or "0", m.group("den") or "1"
    if len(digits) + len(exponent) + len(den) > _MAX_DIGITS or abs(int(exponent)) > _MAX_DIGITS or int(den) == 0:
      value = None
    else:
      value = Fraction(decimal.Decimal(digits)) * Fraction(10) ** int(exponent) / int(den)
    integral = "." not in digits and not m.group("exp")
    if value is not None and m.group("sign"):
      value = -value
    own = not _NOT_A_VALUE.search(text, max(0, m.start() - 12), m.start())
    out.append(_Number(m.start(), m.end(), value, integral and not m.group("den"), bool(m.group("den")), own))
  joined = []
  for n in out:
    prev = joined[-1] if joined else None
    if (prev is not None and prev.integral and prev.value is not None and n.fraction and n.value is not None
        and 0 < n.value < 1
        and re.fullmatch(r" ?" if text[n.start] == "\\" else " ", text[prev.end:n.start])):
      whole = prev.value
      joined[-1] = _Number(prev.start, n.end, whole - n.value if whole < 0 else whole + n.value, False, False)
      continue
    joined.append(n)
  return joined


def _unit(text: str, n: _Number) -> str:
  """The unit of number `n` in `text`: its currency sign, else the word (or `%`, `°`) right after it, singular and
  lower case; "" when none."""
  if re.search(r"[$£€]", text[n.start:n.end]):
    return "$"
  m = _UNIT_AFTER.match(text, n.end)
  return m.group(1).lower().removesuffix("s") if m else ""


def _alternatives(text: str, a: _Number, b: _Number, *, ranges: bool = True) -> bool:
  """Whether consecutive numbers `a` and `b` of `text` are offered as alternatives ("2 or 3", "1, 2", "2-3",
  "between 2 and 3 bolts"); `ranges`: whether "2-3" counts (not left of an `=`, where it is a subtraction).

  Not alternatives: `a` ends an expression ("30 + 160 or 190"), or an "or" restates one quantity in another unit
  ("2 hours or 120 minutes", "$0.60 or 60 cents", "0.6 or 60%").
  """
  gap = text[a.end:b.start]
  if len(gap) > 40 or _OPERAND.search(text, max(0, a.start - 8), a.start):
    return False                                      # a connector is short; an operand of an expression
  if gap == "-":
    return ranges
  if _GAP_OR.fullmatch(gap):
    unit_a, unit_b = _unit(text, a), _unit(text, b)
    if unit_a and unit_b and unit_a != unit_b:
      return False
    if "%" in (unit_a, unit_b) and None not in (a.value, b.value) and 100 in (b.value / a.value if a.value else 0,
                                                                             a.value / b.value if b.value else 0):
      return False                                    # "0.6 or 60%", "60% or 0.6"
    return True
  if _GAP_LIST.fullmatch(gap):
    return True
  return bool(_GAP_SPAN.fullmatch(gap) and _SPAN_START.search(text, 0, a.start))


def _parts(text: str, a: _Number, b: _Number) -> bool:
  """Whether consecutive numbers `a` and `b` of `text` are parts of one quantity or a list of quantities ("7
  dollars and 50 cents", "5 feet, 3 inches", "2 bolts and 3 bolts"): each with a unit, of one dimension
  (`_DIMENSION`) or the same unit, joined by the first's unit word, a comma and / or "and"."""
  if not _GAP_PARTS.fullmatch(text[a.end:b.start]):
    return False
  unit_a, unit_b = _unit(text, a), _unit(text, b)
  return bool(unit_a and unit_b) and (unit_a == unit_b or _DIMENSION.get(unit_a, 1) == _DIMENSION.get(unit_b, 2))


def _expression(text: str, start: int, end: int, numbers: list[_Number]) -> bool:
  """Whether the side text[start:end] holding `numbers` is an expression rather than a value: numbers joined by
  an operator ("9 + 9", "2:30"), a number that is no value of its own or is multiplied by a symbol ("2^{10}",
  "2\\pi"), or an operand ("x + 5")."""
  for i, n in enumerate(numbers):
    if (not n.value_of_its_own or _TIMES_SYMBOL.match(text, n.end)
        or _OPERAND.search(text, max(start, n.start - 8), n.start)):
      return True
    if i + 1 < len(numbers) and _GAP_OPERATOR.fullmatch(text[n.end:numbers[i + 1].start]):
      return True
  return False


def _one_number(text: str, start: int, end: int, numbers: list[_Number]) -> bool:
  """Whether the side text[start:end] is one number with at most its unit after it ("5 km", "The total: 50%")."""
  if len(numbers) != 1 or _expression(text, start, end, numbers):
    return False
  after = _UNIT_AFTER.match(text, numbers[0].end, end)
  return not text[after.end() if after else numbers[0].end:end].strip()


def _answer_side(text: str, numbers: list[_Number], start: int = 0, end: int | None = None) -> tuple[int, int]:
  """The span of the side of the equation chain text[start:end] (a statement) that states its answer (answers.py's
  module docstring, b): the last side; a last side that is an expression (a check, "18 = 9 + 9") gives way to the one
  before it; then a side that restates the one before it, when that is one number (another unit: "5 km = 5000
  m", a percent of it: "1/2 = 50%", or after `≈`: "22/7 ≈ 3.14"), gives way to it."""
  end = len(text) if end is None else end
  marks = list(_EQUALS.finditer(text, start, end))
  sides = list(zip([start] + [m.end() for m in marks], [m.start() for m in marks] + [end]))
  inside = [[n for n in numbers if s <= n.start and n.end <= e] for s, e in sides]
  k = len(sides) - 1
  while k > 0 and inside[k] and _expression(text, *sides[k], inside[k]):
    k -= 1
  while k > 0 and inside[k] and _one_number(text, *sides[k - 1], inside[k - 1]):
    a, b = inside[k - 1][0], inside[k][0]
    unit_a, unit_b = _unit(text, a), _unit(text, b)
    percent = "%" in (unit_a, unit_b) and None not in (a.value, b.value) and 100 in (
        b.value / a.value if a.value else 0, a.value / b.value if b.value else 0)
    if not (marks[k - 1].group() == "≈" or (unit_a and unit_b and unit_a != unit_b) or percent):
      break
    k -= 1
  return sides[k]


def read_statement(statement: str):
  """The one value an answer statement states (answers.py's module docstring, a-c): a Fraction, None when it holds
  numbers but no single value (hedge, expression, bound, list, parts of a quantity), or NO_NUMBER when it holds
  no number."""
  if not any(c.isdigit() for c in statement):
    return NO_NUMBER
  text = normalize(statement)
  end = _SENTENCE_END.search(text)
  text = text[:end.start()] if end else text
  numbers = numbers_in(text)
  if not numbers:
    return NO_NUMBER
  cut = _JUSTIFICATION.search(text, numbers[0].end)
  if cut:
    text = text[:cut.start()]
    numbers = [n for n in numbers if n.end <= cut.start()]
  left, right = _answer_side(text, numbers)
  index = next((i for i, n in enumerate(numbers) if left <= n.start < right), None)
  if index is None:
    return None                                       # "x = ?": an equation without a result
  chosen = numbers[index]
  if (chosen.value is None or not chosen.value_of_its_own or _BOUND.search(text, left, chosen.start)
      or _TIMES_SYMBOL.match(text, chosen.end) or _OPERAND.search(text, max(left, chosen.start - 8), chosen.start)):
    return None
  for a, b in zip(numbers, numbers[1:]):
    if a.value != b.value and _alternatives(text, a, b, ranges=left <= a.start < right):
      return None
    if left <= a.start < right and _parts(text, a, b):
      return None                                     # "7 dollars and 50 cents": never 7
  if index + 1 < len(numbers):
    gap = text[chosen.end:numbers[index + 1].start]
    if _GAP_OPERATOR.fullmatch(gap) or not gap.strip():
      return None
  return chosen.value


def read_last_number(text: str):
  """Rule 4: the last number of `text` (normalised); the value its sentence's equation states instead when the
  last number is a check or a restatement of it ("18 = 9 + 9", "5 km = 5000 m": `_answer_side`); None when it is
  a hedge, a part of a quantity, the end of an unfinished expression or a bound; NO_NUMBER when `text` has no
  number."""
  text = normalize(text)
  numbers = [n for n in numbers_in(text) if n.value_of_its_own]     # "25 m^2" ends in 25
  if not numbers:
    return NO_NUMBER
  last = numbers[-1]
  ends = [m.end() for m in _SENTENCE_END.finditer(text, 0, last.start)]
  after = _SENTENCE_END.search(text, last.end)
  first, end = (ends[-1] if ends else 0), (after.start() if after else len(text))      # the last number's sentence
  left, right = _answer_side(text, [n for n in numbers if first <= n.start < end], first, end)
  if not left <= last.start < right:                  # a check or a restatement: "18 = 9 + 9", "5 km = 5000 m"
    inside = [n for n in numbers if left <= n.start < right]
    if (not inside or inside[0].value is None or _expression(text, left, right, inside)
        or _LAST_BOUND.search(text, left, inside[0].start)):
      return None
    return inside[0].value
  if last.value is None or _TIMES_SYMBOL.match(text, last.end):
    return None
  start = numbers[-2].end if len(numbers) > 1 else 0
  if _LAST_BOUND.search(text, start, last.start):
    return None
  if len(numbers) > 1:
    before = numbers[-2]
    gap = text[before.end:last.start]
    if (before.value != last.value and _alternatives(text, before, last)) or _parts(text, before, last):
      return None                                     # "2 or 3 bolts", "7 dollars and 50 cents"
    if gap != ":" and _GAP_OPERATOR.fullmatch(gap):         # "Week 3:210 pages" is a label, not 3:210
      return None
  return last.value
