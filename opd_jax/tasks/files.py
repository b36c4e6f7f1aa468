"""GSM8K (JSONL), MATH-500 (JSON) and any JSONL file of questions and answers, from local files; nothing is
downloaded.

GSM8K rows: {"question", "answer"}, the answer being the worked solution (with calculator annotations
`<<48/2=24>>`) then `#### <number>`. MATH-500 rows: {"problem", "solution", "answer", "subject", "level",
"unique_id"}, the solution ending in `\\boxed{answer}`. A task's own JSONL file (`jsonl:<grader>`): one object per
line, `JSONL_SCHEMA`.

Gold answers are read from the file's literal text, exactly (issue 49, item 1): a JSON number is never a float
(`0.00001`, `1e21`, `2.5e-7`, `3.14159265358979323846`, `9007199254740993.0` keep their exact values, written as
plain decimals: `_gold`); a key repeated in one object, NaN or Infinity, and bytes that are not UTF-8 are refused
with the file and the line; and under the math grader a gold answer that is one number as people write it must be
read by math-verify as that number (`check_math_gold`: `1e-05` is e - 5 to math-verify unless rewritten, `1 000`
is 0), else the file is refused at load, naming the line and the fix. Each error is one ValueError line naming
the file, the line and what to write instead.
"""
import decimal
import fractions
import json
import pathlib
import re

from opd_jax.tasks import answers
from opd_jax.tasks import base
from opd_jax.tasks import math_answers
from opd_jax.tasks import statements

GSM8K_TEMPLATE = ("{question}\nSolve it step by step, then write the final answer as a number after '####', "
                  "e.g. '#### 42'.")
MATH_TEMPLATE = "{question}\nSolve it step by step, then put the final answer within \\boxed{}."

GSM8K_SOURCE = ("https://github.com/openai/grade-school-math (grade_school_math/data/test.jsonl, train.jsonl); "
                "this project's tests use ../shared/data/gsm8k_test.jsonl")
MATH500_SOURCE = ("https://github.com/openai/prm800k (prm800k/math_splits/test.jsonl, the 500-problem subset of "
                  "MATH, as a JSON list); this project's tests use ../shared/data/math500_test.json")


def _resolve(task: str, path, data_dir, default_name: str, source: str) -> pathlib.Path:
  """The file to read: `path`, else `data_dir/default_name`; clear errors when neither exists."""
  if path is None and data_dir is None:
    raise ValueError(f"task {task!r} reads a local file: pass path=... (or data_dir=... holding {default_name}); "
                     f"get it from {source}")
  resolved = pathlib.Path(path) if path is not None else pathlib.Path(data_dir) / default_name
  if not resolved.is_file():
    raise FileNotFoundError(f"task {task!r}: file {str(resolved)!r} not found; get it from {source}")
  return resolved


class _Literal(str):
  """A JSON number with a fraction or an exponent, as the file writes it (`json.loads`'s parse_float): never a
  float, whose binary rounding would change the gold answer (0.1, 9007199254740993.0) or its text (1e-05)."""


class _Refused(Exception):
  """A JSON text that parses but cannot be a row: the reason, completed with the file and line by the caller."""


def _unique(pairs: list) -> dict:
  """json's object_pairs_hook: the object, refused when a key repeats (json keeps the last value silently)."""
  keys = [k for k, _ in pairs]
  repeated = next((k for i, k in enumerate(keys) if k in keys[:i]), None)
  if repeated is not None:
    raise _Refused(f"repeats the key {repeated!r} in one object (JSON keeps the last value silently); keep one")
  return dict(pairs)


def _constant(name: str):
  raise _Refused(f"holds {name}, which is no number; write the answer as a string or a finite number")


def _loads(text: str):
  """json.loads with JSON numbers exact (`_Literal`, ints as ints), repeated keys and NaN / Infinity refused."""
  return json.loads(text, parse_float=_Literal, parse_constant=_constant, object_pairs_hook=_unique)


def _decoded(data: bytes, file: pathlib.Path, first_line: int = 1) -> str:
  """UTF-8 text of `data` (a leading BOM dropped); ValueError naming the line of the first byte that is not UTF-8."""
  try:
    return data.decode("utf-8-sig" if first_line == 1 else "utf-8")
  except UnicodeDecodeError as e:
    line = first_line + data.count(b"\n", 0, e.start)
    column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
    raise ValueError(f"{file}: line {line} is not UTF-8 (byte 0x{data[e.start]:02x} at byte {column} of the line: "
                     f"{e.reason}); save the file as UTF-8") from None


