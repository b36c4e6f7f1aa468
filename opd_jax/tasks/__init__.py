"""Tasks: problems + prompt template + answer extraction + verifier, reward in {0, 1} (paper.md, "Objects").

  task = tasks.load_task("gsm8k", path="../shared/data/gsm8k_test.jsonl", num_problems=20)
  task.prompt(task.problems[0])                    # user message (no chat template)
  task.reward(task.problems[0], "... #### 18")     # 1.0 or 0.0

Known names: "gsm8k" (JSONL), "math500" (JSON), "reasoning_gym:<dataset>" (offline generators), and
"tfds:<name>" (any TFDS dataset prepared in array_record format under data_dir), and "synthetic:parity" (for
tiny random models: smoke runs and tests). Nothing is downloaded at run
time unless download=True (tfds only).
"""
import difflib

from opd_jax.tasks.base import EmptyTaskError
from opd_jax.tasks.base import Problem
from opd_jax.tasks.base import check_answers
from opd_jax.tasks.base import summarize_solution
from opd_jax.tasks.base import Task

KNOWN_TASKS = ("gsm8k", "math500", "reasoning_gym:<dataset>", "tfds:<name>", "synthetic:parity")


def load_task(name: str, *, path=None, split: str = "test", num_problems: int | None = None, seed: int = 0,
              data_dir=None, download: bool = False, template: str | None = None, **kw) -> Task:
  """Loads a task by name.

  Args:
    name: "gsm8k", "math500", "reasoning_gym:<dataset>[:<field>=<value>,...]" (e.g.
      "reasoning_gym:gsm_symbolic", "reasoning_gym:chain_sum:min_terms=3,max_terms=3": the dataset config in
      the name, so `config.task.name` alone names it) or "tfds:<name>" (e.g.
      "tfds:math_dataset/algebra__linear_1d").
    path: the data file for gsm8k (JSONL) and math500 (JSON).
    split: the split; for file tasks it only names the ids and the default file under data_dir.
    num_problems: how many problems: the first n rows for file and tfds tasks (None: all), the number
      generated for reasoning_gym (None: 100).
    seed: the reasoning_gym generator seed (file and tfds tasks keep their stored order and ignore it).
    data_dir: for gsm8k/math500, a folder holding gsm8k_<split>.jsonl / math500_<split>.json when path is None;
      for tfds, the TFDS data_dir.
    download: tfds only: download and prepare when not prepared. Never downloads otherwise.
    template: the user message with "{question}" (default: per task, stating the answer format).
    **kw: reasoning_gym: `config` (dict of dataset config fields); tfds: question_field, answer_field,
      solution_field, answer_marker, grader (see opd_jax.tasks.tfds_source.load).
  Returns:
    A Task.
  Raises:
    ValueError: unknown name (the message names the nearest ones and lists the known ones) or bad arguments.
    EmptyTaskError (a ValueError): a data file or split that holds no problem.
    FileNotFoundError: a missing data file (the message says where to get it).
  """
  # Imported here so that `import opd_jax.tasks` costs nothing (reasoning_gym and math_verify are slow to import).
  from opd_jax.tasks import files  # pylint: disable=g-import-not-at-top
  from opd_jax.tasks import generators  # pylint: disable=g-import-not-at-top
  from opd_jax.tasks import synthetic  # pylint: disable=g-import-not-at-top
  from opd_jax.tasks import tfds_source  # pylint: disable=g-import-not-at-top
  if not isinstance(name, str):
    raise ValueError(f"task name must be a string, got {name!r}; known: {', '.join(KNOWN_TASKS)}")
  extra = {} if template is None else {"template": template}
  family, _, rest = name.partition(":")
  if name in ("gsm8k", "math500"):
    _no_kw(name, kw)
    load = files.load_gsm8k if name == "gsm8k" else files.load_math500
    return load(path=path, data_dir=data_dir, split=split, num_problems=num_problems, **extra)
  if family == "reasoning_gym" and rest:
    _no_kw(name, {k: v for k, v in kw.items() if k != "config"})
    dataset, spec_config = generators.parse_name(rest)
    if spec_config and kw.get("config"):
      raise ValueError(f"task {name!r}: pass the dataset config either in the name or as config=, not both")
    return generators.load(dataset, num_problems=num_problems, seed=seed, config=spec_config or kw.get("config"),
                           **extra)
  if family == "tfds" and rest:
    allowed = {"question_field", "answer_field", "solution_field", "answer_marker", "grader"}
    _no_kw(name, {k: v for k, v in kw.items() if k not in allowed})
    return tfds_source.load(rest, split=split, data_dir=data_dir, download=download, num_problems=num_problems,
                            **kw, **extra)
  if family == "synthetic" and rest:
    _no_kw(name, kw)
    return synthetic.load(rest, num_problems=num_problems, seed=seed, **extra)
  close = difflib.get_close_matches(name, ["gsm8k", "math500", "synthetic:parity", "reasoning_gym:gsm_symbolic",
                                           "reasoning_gym:basic_arithmetic", "reasoning_gym:chain_sum"], n=3)
  raise ValueError(f"unknown task {name!r}; " + (f"did you mean {' or '.join(map(repr, close))}? " if close else "")
                   + f"known: {', '.join(KNOWN_TASKS)}")


def _no_kw(name: str, kw: dict):
  if kw:
    raise ValueError(f"task {name!r} takes no options {sorted(kw)}")


__all__ = ["KNOWN_TASKS", "Problem", "check_answers", "Task", "load_task", "summarize_solution"]
