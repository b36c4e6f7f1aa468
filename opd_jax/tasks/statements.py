"""Reading an answer statement as one value, or as none (the rules of answers.py's module docstring).

`read_statement` reads a statement (rules a-c: its sentence, its answer side of `=`, no hedge, no unfinished
expression, no bound; parts and restatements of one quantity read as that quantity); `read_last_number` the last
number of a text without a statement (rule 4). Both work on `normalize`d text, whose numbers `numbers_in` finds
as exact fractions; both return a Fraction, a `quantities.Quantity` (one quantity in each unit the statement
names), a `quantities.Refused` (numbers, but no single value: the reason) or NO_NUMBER (no number: the next rule
is tried). Pure string functions, no task state.

Numbers as people write them (issue 49, item 1), each read as the number it means or refused: signs (`-`, `+`,
U+2212 and the other minus signs), fractions (`3/4`, `\\frac{3}{4}`, the fraction slash `3⁄4`, vulgar fractions
`¾`, `7½` = 7.5, `¹⁄₂`), exponents (`2.5e-7`, `1.5 × 10^{3}`, `1.5·10³`; a bare power `10²` or `2^{10}` is an
expression, refused), digit groups (`1,000`, `1{,}000`, `1\\,000`, and thin, narrow no-break, no-break and figure
spaces, `_` and `'` between groups of three; a plain space `1 000` is two numbers, refused, as is a dotted group
`1.000.000`), Unicode decimal digits (Decimal reads them). A decimal written as repeating (`0.\\overline{3}`,
`0.333...`) is not the finite decimal it starts with: refused.
"""
import decimal
import fractions
import re
import unicodedata

from opd_jax.tasks import quantities

Fraction = fractions.Fraction
Refused = quantities.Refused
_DIGITS = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+"
# A number token of the normalised text: a LaTeX fraction of two numbers; another LaTeX fraction (`\\frac{x}{2}`,
# no number: its digits are not read); or a plain number with an optional exponent (`e-7`, `× 10^{3}`) and an
# optional `/denominator`. A plain number does not start inside a word or another number.
_TOKEN = re.compile(
    r"(?P<lsign>[-+]\s*)?\\[dtc]?frac\s*(?:\{\s*(?P<lnum>-?\d+(?:\.\d+)?)\s*\}|(?P<lnum1>\d))"
    r"\s*(?:\{\s*(?P<lden>-?\d+(?:\.\d+)?)\s*\}|(?P<lden1>\d))"
    r"|(?P<latex>\\[dtc]?frac\s*(?:\{[^{}]*\}|\w)\s*(?:\{[^{}]*\}|\w))"
    r"|(?<![\w.])(?P<sign>[-+])?(?:[$£€]\s?)?(?P<num>" + _DIGITS + r")"
    r"(?:[eE](?P<exp>[-+]?\d+)(?![\w])"
    r"|\s*(?:×|x|\*)\s*10\s*(?:\^|\*\*)\s*(?:\{\s*(?P<sci>[-+]?\d+)\s*\}|(?P<sci1>[-+]?\d+)(?!\w|\.\d)))?"
    r"(?:\s*/\s*(?P<den>\d+)(?!\d|[.,]\d))?")
# Right after a number: it is not the value written before it (`1.000.000`, `1_0000`: groups; `0.\\overline{3}`:
# repeating), or, after a decimal point, it repeats (`0.333...`).
_NOT_ITS_VALUE = re.compile(r"[._'’]\d|\.?\s*\\(?:overline|dot|bar|wideparen)\b")
_REPEATS = re.compile(r"\.\.|…|\\[lc]?dots\b")
_SENTENCE_END = re.compile(r"(?<!i\.e)(?<!e\.g)[.!?](?=\s|$)|;|\n")   # "i.e." and "e.g." end no sentence
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
_UNIT_POWER = re.compile(r"\s*\^\s*\{?\s*([23])(?!\d)\s*\}?")
_UNIT_EXPONENT = re.compile(r"[^\W\d_]\s*\^\s*\{?\s*$")                # the 2 of `m^2`: part of its unit
# Between a value and its restatement in another unit ("2 hours, or 120 minutes", "5 km (5000 m)", "5 km, i.e.
# 5000 m", "0.6 or 60%"): the first's unit, then "or", "(", "i.e.", "that is" or "which is".
_GAP_RESTATE = re.compile(r"[ \t]*(?:" + _UNIT + r"[ \t]*)?,?[ \t]*(?:\(|\bor\b|\bi\.e\.?,?|\bthat is,?|\bwhich is)"
                          r"[ \t]*[$£€]?[ \t]*", re.IGNORECASE)
