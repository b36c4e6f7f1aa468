"""Answer extraction and equivalence: numeric (GSM8K-style), \\boxed{} + math-verify, <answer> tags.

Pure string functions; no task state. Every extractor returns a string or None ("no answer found"), and the
graders decide equality on those strings. A grade of 1 means equal, never "close": numbers compare as exact
decimals, a list such as `2 1 5 1` is never read as the number 2151, and math-verify sees decimals as the exact
rationals they denote (`parse_math`).

Numeric extraction (`extract_number`), the first rule that yields a number wins (paper.md, "Objects": the
verifier behind R(y) in {0, 1}):
  1. `#### x`: the first number after the last `####`;
  2. the first number inside the last `\\boxed{...}` (a fraction there, `\\frac{1}{2}` or `1/2`, is returned
     as written and grades as wrong against a number);
  3. the first number after the last "answer is" / "answer:" on the same line;
  4. the last number in the text.
Numbers may carry `$`, thousands commas (`70,000`, LaTeX `1{,}000`) and decimals; they are returned in a
canonical form (`$70,000.00` -> `70000`, `29.50` -> `29.5`) and compared as exact decimals, never as text.
"""
import atexit
import decimal
import re
import threading

# One number as written in a response: optional minus, optional $, then either comma-grouped thousands
# (1,000,000) or plain digits, then an optional decimal part. Group 1: the minus; group 2: the digits.
_NUMBER_TOKEN = r"(-)?(?:\\?\$\s?)?((?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)"
# A number in running text does not start inside a word or another number.
_NUMBER = re.compile(r"(?<![\w.])" + _NUMBER_TOKEN)
_ONE_NUMBER = re.compile(r"\s*" + _NUMBER_TOKEN + r"\s*")
_FRACTION = re.compile(r"\\[dt]?frac|/")
_ANSWER_IS = re.compile(r"answer\s*(?:is|:)", re.IGNORECASE)
_ANSWER_TAG = re.compile(r"<answer>\s?(.*?)\s?</answer>", re.DOTALL)


def _normalize_text(text: str) -> str:
  """Unicode minus to ASCII, LaTeX thousands separators `{,}` to commas."""
  return text.replace("\u2212", "-").replace("{,}", ",")


def canonical_number(text: str) -> str | None:
  """A number string in canonical form, or None when `text` is not exactly one number.

  One number: optional minus, optional `$`, digits with optional thousands commas in groups of three (LaTeX
  `{,}` too) and an optional decimal part, with surrounding whitespace. Lists and other text are not numbers:
  `2 1 5 1`, `1,2`, `1 000` and `3 apples` give None (never 2151, 12, 1000, 3). Canonical: `$` and commas
  dropped; integral values lose their decimals (`29.00` -> `29`, `-0` -> `0`); other values lose trailing zeros
  (`2.50` -> `2.5`). Exact: uses `decimal.Decimal`, never floats.
  """
  match = _ONE_NUMBER.fullmatch(_normalize_text(text))
  if match is None:
    return None
  value = decimal.Decimal((match.group(1) or "") + match.group(2).replace(",", ""))
  if value == value.to_integral_value():
    return str(int(value))
  return format(value.normalize(), "f")


def _numbers(text: str) -> list[str]:
  """Every number in `text`, in order, canonical."""
  out = []
  for m in _NUMBER.finditer(_normalize_text(text)):
    sign = "-" if m.group(1) else ""
    out.append(canonical_number(sign + m.group(2)))
  return [n for n in out if n is not None]


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


def extract_number(text: str) -> str | None:
  """The final numeric answer of a response, canonical (module docstring: rules 1-4), or None.

  >>> extract_number("a profit of $70,000.")
  '70000'
  """
  if "####" in text:
    found = _numbers(text[text.rfind("####") + 4:])
    if found:
      return found[0]
  boxed = last_boxed(text)
  if boxed is not None:
    if _FRACTION.search(boxed):
      return boxed.strip()  # an answer, but not a decimal number: grades as wrong, never as its numerator
    found = _numbers(boxed)
    if found:
      return found[0]
  anchors = list(_ANSWER_IS.finditer(text))
  if anchors:
    rest = text[anchors[-1].end():].split("\n", 1)[0]
    found = _numbers(rest)
    if found:
      return found[0]
  found = _numbers(text)
  return found[-1] if found else None


def numbers_equal(gold: str, pred: str | None) -> bool:
  """Exact decimal equality of two number strings after canonicalisation (`29.00` == `29`, `70,000` ==
  `70000`). False when either is None or not a number."""
  if pred is None:
    return False
  g, p = canonical_number(gold), canonical_number(pred)
  return g is not None and p is not None and decimal.Decimal(g) == decimal.Decimal(p)


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
