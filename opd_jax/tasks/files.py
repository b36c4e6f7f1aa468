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
is 0), else the file is refused at load, naming the line and the fix. A JSONL file is read once and every bad
line is named in one ValueError line (`refuse_lines`: the file, each line and what is wrong, then what to write
instead), with what the study needs of each row (issue 50, item 5: a solution, a gold answer that grades).
"""
import decimal
import fractions
import json
import pathlib
import re

from absl import logging

from opd_jax.tasks import answers
from opd_jax.tasks import base
from opd_jax.tasks import math_answers
from opd_jax.tasks import statements

GSM8K_TEMPLATE = ("{question}\nSolve it step by step, then write the final answer as a number after '####', "
                  "e.g. '#### 42'.")
MATH_TEMPLATE = "{question}\nSolve it step by step, then put the final answer within \\boxed{}."

GSM8K_SOURCE = "https://github.com/openai/grade-school-math (grade_school_math/data/test.jsonl, train.jsonl; MIT)"
MATH500_SOURCE = ("https://github.com/openai/prm800k (prm800k/math_splits/test.jsonl, the 500-problem subset of "
                  "MATH, saved as one JSON list)")


def _resolve(task: str, path, data_dir, default_name: str, source: str) -> pathlib.Path:
  """The file to read: `path`, else `data_dir/default_name`; clear errors when neither exists."""
  how = (f"download it from {source}, then pass path=<file> (--config.task.path) or data_dir=<folder holding "
         f"{default_name}> (--config.task.data_dir)")
  if path is None and data_dir is None:
    raise ValueError(f"task {task!r} reads a local file, and none was given: {how}")
  resolved = pathlib.Path(path) if path is not None else pathlib.Path(data_dir) / default_name
  if not resolved.is_file():
    raise FileNotFoundError(f"task {task!r}: file {str(resolved)!r} not found; {how}")
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


def _json_lines(file: pathlib.Path) -> tuple[list, list]:
  """Every non-blank line of a JSONL file, read once.

  Returns:
    (rows, bad): rows = (row, line number, object) of each line that reads (row: 0-based among the non-blank
    lines, bad ones included, so a fix does not renumber the rest); bad = (line number, what is wrong) of each line
    that is not UTF-8 or not valid JSON, repeats a key in one object or holds NaN / Infinity, for `refuse_lines`.
  """
  with open(file, "rb") as f:
    data = list(enumerate(f, 1))
  rows, bad, row = [], [], -1
  for lineno, raw in data:
    try:
      text = _decoded(raw, file, lineno)
    except ValueError as e:                 # not UTF-8: the message names the line and the byte
      row += 1
      bad.append((lineno, str(e).removeprefix(f"{file}: ")))
      continue
    if not text.strip():
      continue
    row += 1
    try:
      rows.append((row, lineno, _loads(text)))
    except json.JSONDecodeError as e:
      bad.append((lineno, f"line {lineno} is not valid JSON ({e.msg})"))
    except _Refused as e:
      bad.append((lineno, f"line {lineno} {e}"))
    except ValueError as e:                 # an integer of more digits than Python converts
      bad.append((lineno, f"line {lineno}: {e}; write the number as a string"))
  return rows, bad


MAX_LINES_SHOWN = 10      # bad lines one error names; the rest are counted


def refuse_lines(file, bad: list[tuple[int, str]], fixes=(), *, rows: int = 0, num_problems: int | None = None) -> None:
  """Raises one ValueError naming every bad line of `file` in line order (`MAX_LINES_SHOWN`, then a count), then
  each of `fixes` once, then a `num_problems` larger than the file's `rows` (`base.limit` would refuse it next):
  "data.jsonl: line 3: ...; line 5: ...; <fix>". Returns when `bad` is empty."""
  if not bad:
    return
  if num_problems and num_problems > rows:
    fixes = [*fixes, f"and num_problems={num_problems} (config.task.num_problems) asks for more than its {rows} "
             "rows: lower it, or set it to 0 for all"]
  texts = [text for _, text in sorted(bad, key=lambda b: b[0])]
  more = len(texts) - MAX_LINES_SHOWN
  texts = texts[:MAX_LINES_SHOWN] + ([f"and {more} more bad lines"] if more > 0 else [])
  raise ValueError("; ".join([f"{file}: {texts[0]}", *texts[1:], *dict.fromkeys(f for f in fixes if f)]))


BAD_ANSWERS = ("keep", "refuse", "skip")


def _check_golds(task_name: str, file, problems: list, lines: dict, grade, bad_answers: str, numeric: bool,
                 bad: list) -> tuple[list, list[str]]:
  """The gold answers of `problems` graded against themselves (`base.check_answers`'s rule), by line.

  Args:
    lines: problem id -> its line number.
    bad_answers: "keep" (unchecked: `base.check_answers` may refuse them later), "refuse" (each one added to `bad`)
      or "skip" (dropped with one warning naming their lines).
    bad: the file's bad lines so far, appended to.
  Returns:
    (the problems kept, the fixes to name once in the error).
  """
  if bad_answers not in BAD_ANSWERS:
    raise ValueError(f"bad_answers must be one of {BAD_ANSWERS}, got {bad_answers!r}")
  if bad_answers == "keep":
    return problems, []
  wrong = [p for p in problems if not base.grades_itself(p, grade)]
  if not wrong:
    return problems, []
  what = "is not a number" if numeric else "does not grade as correct against itself (math-verify)"
  if bad_answers == "skip":
    logging.warning("task %r: skipping %d of %d problems of %s whose gold answer %s: lines %s", task_name,
                    len(wrong), len(problems), file, what, ", ".join(str(lines[p.id]) for p in wrong))
    dropped = {p.id for p in wrong}
    return [p for p in problems if p.id not in dropped], []
  bad += [(lines[p.id], f"line {lines[p.id]}: answer {p.answer!r} {what}") for p in wrong]
  rule = ("the numeric grader reads one number per answer, e.g. 42, -3.5 or 1,000" if numeric else
          "the math grader reads answers with math-verify")
  return problems, [f"{len(wrong)} of {len(problems)} gold answers do not grade as correct against themselves "
                    f"({rule}): fix those lines, or set config.task.skip_bad_answers=True to skip them"]


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
               template: str = GSM8K_TEMPLATE, bad_answers: str = "keep") -> base.Task:
  """GSM8K from a JSONL file: gold = the text after the last `#### `, solution = the text before it.

  Every line is checked before any is used, and every bad one is named in one error (`refuse_lines`).

  Args:
    path: the JSONL file; default `data_dir/gsm8k_<split>.jsonl`.
    data_dir: folder holding `gsm8k_<split>.jsonl` when `path` is None.
    split: names the ids ("gsm8k-<split>-<row:05d>", row = 0-based index among the non-blank lines) and the
      default file.
    num_problems: the first n rows in file order (None: all).
    template: the user message, with `{question}`.
    bad_answers: a gold answer that is not a number: "keep" (for `base.check_answers`), "refuse" (named with its
      line among the bad lines) or "skip" (dropped, with a warning naming the lines); a study passes "refuse" or
      "skip" (config.task.skip_bad_answers).
  Returns:
    A Task graded by `answers.extract_number` / `answers.numbers_equal` (exact decimal equality).
  Raises:
    ValueError: naming every line that is not UTF-8, not a JSON object, without a 'question' or a '#### <answer>'
      (or with a gold answer that is not a number, under bad_answers="refuse").
  """
  file = _resolve("gsm8k", path, data_dir, f"gsm8k_{split}.jsonl", GSM8K_SOURCE)
  rows, bad = _json_lines(file)
  n_rows, problems, lines = len(rows) + len(bad), [], {}
  for row, lineno, record in rows:
    if not isinstance(record, dict):
      bad.append((lineno, f"line {lineno} is a JSON {type(record).__name__}, not an object"))
      continue
    text = record.get("answer", "")
    if not isinstance(text, str) or isinstance(text, _Literal):
      text = ""
    if "question" not in record or "####" not in text:
      missing = "'question'" if "question" not in record else "'#### <answer>' in its 'answer'"
      bad.append((lineno, f"line {lineno}: no {missing}"))
      continue
    solution, gold = text.rsplit("####", 1)
    problems.append(base.Problem(id=base.safe_id("gsm8k", split, f"{row:05d}"), question=record["question"],
                                 answer=gold.strip(), solution=solution.rstrip(), fields={"row": row}))
    lines[problems[-1].id] = lineno
  shape = "expected GSM8K rows {\"question\": ..., \"answer\": \"... #### <number>\"}" if bad else ""
  grade = lambda p, a: answers.numbers_equal(p.answer, a)
  problems, fixes = _check_golds("gsm8k", file, problems, lines, grade, bad_answers, True, bad)
  refuse_lines(file, bad, [shape, *fixes], rows=n_rows, num_problems=num_problems)
  problems = base.limit(problems, num_problems, str(file))
  return base.Task(name="gsm8k", problems=problems, template=base.check_template(template),
                   extractor=answers.extract_number, grader=grade)


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
               template: str | None = None, solution_needed_by: str = "", bad_answers: str = "keep") -> base.Task:
  """A task from a JSONL file of questions and answers (`JSONL_SCHEMA`), graded by `grader` (`GRADERS`).

  Every line is checked before any is used, and every bad one is named in one error with what is wrong
  (`refuse_lines`): "data.jsonl: line 3: no 'solution' (needed on every line by config.configurations['solution']);
  line 5: answer 'abc' is not a number; ...".

  Args:
    grader: "numeric" or "math" (`grading`); the task's name is `jsonl:<grader>`.
    path: the JSONL file (config.task.path).
    split: names nothing but the default ids' prefix (kept for the loader's common signature).
    num_problems: the first n rows in file order (None: all).
    template: the user message with `{question}`; default: gsm8k's (numeric) or math500's (math).
    solution_needed_by: who needs a reference solution on every line (e.g. "config.configurations['solution']",
      a configuration whose context shows it): a line without 'solution' is then a bad line; "" (default):
      optional.
    bad_answers: a gold answer that does not grade as correct against itself (under "numeric": not a number):
      "keep" (for `base.check_answers`), "refuse" (a bad line) or "skip" (dropped, with a warning naming the
      lines); a study passes "refuse" or "skip" (config.task.skip_bad_answers).
  Raises:
    ValueError: no path, a bad grader, duplicate ids (`base.Task`), or bad lines, all named in one error: not UTF-8,
      not a JSON object, repeating a key, without a string question or an answer, a math gold answer that
      math-verify reads as another number (`check_math_gold`), and those `solution_needed_by` and `bad_answers`
      make bad.
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
  rows, bad = _json_lines(file)
  n_rows, problems, lines, schema = len(rows) + len(bad), [], {}, bool(bad)
  for row, lineno, record in rows:
    question = record.get("question") if isinstance(record, dict) else None
    if not isinstance(question, str) or isinstance(question, _Literal) or record.get("answer") is None:
      bad.append((lineno, f"line {lineno} needs a string 'question' and an 'answer'"))
      schema = True
      continue
    solution = record.get("solution")
    try:
      answer = _gold(record["answer"], f"line {lineno}")
      parsed = check_math_gold(answer, f"line {lineno}") if grader == "math" else None
    except ValueError as e:
      bad.append((lineno, str(e)))
      continue
    if solution is None and solution_needed_by:
      first = not any(": no 'solution'" in text for _, text in bad)
      bad.append((lineno, f"line {lineno}: no 'solution'" + (f" (needed on every line by {solution_needed_by})"
                                                              if first else "")))
    problem_id = base.safe_id(str(record.get("id") or f"{file.stem}-{split}-{row:05d}"))
    if problem_id in lines:
      bad.append((lineno, f"line {lineno}: id {problem_id!r} repeats line {lines[problem_id]}'s (ids must be unique)"))
      continue
    if parsed:
      grade.parsed_golds[answer] = parsed
    problems.append(base.Problem(id=problem_id, question=record["question"], answer=answer,
                                 solution=None if solution is None else str(solution), fields={"row": row}))
    lines[problem_id] = lineno
  problems, fixes = _check_golds(name, file, problems, lines, grade, bad_answers, grader == "numeric", bad)
  shape = f"expected one object per line: {', '.join(f'{k}: {v}' for k, v in JSONL_SCHEMA.items())}"
  refuse_lines(file, bad, [shape if schema else "", *fixes], rows=n_rows, num_problems=num_problems)
  problems = base.limit(problems, num_problems, str(file))
  template = template or (GSM8K_TEMPLATE if grader == "numeric" else MATH_TEMPLATE)
  return base.Task(name=name, problems=problems, template=base.check_template(template), extractor=extractor,
                   grader=grade)