# A number that is no value of its own: an exponent ("x^2", "2^{10}"), the argument of a function ("\\sqrt{2}") or
# the repeating digits of a decimal ("0.\\overline{3}").
_NOT_A_VALUE = re.compile(r"(?:\^|\\(?:sqrt|log|ln|exp|sin|cos|tan|binom|dbinom|tbinom|overline|dot|bar|wideparen)"
                          r"(?:\s*\[[^\]]*\])?)\s*\{?\s*$")
# After a value: a power or a product with a symbol ("2^{10}", "2\\pi", "3\\sqrt{2}", "2x = 20"): not the value.
_TIMES_SYMBOL = re.compile(r"\s*(?:\^|\\(?:pi|sqrt|sin|cos|tan|log|ln|exp|theta|infty)\b)|[xyzn](?=\s*[-=+*/^])")
# Between the parts of one quantity or a list of quantities ("7 dollars and 50 cents", "5 feet 3 inches"): the first
# number's unit word (never "or": "2 hours or 120 minutes" restates one quantity), then a comma and / or "and",
# within one line.
_GAP_PARTS = re.compile(r"[ \t]*(?:(?!or\b)(?:[^\W\d_]+\.?|%|°)[ \t]*)?(?:,[ \t]*)?(?:and[ \t]+)?[$£€]?[ \t]*",
                        re.IGNORECASE)
_SUPER = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺", "0123456789-+")
_SUB = str.maketrans("₀₁₂₃₄₅₆₇₈₉", "0123456789")
_VULGAR = "".join(c for c in map(chr, range(0xBC, 0x2190))          # ½ ⅓ ¾ ... ⅟ ↉
                  if unicodedata.decomposition(c).startswith("<fraction>"))


def _fraction(whole: str | None, num: str, den: str, latex: bool) -> str:
  """A (mixed) fraction written for our reader (`7 1/2`) or for LaTeX (`7\\frac{1}{2}`; `⅟` has no denominator)."""
  if latex and den:
    return (whole or "") + f"\\frac{{{num}}}{{{den}}}"
  return (whole + " " if whole else "") + f"{num}/{den}"


def _vulgar(m: re.Match, latex: bool) -> str:
  """`7½` -> `7 1/2` (a mixed number), `¾` -> `3/4`, `⅟4` -> `1/4`: the character's own decomposition."""
  num, _, den = "".join(chr(int(c, 16)) for c in unicodedata.decomposition(m.group(2)).split()[1:]).partition("⁄")
  return _fraction(m.group(1), num, den, latex)


# Unicode notations of numbers (module docstring), to ASCII: (pattern, replacement for our reader, for LaTeX).
_UNICODE = [(re.compile(p), text, latex) for p, text, latex in [
    (r"[\u2212\uff0d\ufe63\u2010\u2011\u2012]", "-", "-"), (r"\uff0b", "+", "+"),     # minus signs, full-width plus
    (r"(?:(\d)[ \t]?)?([⁰¹²³⁴⁵⁶⁷⁸⁹]+)\s*[⁄/∕]\s*([₀₁₂₃₄₅₆₇₈₉]+)",                    # `7¹⁄₂`: a mixed number
     lambda m: _fraction(m.group(1), m.group(2).translate(_SUPER), m.group(3).translate(_SUB), False),
     lambda m: _fraction(m.group(1), m.group(2).translate(_SUPER), m.group(3).translate(_SUB), True)),
    ("(?:(\\d)[ \t]?)?([" + _VULGAR + "])", lambda m: _vulgar(m, False), lambda m: _vulgar(m, True)),
    (r"(?:(\d)[ \t]+)?(\d+)\s*[\u2044\u2215]\s*(\d+)", lambda m: _fraction(m.group(1), m.group(2), m.group(3), False),
     lambda m: _fraction(m.group(1), m.group(2), m.group(3), True)),                  # the fraction slash
    (r"[⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺]+", lambda m: "^{" + m.group().translate(_SUPER) + "}",          # `10²`: a power
     lambda m: "^{" + m.group().translate(_SUPER) + "}"),
    (r"[·⋅∙]", " × ", r"\\cdot "),
    (r"(?<=\d)[\u00a0\u2009\u202f\u2007_'’](?=\d{3}(?!\d))", ",", ""),                 # digit groups
]]


