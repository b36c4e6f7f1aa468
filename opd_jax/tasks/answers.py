"""Answer extraction and equivalence: numeric (GSM8K-style), \\boxed{} + math-verify, <answer> tags.

Pure string functions; no task state. Every extractor returns a string or None ("no answer found"), and the
graders decide equality on those strings. A grade of 1 means equal, never "close": numbers compare as exact
rationals (`3/4` is 0.75, never its numerator 3), a list such as `2 1 5 1` is never read as the number 2151, and
math-verify sees decimals as the exact rationals they denote (`parse_math`). The reward R(y) in {0, 1} (paper.md,
"Objects") feeds P_succ, V and g* directly, so a false 1 and a false 0 cost the same.

Numeric extraction (`extract_number`; GSM8K, tfds "numeric", reasoning-gym numeric tasks without a tag). An
answer statement is a piece of the response that states the answer; the first rule below that finds a statement
holding a number decides, even when it decides "no answer":
  1. `####`: the text after the last `####` marker whose line holds a number (the next non-empty line when
     nothing follows the marker); GSM8K's format (openai/grade-school-math). A Markdown heading
     `#### Step 2: ...` (a word of two or more letters right after the marker) is not a marker.
  2. `\\boxed{...}`: the content of the last one (balanced braces).
  3. "answer is" / "answers are" / "answer:" / "answer =" / "answer would be": the rest of the line after the
     last such phrase whose statement holds a number (the next non-empty line when the rest of its line is only
     markup, as in "**Final Answer:**\\n42").
  4. No statement: the last number of the whole text, refused when it is part of a hedge ("2 or 3 bolts"), ends
     an unfinished expression ("32 + 15") or is negated ("not 3", "±3").
Markup beats prose (1 > 2 > 3 > 4, as before), and within rules 1 and 3 the last statement wins, so a final
restatement decides ("Answer: 42" after the working; "the answer is 40. ... the answer is 42." reads 42).
A statement is read as one value (`_read_statement`):
  a. it ends with its sentence (`.` before a space or the end, `!`, `?`, `;`, a line break), and a
     justification after its first number is dropped ("42 (since 12 + 30 = 42)", "5, which is 2 + 3", "8, not 7");
  b. its value is the first number after its last `=` (or `≈`), an equation's result: "12 + 30 = 42" -> 42,
     "m+n = 256+37 = 293" -> 293, "2^{10} = 1024" -> 1024; without `=`, its first number ("The answer is 3/4 of
     a pizza" -> 0.75);
  c. no single value, so no answer (None, and no later rule is tried: "the answer is 2 or 3" must not become
     3): a hedge, two different values joined by "or", a comma, "and" / "to" between bare numbers, "between x
     and y", "from x to y", a range "2-3" or "2–3", or "±" (an "or" that restates one quantity in another unit,
     "2 hours or 120 minutes", "0.6 or 60%", or that follows an expression, "30 + 160 or 190", is no hedge);
     an unfinished expression ("32 + 15", "5 x 3", "2^{10}", "2:30"; never evaluated) or a number that is no
     value of its own ("2\\pi", "\\sqrt{2}", "x^2", `\\frac{x}{2}`; "25 m^2" reads 25); a value excluded ("not 3",
     "≠ 3", "more than 3", "< 3"; a non-strict bound "at least 94" states 94, as a minimum question's answer
     does); several numbers side by side ("2 1 5 1", "1 000"). Approximations ("about 5", "≈ 5") state their
     number.
Numbers: optional minus and currency (`$`, `\\$`, `£`, `€`), thousands commas in groups of three (`70,000`,
LaTeX `1{,}000` and `1\\,000`), decimals, exponents (`1.5e3`), fractions `3/4` and `\\frac{3}{4}` (`\\dfrac`,
`\\tfrac`, `\\frac34`) as exact fractions, mixed numbers `2 1/2` and `2\\frac{1}{2}` (2.5). Units and trailing
words are ignored ("42 dollars", "10 cm", `10\\text{ cm}`, "90°", "28%": a percent reads as its number, the
convention of GSM8K and of MATH's is_equiv), and so are scale words: "4 million" reads 4, as GSM8K states its
gold answers in the unit the question asks for (in its 8,792 train and test solutions, a number before
"hundred" / "thousand" / "million" / "billion" equals the gold answer 7 times, its scaled value never). GSM8K
calculator annotations `<<48/2=24>>` are dropped. Word numbers ("forty-two") are not read. The value returned
is canonical (`format_number`: `$70,000.00` -> `70000`, `29.50` -> `29.5`, `\\frac{6}{8}` -> `0.75`; without a
finite decimal, `p/q`: `1/3`), and `numbers_equal` compares exact rationals, never floats or text.

reasoning-gym numeric tasks (`extract_tagged_number`): the last `<answer>` tag read as a statement (b, c), else
rules 1-4; only finite decimals reach the dataset's scorer, which reads the first number of what it gets.
MATH (`last_boxed` + `math_equal`): math-verify decides; a hedge `2 \\text{ or } 3` parses as the set {2, 3},
equal only to a gold that lists both (MATH's "all solutions" answers), and `1 \\pm \\sqrt{19}` as a set too.

The kinds of cases were collected from other graders (tests/test_grading_cases.py): OpenAI grade-school-math's
`extract_answer`, lm-evaluation-harness gsm8k "strict-match" (the first number after "The answer is") and
"flexible-extract" (the last number), hendrycks/math `is_equiv`, math-verify, and reasoning-gym's scorers.
"""
import atexit
import decimal
import fractions
import re
import threading

