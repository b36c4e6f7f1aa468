"""MATH answers: math-verify's equivalence, with exact numbers and counted failures.

`math_equal(gold, pred)` grades the content of a response's last box (`answers.last_boxed`) against a gold answer
with math-verify (both wrapped as `\\boxed{...}` and parsed: `parse_math`), after two changes to what it compares:

- Decimals are the exact rationals they denote (`_exact_decimals`): math-verify rounds a Float to 6 decimals
  before comparing, so `0.333333` would equal `\\frac{1}{3}` and `1.414214` `\\sqrt{2}`.
- A number built from integers by `+ - * /`, integer powers and factorials is computed exactly (`_exact_numbers`):
  math-verify compares such unevaluated expressions by `(a - b).evalf(15, chop=True)`, which chops any tiny
  difference to 0, so `\\frac{1}{2^{99}}` would equal `\\frac{1}{2^{98}}` and `\\frac{1}{2004!}` `\\frac{1}{2006!}`.
  Two exact rationals compare by equality (`\\frac{1}{2^{99}}` still equals `\\frac{2}{2^{100}}`); a value
  larger than _MAX_BITS bits (a power tower) is left as written.
A hedge `2 \\text{ or } 3` parses as the set {2, 3}, equal only to a gold that lists both (MATH's "all solutions"
answers), and `1 \\pm \\sqrt{19}` as a set too.

Numbers as people write them (issue 49, item 1), before math-verify parses (`latex_numbers`): math-verify reads
`1e-05` as e - 5, `1\\,000` and `1 000` as 0, `2 1/2` as 3/2, `1.000.000` as 0, `1_000` as 1 and `10^-5` as 10,
and leaves `7½`, `¾`, `1⁄2` and `10²` unparsed (compared as strings). So exponents become `\\times10^{...}`
(`1e-05` -> `1\\times10^{-5}`; a signed power is braced, `10^{-5}`), mixed numbers `2\\frac{1}{2}`, Unicode
fractions, powers and digit groups LaTeX or plain digits (`statements.unicode_numbers`; a `_` before a base of one
or two digits stays: `52_8`), and `1\\,000`, `1\\ 000`, `1~000` plain digits; an answer holding digit groups that
stay ambiguous (`1 000`, `1.000.000`, `1'0000`: a product, a list, a decimal?) is refused (no parse: not
credited, and a gold answer so written is refused when its file is loaded).

Timeouts: math-verify's own (SIGALRM, 5 s per parse and per comparison) on the main thread; off it, the grade runs
in a worker process with a deadline (`grading.in_worker`). A grade that timed out or raised returns False (an
empty parse) and is counted (`grading.failures`), never a silent 0.
"""
import math
import re
import threading

from opd_jax.tasks import grading
from opd_jax.tasks import statements

_MAX_BITS = 1 << 17     # an exact value of more bits is not computed (2006! has 19,000; 9^{9^{9}} 1.2e9)
_MAX_FACTORIAL = 10_000


_E_NOTATION = re.compile(r"(?<![\w.\\])(\d+(?:\.\d+)?|\.\d+)[eE]([-+]?\d+)(?![\w.])")
_MIXED = re.compile(r"(?<![\d.,/])(-?\d+) +(\d+)\s*/\s*(\d+)(?![\d.,/])")
_SIGNED_POWER = re.compile(r"\^\s*([-+]\s*\d+)")
_LATEX_GROUP = re.compile(r"(?<=\d)(?:\\,|\\ |~|\{,\})(?=\d{3}(?!\d))")
_AMBIGUOUS_GROUPS = re.compile(r"(?<![\d.,])\d{1,3}(?: \d{3})+(?![\d.,])|(?<![\d.])\d{1,3}(?:\.\d{3}){2,}(?![\d.])"
                               r"|\d['’]\d")           # `1'0000`: `'` left between digits (`52_8` is base 8)


def latex_numbers(answer: str) -> str | None:
  """`answer` with its numbers written as math-verify reads them (module docstring), or None when it holds digit
  groups that stay ambiguous (`1 000`, `1.000.000`)."""
  answer = _LATEX_GROUP.sub("", statements.unicode_numbers(answer, latex=True))
  if _AMBIGUOUS_GROUPS.search(answer):
    return None
  answer = _E_NOTATION.sub(lambda m: f"{m.group(1)}\\times10^{{{int(m.group(2))}}}", answer)
  answer = _SIGNED_POWER.sub(r"^{\1}", answer)                # `10^-5` -> `10^{-5}` (LaTeX reads `10^-` then 5)
  return _MIXED.sub(lambda m: f"{m.group(1)}\\frac{{{m.group(2)}}}{{{m.group(3)}}}" if int(m.group(2)) < int(
      m.group(3)) else m.group(), answer)


def _timeout_seconds() -> int | None:
  """math-verify times out through SIGALRM, which only the main thread may set: elsewhere, no timeout (callers off
  the main thread go through `grading.in_worker` instead)."""
  return 5 if threading.current_thread() is threading.main_thread() else None


def _on_main_thread() -> bool:
  return threading.current_thread() is threading.main_thread()