def unicode_numbers(text: str, *, latex: bool = False) -> str:
  """`text` with the Unicode notations of numbers in ASCII (module docstring): minus signs, vulgar fractions and
  the fraction slash (`7½` -> `7 1/2`, or `7\\frac{1}{2}` for LaTeX), superscript powers (`10²` -> `10^{2}`), the
  middle dot as a product, and digit groups separated by thin or no-break spaces, `_` or `'` (`1 000` -> `1,000`,
  or `1000` for LaTeX)."""
  if text.isascii() and "_" not in text and "'" not in text:
    return text                                       # nothing to rewrite (the common case, fast)
  for pattern, plain, for_latex in _UNICODE:
    text = pattern.sub(for_latex if latex else plain, text)
  return text


_NORMALIZE = [  # (pattern, replacement), applied in order by `normalize` (after `unicode_numbers`)
    (r"<<[^<>]*>>", ""),                                            # GSM8K calculator annotations
    (r"\u2014", "–"), (r"\{,\}", ","), (r"(?<=\d)\\,(?=\d{3}(?!\d))", ","), (r"\\!", ""),
    (r"\\(?:text\w*|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}", r" \1 "), (r"\\left|\\right", ""),
    (r"\\%", "%"), (r"\\\$", "$"), (r"\\(?:cdot|times)(?![A-Za-z])", " × "), (r"\\div(?![A-Za-z])", " ÷ "),
    (r"\\approx(?![A-Za-z])", "≈"),
    (r"\\(?:leq?|leqslant)\b|<=", "≤"), (r"\\(?:geq?|geqslant)\b|>=", "≥"), (r"\\(?:neq?)\b|!=", "≠"),
    (r"\\lt\b", "<"), (r"\\gt\b", ">"), (r"\\pm(?![A-Za-z])", "±"), (r"\^\s*\{?\\circ\}?", "°"), (r"==", "="),
    (r"\\[,;:]|\\q?quad\b|\\ |\\[()\[\]]", " "), (r"(?<!\d)\*\*|\*\*(?!\d)", ""),
]
_NORMALIZE = [(re.compile(p), r) for p, r in _NORMALIZE]
_MAX_DIGITS = 300       # a longer digit string (a degenerate response) is no number: no gold has as many
NO_NUMBER = object()   # a statement without any number: the next rule is tried


class _Number:
  """A number token of a normalised text: its span and exact value (None: not a number, e.g. `3/0`)."""

  def __init__(self, start: int, end: int, value: Fraction | None, integral: bool, fraction: bool,
               value_of_its_own: bool = True, symbolic: bool = False):
    self.start, self.end, self.value, self.integral, self.fraction = start, end, value, integral, fraction
    self.value_of_its_own = value_of_its_own        # False: an exponent or a function's argument
    self.symbolic = symbolic                        # a LaTeX fraction of symbols (`\\frac{x}{2}`): value None


def normalize(text: str) -> str:
  """Unicode numbers to ASCII (`unicode_numbers`); LaTeX spacing, text, relations and thousands separators to plain
  characters."""
  text = unicode_numbers(text)
  for pattern, replacement in _NORMALIZE:
    text = pattern.sub(replacement, text)
  return text


