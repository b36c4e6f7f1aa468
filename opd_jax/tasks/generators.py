"""reasoning-gym procedural tasks (offline): `reasoning_gym:<name>`, e.g. gsm_symbolic, chain_sum, countdown.

Problems come from `reasoning_gym.create_dataset(name, size=num_problems, seed=seed, **config)`: the same name,
seed and config give the same problems and ids. reasoning-gym's random `metadata["_rgid"]` is dropped
everywhere (Problem.fields and the entries kept for scoring).

Answer format [ours]: reasoning-gym's own convention, `<answer>...</answer>` tags (its `extract_answer`), and
its scorers take that extracted string (not the full response text): `score_answer(extracted, entry)`.
- Numeric tasks (every gold answer is exactly one number, e.g. gsm_symbolic, basic_arithmetic, chain_sum):
  `answers.extract_tagged_number`: the content of the deciding `<answer>` span read as an answer statement (`x =
  42` and `12 + 30 = 42` -> `42`, `$1,000.00` -> `1000`; a hedge `2 or 3`, a fraction `1/3` or a list -> None,
  reward 0), as written when it holds no digit; with no tag, the numeric rules of `answers.extract_number` on the
  whole response (`####`, last `\\boxed{}`, "answer is", last number). The scorer thus sees one clean number:
  gsm_symbolic's reads the first number of what it gets, so `2 or 3` or `3/4` would reach it as 2 or 3. One
  quantity in several units ("7 dollars and 50 cents" -> `7.5 dollar = 750 cent`) is scored once per reading,
  and credited when one scores 1.0 (`answers.readings`).
- Other tasks: the stripped content of the deciding `<answer>` span, as written; None without one.
The deciding span (`spans`, the one definition the answer stop shares): the first closed `<answer>` span that
holds anything but whitespace, so an empty `<answer></answer>` echoed from the template before the answer hides
nothing, and nothing after it is read (reasoning-gym's `extract_answer` reads the last match instead: a second,
corrected answer is not read here, so that a continuation stopped at its first answer keeps its reward). Lists are not
  numbers (`answers.canonical_number`): spiral_matrix, arc_1d, path_star, string_splitting and string_synthesis,
  whose gold answers are space-separated numbers such as `2 1 5 1`, are not numeric tasks, and an answer
  `2 1 5 1` reaches the scorer as written, never as 2151 (open-thought/reasoning-gym#142).
Reward: 1.0 only when the dataset's own `score_answer(extracted, entry)` on the generated entry returns exactly
1.0; partial credit (0.01 for a wrong number in gsm_symbolic, 0.05 for a wrong countdown expression, a length
ratio for an answer that contains the gold one) counts as 0. The scorer decides what "correct" means: a few
accept answers within a tolerance (decimal_arithmetic: one unit in the last decimal place; number_format:
within 0.01; power_function: the same 3 significant figures).
Reference solutions: gsm_symbolic's own `answer_cot`; for chain_sum and basic_arithmetic, built from the
generated expression (`expression_solution`: one line `a op b = c` per operation in evaluation order, then "The
answer is c."), kept only where it reaches the gold answer (basic_arithmetic without parentheses but with * or
/ has gold answers evaluated left to right, `2 + 3 * 4` -> 20: none, with a warning). Other datasets have none
(the solution, summary and contrastive contexts refuse them).
Dataset config: `load(..., config={...})`, or in the task name `reasoning_gym:chain_sum:min_terms=3,max_digits=2`
(`parse_name`), so that `config.task.name` alone selects a slice.
Refused datasets (ValueError): those whose entries carry no gold answer (the scorer checks a proposed solution
instead: boxnet, graph_color, propositional_logic, rubiks_cube, rush_hour), as Problem.answer must be the gold
answer; and those whose scorer cannot tell a wrong answer from a right one (BROKEN_SCORERS).
"""
import ast
import difflib
import hashlib
import json
import operator
import re

from absl import logging

from opd_jax.tasks import answers
from opd_jax.tasks import base
from opd_jax.tasks import spans

TEMPLATE = "{question}\nPut only the final answer inside <answer></answer> tags."
# Both extractors read the deciding `<answer>` span when there is one (`answers.answer_tag`, `spans`) and nothing
# after it: `base.Task.answer_span`.
ANSWER_SPAN = spans.ANSWER_SPAN
DEFAULT_NUM_PROBLEMS = 100
_RANDOM_ID = "_rgid"
# Datasets whose score_answer gives 1.0 to wrong answers (reasoning-gym 0.1.19), so a reward of 1 would not mean
# correct: name -> why.
BROKEN_SCORERS = {
    "game_of_life_halting": "its score_answer returns 1.0 for every non-empty answer: it compares bool(answer) "
                            "with bool(gold) and bool('False') is True",
}


