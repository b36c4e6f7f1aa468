"""Tasks: problems + prompt template + answer extraction + verifier, reward in {0, 1} (paper.md, "Objects").

  task = tasks.load_task("gsm8k", path="test.jsonl", num_problems=20)   # openai/grade-school-math's test split
  task.prompt(task.problems[0])                    # user message (no chat template)
  task.reward(task.problems[0], "... #### 18")     # 1.0 or 0.0

A task name is `<source>` or `<source>:<rest>`; `REGISTRY` holds the sources: "gsm8k" (JSONL), "math500" (JSON),
"jsonl:<grader>" (your own JSONL file, `files.JSONL_SCHEMA`), "reasoning_gym:<dataset>" (offline generators),
"tfds:<name>" (any TFDS dataset prepared in array_record format under data_dir) and "synthetic:parity" (for tiny
random models: smoke runs and tests). Nothing is downloaded at run time unless download=True (tfds only). A fork
adds a source with one `register(Source(...))` (docs/usage.md, "Extending").
"""
import dataclasses
import difflib
from typing import Callable

from opd_jax.tasks.base import EmptyTaskError
from opd_jax.tasks.base import Problem
from opd_jax.tasks.base import Task
from opd_jax.tasks.base import check_answers
from opd_jax.tasks.base import summarize_solution


@dataclasses.dataclass(frozen=True, kw_only=True)
class Source:
  """Where a task's problems come from: the `<source>` of a task name `<source>[:<rest>]`.

  Attributes:
    name: the source's name.
    load: `load(rest, *, path, split, num_problems, seed, data_dir, download, template, **options) -> Task`
      (`rest`: the name after '<source>:', "" when there is none; template None: the source's default). Import
      slow libraries inside it, so that `import opd_jax.tasks` stays cheap.
    example: the name as users write it, e.g. "reasoning_gym:<dataset>" (error messages, `KNOWN_TASKS`).
    needs_rest: the name must have a ':<rest>'.
    options: the keyword options `load_task(..., **options)` may pass on.
    examples: real names, offered as the nearest ones to a misspelt name.
  """
  name: str
  load: Callable[..., Task]
  example: str
  needs_rest: bool = False
  options: tuple[str, ...] = ()
  examples: tuple[str, ...] = ()


REGISTRY: dict[str, Source] = {}


def register(source: Source) -> Source:
  """Adds `source` to `REGISTRY` (replacing one of the same name) and returns it."""
  REGISTRY[source.name] = source
  return source


def _files(rest, *, path, split, num_problems, template, data_dir, name, bad_answers="keep", **_):
  from opd_jax.tasks import files  # pylint: disable=g-import-not-at-top
  if name == "gsm8k":
    return files.load_gsm8k(path=path, data_dir=data_dir, split=split, num_problems=num_problems,
                            bad_answers=bad_answers, **({} if template is None else {"template": template}))
  return files.load_math500(path=path, data_dir=data_dir, split=split, num_problems=num_problems,
                            **({} if template is None else {"template": template}))


def _jsonl(rest, *, path, split, num_problems, template, solution_needed_by="", bad_answers="keep", **_):
  from opd_jax.tasks import files  # pylint: disable=g-import-not-at-top
  return files.load_jsonl(rest, path=path, split=split, num_problems=num_problems, template=template,
                          solution_needed_by=solution_needed_by, bad_answers=bad_answers)


def _reasoning_gym(rest, *, num_problems, seed, template, config=None, **_):
  from opd_jax.tasks import generators  # pylint: disable=g-import-not-at-top
  dataset, spec_config = generators.parse_name(rest)
  if spec_config and config:
    raise ValueError(f"task 'reasoning_gym:{rest}': pass the dataset config either in the name or as config=, "
                     "not both")
  return generators.load(dataset, num_problems=num_problems, seed=seed, config=spec_config or config,
                         **({} if template is None else {"template": template}))


_TFDS_OPTIONS = ("question_field", "answer_field", "solution_field", "answer_marker", "grader")


def _tfds(rest, *, path, seed, split, data_dir, download, num_problems, template, **options):
  del path, seed                                   # a tfds dataset is named, and keeps its stored order
  from opd_jax.tasks import tfds_source  # pylint: disable=g-import-not-at-top
  return tfds_source.load(rest, split=split, data_dir=data_dir, download=download, num_problems=num_problems,
                          **options, **({} if template is None else {"template": template}))


def _synthetic(rest, *, num_problems, seed, template, **_):
  from opd_jax.tasks import synthetic  # pylint: disable=g-import-not-at-top
  return synthetic.load(rest, num_problems=num_problems, seed=seed,
                        **({} if template is None else {"template": template}))