def numbers_in(text: str) -> list[_Number]:
  """The number tokens of a normalised text, in order; a mixed number (`2 1/2`, `2\\frac{1}{2}`) is one token."""
  out = []
  for m in _TOKEN.finditer(text):
    if m.group("latex"):
      out.append(_Number(m.start(), m.end(), None, False, False, symbolic=True))
      continue
    if m.group("num") is None:
      num, den = m.group("lnum") or m.group("lnum1"), m.group("lden") or m.group("lden1")
      ok = len(num) + len(den) <= _MAX_DIGITS and float(den) != 0
      value = Fraction(decimal.Decimal(num)) / Fraction(decimal.Decimal(den)) if ok else None
      if value is not None and (m.group("lsign") or "").strip() == "-":
        value = -value
      out.append(_Number(m.start(), m.end(), value, False, True))
      continue
    digits, den = m.group("num").replace(",", ""), m.group("den") or "1"
    exponent = m.group("exp") or m.group("sci") or m.group("sci1") or "0"
    grouped = bool(out) and out[-1].end + 1 == m.start() and text[out[-1].end] in "._'’" and out[-1].value is None
    if (len(digits) + len(exponent) + len(den) > _MAX_DIGITS or abs(int(exponent)) > _MAX_DIGITS or int(den) == 0
        or _NOT_ITS_VALUE.match(text, m.end()) or ("." in digits and _REPEATS.match(text, m.end())) or grouped):
      value = None
    else:
      value = Fraction(decimal.Decimal(digits))
      value = value * Fraction(10) ** int(exponent) if exponent != "0" else value
      value = value / int(den) if den != "1" else value
    integral = "." not in digits and exponent == "0"
    if value is not None and m.group("sign") == "-":
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


def refused_numbers(text: str) -> bool:
  """Whether `text` writes a number that is not the value it starts with (`1.000.000`, `0.\\overline{3}`,
  `0.333...`, a digit string too long, a zero denominator): module docstring."""
  return any(n.value is None and not n.symbolic for n in numbers_in(normalize(text)))


def whole_number(text: str) -> Fraction | None:
  """The value of a text that is exactly one number as people write it (`-1,000`, `1e-05`, `7½`, `\\frac{3}{4}`,
  `2\\frac{1}{2}`, `$5`; spaces around it), else None (a unit, a word, a list, an expression, a refused number)."""
  normal = normalize(text).strip()
  numbers = numbers_in(normal)
  if len(numbers) == 1 and numbers[0].start == 0 and numbers[0].end == len(normal):
    return numbers[0].value
  return None


def _unit(text: str, n: _Number) -> str:
  """The unit of number `n` in `text`: "dollar" for a currency sign, else the word (or `%`, `°`) right after it,
  singular and lower case, with its power when it has one (`m^2`), by its own name (`quantities.canonical`: "hrs"
  -> "hour"); "" when none."""
  if re.search(r"[$£€]", text[n.start:n.end]):
    return "dollar"
  m = _UNIT_AFTER.match(text, n.end)
  if not m:
    return ""
  power = _UNIT_POWER.match(text, m.end())
  return quantities.canonical(m.group(1).lower().removesuffix("s") + (f"^{power.group(1)}" if power else ""))


def _units_differ(a: str, b: str) -> bool:
  """Whether units `a` and `b` name one quantity two ways: two different units, or a bare number and a percent."""
  return a != b and (bool(a and b) or {a, b} == {"", "%"})


def _alternatives(text: str, a: _Number, b: _Number, *, ranges: bool = True) -> bool:
  """Whether consecutive numbers `a` and `b` of `text` are offered as alternatives ("2 or 3", "1, 2", "2-3",
  "between 2 and 3 bolts"); `ranges`: whether "2-3" counts (not left of an `=`, where it is a subtraction).

  Not alternatives: `a` ends an expression ("30 + 160 or 190"), or an "or" restates one quantity in another unit
  ("2 hours or 120 minutes", "$0.60 or 60 cents", "0.6 or 60%": `_restates`).
  """
  gap = text[a.end:b.start]
  if len(gap) > 40 or _OPERAND.search(text, max(0, a.start - 8), a.start):
    return False                                      # a connector is short; an operand of an expression
  if gap == "-":
    return ranges
  if _GAP_OR.fullmatch(gap):
    return not _units_differ(_unit(text, a), _unit(text, b))
  if _GAP_LIST.fullmatch(gap):
    return True
  return bool(_GAP_SPAN.fullmatch(gap) and _SPAN_START.search(text, 0, a.start))


