"""reasoning-gym procedural tasks (offline): `reasoning_gym:<name>`, e.g. gsm_symbolic, chain_sum, countdown.

Problems come from `reasoning_gym.create_dataset(name, size=num_problems, seed=seed, **config)`: the same name,
seed and config give the same problems and ids. reasoning-gym's random `metadata["_rgid"]` is dropped
everywhere (Problem.fields and the entries kept for scoring).

Answer format [ours]: reasoning-gym's own convention, `<answer>...</answer>` tags (its `extract_answer`), and
its scorers take that extracted string (not the full response text): `score_answer(extracted, entry)`.
- Numeric tasks (every gold answer is a number, e.g. gsm_symbolic, basic_arithmetic, chain_sum): the content
  of the last `<answer>` tag (canonical when it is one number: `$1,000.00` -> `1000`, else as written); with
  no tag, the numeric rules of `answers.extract_number` on the whole response (`####`, last `\\boxed{}`,
  "answer is", last number). The scorer thus sees a clean number.
- Other tasks (e.g. countdown, whose answer is an expression): the stripped content of the last `<answer>` tag;
  None without one.
Reward: 1.0 only when `score_answer` returns exactly 1.0; partial credit (0.01 for a wrong number in
gsm_symbolic, 0.05 for a wrong countdown expression) counts as 0.
"""
import hashlib
import json

from opd_jax.tasks import answers
from opd_jax.tasks import base

TEMPLATE = "{question}\nPut only the final answer inside <answer></answer> tags."
DEFAULT_NUM_PROBLEMS = 100
_RANDOM_ID = "_rgid"


def _numeric_extract(text: str) -> str | None:
  """The last <answer> tag's content (canonical when it is one number), else extract_number(text)."""
  tag = answers.answer_tag(text)
  if tag is not None:
    return answers.canonical_number(tag) or tag
  return answers.extract_number(text)


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
    generator provides one (gsm_symbolic), else None; fields = the metadata without "_rgid" and answer_cot.
  """
  import reasoning_gym  # pylint: disable=g-import-not-at-top
  from reasoning_gym import factory  # pylint: disable=g-import-not-at-top
  if name not in factory.DATASETS:
    raise ValueError(f"unknown reasoning-gym dataset {name!r} (task 'reasoning_gym:{name}'); known: "
                     f"{', '.join(sorted(factory.DATASETS))}")
  size = DEFAULT_NUM_PROBLEMS if num_problems is None else num_problems
  if not isinstance(size, int) or size <= 0:
    raise ValueError(f"num_problems must be a positive int or None, got {num_problems!r}")
  config = dict(config or {})
  try:
    dataset = reasoning_gym.create_dataset(name, size=size, seed=seed, **config)
  except TypeError as e:
    raise ValueError(f"reasoning_gym:{name}: bad config {config!r} ({e}); see the fields of "
                     f"{factory.DATASETS[name][1].__name__}") from e

  prefix = [name, f"seed{seed}"]
  if config:
    digest = hashlib.sha1(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:8]
    prefix.append(f"cfg{digest}")
  entries, problems = {}, []
  for index in range(size):
    entry = _strip_random_id(dataset[index])  # generated once: countdown takes ~40 ms per entry
    metadata = entry["metadata"]
    problem_id = base.safe_id(*prefix, f"{index:05d}")
    fields = {k: v for k, v in metadata.items() if k != "answer_cot"}
    fields = json.loads(json.dumps(fields, default=str))  # JSON-safe for records (tuples -> lists)
    solution = metadata.get("answer_cot")
    problems.append(base.Problem(id=problem_id, question=entry["question"], answer=str(entry["answer"]),
                                 solution=str(solution) if solution is not None else None, fields=fields))
    entries[problem_id] = entry

  numeric = all(answers.canonical_number(p.answer) is not None for p in problems)

  def grade(problem: base.Problem, answer: str) -> bool:
    if problem.id not in entries:
      raise ValueError(f"problem {problem.id!r} is not one of task 'reasoning_gym:{name}' (seed {seed}); grade "
                       "it with the task that generated it")
    return dataset.score_answer(answer, entries[problem.id]) == 1.0

  return base.Task(name=f"reasoning_gym:{name}", problems=problems, template=base.check_template(template),
                   extractor=_numeric_extract if numeric else answers.answer_tag, grader=grade)
