"""Problem and Task: problems + prompt template + answer extraction + verifier (reward in {0, 1}).

A task's verifier is the R(y) in {0, 1} of paper.md ("Objects"); its reference solutions feed the
`solution`, `summary` and `contrastive` self-distillation contexts (paper.md, "Self-distillation contexts").
"""
import dataclasses
import re
from typing import Any, Callable

from absl import logging

from opd_jax.tasks import spans

QUESTION_SLOT = "{question}"
_SAFE_ID = re.compile(r"[^A-Za-z0-9_.-]+")
_CALCULATOR = re.compile(r"<<([^<>]*?)>>")


@dataclasses.dataclass(frozen=True)
class Problem:
  """One question with a verifiable answer.

  Attributes:
    id: stable and deterministic, safe in a file name (`[A-Za-z0-9_.-]`), e.g. "gsm8k-test-00017"; the same
      source, split, seed and index always give the same id. Never a random uuid.
    question: the question text, without any answer-format instruction (the task's template adds that).
    answer: the gold answer, as a string (e.g. "72", "\\frac{1}{2}", "94*4 - 61 - 6").
    solution: a worked reference solution when the source has one, else None.
    fields: extra source fields that are safe to store in records (JSON-serialisable; never random ids).
  """
  id: str
  question: str
  answer: str
  solution: str | None = None
  fields: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Task:
  """A named list of problems with a prompt template, an answer extractor and a grader.

  Attributes:
    name: the task name as given to `load_task`, e.g. "gsm8k" or "reasoning_gym:chain_sum".
    problems: the problems, in a deterministic order.
    template: the user message; `{question}` is replaced by the question (plain replacement, not str.format,
      so literal braces such as `\\boxed{}` need no escaping).
    extractor: response text -> extracted answer string, or None when the response has no answer.
    grader: (problem, extracted answer) -> whether it is correct. Called only with a non-None answer.
    answer_span: (open, close), e.g. ("<answer>", "</answer>"), when the extractor reads only the response's
      deciding span, its first closed span that holds anything but whitespace (`spans`: one definition for the
      grader and the answer stop), and nothing after it; None otherwise (the grader may read anything up to the
      stop token: gsm8k, math500, tfds). Continuations may stop where it closes (config.budget.stop_at_answer,
      `opd_jax.decode.stops`): the text cut there gets the reward of the full response, unless the full response
      would have run into the token cap without a stop token (it then gets 0 unless grade_truncated);
      `answer_closed` finds the cut.
  """
  name: str
  problems: list[Problem]
  template: str
  extractor: Callable[[str], str | None]
  grader: Callable[[Problem, str], bool]
  answer_span: tuple[str, str] | None = None

  def __post_init__(self):
    check_template(self.template)
    ids = [p.id for p in self.problems]
    if len(set(ids)) != len(ids):
      raise ValueError(f"task {self.name!r}: problem ids must be unique, got duplicates in {ids[:10]}...")

  @property
  def has_solutions(self) -> bool:
    """True when every problem carries a reference solution (needed by the solution/summary/contrastive
    self-distillation contexts)."""
    return bool(self.problems) and all(p.solution is not None for p in self.problems)

  def prompt(self, problem: Problem) -> str:
    """The user message for `problem`: the template with `{question}` replaced (no chat template)."""
    return self.template.replace(QUESTION_SLOT, problem.question)

  def extract(self, response_text: str) -> str | None:
    """The answer a response gives (task-specific rule, see the loader), or None."""
    return self.extractor(response_text)

  def reward(self, problem: Problem, response_text: str) -> float:
    """R(y): 1.0 when the extracted answer is correct, else 0.0 (also when no answer is found)."""
    answer = self.extractor(response_text)
    if answer is None:
      return 0.0
    return 1.0 if self.grader(problem, answer) else 0.0

  def answer_closed(self, response_text: str) -> int | None:
    """The end of the deciding answer span of `response_text` (`spans.answer_end`: characters [0, end) are the
    text a stop at the answer keeps, graded as the whole), or None (no closed span that holds an answer, or no
    `answer_span`)."""
    if self.answer_span is None:
      return None
    return spans.answer_end(response_text, tuple(self.answer_span))

  def rollout_reward(self, problem: Problem, response_text: str, *, finished: bool, grade_truncated: bool) -> float:
    """The reward of a sampled response (rollout or continuation): `reward`, but 0.0 for a response cut at the
    token cap (not `finished`) unless `grade_truncated` (config.task.grade_truncated; paper.md)."""
    return self.reward(problem, response_text) if finished or grade_truncated else 0.0