def _json_lines(file: pathlib.Path, expected: str):
  """(row, line number, object) of each non-blank line of a JSONL file (row: 0-based among those lines).

  Raises:
    ValueError: a line that is not UTF-8 or not valid JSON, repeats a key in one object or holds NaN / Infinity,
      naming the file, the line and `expected`.
  """
  with open(file, "rb") as f:
    raw = [(i, _decoded(l, file, i)) for i, l in enumerate(f, 1)]
  for row, (lineno, line) in enumerate((i, l) for i, l in raw if l.strip()):
    try:
      yield row, lineno, _loads(line)
    except json.JSONDecodeError as e:
      raise ValueError(f"{file}: line {lineno} is not valid JSON ({e.msg}); expected {expected}") from None
    except (_Refused, ValueError) as e:        # ValueError: an integer of more digits than Python converts
      raise ValueError(f"{file}: line {lineno} {e}" if isinstance(e, _Refused) else
                       f"{file}: line {lineno}: {e}; write the number as a string") from None


_PLAIN = re.compile(r"-?\d+(?:\.\d+)?")
_MAX_EXPONENT = 100     # a JSON number written out in at most ~100 digits; beyond it, the file must write a string


def _gold(value, where: str) -> str:
  """The gold answer string of a JSON value: a string stripped; a JSON number as the exact plain decimal it writes
  (`1e21` -> `1000000000000000000000`, `2.5e-7` -> `0.00000025`, `9007199254740993.0` -> `9007199254740993`).

  Raises:
    ValueError: another JSON type (a bool, a list, an object), or a number too large or small to write out.
  """
  if isinstance(value, str) and not isinstance(value, _Literal):
    return value.strip()
  if isinstance(value, bool) or not isinstance(value, (int, _Literal)):
    raise ValueError(f"{where}: 'answer' must be a string or a number, got a JSON {type(value).__name__}")
  exact = decimal.Decimal(str(value))
  if abs(exact.adjusted()) > _MAX_EXPONENT:
    raise ValueError(f"{where}: the answer {value} has too many digits to write out; write it as a string "
                     "(e.g. \"10^{...}\" for the math grader)")
  return answers.format_number(fractions.Fraction(exact))


def check_math_gold(gold: str, where: str) -> list | None:
  """Refuses a gold answer that math-verify would read as something else than the number it writes.

  A gold answer that is one number as people write it (`statements.whole_number`: `1e-05`, `7½`, `1,000`,
  `2\\frac{1}{2}`) must parse (`answers.parse_math`) to exactly that number; one with digit groups that stay
  ambiguous (`1 000`, `1.000.000`: `math_answers.latex_numbers`) is refused, and so is one whose numbers are not
  the values they start with (`0.\\overline{3}`, `0.333...`: `statements.refused_numbers`) when math-verify reads
  it only as text. Other answers (expressions, sets, matrices, text) are math-verify's to read.

  Returns:
    The gold's parse when it was parsed (a grader may keep it: `math_grader`), else None.
  Raises:
    ValueError: naming `where` (file and line), the answer, both readings and what to write instead.
  """
  if math_answers.latex_numbers(gold) is None:
    raise ValueError(f"{where}: the answer {gold!r} has digit groups that are ambiguous (a product, a list or a "
                     "decimal point?); write the number without separators or with commas (1000000 or 1,000,000)")
  value = statements.whole_number(gold)
  refused = value is None and statements.refused_numbers(gold)
  if _PLAIN.fullmatch(gold) or (value is None and not refused):
    return None                         # a plain decimal: math-verify reads it exactly (`math_answers`; tested)
  import sympy  # pylint: disable=g-import-not-at-top
  parsed = answers.parse_math(gold)
  if refused:
    if not any(isinstance(p, (sympy.Basic, sympy.MatrixBase)) for p in parsed):
      raise ValueError(f"{where}: the answer {gold!r} writes a number that is not the value it starts with, and "
                       "the math grader (math-verify) reads it only as text; write its exact value, e.g. "
                       "\\frac{1}{3} for 0.\\overline{3}")
    return parsed
  want = sympy.Rational(value.numerator, value.denominator)
  if not any(isinstance(p, sympy.Basic) and p == want for p in parsed):
    written = answers.format_number(value)
    latex = written if "/" not in written else f"\\frac{{{value.numerator}}}{{{value.denominator}}}"
    raise ValueError(f"{where}: the answer {gold!r} is the number {written}, but the math grader (math-verify) reads "
                     f"it as {parsed[0] if parsed else 'nothing'}; write it as {latex}")
  return parsed