_FIELD = re.compile(r",(?=\s*[A-Za-z_]\w*\s*=)")   # a comma that starts the next `field=`
_OPS = {ast.Add: ("+", operator.add), ast.Sub: ("-", operator.sub), ast.Mult: ("*", operator.mul)}
# Datasets whose answer is the generated expression's value: name -> whether "/" is floor division (as
# reasoning-gym's basic_arithmetic evaluates it, `eval_floordiv`).
EXPRESSION_DATASETS = {"chain_sum": False, "basic_arithmetic": True}
KNOWN_GOOD = ("gsm_symbolic", "basic_arithmetic", "chain_sum")   # with reference solutions; named by errors


def parse_name(spec: str) -> tuple[str, dict]:
  """"chain_sum:min_terms=3,max_terms=4" -> ("chain_sum", {"min_terms": 3, "max_terms": 4}); no ':' -> {}.

  Values are Python literals (`ast.literal_eval`: 3, 0.5, True, ('+', '-')), else kept as strings.
  Raises:
    ValueError: an empty dataset name or a part without '=' (naming it and the expected form).
  """
  name, _, rest = spec.partition(":")
  if not name:
    raise ValueError(f"task 'reasoning_gym:{spec}': no dataset name; e.g. 'reasoning_gym:chain_sum:min_terms=3'")
  config = {}
  for part in (_FIELD.split(rest) if rest.strip() else []):
    key, eq, value = part.partition("=")
    if not eq or not key.strip().isidentifier():
      raise ValueError(f"task 'reasoning_gym:{spec}': {part!r} is not field=value; write the dataset config as "
                       "'reasoning_gym:<dataset>:<field>=<value>,...', e.g. 'reasoning_gym:chain_sum:min_terms=3'")
    try:
      config[key.strip()] = ast.literal_eval(value.strip())
    except (ValueError, SyntaxError):
      config[key.strip()] = value.strip()
  return name, config


def expression_solution(expression: str, *, floordiv: bool = False) -> tuple[str, int]:
  """A worked solution of an integer expression: each operation in Python's evaluation order (precedence,
  parentheses, left to right) as one line `a op b = c`, then "The answer is c.".

  Args:
    expression: e.g. "12 + 34 - 5" (chain_sum) or "-(3 * 4) / 2" (basic_arithmetic).
    floordiv: "/" is floor division (basic_arithmetic's `eval_floordiv`); False: "/" is refused.
  Returns:
    (solution text, value); e.g. ("12 + 34 = 46\n46 - 5 = 41\nThe answer is 41.", 41).
  Raises:
    ValueError: anything but integer literals, + - * (/ with floordiv), unary minus and parentheses.
  """
  lines = []
  show = lambda v: f"({v})" if v < 0 else str(v)

  def walk(node):
    if isinstance(node, ast.Constant) and type(node.value) is int:  # pylint: disable=unidiomatic-typecheck
      return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
      value = walk(node.operand)
      if isinstance(node.operand, ast.Constant):
        return -value if isinstance(node.op, ast.USub) else value
      if isinstance(node.op, ast.UAdd):
        return value
      lines.append(f"-({value}) = {-value}")
      return -value
    if isinstance(node, ast.BinOp) and (type(node.op) in _OPS or (floordiv and isinstance(node.op, ast.Div))):
      left, right = walk(node.left), walk(node.right)
      if isinstance(node.op, ast.Div):
        if right == 0:
          raise ValueError(f"expression {expression!r} divides by zero")
        symbol, value = "/", left // right
      else:
        symbol, fn = _OPS[type(node.op)]
        value = fn(left, right)
      lines.append(f"{left} {symbol} {show(right)} = {value}")
      return value
    raise ValueError(f"expression {expression!r}: unsupported part {ast.dump(node)[:60]}; expression_solution "
                     "takes integer literals, + - *" + (" /" if floordiv else "") + ", unary minus and parentheses")

  try:
    tree = ast.parse(expression.strip(), mode="eval")
  except SyntaxError as e:
    raise ValueError(f"expression {expression!r} is not an arithmetic expression ({e})") from e
  value = walk(tree.body)
  lines.append(f"The answer is {value}.")
  return "\n".join(lines), value


def _solution(name: str, entry: dict) -> str | None:
  """The reference solution of a generated entry (module docstring), or None (also when a built one disagrees
  with the gold answer)."""
  metadata = entry["metadata"]
  if metadata.get("answer_cot") is not None:
    return str(metadata["answer_cot"])
  if name not in EXPRESSION_DATASETS or "expression" not in metadata:
    return None
  text, value = expression_solution(str(metadata["expression"]), floordiv=EXPRESSION_DATASETS[name])
  if answers.canonical_number(str(entry["answer"])) != answers.canonical_number(str(value)):
    return None
  return text


def _strip_random_id(entry: dict) -> dict:
  """A copy of a reasoning-gym entry without metadata["_rgid"]."""
  metadata = {k: v for k, v in entry.get("metadata", {}).items() if k != _RANDOM_ID}
  return {**{k: v for k, v in entry.items() if k != _RANDOM_ID}, "metadata": metadata}


