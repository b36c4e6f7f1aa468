"""GSM8K (JSONL), MATH-500 (JSON) and any JSONL file of questions and answers, from local files; nothing is
downloaded.

GSM8K rows: {"question", "answer"}, the answer being the worked solution (with calculator annotations
`<<48/2=24>>`) then `#### <number>`. MATH-500 rows: {"problem", "solution", "answer", "subject", "level",
"unique_id"}, the solution ending in `\\boxed{answer}`. A task's own JSONL file (`jsonl:<grader>`): one object per
line, `JSONL_SCHEMA`.
"""
import json
import pathlib

from opd_jax.tasks import answers
from opd_jax.tasks import base

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


def _json_lines(file: pathlib.Path, expected: str):
  """(row, line number, object) of each non-blank line of a JSONL file (row: 0-based among those lines).

  Raises:
    ValueError: a line that is not valid JSON, naming the file, the line and `expected`.
  """
  with open(file, encoding="utf-8") as f:
    for row, (lineno, line) in enumerate((i, l) for i, l in enumerate(f, 1) if l.strip()):
      try:
        yield row, lineno, json.loads(line)
      except json.JSONDecodeError as e:
        raise ValueError(f"{file}: line {lineno} is not valid JSON ({e.msg}); expected {expected}") from None


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
    if not isinstance(text, str):
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
  with open(file, encoding="utf-8") as f:
    text = f.read()
  if not text.strip():
    raise base.EmptyTaskError(str(file))
  try:
    rows = json.loads(text)
  except json.JSONDecodeError as e:
    raise ValueError(f"{file}: invalid JSON at line {e.lineno}, column {e.colno} ({e.msg}); expected a JSON "
                     "list of MATH-500 rows") from None
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
    fields = {k: record[k] for k in ("subject", "level", "unique_id") if k in record}
    problems.append(base.Problem(id=base.safe_id("math500", split, f"{row:05d}"), question=record["problem"],
                                 answer=str(record["answer"]), solution=record.get("solution"),
                                 fields={"row": row, **fields}))
  problems = base.limit(problems, num_problems, str(file))
  return base.Task(name="math500", problems=problems, template=base.check_template(template),
                   extractor=answers.last_boxed, grader=math_grader())


def math_grader():
  """A grader (problem, answer) -> bool by math-verify (`answers.math_equal`) that parses each distinct gold answer
  once (again when its parse came back empty: a parse that timed out, counted in `grading.failures`)."""
  parsed_golds = {}

  def grade(problem: base.Problem, answer: str) -> bool:
    if not parsed_golds.get(problem.answer):            # an empty parse (one that timed out) is not kept
      parsed_golds[problem.answer] = answers.parse_math(problem.answer)
    return answers.math_equal(parsed_golds[problem.answer], answer)

  return grade


GRADERS = ("numeric", "math")
JSONL_SCHEMA = {
    "question": "string, required: the question, without any answer-format instruction (the template adds it)",
    "answer": "string or number, required: the gold answer",
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
    ValueError: no path, a line that is not a JSON object, a row without a string question or an answer (naming
      the file and the line), a bad grader, duplicate ids (`base.Task`).
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
    if not isinstance(record, dict) or not isinstance(record.get("question"), str) or record.get("answer") is None:
      raise ValueError(f"{file}: line {lineno} needs a string 'question' and an 'answer' (schema: "
                       f"{', '.join(f'{k}: {v}' for k, v in JSONL_SCHEMA.items())})")
    solution = record.get("solution")
    problems.append(base.Problem(id=base.safe_id(str(record.get("id") or f"{file.stem}-{split}-{row:05d}")),
                                 question=record["question"], answer=str(record["answer"]).strip(),
                                 solution=None if solution is None else str(solution), fields={"row": row}))
  problems = base.limit(problems, num_problems, str(file))
  template = template or (GSM8K_TEMPLATE if grader == "numeric" else MATH_TEMPLATE)
  return base.Task(name=name, problems=problems, template=base.check_template(template), extractor=extractor,
                   grader=grade)