def load_gsm8k(*, path=None, data_dir=None, split: str = "test", num_problems: int | None = None,
               template: str = GSM8K_TEMPLATE) -> base.Task:
  """GSM8K from a JSONL file: gold = the text after the last `#### `, solution = the text before it.

  Args:
    path: the JSONL file; default `data_dir/gsm8k_<split>.jsonl`.
    data_dir: folder holding `gsm8k_<split>.jsonl` when `path` is None.
    split: names the ids ("gsm8k-<split>-<row:05d>", row = 0-based line index) and the default file.
    num_problems: the first n rows in file order (None: all).
    template: the user message, with `{question}`.
  Returns:
    A Task graded by `answers.extract_number` / `answers.numbers_equal` (exact decimal equality).
  """
  file = _resolve("gsm8k", path, data_dir, f"gsm8k_{split}.jsonl", GSM8K_SOURCE)
  problems = []
  for row, lineno, record in _json_lines(file, "one GSM8K object per line"):
    if not isinstance(record, dict):
      raise ValueError(f"{file}: line {lineno} is a JSON {type(record).__name__}, not an object; expected "
                       "GSM8K rows {\"question\": ..., \"answer\": \"... #### <number>\"}")
    text = record.get("answer", "")
    if not isinstance(text, str) or isinstance(text, _Literal):
      text = ""
    if "####" not in text or "question" not in record:
      raise ValueError(f"{file}: row {row} has no 'question' or no '#### <answer>' in its 'answer' field; "
                       "expected GSM8K JSONL rows")
    solution, gold = text.rsplit("####", 1)
    problems.append(base.Problem(id=base.safe_id("gsm8k", split, f"{row:05d}"), question=record["question"],
                                 answer=gold.strip(), solution=solution.rstrip(), fields={"row": row}))
  problems = base.limit(problems, num_problems, str(file))
  return base.Task(name="gsm8k", problems=problems, template=base.check_template(template),
                   extractor=answers.extract_number, grader=lambda p, a: answers.numbers_equal(p.answer, a))


def load_math500(*, path=None, data_dir=None, split: str = "test", num_problems: int | None = None,
                 template: str = MATH_TEMPLATE) -> base.Task:
  """MATH-500 from a JSON list: gold = the `answer` field, solution = the `solution` field.

  Extraction: the content of the response's last `\\boxed{...}` (None when there is none: reward 0).
  Grading: `answers.math_equal` (math-verify, both sides wrapped in `\\boxed{}` before parsing).

  Args:
    path: the JSON file; default `data_dir/math500_<split>.json`.
    data_dir: folder holding `math500_<split>.json` when `path` is None.
    split: names the ids ("math500-<split>-<row:05d>", row = 0-based list index) and the default file.
    num_problems: the first n rows in file order (None: all).
    template: the user message, with `{question}`.
  """
  file = _resolve("math500", path, data_dir, f"math500_{split}.json", MATH500_SOURCE)
  grade = math_grader()
  text = _decoded(file.read_bytes(), file)
  if not text.strip():
    raise base.EmptyTaskError(str(file))
  try:
    rows = _loads(text)
  except json.JSONDecodeError as e:
    raise ValueError(f"{file}: invalid JSON at line {e.lineno}, column {e.colno} ({e.msg}); expected a JSON "
                     "list of MATH-500 rows") from None
  except (_Refused, ValueError) as e:
    raise ValueError(f"{file}: {e}" if isinstance(e, _Refused) else f"{file}: {e}; write the number as a string"
                     ) from None
  if not isinstance(rows, list):
    raise ValueError(f"{file}: a JSON {type(rows).__name__}, expected a list of MATH-500 rows")
  problems = []
  for row, record in enumerate(rows):
    if not isinstance(record, dict):
      raise ValueError(f"{file}: row {row} is a JSON {type(record).__name__}, not an object; expected MATH-500 "
                       "rows")
    missing = {"problem", "answer"} - set(record)
    if missing:
      raise ValueError(f"{file}: row {row} lacks fields {sorted(missing)}; expected MATH-500 rows")
    fields = {k: float(v) if isinstance(v, _Literal) else v
              for k, v in record.items() if k in ("subject", "level", "unique_id")}
    answer = _gold(record["answer"], f"{file}: row {row}")
    parsed = check_math_gold(answer, f"{file}: row {row}")
    if parsed:
      grade.parsed_golds[answer] = parsed
    problems.append(base.Problem(id=base.safe_id("math500", split, f"{row:05d}"), question=record["problem"],
                                 answer=answer, solution=record.get("solution"), fields={"row": row, **fields}))
  problems = base.limit(problems, num_problems, str(file))
  return base.Task(name="math500", problems=problems, template=base.check_template(template),
                   extractor=answers.last_boxed, grader=grade)