def load(name: str, *, num_problems: int | None = None, seed: int = 0, config: dict | None = None,
         template: str = TEMPLATE) -> base.Task:
  """A reasoning-gym task.

  Args:
    name: a reasoning-gym dataset name, e.g. "gsm_symbolic", "basic_arithmetic", "chain_sum", "countdown".
    num_problems: how many problems to generate (None: DEFAULT_NUM_PROBLEMS = 100).
    seed: the generator seed.
    config: extra keyword arguments of the dataset's config (e.g. {"min_terms": 2, "max_terms": 3}); when
      given, a short hash of it enters the ids so different configs never share ids.
    template: the user message, with `{question}`.
  Returns:
    A Task; ids "<name>-seed<seed>[-cfg<hash>]-<index:05d>"; solution = metadata["answer_cot"] where the
    generator provides one (gsm_symbolic), the step-by-step evaluation for EXPRESSION_DATASETS
    (`expression_solution`), else None; fields = the metadata without "_rgid" and answer_cot.
  Raises:
    ValueError: an unknown name, a bad num_problems, a config the dataset rejects (composite needs one: its
      `datasets`), a dataset whose entries have no gold answer (boxnet, graph_color, ...) or one in
      BROKEN_SCORERS.
  """
  import reasoning_gym  # pylint: disable=g-import-not-at-top
  from reasoning_gym import factory  # pylint: disable=g-import-not-at-top
  if name not in factory.DATASETS:
    close = difflib.get_close_matches(name, sorted(factory.DATASETS), n=3)
    shown = (f"did you mean {' or '.join(repr(c) for c in close)}?" if close else
             f"e.g. {', '.join(repr(c) for c in KNOWN_GOOD)}")
    raise ValueError(f"unknown reasoning-gym dataset {name!r} (task 'reasoning_gym:{name}'); {shown} (all "
                     f"{len(factory.DATASETS)} names: sorted(reasoning_gym.factory.DATASETS))")
  if name in BROKEN_SCORERS:
    raise ValueError(f"reasoning_gym:{name} cannot be graded: {BROKEN_SCORERS[name]}; pick another dataset")
  size = DEFAULT_NUM_PROBLEMS if num_problems is None else num_problems
  if not isinstance(size, int) or size <= 0:
    raise ValueError(f"num_problems must be a positive int or None, got {num_problems!r}")
  config = dict(config or {})
  try:
    dataset = reasoning_gym.create_dataset(name, size=size, seed=seed, **config)
  except (TypeError, ValueError, AssertionError) as e:  # unknown field / invalid value / composite's asserts
    raise ValueError(f"reasoning_gym:{name}: bad config {config!r} ({e}); see the fields of "
                     f"{factory.DATASETS[name][1].__name__}") from e

  prefix = [name, f"seed{seed}"]
  if config:
    digest = hashlib.sha1(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:8]
    prefix.append(f"cfg{digest}")
  entries, problems, unsolved = {}, [], []
  for index in range(size):
    entry = _strip_random_id(dataset[index])  # generated once: countdown takes ~40 ms per entry
    if entry["answer"] is None:
      raise ValueError(f"reasoning_gym:{name}: entry {index} has no gold answer (its scorer checks a proposed "
                       "solution instead); opd_jax tasks need one (Problem.answer, the answer contexts): pick a "
                       "dataset with gold answers")
    metadata = entry["metadata"]
    problem_id = base.safe_id(*prefix, f"{index:05d}")
    fields = {k: v for k, v in metadata.items() if k != "answer_cot"}
    fields = json.loads(json.dumps(fields, default=str))  # JSON-safe for records (tuples -> lists)
    solution = _solution(name, entry)
    if solution is None and name in EXPRESSION_DATASETS:
      unsolved.append(f"{metadata.get('expression')!r} -> gold {entry['answer']!r}")
    problems.append(base.Problem(id=problem_id, question=entry["question"], answer=str(entry["answer"]),
                                 solution=solution, fields=fields))
    entries[problem_id] = entry

  if unsolved:
    logging.warning("reasoning_gym:%s: %d of %d gold answers are not their expression's value (without parentheses "
                    "reasoning-gym evaluates left to right: %s); those problems have no reference solution, so the "
                    "solution, summary and contrastive contexts refuse the task", name, len(unsolved), size,
                    ", ".join(unsolved[:3]))
  numeric = all(answers.canonical_number(p.answer) is not None for p in problems)

  def grade(problem: base.Problem, answer: str) -> bool:
    if problem.id not in entries:
      raise ValueError(f"problem {problem.id!r} is not one of task 'reasoning_gym:{name}' (seed {seed}); grade "
                       "it with the task that generated it")
    several = answers.readings(answer) if numeric and " = " in answer else []     # one quantity, several units
    return any(dataset.score_answer(a, entries[problem.id]) == 1.0
               for a in ([answers.format_number(v) for v in several] or [answer]))

  return base.Task(name=f"reasoning_gym:{name}", problems=problems, template=base.check_template(template),
                   extractor=answers.extract_tagged_number if numeric else answers.answer_tag, grader=grade,
                   answer_span=ANSWER_SPAN)