def _restates(text: str, a: _Number, b: _Number) -> bool:
  """Whether `b` restates `a` in another unit ("2 hours, or 120 minutes", "5 km (5000 m)", "0.6 or 60%", "5 km,
  i.e. 5000 m"), whether or not the two agree (`quantities.same` decides)."""
  return bool(_GAP_RESTATE.fullmatch(text[a.end:b.start])) and _units_differ(_unit(text, a), _unit(text, b))


def _parts(text: str, a: _Number, b: _Number) -> bool:
  """Whether consecutive numbers `a` and `b` of `text` are parts of one quantity or a list of quantities ("7
  dollars and 50 cents", "5 feet, 3 inches", "2 bolts and 3 bolts"): each with a unit, of one dimension
  (`quantities.UNITS`) or the same unit, joined by the first's unit word, a comma and / or "and"."""
  if not _GAP_PARTS.fullmatch(text[a.end:b.start]):
    return False
  unit_a, unit_b = _unit(text, a), _unit(text, b)
  return bool(unit_a and unit_b) and (unit_a == unit_b or quantities.dimension(unit_a) is not None
                                      and quantities.dimension(unit_a) == quantities.dimension(unit_b))


def _run(text: str, numbers: list[_Number], i: int) -> int:
  """The index of the last number of the parts run that starts at numbers[i] (i itself when none)."""
  while i + 1 < len(numbers) and _parts(text, numbers[i], numbers[i + 1]):
    i += 1
  return i


def _quantity(text: str, run: list[_Number]):
  """The value stated by one number or the parts of one quantity (`run`): a Fraction, a Quantity, or Refused."""
  if len(run) == 1:
    return run[0].value
  what = text[run[0].start:run[-1].end] + (_unit(text, run[-1]) and " " + _unit(text, run[-1]))
  return quantities.parts([(n.value, _unit(text, n)) for n in run], what)


def _readings(value, text: str, n: _Number) -> list:
  """(value, unit) pairs of a value read at number `n`: a Quantity's own pairs, else (value, n's unit)."""
  return list(value) if isinstance(value, quantities.Quantity) else [(value, _unit(text, n))]


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


def _side_value(text: str, start: int, end: int, numbers: list[_Number]):
  """The value of a side text[start:end] that is one number or the parts of one quantity, with at most a unit
  after it ("5 km", "1 hour and 30 minutes"): a Fraction, Quantity or Refused; None for another side."""
  if not numbers or _expression(text, start, end, numbers) or _run(text, numbers, 0) != len(numbers) - 1:
    return None
  after = _UNIT_AFTER.match(text, numbers[-1].end, end)
  after = after and (_UNIT_POWER.match(text, after.end(), end) or after)
  if text[after.end() if after else numbers[-1].end:end].strip() or numbers[0].value is None:
    return None
  return _quantity(text, numbers)


def _answer_side(text: str, numbers: list[_Number], start: int = 0, end: int | None = None):
  """The side of the equation chain text[start:end] (a statement) that states its answer (answers.py's module
  docstring, b), and the sides that restate it.

  The last side; a last side that is an expression (a check, "18 = 9 + 9") gives way to the one before it; then,
  while the side before is one quantity (one number, or the parts of one, with its unit), a side after `≈` gives
  way to it ("22/7 ≈ 3.14": an approximation is not the value), and a side in another unit restates it ("5 km =
  5000 m", "5000 m = 5 km", "1/2 = 50%", "1 hour and 30 minutes = 90 minutes"): both are kept.
  Returns:
    ((start, end) of the answer side, [(start, end) of each side that states the answer, the answer side too]).
  """
  end = len(text) if end is None else end
  marks = list(_EQUALS.finditer(text, start, end))
  sides = list(zip([start] + [m.end() for m in marks], [m.start() for m in marks] + [end]))
  inside = [[n for n in numbers if s <= n.start and n.end <= e] for s, e in sides]
  k = len(sides) - 1
  while k > 0 and inside[k] and _expression(text, *sides[k], inside[k]):
    k -= 1
  chain = [k]
  while k > 0 and inside[k] and _side_value(text, *sides[k - 1], inside[k - 1]) is not None:
    units_before = {_unit(text, n) for n in inside[k - 1]}
    whole = _side_value(text, *sides[k], inside[k]) is not None          # else its first number's unit
    units = {_unit(text, n) for n in (inside[k] if whole else inside[k][:1])}
    if marks[k - 1].group() == "≈":
      chain = [k - 1]
    elif units != units_before and ("" not in units | units_before or units | units_before == {"", "%"}):
      chain = [k - 1] + chain
    else:
      break
    k -= 1
  return sides[k], [sides[i] for i in chain]


