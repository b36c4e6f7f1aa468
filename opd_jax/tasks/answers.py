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
  4. No statement: the last number of the whole text, refused when it is part of a hedge ("2 or 3 bolts") or
     of a compound quantity ("7 dollars and 50 cents", as in c), ends an unfinished expression ("32 + 15") or is
     negated ("not 3", "±3").
Markup beats prose (1 > 2 > 3 > 4, as before), and within rules 1 and 3 the last statement wins, so a final
restatement decides ("Answer: 42" after the working; "the answer is 40. ... the answer is 42." reads 42).
A statement is read as one value (`statements.read_statement`):
  a. it ends with its sentence (`.` before a space or the end, `!`, `?`, `;`, a line break), and a
     justification after its first number is dropped ("42 (since 12 + 30 = 42)", "5, which is 2 + 3", "8, not 7");
  b. its value is the first number of its answer side (`statements._answer_side`). Its `=` (or `≈`) split it into
     sides; the answer side is the last one, an equation's result ("12 + 30 = 42" -> 42, "m+n = 256+37 = 293" ->
     293, "2^{10} = 1024" -> 1024), except that a check after the value is not the value ("18 = 9 + 9" -> 18: a
     last side that is an expression gives way to the side before it), and a restatement of the value is not the
     value: a side that is one number with another unit ("5 km = 5000 m" -> 5, "2.5 hours = 150 minutes" ->
     2.5, "1/2 = 50%" -> 0.5) or an approximation ("22/7 ≈ 3.14" -> 22/7) gives way to a side before it that
     is one number. Rule 4 reads the sentence of the last number alike ("So she has 18 = 9 + 9 eggs." -> 18).
     Without `=`, its first number ("The answer is 3/4 of a pizza" -> 0.75);
  c. no single value, so no answer (None, and no later rule is tried: "the answer is 2 or 3" must not become
     3): a hedge, two different values joined by "or", a comma, "and" / "to" between bare numbers, "between x
     and y", "from x to y", a range "2-3" or "2–3", or "±" (an "or" that restates one quantity in another unit,
     "2 hours or 120 minutes", "0.6 or 60%", or that follows an expression, "30 + 160 or 190", is no hedge);
     several quantities or the parts of one ("7 dollars and 50 cents", "5 feet 3 inches", "2 bolts and 3
     bolts": numbers with units of one dimension, or of one unit, joined by "and", a comma or nothing; never
     added up, so never 7 nor 50); an unfinished expression ("32 + 15", "5 x 3", "2^{10}", "2:30", "x + 5";
     never evaluated) or a number that is no value of its own ("2\\pi", "\\sqrt{2}", "x^2", `\\frac{x}{2}`; "25
     m^2" reads 25); a value excluded ("not 3", "≠ 3", "more than 3", "< 3"; a non-strict bound "at least 94"
     states 94, as a minimum question's answer does); several numbers side by side ("2 1 5 1", "1 000").
     Approximations ("about 5", "≈ 5") state their number.
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

reasoning-gym numeric tasks (`extract_tagged_number`): the last non-empty `<answer>` tag read as a statement (b,
c), else rules 1-4; only finite decimals reach the dataset's scorer, which reads the first number of what it gets.
MATH (`last_boxed` + `math_equal`, math_answers.py): math-verify decides, on exact numbers.

The kinds of cases were collected from other graders (tests/tasks/test_grading_cases.py): OpenAI grade-school-math's
`extract_answer`, lm-evaluation-harness gsm8k "strict-match" (the first number after "The answer is") and
"flexible-extract" (the last number), hendrycks/math `is_equiv` and `last_boxed_only_string` (`\\boxed 5`,
`\\fbox`), math-verify, and reasoning-gym's scorers. None of these rules credits a number the text does not give
as its answer: where a statement gives no single value, the answer is None.
"""
import decimal
import fractions
import re

from opd_jax.tasks import statements

Fraction = fractions.Fraction
# One number as written in a response: optional minus, optional $, then either comma-grouped thousands
# (1,000,000) or plain digits, then an optional decimal part. Group 1: the minus; group 2: the digits.
_NUMBER_TOKEN = r"(-)?(?:\\?\$\s?)?((?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)"
_ONE_NUMBER = re.compile(r"\s*" + _NUMBER_TOKEN + r"\s*")
_ANSWER_TAG = re.compile(r"<answer>\s?(.*?)\s?</answer>", re.DOTALL)

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
  """Stripped content of the last `<answer>...</answer>` in `text` that holds anything (reasoning-gym's convention;
  an empty `<answer></answer>`, the format echoed after the answer, hides nothing), or None."""
  matches = [m.strip() for m in _ANSWER_TAG.findall(text) if m.strip()]
  return matches[-1] if matches else None


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
  """The numeric answer of a response to a reasoning-gym numeric task: its last non-empty `<answer>` tag read as an
  answer statement (`statements.read_statement`: "x = 42" -> 42, "2 or 3" -> None), else `extract_number` on the
  whole response.

  Only a finite decimal is returned (canonical, `$1,000.00` -> `1000`): reasoning-gym's numeric scorers read the
  first number of the string they get (gsm_symbolic: `\\b-?\\d+(?:\\.\\d+)?\\b`), so `1/3` or `2 or 3` would reach
  them as 1 or 2; every gold answer of a numeric task is a finite decimal, so a value without one is wrong, and
  None scores 0. A tag without any digit is returned as written (the scorer gives it 0).
  """
  tag = answer_tag(text)
  if tag is not None:
    value = statements.read_statement(tag)
    if value is statements.NO_NUMBER:
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


# math-verify's grading (MATH answers) lives in math_answers.py; these names are its public entry points.
from opd_jax.tasks.math_answers import math_equal  # pylint: disable=g-import-not-at-top,wrong-import-position
from opd_jax.tasks.math_answers import parse_math  # pylint: disable=g-import-not-at-top,wrong-import-position