register(Source(name="gsm8k", load=lambda rest, **kw: _files(rest, name="gsm8k", **kw), example="gsm8k",
                options=("bad_answers",), examples=("gsm8k",)))
register(Source(name="math500", load=lambda rest, **kw: _files(rest, name="math500", **kw), example="math500",
                examples=("math500",)))
register(Source(name="jsonl", load=_jsonl, example="jsonl:<numeric|math>", needs_rest=True,
                options=("solution_needed_by", "bad_answers"), examples=("jsonl:numeric", "jsonl:math")))
register(Source(name="reasoning_gym", load=_reasoning_gym, example="reasoning_gym:<dataset>", needs_rest=True,
                options=("config",), examples=("reasoning_gym:gsm_symbolic", "reasoning_gym:basic_arithmetic",
                                               "reasoning_gym:chain_sum")))
register(Source(name="tfds", load=_tfds, example="tfds:<name>", needs_rest=True, options=_TFDS_OPTIONS))
register(Source(name="synthetic", load=_synthetic, example="synthetic:parity", needs_rest=True,
                examples=("synthetic:parity",)))
KNOWN_TASKS = tuple(s.example for s in REGISTRY.values())

# The fields a study config chooses for its own task, at their defaults (configs/base.py reads them from here):
# "" = the task's own template, stating its answer format; a 256-token response cap. On another task (an override
# of --config.task.name) each one that is not overridden too is reset to its default (opd_jax/main.py).
TASK_CHOSEN = {"task.template": "", "sampling.max_new_tokens": 256}


def load_task(name: str, *, path=None, split: str = "test", num_problems: int | None = None, seed: int = 0,
              data_dir=None, download: bool = False, template: str | None = None, **kw) -> Task:
  """Loads a task by name, through its source in `REGISTRY`.

  Args:
    name: "<source>[:<rest>]": "gsm8k", "math500", "jsonl:numeric" or "jsonl:math" (path: your JSONL file),
      "reasoning_gym:<dataset>[:<field>=<value>,...]" (e.g. "reasoning_gym:gsm_symbolic",
      "reasoning_gym:chain_sum:min_terms=3,max_terms=3": the dataset config in the name, so `config.task.name`
      alone names it) or "tfds:<name>" (e.g. "tfds:math_dataset/algebra__linear_1d").
    path: the data file for gsm8k (JSONL), math500 (JSON) and jsonl.
    split: the split; for file tasks it only names the ids and the default file under data_dir.
    num_problems: how many problems: the first n rows for file and tfds tasks (None: all), the number
      generated for reasoning_gym (None: 100).
    seed: the reasoning_gym generator seed (file and tfds tasks keep their stored order and ignore it).
    data_dir: for gsm8k/math500, a folder holding gsm8k_<split>.jsonl / math500_<split>.json when path is None;
      for tfds, the TFDS data_dir.
    download: tfds only: download and prepare when not prepared. Never downloads otherwise.
    template: the user message with "{question}" (default: per task, stating the answer format).
    **kw: the source's `options`: reasoning_gym: `config` (dict of dataset config fields); tfds: question_field,
      answer_field, solution_field, answer_marker, grader (see opd_jax.tasks.tfds_source.load); gsm8k:
      bad_answers, jsonl: solution_needed_by and bad_answers (every bad line of the file in one error: see
      opd_jax.tasks.files.load_jsonl).
  Returns:
    A Task.
  Raises:
    ValueError: unknown name (the message names the nearest ones and lists the known ones) or bad arguments.
    EmptyTaskError (a ValueError): a data file or split that holds no problem.
    FileNotFoundError: a missing data file (the message says where to get it).
  """
  if not isinstance(name, str):
    raise ValueError(f"task name must be a string, got {name!r}; known: {', '.join(KNOWN_TASKS)}")
  family, colon, rest = name.partition(":")
  source = REGISTRY.get(family)
  if source is None or (source.needs_rest and not rest) or (rest and not source.needs_rest):
    close = difflib.get_close_matches(name, [e for s in REGISTRY.values() for e in s.examples], n=3)
    raise ValueError(f"unknown task {name!r}; " + (f"did you mean {' or '.join(map(repr, close))}? " if close else "")
                     + f"known: {', '.join(KNOWN_TASKS)}")
  extra = sorted(set(kw) - set(source.options))
  if extra:
    raise ValueError(f"task {name!r} takes no options {extra}")
  return source.load(rest, path=path, split=split, num_problems=num_problems, seed=seed, data_dir=data_dir,
                     download=download, template=template, **kw)


__all__ = ["KNOWN_TASKS", "TASK_CHOSEN", "Problem", "REGISTRY", "Source", "check_answers", "Task", "load_task",
           "register", "summarize_solution"]