Fraction = fractions.Fraction
# One number as written in a response: optional minus, optional $, then either comma-grouped thousands
# (1,000,000) or plain digits, then an optional decimal part. Group 1: the minus; group 2: the digits.
_NUMBER_TOKEN = r"(-)?(?:\\?\$\s?)?((?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)"
_ONE_NUMBER = re.compile(r"\s*" + _NUMBER_TOKEN + r"\s*")
_ANSWER_TAG = re.compile(r"<answer>\s?(.*?)\s?</answer>", re.DOTALL)

# ----- reading answer statements (module docstring) -----

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
_NORMALIZE = [  # (pattern, replacement), applied in order by `_normalize`
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
_NO_NUMBER = object()   # a statement without any number: the next rule is tried


class _Number:
  """A number token of a normalised text: its span and exact value (None: not a number, e.g. `3/0`)."""

  def __init__(self, start: int, end: int, value: Fraction | None, integral: bool, fraction: bool,
               value_of_its_own: bool = True):
    self.start, self.end, self.value, self.integral, self.fraction = start, end, value, integral, fraction
    self.value_of_its_own = value_of_its_own        # False: an exponent or a function's argument


def _normalize(text: str) -> str:
  """Unicode minus to ASCII, LaTeX spacing, text, relations and thousands separators to plain characters."""
  for pattern, replacement in _NORMALIZE:
    text = pattern.sub(replacement, text)
  return text


def _numbers_in(text: str) -> list[_Number]:
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


def _read_statement(statement: str):
  """The one value an answer statement states (module docstring, a-c): a Fraction, None when it holds numbers but
  no single value (hedge, expression, bound, list), or _NO_NUMBER when it holds no number."""
  if not any(c.isdigit() for c in statement):
    return _NO_NUMBER
  text = _normalize(statement)
  end = _SENTENCE_END.search(text)
  text = text[:end.start()] if end else text
  numbers = _numbers_in(text)
  if not numbers:
    return _NO_NUMBER
  cut = _JUSTIFICATION.search(text, numbers[0].end)
  if cut:
    text = text[:cut.start()]
    numbers = [n for n in numbers if n.end <= cut.start()]
  equals = [m.end() for m in _EQUALS.finditer(text)]
  left = equals[-1] if equals else 0
  index = next((i for i, n in enumerate(numbers) if n.start >= left), None)
  if index is None:
    return None                                       # "x = ?": an equation without a result
  chosen = numbers[index]
  if (chosen.value is None or not chosen.value_of_its_own or _BOUND.search(text, left, chosen.start)
      or _TIMES_SYMBOL.match(text, chosen.end)):
    return None
  for a, b in zip(numbers, numbers[1:]):
    if a.value != b.value and _alternatives(text, a, b, ranges=a.start >= left):
      return None
  if index + 1 < len(numbers):
    gap = text[chosen.end:numbers[index + 1].start]
    if _GAP_OPERATOR.fullmatch(gap) or not gap.strip():
      return None
  return chosen.value


def _read_last_number(text: str):
  """Rule 4: the last number of `text` (normalised), None when it is a hedge, the end of an unfinished
  expression or a bound, _NO_NUMBER when `text` has no number."""
  text = _normalize(text)
  numbers = [n for n in _numbers_in(text) if n.value_of_its_own]     # "25 m^2" ends in 25
  if not numbers:
    return _NO_NUMBER
  last = numbers[-1]
  if last.value is None or _TIMES_SYMBOL.match(text, last.end):
    return None
  start = numbers[-2].end if len(numbers) > 1 else 0
  if _LAST_BOUND.search(text, start, last.start):
    return None
  if len(numbers) > 1:
    before = numbers[-2]
    gap = text[before.end:last.start]
    if before.value != last.value and _alternatives(text, before, last):
      return None
    if gap != ":" and _GAP_OPERATOR.fullmatch(gap):         # "Week 3:210 pages" is a label, not 3:210
      return None
  return last.value


def format_number(value: Fraction) -> str:
  """The canonical string of an exact value: an integer (`29`), a decimal without trailing zeros (`2.5`) when
  the value has a finite decimal expansion, else `p/q` in lowest terms (`1/3`, `-2/3`)."""
  if value.denominator == 1:
    return str(value.numerator)
  den = value.denominator
  for p in (2, 5):
    while den % p == 0:
      den //= p
  if den != 1:
    return f"{value.numerator}/{value.denominator}"
  with decimal.localcontext() as context:
    context.prec = len(str(abs(value.numerator))) + 4 * len(str(value.denominator)) + 2   # enough for 2^a 5^b
    exact = decimal.Decimal(value.numerator) / decimal.Decimal(value.denominator)
  return format(exact.normalize(), "f") if Fraction(exact) == value else f"{value.numerator}/{value.denominator}"


def exact_number(text: str) -> Fraction | None:
  """The exact value of a string that is exactly one number (`canonical_number`) or one fraction (`3/4`,
  `-\\frac{3}{4}`, as `format_number` writes them), else None."""
  canonical = canonical_number(text)
  if canonical is not None:
    return Fraction(decimal.Decimal(canonical))
  normal = _normalize(text).strip()
  numbers = _numbers_in(normal)
  if len(numbers) == 1 and numbers[0].fraction and numbers[0].start == 0 and numbers[0].end == len(normal):
    return numbers[0].value
  return None


# ----- public extractors and graders -----

def canonical_number(text: str) -> str | None:
  """A number string in canonical form, or None when `text` is not exactly one number.

  One number: optional minus, optional `$`, digits with optional thousands commas in groups of three (LaTeX
  `{,}` too) and an optional decimal part, with surrounding whitespace. Lists and other text are not numbers:
  `2 1 5 1`, `1,2`, `1 000` and `3 apples` give None (never 2151, 12, 1000, 3). Canonical: `$` and commas
  dropped; integral values lose their decimals (`29.00` -> `29`, `-0` -> `0`); other values lose trailing zeros
  (`2.50` -> `2.5`). Exact: uses `decimal.Decimal`, never floats.
  """
  match = _ONE_NUMBER.fullmatch(text.replace("\u2212", "-").replace("{,}", ","))
  if match is None:
    return None
  value = decimal.Decimal((match.group(1) or "") + match.group(2).replace(",", ""))
  if value == value.to_integral_value():
    return str(int(value))
  return format(value.normalize(), "f")


def last_boxed(text: str) -> str | None:
  """Content of the last `\\boxed{...}` in `text` (balanced braces), or None when there is none or it is
  unclosed. `\\boxed{\\frac{1}{2}}` -> `\\frac{1}{2}`."""
  start = text.rfind("\\boxed{")
  if start < 0:
    return None
  i = start + len("\\boxed{")
  depth = 1
  for j in range(i, len(text)):
    if text[j] == "{":
      depth += 1
    elif text[j] == "}":
      depth -= 1
      if depth == 0:
        return text[i:j]
  return None


def answer_tag(text: str) -> str | None:
  """Stripped content of the last `<answer>...</answer>` in `text` (reasoning-gym's convention), or None."""
  matches = _ANSWER_TAG.findall(text)
  return matches[-1].strip() if matches else None


_MARKER = re.compile(r"####")
_HEADING = re.compile(r"[ \t]*[^\W\d_]{2,}")
_ANSWER_IS = re.compile(r"\banswers?\b\W{0,4}?\s*(?:is|are|:|=|would\s+be|will\s+be|should\s+be)(?!\w)",
                        re.IGNORECASE)
_ONLY_MARKUP = re.compile(r"[\s:*$\\()\[\]{}>#_.-]*")
_STATEMENT_CHARS, _MARKUP_LINES = 1000, 4


def _line_or_next(text: str, start: int) -> str:
  """The rest of the line of `text` from `start`, or the next non-empty line (within _MARKUP_LINES lines) when
  that rest is only markup; at most _STATEMENT_CHARS characters (a statement is one sentence: this bounds the
  work on degenerate text)."""
  end = text.find("\n", start)
  line = text[start:end if end >= 0 else len(text)][:_STATEMENT_CHARS]
  for _ in range(_MARKUP_LINES):
    if end < 0 or not _ONLY_MARKUP.fullmatch(line):
      break
    start, end = end + 1, text.find("\n", end + 1)
    line = text[start:end if end >= 0 else len(text)][:_STATEMENT_CHARS]
    if line.strip():
      return line
  return "" if _ONLY_MARKUP.fullmatch(line) else line


def _read_text(text: str):
  """The value a response states (module docstring, rules 1-4): a Fraction, or None (no answer)."""
  for marker in reversed(list(_MARKER.finditer(text))):
    if _HEADING.match(text, marker.end()):
      continue                                        # a Markdown heading "#### Step 2: ..."
    value = _read_statement(_line_or_next(text, marker.end()))
    if value is not _NO_NUMBER:
      return value
  boxed = last_boxed(text)
  if boxed is not None:
    value = _read_statement(boxed)
    if value is not _NO_NUMBER:
      return value
  for anchor in reversed(list(_ANSWER_IS.finditer(text))):
    value = _read_statement(_line_or_next(text, anchor.end()))
    if value is not _NO_NUMBER:
      return value
  value = _read_last_number(text)
  return None if value is _NO_NUMBER else value


def extract_number(text: str) -> str | None:
  """The final numeric answer of a response, canonical (`format_number`; module docstring: rules 1-4 and a-c),
  or None (no number, or no single value: a hedge such as "2 or 3", an unfinished expression, a bound).

  >>> extract_number("a profit of $70,000.")
  '70000'
  >>> extract_number("So the answer is 12 + 30 = 42.")
  '42'
  """
  value = _read_text(text)
  return None if value is None else format_number(value)


def extract_tagged_number(text: str) -> str | None:
  """The numeric answer of a response to a reasoning-gym numeric task: its last `<answer>` tag read as an answer
  statement (`_read_statement`: "x = 42" -> 42, "2 or 3" -> None), else `extract_number` on the whole response.

  Only a finite decimal is returned (canonical, `$1,000.00` -> `1000`): reasoning-gym's numeric scorers read the
  first number of the string they get (gsm_symbolic: `\\b-?\\d+(?:\\.\\d+)?\\b`), so `1/3` or `2 or 3` would reach
  them as 1 or 2; every gold answer of a numeric task is a finite decimal, so a value without one is wrong, and
  None scores 0. A tag without any digit is returned as written (the scorer gives it 0).
  """
  tag = answer_tag(text)
  if tag is not None:
    value = _read_statement(tag)
    if value is _NO_NUMBER:
      return tag
  else:
    value = _read_text(text)
  if value is None:
    return None
  written = format_number(value)
  return None if "/" in written else written


def numbers_equal(gold: str, pred: str | None) -> bool:
  """Whether `pred` states exactly the number `gold`: `29.00` == `29`, `70,000` == `70000`, `0.75` == `3/4`.

  Args:
    gold: one number (`canonical_number`); a gold fraction such as `1/2` is not a GSM8K answer and grades False
      (`base.check_answers` then refuses it).
    pred: an extracted answer, one number or a fraction as `format_number` writes it (`1/3`), or None (False).
  """
  if pred is None:
    return False
  g, p = canonical_number(gold), exact_number(pred)
  return g is not None and p is not None and Fraction(decimal.Decimal(g)) == p


# ----- math-verify wrapper (MATH-500 style answers) -----

def _timeout_seconds() -> int | None:
  """math-verify times out through SIGALRM, which only the main thread may set: elsewhere, no timeout (callers off
  the main thread go through `_in_worker` instead)."""
  return 5 if threading.current_thread() is threading.main_thread() else None


OFF_MAIN_TIMEOUT = 10.0    # seconds a grade may take off the main thread (`_in_worker`)
_POOL, _POOL_LOCK = None, threading.Lock()


def _in_worker(fn, *args, timeout_value):
  """fn(*args) on the main thread of a worker process: how callers off the main thread get a timeout that works.

  math-verify's own timeout needs SIGALRM (main thread only), and a thread cannot be stopped: a power tower such
  as `9^{9^{9^{9}}}` computes in C with the GIL held and stalls the whole process (math-verify#65). So off the
  main thread the grade runs in one spawned worker process (started once, ~seconds), and after
  OFF_MAIN_TIMEOUT seconds the worker is terminated (the next call starts another) and `timeout_value` is
  returned: an answer that cannot be verified in time is not credited.
  """
  global _POOL
  import multiprocessing  # pylint: disable=g-import-not-at-top
  with _POOL_LOCK:
    if _POOL is None:
      _POOL = multiprocessing.get_context("spawn").Pool(1)
      atexit.register(_POOL.terminate)               # before interpreter teardown (Pool.__del__ then fails)
    pool = _POOL
  try:
    return pool.apply_async(fn, args).get(timeout=OFF_MAIN_TIMEOUT)
  except multiprocessing.TimeoutError:
    with _POOL_LOCK:
      if _POOL is pool:
        _POOL = None
    pool.terminate()
    return timeout_value


def parse_math(answer: str) -> list:
  """math-verify's parse of a bare answer string (no `\\boxed`), e.g. `\\frac{1}{2}` or `1,000`, decimals exact.

  The answer is wrapped as `\\boxed{answer}` before parsing (so math-verify reads it as one LaTeX answer, the
  way it reads a response's boxed answer); if that yields nothing, as `$answer$`. Each decimal (a sympy Float
  in the parse) is then replaced by the exact rational it denotes (`0.333333` -> 333333/1000000): math-verify
  compares a Float with another value after rounding both to 6 decimals, so it would grade `0.333333` equal to
  `\\frac{1}{3}` and `1.414214` to `\\sqrt{2}`; exact, a grade of 1 means equal (`0.5` still equals
  `\\frac{1}{2}`). Returns the parse (a list; empty when unparseable). Off the main thread it runs in a worker
  process with a timeout (`_in_worker`: empty after OFF_MAIN_TIMEOUT seconds).
  """
  if threading.current_thread() is not threading.main_thread():
    return _in_worker(parse_math, answer, timeout_value=[])
  import math_verify  # pylint: disable=g-import-not-at-top
  timeout = _timeout_seconds()
  for wrapped in (f"\\boxed{{{answer}}}", f"${answer}$"):
    parsed = math_verify.parse(wrapped, parsing_timeout=timeout)
    if parsed:
      return [_exact_decimals(e) for e in parsed]
  return []


def _exact_decimals(expr):
  """`expr` with every sympy Float replaced by the Rational of its decimal digits; non-sympy items as given.

  A parsed Float prints its decimal literal back (`Float("0.1")` -> "0.100000000000000"; longer literals keep
  their digits), so Rational(str(f)) is the number that was written, not its binary approximation.
  """
  import sympy  # pylint: disable=g-import-not-at-top
  if not isinstance(expr, (sympy.Basic, sympy.MatrixBase)):
    return expr
  floats = expr.atoms(sympy.Float)
  return expr.xreplace({f: sympy.Rational(str(f)) for f in floats}) if floats else expr


def math_equal(gold: str | list, pred: str | None) -> bool:
  """Whether a predicted answer (the content of a response's last `\\boxed{}`) equals the gold answer.

  Args:
    gold: the gold answer string (bare, no `\\boxed`), or its `parse_math` result (cache it: parsing costs
      milliseconds).
    pred: the predicted answer string (bare), or None (no answer: False).
  Returns:
    math_verify.verify(parse_math(gold), parse_math(pred)), decimals exact (see parse_math: `0.333333` is not
    `\\frac{1}{3}`); False when either side does not parse, or when the grade takes longer than math-verify's 5 s
    on the main thread, or OFF_MAIN_TIMEOUT seconds off it (a thread grades in a worker process: `_in_worker`).
  """
  if pred is None:
    return False
  if threading.current_thread() is not threading.main_thread():
    return _in_worker(math_equal, gold, pred, timeout_value=False)
  import math_verify  # pylint: disable=g-import-not-at-top
  gold_parsed = parse_math(gold) if isinstance(gold, str) else gold
  pred_parsed = parse_math(pred)
  if not gold_parsed or not pred_parsed:
    return False
  return bool(math_verify.verify(gold_parsed, pred_parsed, timeout_seconds=_timeout_seconds()))