def _restated(text: str, value, chain: list, numbers: list[_Number], side: tuple[int, int]):
  """`value` (read at the answer side `side`) with the readings of the other sides of `chain` that restate it
  (`_answer_side`): a Fraction, a Quantity, or Refused when they disagree (`quantities.same`)."""
  readings = _readings(value, text, next(n for n in numbers if side[0] <= n.start))
  for s, e in chain:
    if (s, e) != side:
      inside = [n for n in numbers if s <= n.start and n.end <= e]
      other = _side_value(text, s, e, inside)
      other = inside[0].value if other is None else other          # "76 quarts, not 9": its first number
      if isinstance(other, Refused) or other is None:
        return other or Refused(f"a restatement that is no number: {text[s:e].strip()}")
      readings += _readings(other, text, inside[0])
  return quantities.same(readings, text[chain[0][0]:chain[-1][1]].strip()) if len(readings) > 1 else value


def read_statement(statement: str):
  """The one value an answer statement states (answers.py's module docstring, a-c): a Fraction, a Quantity (one
  quantity in the units it names: parts "7 dollars and 50 cents", restatements "5 km = 5000 m"), Refused when it
  holds numbers but no single value (hedge, expression, bound, list; the reason), or NO_NUMBER when it holds no
  number."""
  if not any(c.isdigit() for c in statement):
    return NO_NUMBER
  text = normalize(statement)
  end = _SENTENCE_END.search(text)
  text = text[:end.start()] if end else text
  numbers = [n for n in numbers_in(text) if n.value_of_its_own or not _UNIT_EXPONENT.search(text, 0, n.start)]
  if not numbers:
    return NO_NUMBER
  last = _run(text, numbers, 0)                       # a restatement right after the first value is kept
  keep = numbers[last + 1].end if last + 1 < len(numbers) and _restates(text, numbers[last], numbers[last + 1]) \
      else numbers[0].end
  cut = _JUSTIFICATION.search(text, keep)
  if cut:
    text = text[:cut.start()]
    numbers = [n for n in numbers if n.end <= cut.start()]
  (left, right), chain = _answer_side(text, numbers)
  index = next((i for i, n in enumerate(numbers) if left <= n.start < right), None)
  if index is None:
    return Refused(f"an equation without a result: {statement.strip()}")
  chosen = numbers[index]
  if (chosen.value is None or not chosen.value_of_its_own or _BOUND.search(text, left, chosen.start)
      or _TIMES_SYMBOL.match(text, chosen.end) or _OPERAND.search(text, max(left, chosen.start - 8), chosen.start)):
    return Refused(f"no value of its own (a bound, an operand, a power, a repeating or grouped number): "
                   f"{text[left:right].strip()}")
  last = _run(text, numbers, index)
  value = _quantity(text, numbers[index:last + 1])
  if isinstance(value, Refused):
    return value
  for i, (a, b) in enumerate(zip(numbers, numbers[1:])):
    if index <= i < last:
      continue                                        # the parts of the value ("$7 and 50 cents")
    if a.value != b.value and _alternatives(text, a, b, ranges=left <= a.start < right):
      return Refused(f"a hedge, a range or a list: {text.strip()}")
    if left <= a.start < right and _parts(text, a, b):
      return Refused(f"several quantities: {text.strip()}")
  if last + 1 < len(numbers):
    after = numbers[last + 1]
    gap = text[numbers[last].end:after.start]
    if _restates(text, numbers[last], after) and after.value is not None:
      value = quantities.same(_readings(value, text, chosen) + [(after.value, _unit(text, after))], text.strip())
    elif _GAP_OPERATOR.fullmatch(gap) or not gap.strip():
      return Refused(f"an unfinished expression or numbers side by side: {text.strip()}")
  return value if isinstance(value, Refused) else _restated(text, value, chain, numbers, (left, right))


