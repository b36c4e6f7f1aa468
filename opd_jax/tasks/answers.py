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
  2. A box: the content of the last one that holds anything (`last_boxed`: `\\boxed{...}`, `\\fbox{...}`, `\\boxed 5`;
     an empty `\\boxed{}` after the answer, an answer-format reminder, hides nothing).
  3. "answer is" / "answers are" / "answer:" / "answer =" / "answer would be": the rest of the line after the
     last such phrase whose statement holds a number (the next non-empty line when the rest of its line is only
     markup, as in "**Final Answer:**\\n42").
  4. No statement: the last number of the whole text, or the quantity whose parts or restatement it ends ("7
     dollars and 50 cents", "2 hours or 120 minutes", as in b), refused when it is part of a hedge ("2 or 3
     bolts"), ends an unfinished expression ("32 + 15") or is negated ("not 3", "±3").
Markup beats prose (1 > 2 > 3 > 4, as before), and within rules 1 and 3 the last statement wins, so a final
restatement decides ("Answer: 42" after the working; "the answer is 40. ... the answer is 42." reads 42).
A statement is read as one value (`statements.read_statement`):
  a. it ends with its sentence (`.` before a space or the end, `!`, `?`, `;`, a line break), and a
     justification after its first number (or after its restatement, as in b) is dropped ("42 (since 12 + 30 =
     42)", "5, which is 2 + 3", "8, not 7");
  b. its value is the first number of its answer side (`statements._answer_side`). Its `=` (or `≈`) split it into
     sides; the answer side is the last one, an equation's result ("12 + 30 = 42" -> 42, "m+n = 256+37 = 293" ->
     293, "2^{10} = 1024" -> 1024), except that a check after the value is not the value ("18 = 9 + 9" -> 18: a
     last side that is an expression gives way to the side before it), and an approximation ("22/7 ≈ 3.14" ->
     22/7) gives way to a side before it that is one number. Rule 4 reads the sentence of the last number alike
     ("So she has 18 = 9 + 9 eggs." -> 18). Without `=`, its first number ("The answer is 3/4 of a pizza" ->
     0.75). One quantity stated in several units reads as that quantity in each of them (`quantities`, issue 49):
     its parts ("7 dollars and 50 cents" -> 7.5 dollar = 750 cent, "5 feet 3 inches" -> 5.25 foot = 63 inch) and
     its restatements in another unit, after `=`, "or", "(", "i.e.", "that is" or "which is" ("5 km = 5000 m"
     and "5000 m = 5 km" -> 5 km = 5000 m, "2 hours, or 120 minutes", "1/2 = 50%", "1 hour and 30 minutes = 90
     minutes"); a gold answer equal to any reading is credited (the question's unit is unknown; each reading
     alone would be), never a single part of it. Parts or restatements that do not make one quantity by exact
     unit sizes ("5 km = 500 m", "2 bolts and 3 bolts", "3 dozen = 36 eggs") state no answer;
  c. no single value, so no answer (None, and no later rule is tried: "the answer is 2 or 3" must not become
     3): a hedge, two different values joined by "or", a comma, "and" / "to" between bare numbers, "between x
     and y", "from x to y", a range "2-3" or "2–3", or "±" (an "or" that restates one quantity in another unit,
     "2 hours or 120 minutes", "0.6 or 60%", or that follows an expression, "30 + 160 or 190", is no hedge);
     several quantities, or parts and restatements that are not one quantity (as in b); an unfinished
     expression ("32 + 15", "5 x 3", "2^{10}", "2:30", "x + 5"; never evaluated) or a number that is no value of
     its own ("2\\pi", "\\sqrt{2}", "x^2", `\\frac{x}{2}`; "25 m^2" reads 25); a value excluded ("not 3", "≠ 3",
     "more than 3", "< 3"; a non-strict bound "at least 94" states 94, as a minimum question's answer does);
     several numbers side by side ("2 1 5 1", "1 000"). Approximations ("about 5", "≈ 5") state their number.
     Each such refusal says why (`read_answer` returns a `quantities.Refused`, the reason in words; the
     extractors return None).
Numbers: optional sign (`-`, `+`, Unicode minus signs) and currency (`$`, `\\$`, `£`, `€`), thousands commas in
groups of three (`70,000`, LaTeX `1{,}000` and `1\\,000`, thin and no-break spaces, `_`, `'`), decimals, exponents
(`1.5e3`, `1.5 \\times 10^{3}`, `1.5·10³`), fractions `3/4`, `3⁄4`, `¾` and `\\frac{3}{4}` (`\\dfrac`, `\\tfrac`,
`\\frac34`) as exact fractions, mixed numbers `2 1/2`, `2½` and `2\\frac{1}{2}` (2.5); refused: a bare power
(`10²`), a dotted group (`1.000.000`), a repeating decimal (`0.\\overline{3}`, `0.333...`); `statements` module
docstring. Units and trailing words are ignored ("42 dollars", "10 cm", `10\\text{ cm}`, "90°", "28%": a percent
reads as its number, the convention of GSM8K and of MATH's is_equiv), and so are scale words: "4 million" reads
4, as GSM8K states its gold answers in the unit the question asks for (in its 8,792 train and test solutions, a
number before "hundred" / "thousand" / "million" / "billion" equals the gold answer 7 times, its scaled value
never). GSM8K calculator annotations `<<48/2=24>>` are dropped. Word numbers ("forty-two") are not read. The
value returned is canonical (`format_number`: `$70,000.00` -> `70000`, `29.50` -> `29.5`, `\\frac{6}{8}` ->
`0.75`; without a finite decimal, `p/q`: `1/3`; a quantity as its readings, `7.5 dollar = 750 cent`), and
`numbers_equal` compares exact rationals, never floats or text.

reasoning-gym numeric tasks (`extract_tagged_number`): the deciding `<answer>` span (`spans`: the first closed one
that holds anything but whitespace; nothing after it is read, so the reward is known when it closes and the
answer stop keeps it) read as a statement (b, c), else rules 1-4; only finite decimals reach the dataset's scorer,
which reads the first number of what it gets.
MATH (`last_boxed` + `math_equal`, math_answers.py): math-verify decides, on exact numbers written as it reads
them (`math_answers.latex_numbers`).

The kinds of cases were collected from other graders (tests/tasks/test_grading_cases.py): OpenAI grade-school-math's
`extract_answer`, lm-evaluation-harness gsm8k "strict-match" (the first number after "The answer is") and
"flexible-extract" (the last number), hendrycks/math `is_equiv` and `last_boxed_only_string` (`\\boxed 5`,
`\\fbox`), math-verify, and reasoning-gym's scorers; issue 49 added numbers as people write them and answers
followed by their restatement. None of these rules credits a number the text does not give as its answer: where
a statement gives no single value, the answer is None.
"""
import decimal
import fractions
import re

from opd_jax.tasks import quantities
from opd_jax.tasks import spans
from opd_jax.tasks import statements

Fraction = fractions.Fraction
# One number as written in a response: optional minus, optional $, then either comma-grouped thousands
# (1,000,000) or plain digits, then an optional decimal part. Group 1: the minus; group 2: the digits.
_NUMBER_TOKEN = r"(-)?(?:\\?\$\s?)?((?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)"
_ONE_NUMBER = re.compile(r"\s*" + _NUMBER_TOKEN + r"\s*")
_READING = re.compile(r"(-?[\d./]+)(?:%| [^\W\d_]+(?:\^[23])?)?")      # one reading of a quantity: `7.5 dollar`

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
    written = format(exact.normalize(), "f")            # normalize rounds to the context's precision: this one
  return written if Fraction(exact) == value == Fraction(written) else f"{value.numerator}/{value.denominator}"


def exact_number(text: str) -> Fraction | None:
  """The exact value of a string that is exactly one number (`canonical_number`) or one fraction (`3/4`,
  `-\\frac{3}{4}`, as `format_number` writes them), else None."""
  canonical = canonical_number(text)
  if canonical is not None:
    return Fraction(decimal.Decimal(canonical))
  normal = statements.normalize(text).strip()
  numbers = statements.numbers_in(normal)
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
  with decimal.localcontext() as context:
    context.prec = len(match.group(2)) + 2              # normalize rounds to the context's precision (28 digits)
    return format(value.normalize(), "f")


_BOX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
# Where `\\boxed 5` (no brace) ends: MATH's convention reads up to the next `$`; also a line break, the end of
# display or inline math, or the end of the sentence.
_BARE_BOX_END = re.compile(r"\$|\n|\\[\])]|[.,;!?](?=\s|$)")


def last_boxed(text: str) -> str | None:
  """Content of the last box of `text` that holds anything, or None when none does or that one is unclosed.

  Boxes: `\\boxed{...}` and `\\fbox{...}` (balanced braces, spaces allowed before the brace), and `\\boxed 5`
  (hendrycks/math's `last_boxed_only_string`: the text up to the next `$`, here also up to a line break, `\\]`,
  `\\)` or the end of the sentence). An empty box (`\\boxed{}`, e.g. an answer-format reminder written after
  the answer) is skipped, so it never hides the answer before it. `\\boxed{\\frac{1}{2}}` -> `\\frac{1}{2}`,
  `$\\boxed 5$` -> `5`, `\\boxed{7}. Answer format: \\boxed{}` -> `7`.
  """
  for box in reversed(list(_BOX.finditer(text))):
    i = box.end()
    while i < len(text) and text[i] in " \t":
      i += 1
    if i < len(text) and text[i] == "{":
      depth, content = 0, None
      for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
          content = text[i + 1:j]
          break
      if content is None:
        return None                                   # unclosed: a cut response states no answer
    else:
      end = _BARE_BOX_END.search(text, i)
      content = text[i:end.start() if end else len(text)].strip()
    if content.strip():
      return content
  return None


def answer_tag(text: str) -> str | None:
  """Stripped content of the deciding `<answer>` span of `text`: the first closed one that holds anything but
  whitespace (`spans.answer_content`; an empty `<answer></answer>`, the format echoed before or after the answer,
  hides nothing, and nothing after the deciding span is read), or None."""
  return spans.answer_content(text, spans.ANSWER_SPAN)


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


def read_answer(text: str):
  """What a response states as its answer (module docstring, rules 1-4): a Fraction, a `quantities.Quantity` (one
  quantity in each unit it names, "7 dollars and 50 cents" = 7.5 dollars = 750 cents), a `quantities.Refused`
  (numbers, but no single value: the reason, e.g. "a hedge, a range or a list: 2 or 3"), or None (no number)."""
  for marker in reversed(list(_MARKER.finditer(text))):
    if _HEADING.match(text, marker.end()):
      continue                                        # a Markdown heading "#### Step 2: ..."
    value = statements.read_statement(_line_or_next(text, marker.end()))
    if value is not statements.NO_NUMBER:
      return value
  boxed = last_boxed(text)
  if boxed is not None:
    value = statements.read_statement(boxed)
    if value is not statements.NO_NUMBER:
      return value
  for anchor in reversed(list(_ANSWER_IS.finditer(text))):
    value = statements.read_statement(_line_or_next(text, anchor.end()))
    if value is not statements.NO_NUMBER:
      return value
  value = statements.read_last_number(text)
  return None if value is statements.NO_NUMBER else value


def _written(value) -> str | None:
  """The string an extractor returns for a reading (`read_answer`): canonical (`format_number`), a Quantity's
  readings joined by " = " with their units ("7.5 dollar = 750 cent"), or None (no answer)."""
  if value is None or isinstance(value, quantities.Refused):
    return None
  return str(value) if isinstance(value, quantities.Quantity) else format_number(value)


def extract_number(text: str) -> str | None:
  """The final numeric answer of a response, canonical (`format_number`; module docstring: rules 1-4 and a-c); one
  quantity in several units as its readings ("7.5 dollar = 750 cent", `readings`); or None (no number, or no
  single value: a hedge such as "2 or 3", an unfinished expression, a bound; `read_answer` gives the reason).

  >>> extract_number("a profit of $70,000.")
  '70000'
  >>> extract_number("So the answer is 12 + 30 = 42.")
  '42'
  """
  return _written(read_answer(text))


def extract_tagged_number(text: str) -> str | None:
  """The numeric answer of a response to a reasoning-gym numeric task: its deciding `<answer>` span (`answer_tag`)
  read as an answer statement (`statements.read_statement`: "x = 42" -> 42, "2 or 3" -> None), else
  `extract_number` on the whole response.

  Only finite decimals are returned (canonical, `$1,000.00` -> `1000`; a quantity as its readings that are,
  "7.5 dollar = 750 cent": the task's grader scores each, `generators.load`): reasoning-gym's numeric scorers read
  the first number of the string they get (gsm_symbolic: `\\b-?\\d+(?:\\.\\d+)?\\b`), so `1/3` or `2 or 3` would reach
  them as 1 or 2; every gold answer of a numeric task is a finite decimal, so a value without one is wrong, and
  None scores 0. A tag without any digit is returned as written (the scorer gives it 0).
  """
  tag = answer_tag(text)
  if tag is not None:
    value = statements.read_statement(tag)
    if value is statements.NO_NUMBER:
      return tag
  else:
    value = read_answer(text)
  if isinstance(value, quantities.Quantity):
    finite = [(v, u) for v, u in value if "/" not in format_number(v)]
    value = quantities.Quantity(finite) if len(finite) > 1 else finite[0][0] if finite else None
  written = _written(value)
  return None if written is None or "/" in written else written


def readings(answer: str | None) -> list[fractions.Fraction]:
  """The exact values an extracted answer states: one (`exact_number`: `42`, `1/3`), each reading of a quantity
  as `extract_number` writes it (`7.5 dollar = 750 cent` -> [7.5, 750]), or none."""
  if answer is None:
    return []
  one = exact_number(answer)
  if one is not None:
    return [one]
  out = []
  for part in answer.split(" = "):
    match = _READING.fullmatch(part)
    value = None if match is None else exact_number(match.group(1))
    if value is None:
      return []
    out.append(value)
  return out if len(out) > 1 else []


def numbers_equal(gold: str, pred: str | None) -> bool:
  """Whether `pred` states exactly the number `gold`: `29.00` == `29`, `70,000` == `70000`, `0.75` == `3/4`, and
  a quantity in several units states each of its readings (`7.5 dollar = 750 cent` == `7.5` and `750`: the unit
  the question asks for is unknown, and each reading alone would be credited; `quantities`).

  Args:
    gold: one number (`canonical_number`); a gold fraction such as `1/2` is not a GSM8K answer and grades False
      (`base.check_answers` then refuses it).
    pred: an extracted answer, one number or a fraction as `format_number` writes it (`1/3`), a quantity's
      readings (`readings`), or None (False).
  """
  g = canonical_number(gold)
  return g is not None and Fraction(decimal.Decimal(g)) in readings(pred)


# math-verify's grading (MATH answers) lives in math_answers.py; these names are its public entry points.
from opd_jax.tasks.math_answers import math_equal  # noqa: F401  pylint: disable=g-import-not-at-top,wrong-import-position
from opd_jax.tasks.math_answers import parse_math  # noqa: F401  pylint: disable=g-import-not-at-top,wrong-import-position