def math_grader():
  """A grader (problem, answer) -> bool by math-verify (`answers.math_equal`) that parses each distinct gold answer
  once (again when its parse came back empty: a parse that timed out, counted in `grading.failures`); its
  `parsed_golds` ({gold: parse}) may be filled beforehand (`check_math_gold`'s parses)."""
  parsed_golds = {}

  def grade(problem: base.Problem, answer: str) -> bool:
    if not parsed_golds.get(problem.answer):            # an empty parse (one that timed out) is not kept
      parsed_golds[problem.answer] = answers.parse_math(problem.answer)
    return answers.math_equal(parsed_golds[problem.answer], answer)

  grade.parsed_golds = parsed_golds
  return grade


GRADERS = ("numeric", "math")
JSONL_SCHEMA = {
    "question": "string, required: the question, without any answer-format instruction (the template adds it)",
    "answer": "string or number, required: the gold answer (a number is read exactly as written: 0.1, 1e-05)",
    "solution": "string, optional: a worked reference solution (the solution, summary and contrastive contexts "
                "need it on every row)",
    "id": "string, optional: a stable id (default <file stem>-<row:05d>); ids must be unique",
}


def grading(grader: str, where: str) -> tuple:
  """(extractor, grader) of a grading rule: "numeric" (`answers.extract_number`, exact decimal equality, as gsm8k)
  or "math" (the last `\\boxed{}`, math-verify, as math500).

  Raises:
    ValueError: another name, naming `where` and the rules.
  """
  if grader == "math":
    return answers.last_boxed, math_grader()
  if grader == "numeric":
    return answers.extract_number, lambda p, a: answers.numbers_equal(p.answer, a)
  raise ValueError(f"{where}: grader must be one of {GRADERS}, got {grader!r}")


def load_jsonl(grader: str, *, path=None, split: str = "test", num_problems: int | None = None,
               template: str | None = None) -> base.Task:
  """A task from a JSONL file of questions and answers (`JSONL_SCHEMA`), graded by `grader` (`GRADERS`).

  Args:
    grader: "numeric" or "math" (`grading`); the task's name is `jsonl:<grader>`.
    path: the JSONL file (config.task.path).
    split: names nothing but the default ids' prefix (kept for the loader's common signature).
    num_problems: the first n rows in file order (None: all).
    template: the user message with `{question}`; default: gsm8k's (numeric) or math500's (math).
  Raises:
    ValueError: no path, a line that is not UTF-8 or not a JSON object or repeats a key, a row without a string
      question or an answer, a math gold answer that math-verify reads as another number (`check_math_gold`)
      (each naming the file and the line), a bad grader, duplicate ids (`base.Task`).
    FileNotFoundError: a missing file.
    EmptyTaskError: a file without rows.
  """
  name = f"jsonl:{grader}"
  extractor, grade = grading(grader, f"task {name!r}")
  if path is None:
    raise ValueError(f"task {name!r} reads a JSONL file: set config.task.path (rows {sorted(JSONL_SCHEMA)})")
  file = pathlib.Path(path)
  if not file.is_file():
    raise FileNotFoundError(f"task {name!r}: file {str(file)!r} not found")
  problems = []
  for row, lineno, record in _json_lines(file, f"one object per line with {sorted(JSONL_SCHEMA)}"):
    question = record.get("question") if isinstance(record, dict) else None
    if not isinstance(question, str) or isinstance(question, _Literal) or record.get("answer") is None:
      raise ValueError(f"{file}: line {lineno} needs a string 'question' and an 'answer' (schema: "
                       f"{', '.join(f'{k}: {v}' for k, v in JSONL_SCHEMA.items())})")
    solution = record.get("solution")
    answer = _gold(record["answer"], f"{file}: line {lineno}")
    parsed = check_math_gold(answer, f"{file}: line {lineno}") if grader == "math" else None
    if parsed:
      grade.parsed_golds[answer] = parsed
    problems.append(base.Problem(id=base.safe_id(str(record.get("id") or f"{file.stem}-{split}-{row:05d}")),
                                 question=record["question"], answer=answer,
                                 solution=None if solution is None else str(solution), fields={"row": row}))
  problems = base.limit(problems, num_problems, str(file))
  template = template or (GSM8K_TEMPLATE if grader == "numeric" else MATH_TEMPLATE)
  return base.Task(name=name, problems=problems, template=base.check_template(template), extractor=extractor,
                   grader=grade)
