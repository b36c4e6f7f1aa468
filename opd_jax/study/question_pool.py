"""The study's question pool: config.task loaded (`load_task`), gold answers checked against their own grader,
and the questions of config.task.exclude dropped (`excluded`), with each error naming the config.task field.
"""
from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Mapping

from opd_jax import tasks
from opd_jax.teachers import contexts


def solution_needed_by(config, fields: Mapping[str, str] | None = None) -> str:
  """The configurations whose context shows a reference solution, for a loader's error on a row without one
  ("config.configurations['solution']", "... and 2 more configurations"); "" when none does (or a spec does not
  parse: `contexts.parse_all` says why). `fields`: as `check`'s."""
  needing = []
  for cid, spec in sorted(config.configurations.items()):
    try:
      if contexts.get(contexts.parse(cid, spec).context).needs_solution:
        needing.append((fields or {}).get(cid, f"config.configurations[{cid!r}]"))
    except ValueError:
      continue
  if len(needing) > 1:
    return f"{needing[0]} and {len(needing) - 1} more configuration{'s' if len(needing) > 2 else ''}"
  return needing[0] if needing else ""


def load_task(config, fields: Mapping[str, str] | None = None):
  """The study's task; gold answers that do not grade against themselves are refused (or skipped with a
  warning when config.task.skip_bad_answers: `tasks.check_answers`). A data file (gsm8k, jsonl:<grader>) is
  checked row by row: its bad rows, those without the reference solution a configuration needs and those whose
  gold answer does not grade among them, are named by line in one error (`tasks.files.load_jsonl`).

  Raises:
    ValueError / FileNotFoundError: the task's own errors, naming the config.task field where it is known: an
      unknown task or dataset (config.task.name, with the nearest names), an empty data file or a pool of no
      problems (config.task.path / num_problems), more problems asked than the source holds.
  """
  t = config.task
  n = t.num_problems
  skip = bool(t.get("skip_bad_answers", False))
  source = tasks.REGISTRY.get(t.name.partition(":")[0]) if isinstance(t.name, str) else None
  options = {"bad_answers": "skip" if skip else "refuse", "solution_needed_by": solution_needed_by(config, fields)}
  options = {k: v for k, v in options.items() if source is not None and k in source.options}
  try:
    task = tasks.load_task(t.name, path=t.path or None, split=t.split, num_problems=n or None,
                           seed=config.seed, data_dir=t.data_dir or None, download=t.download,
                           template=t.template or None, **options)
  except tasks.EmptyTaskError as e:
    field = "config.task.path" if t.path else "config.task.data_dir" if t.data_dir else "config.task.name"
    raise ValueError(f"{field}: {e.source} is empty: it holds no problems, so config.task.num_problems={n}"
                     f"{' (all)' if not n else ''} gives none; point {field} at a file (or split) with problems"
                     ) from None
  except ValueError as e:            # tasks.base.limit speaks of the API (None = all); the CLI field's 0 is all
    text = str(e)
    if text.startswith("num_problems="):
      text = "config.task." + text.replace("lower num_problems or pass None for all",
                                           "lower config.task.num_problems, or set it to 0 for all of them")
      raise ValueError(text) from None
    if text.startswith(("unknown task", "unknown reasoning-gym dataset")):
      raise ValueError(f"config.task.name: {text}") from None
    raise
  if "bad_answers" not in options:                        # else the loader checked them, by line
    task = tasks.check_answers(task, skip=skip)
  if not task.problems:
    raise ValueError(f"config.task.num_problems={n}{' (all)' if not n else ''}: task {task.name!r} has no problems "
                     "to study; check config.task.name and its data (config.task.path, split)")
  return excluded(task, t.get("exclude", ""))


def excluded(task, path: str):
  """The task without the problems whose question text is listed in the JSON file `path` (config.task.exclude: a
  list of strings, e.g. another job's questions, so that the two share none; "" = keep all).

  Raises:
    ValueError: naming config.task.exclude when the file is missing, not a JSON list of strings, or leaves no problem.
  """
  if not path:
    return task
  try:
    texts = json.loads(pathlib.Path(path).read_text())
  except (OSError, ValueError) as e:
    raise ValueError(f"config.task.exclude={path!r}: cannot read a JSON list of question texts ({e}); give such a "
                     "file or '' to keep every question") from None
  if not isinstance(texts, list) or not all(isinstance(x, str) for x in texts):
    raise ValueError(f"config.task.exclude={path!r}: must hold a JSON list of question texts (strings)")
  drop = set(texts)
  kept = [p for p in task.problems if p.question not in drop]
  if not kept:
    raise ValueError(f"config.task.exclude={path!r} removes all {len(task.problems)} problems of the pool; raise "
                     "config.task.num_problems or exclude fewer")
  return dataclasses.replace(task, problems=kept)