def parse_math(answer: str) -> list:
  """math-verify's parse of a bare answer string (no `\\boxed`), e.g. `\\frac{1}{2}` or `1,000`, numbers exact.

  Numbers are first written as math-verify reads them (`latex_numbers`; an answer with ambiguous digit groups
  parses to nothing). The answer is wrapped as `\\boxed{answer}` before parsing (so math-verify reads it as one
  LaTeX answer, the way it reads a response's boxed answer); if that yields nothing, as `$answer$`. Each decimal
  (a sympy Float) is then replaced by the exact rational it denotes (`0.333333` -> 333333/1000000; `0.5` still
  equals `\\frac{1}{2}`), and each exact number by its value (`\\frac{1}{2^{99}}` -> Rational(1, 2**99)): module
  docstring. Returns the parse (a list; empty when unparseable, or when parsing timed out or raised: counted in
  `grading.failures`). Off the main thread it runs in a worker process (`grading.in_worker`).
  """
  if not _on_main_thread():
    return grading.in_worker(parse_math, answer, failed=[], what=f"parsing {grading.describe(answer)}")
  parsed, failed = _parse(answer)
  if failed:
    grading.count(failed[0], f"parsing {grading.describe(answer)}{failed[1]}")
  return parsed


def _parse(answer: str) -> tuple[list, tuple[str, str] | None]:
  """`parse_math`'s parse on this thread, and its failure uncounted: None, or (kind, detail) when math-verify
  timed out ("timed_out") or raised ("errored")."""
  import math_verify  # pylint: disable=g-import-not-at-top
  from math_verify import errors  # pylint: disable=g-import-not-at-top
  answer = latex_numbers(answer)
  if answer is None:
    return [], None
  for wrapped in (f"\\boxed{{{answer}}}", f"${answer}$"):
    try:
      parsed = math_verify.parse(wrapped, parsing_timeout=_timeout_seconds(), raise_on_error=True)
    except errors.TimeoutException:
      return [], ("timed_out", "")
    except Exception as e:  # pylint: disable=broad-except  (math-verify's own error: counted, not credited)
      return [], ("errored", f" ({type(e).__name__}: {e})")
    if parsed:
      return [_exact_numbers(_exact_decimals(e)) for e in parsed], None
  return [], None


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


def _exact_value(expr):
  """The exact value (a sympy Rational) of an expression built from rationals by +, *, integer powers and
  factorials of integers, or None: another expression (a symbol, a root, a percent `10*UnevaluatedExpr(1/100)`),
  or a value of more than _MAX_BITS bits."""
  import sympy  # pylint: disable=g-import-not-at-top
  if isinstance(expr, sympy.Rational):
    return expr
  if isinstance(expr, (sympy.Add, sympy.Mul)):
    values = [_exact_value(a) for a in expr.args]
    if any(v is None for v in values):
      return None
    out = sum(values, sympy.Integer(0)) if isinstance(expr, sympy.Add) else math.prod(values, start=sympy.Integer(1))
    return out if _bits(out) <= _MAX_BITS else None
  if isinstance(expr, sympy.Pow):
    base, exponent = _exact_value(expr.base), _exact_value(expr.exp)
    if base is None or exponent is None or not exponent.is_Integer or (base == 0 and exponent < 0):
      return None
    if _bits(base) * abs(int(exponent)) > _MAX_BITS:
      return None
    return base ** exponent
  if isinstance(expr, sympy.factorial):
    n = _exact_value(expr.args[0])
    if n is None or not n.is_Integer or not 0 <= n <= _MAX_FACTORIAL:
      return None
    return sympy.Integer(math.factorial(int(n)))
  return None


def _bits(value) -> int:
  return max(int(value.p).bit_length(), int(value.q).bit_length())


def _exact_numbers(expr):
  """`expr` with each largest exact-number part replaced by its value (`_exact_value`); the rest kept as written,
  unevaluated (a power tower beside an exact part is not computed by the rebuild)."""
  import sympy  # pylint: disable=g-import-not-at-top
  if not isinstance(expr, sympy.Basic) or expr.is_Atom:
    return expr
  value = _exact_value(expr)
  if value is not None:
    return value
  changed = {}
  for arg in expr.args:
    new = _exact_numbers(arg)
    if new is not arg:
      changed[arg] = new
  if not changed:
    return expr
  with sympy.evaluate(False):
    return expr.xreplace(changed)


def math_equal(gold: str | list, pred: str | None) -> bool:
  """Whether a predicted answer (the content of a response's last box) equals the gold answer.

  Args:
    gold: the gold answer string (bare, no `\\boxed`), or its `parse_math` result (cache it: parsing costs
      milliseconds).
    pred: the predicted answer string (bare), or None (no answer: False).
  Returns:
    math_verify.verify(parse_math(gold), parse_math(pred)) on exact numbers (module docstring: `0.333333` is not
    `\\frac{1}{3}`, `\\frac{1}{2^{99}}` not `\\frac{1}{2^{98}}`); False when either side does not parse. False too
    when the grade times out (math-verify's 5 s per comparison on the main thread; off it, the worker's deadline
    `grading.DEADLINE_S`, from the grade's start) or raises: each such grade counted in `grading.failures()`.
  """
  if pred is None:
    return False
  if not _on_main_thread():
    return grading.in_worker(math_equal, gold, pred, failed=False, what=f"grading {grading.describe(pred)}")
  import math_verify  # pylint: disable=g-import-not-at-top
  from math_verify import errors  # pylint: disable=g-import-not-at-top
  gold_parsed, failed = _parse(gold) if isinstance(gold, str) else (gold, None)
  pred_parsed, pred_failed = _parse(pred)
  failed = failed or pred_failed
  for g in gold_parsed:                  # math-verify's own loop over both parses, each failure seen
    for p in pred_parsed:
      try:
        if math_verify.verify(g, p, timeout_seconds=_timeout_seconds(), raise_on_error=True):
          return True
      except errors.TimeoutException:
        failed = failed or ("timed_out", "")
      except Exception as e:  # pylint: disable=broad-except  (math-verify's own error: counted, not credited)
        failed = failed or ("errored", f" ({type(e).__name__}: {e})")
  if failed:                             # one grade, counted once
    grading.count(failed[0], f"grading {grading.describe(pred)} against {grading.describe(gold)}{failed[1]}")
  return False