def read_last_number(text: str):
  """Rule 4: the last number of `text` (normalised), or the quantity whose parts or restatement it ends ("7
  dollars and 50 cents", "2 hours or 120 minutes"); the value its sentence's equation states instead when the last
  number is a check ("18 = 9 + 9": `_answer_side`); Refused when it is a hedge, the end of an unfinished
  expression or a bound; NO_NUMBER when `text` has no number. A justification after a value in a text without an
  answer statement is not cut ("... 160 because 480 / 30 = 16" reads 16: GSM8K's own solutions end so where their
  prose has a typo)."""
  text = normalize(text)
  numbers = [n for n in numbers_in(text) if n.value_of_its_own]     # "25 m^2" ends in 25
  if not numbers:
    return NO_NUMBER
  last = numbers[-1]
  ends = [m.end() for m in _SENTENCE_END.finditer(text, 0, last.start)]
  after = _SENTENCE_END.search(text, last.end)
  first, end = (ends[-1] if ends else 0), (after.start() if after else len(text))      # the last number's sentence
  sentence = [n for n in numbers if first <= n.start < end]
  (left, right), chain = _answer_side(text, sentence, first, end)
  if not left <= last.start < right:                  # a check or a restatement: "18 = 9 + 9", "5 km = 5000 m"
    inside = [n for n in numbers if left <= n.start < right]
    if (not inside or inside[0].value is None or _expression(text, left, right, inside)
        or _LAST_BOUND.search(text, left, inside[0].start)):
      return Refused(f"an equation without one result: {text[first:end].strip()}")
    value = _side_value(text, left, right, inside)
    value = inside[0].value if value is None else value
    return value if isinstance(value, Refused) else _restated(text, value, chain, numbers, (left, right))
  if last.value is None or _TIMES_SYMBOL.match(text, last.end):
    return Refused(f"no value of its own (a power, a repeating or grouped number): {text[first:end].strip()}")
  i = len(numbers) - 1
  while i > 0 and numbers[i - 1].start >= first and _parts(text, numbers[i - 1], numbers[i]):
    i -= 1                                            # the parts of one quantity: "7 dollars and 50 cents"
  value = _quantity(text, numbers[i:])
  start = numbers[i - 1].end if i > 0 else 0
  if _LAST_BOUND.search(text, start, numbers[i].start):
    return Refused(f"a value excluded: {text[first:end].strip()}")
  if i > 0 and not isinstance(value, Refused):
    before, head = numbers[i - 1], numbers[i]
    gap = text[before.end:head.start]
    if before.value != head.value and _alternatives(text, before, head):
      return Refused(f"a hedge, a range or a list: {text[first:end].strip()}")
    if i == len(numbers) - 1 and _restates(text, before, head) and before.value is not None:
      k = i - 1                                       # "2 hours or 120 minutes": the quantity before, restated
      while k > 0 and numbers[k - 1].start >= first and _parts(text, numbers[k - 1], numbers[k]):
        k -= 1
      earlier = _quantity(text, numbers[k:i])
      what = text[numbers[k].start:end].strip()
      return earlier if isinstance(earlier, Refused) else quantities.same(
          _readings(earlier, text, numbers[k]) + [(head.value, _unit(text, head))], what)
    if gap != ":" and _GAP_OPERATOR.fullmatch(gap):         # "Week 3:210 pages" is a label, not 3:210
      return Refused(f"an unfinished expression: {text[first:end].strip()}")
    if re.fullmatch(r"[ \t]+", gap):
      return Refused(f"numbers side by side (a list, or digit groups: 1 000): {text[first:end].strip()}")
  return value