def check_answers(task: Task, *, skip: bool = False) -> Task:
  """`task` if every gold answer grades as correct against itself (`task.grader(p, p.answer)`), else refused.

  A gold answer that its own grader rejects (GSM8K `#### two`, `#### 1/2`, an empty `#### `) makes every reward
  0 and every node degenerate: the study would end with nothing to measure.

  Args:
    skip: drop such problems with a counted warning instead of refusing.
  Raises:
    ValueError: naming the first bad problems and their answers, unless skip.
  """
  bad = [p for p in task.problems if not grades_itself(p, task.grader)]
  if not bad:
    return task
  shown = ", ".join(f"{p.id} ({p.answer!r})" for p in bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
  if not skip:
    raise ValueError(f"task {task.name!r}: {len(bad)} of {len(task.problems)} gold answers do not grade as correct "
                     f"against themselves: {shown}; fix the data, or set config.task.skip_bad_answers=True to skip "
                     "them")
  logging.warning("task %r: skipping %d of %d problems whose gold answer does not grade as correct against itself: "
                  "%s", task.name, len(bad), len(task.problems), shown)
  bad_ids = {p.id for p in bad}
  return dataclasses.replace(task, problems=[p for p in task.problems if p.id not in bad_ids])


def grades_itself(problem: Problem, grader: Callable[[Problem, str], bool]) -> bool:
  """Whether `problem`'s gold answer is not empty and `grader` credits it against itself (`check_answers`'s rule; a
  grader that raises on it: False)."""
  try:
    return bool(problem.answer.strip()) and bool(grader(problem, problem.answer))
  except Exception:  # pylint: disable=broad-except  (a grader that cannot parse the gold: same verdict)
    return False


def check_template(template: str) -> str:
  """Returns `template` when it holds the `{question}` slot, else raises ValueError."""
  if not isinstance(template, str) or QUESTION_SLOT not in template:
    raise ValueError(f"task template must be a string containing {QUESTION_SLOT!r}, got {template!r}; "
                     "e.g. '{question}\\nPut the final answer after \\'####\\'.'")
  return template


def safe_id(*parts: Any) -> str:
  """Joins parts with '-' after replacing characters outside `[A-Za-z0-9_.-]` by '_' (ids name files)."""
  return "-".join(_SAFE_ID.sub("_", str(p)).strip("_") for p in parts)


class EmptyTaskError(ValueError):
  """A task source (data file, split) that holds no problem; `source` names it."""

  def __init__(self, source: str):
    super().__init__(f"{source} is empty: it holds no problems")
    self.source = source


def limit(rows: list, num_problems: int | None, source: str) -> list:
  """The first `num_problems` rows (all when None).

  Raises:
    EmptyTaskError: `source` holds no rows (whatever num_problems asks).
    ValueError: a bad num_problems, or more asked than exist.
  """
  if not len(rows):
    raise EmptyTaskError(source)
  if num_problems is None:
    return rows
  if not isinstance(num_problems, int) or num_problems <= 0:
    raise ValueError(f"num_problems must be a positive int or None, got {num_problems!r}")
  if num_problems > len(rows):
    raise ValueError(f"num_problems={num_problems} but {source} has only {len(rows)} problems; "
                     "lower num_problems or pass None for all")
  return rows[:num_problems]


def summarize_solution(task_name: str, solution: str) -> str:
  """The reference solution reduced to its equations, in order, one per line (paper.md, "summary" context).

  GSM8K-style solutions (those with calculator annotations: task "gsm8k", tfds "huggingface:gsm8k/main"):
  the annotations `<<48/2=24>>` -> "48/2=24". Other solutions (reasoning-gym's answer_cot, MATH, and the few
  GSM8K solutions without annotations): the stripped lines that contain "=". Deterministic; "" when nothing
  qualifies.

  Args:
    task_name: the task name as given to `load_task` (named in errors).
    solution: the problem's reference solution text.
  Returns:
    The equations joined by newlines.
  """
  if not isinstance(solution, str):
    raise ValueError(f"summarize_solution: solution must be a string, got {type(solution).__name__} for task "
                     f"{task_name!r}; tasks without reference solutions have no summary")
  annotations = _CALCULATOR.findall(solution)
  if annotations:
    return "\n".join(e.strip() for e in annotations)
  return "\n".join(line.strip() for line in solution.splitlines() if "=" in line)
