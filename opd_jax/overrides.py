"""What the command line does to a config before a job starts: overrides (`--config.<field>`) that name no field,
fields the job's schema lacks, `--configuration` items merged in, and a task switch's resets.

The checks return one `error:` line's text in `terminal.field_error`'s format (or None); `with_configurations` and
`switch_task` return `note:` lines; `main.parse_flags` and `main.main` print them. Nothing here loads a model.
"""
from __future__ import annotations

import pathlib
import re

from ml_collections import config_flags
from ml_collections.config_flags import config_flags as config_flags_lib

from opd_jax import tasks
from opd_jax import terminal


def _paths(tree, prefix: str = "config") -> list[str]:
  """Every dotted field path of a config (groups and leaves)."""
  out = []
  for k in tree.keys():
    out.append(f"{prefix}.{k}")
    if hasattr(tree[k], "keys"):
      out += _paths(tree[k], f"{prefix}.{k}")
  return out


def unknown_field(config, path: str) -> tuple[str, list[str]] | None:
  """(the first unknown prefix of `path`, the nearest valid field paths) for an override `--config.<path>`, or None
  when every part of the path exists. Suggestions: the path with the unknown part replaced by its closest
  siblings, else fields whose last part is close to the path's last part."""
  node, parts = config, path.split(".")
  for i, key in enumerate(parts):
    if "[" in key:                                 # an index into a sequence: ml_collections checks it
      return None
    if not hasattr(node, "keys") or key not in node.keys():
      done = ["config", *parts[:i]]
      siblings = list(node.keys()) if hasattr(node, "keys") else []
      near = [".".join([*done, s, *parts[i + 1:]]) for s in terminal.nearest(key, siblings)]
      near = [n for n in near if unknown_field(config, n.split(".", 1)[1]) is None] or [
          ".".join([*done, s]) for s in terminal.nearest(key, siblings)]
      if not near:
        leaves = _paths(config)
        near = [p for p in leaves if terminal.nearest(parts[-1], [p.rsplit(".", 1)[1]])][:3]
      return ".".join([*done, key]), near
    node = node[key]
  return None


def override_error(argv) -> str | None:
  """`terminal.field_error`'s line for the first `--config.<field>` override of argv that names no field of the
  config file (loaded again here: the flag parse failed), or None when all exist or the file does not load."""
  files = [a.split("=", 1)[1] for a in argv if a.startswith("--config=")]
  if not files:
    return None
  try:
    config = config_flags_lib.ConfigFileFlagParser(name="config").parse(files[-1])
    config.keys()
  except Exception:  # pylint: disable=broad-except  (the file's own error is reported by the caller)
    return None
  for arg in argv:
    m = re.match(r"^--(?:no)?config\.([^=]+)", arg)
    if not m:
      continue
    found = unknown_field(config, m.group(1))
    if found:
      field, near = found
      if field.startswith(("config.configurations.", "config.contexts.templates.")):
        near = []                                   # names of the user's own entries: nothing to suggest
      if field.split(".")[:2] == ["config", "train"] and "train" not in config.keys():
        near, fix = [], (f"config.train is the trainer's group: this config is a {config.get('job', 'study')} "
                         f"(job {config.get('job', 'study')!r}); train with --config=configs/opd_train.py")
      elif field.startswith("config.configurations."):
        fix = "add a configuration with --configuration=<name>=teacher:context:divergence"
      elif field.startswith("config.contexts.templates."):
        fix = "set the templates as one dict, e.g. --config.contexts.templates=\"{'solution': '{prompt} ...'}\""
      else:
        fix = ("the fields are documented in configs/base.py" + (" and configs/opd_train.py (config.train)" if
                                                                 "train" in config.keys() else ""))
      return terminal.field_error(arg, f"unknown config field {field!r}", suggest=near, fix=fix)
  return None


SCHEMA_FILES = {"study": "base.py", "train": "opd_train.py", "lookahead": "lookahead.py"}   # under configs/
FREE_FORM = ("config.configurations.", "config.chat.kwargs.", "config.contexts.templates.")    # the user's own keys


def schema_error(config) -> str | None:
  """`terminal.field_error`'s line for the first field of `config` (whatever set it: the file, a flag) that its
  job's schema (configs/base.py, opd_train.py or lookahead.py, loaded as a config file is) does not have, with the
  nearest fields; None when every field is known (issue 50, item 2: a typo inside a config file ran silently
  with the default)."""
  import importlib.util  # pylint: disable=g-import-not-at-top
  spec = importlib.util.find_spec("configs")
  job = config.get("job", "study")
  if spec is None or not spec.submodule_search_locations or job not in SCHEMA_FILES:
    return None
  path = pathlib.Path(list(spec.submodule_search_locations)[0]) / SCHEMA_FILES[job]
  reference = config_flags_lib.ConfigFileFlagParser(name="config").parse(str(path))
  for field in _paths(config):
    if field.startswith(FREE_FORM):
      continue
    found = unknown_field(reference, field.split(".", 1)[1])
    if found:
      return terminal.field_error(found[0], f"unknown config field (set in the config file or a flag; the schema "
                                  f"is configs/{SCHEMA_FILES[job]})", suggest=found[1],
                                  fix=f"fix its name, or add the field to configs/{SCHEMA_FILES[job]}")
  return None


def config_files() -> list[str]:
  """The study configs beside this package (configs/*.py but __init__), for the missing --config's fix."""
  root = pathlib.Path(__file__).resolve().parents[1] / "configs"
  return sorted(f"configs/{p.name}" for p in root.glob("*.py") if p.name != "__init__.py")


def with_configurations(config, items) -> list[str]:
  """Merge `--configuration=name=spec` items into config.configurations (in place).

  Returns:
    One `note:` line per configuration of the config file that an item replaced with another spec (old -> new),
    for stderr: a name the file already uses is replaced, not added.
  Raises:
    ValueError: an item without `name=` or without a spec.
  """
  notes = []
  for item in items:
    name, sep, spec = item.partition("=")
    name, spec = name.strip(), spec.strip()
    if not (sep and name and spec):
      raise ValueError(f"--configuration={item!r}: expected name=teacher:context:divergence, e.g. "
                       "--configuration=mine=self:answer:reverse_kl")
    old = config.configurations.get(name)
    if old is not None and old != spec:
      notes.append(f"note: --configuration={name}=... replaced the config's configuration {name!r}: {old!r} -> "
                   f"{spec!r} (pick another name to add one beside it)")
    with config.unlocked(), config.configurations.unlocked():
      config.configurations[name] = spec
  return notes


def switch_task(config, own_task: str, overrides) -> str | None:
  """A task switch resets what the config chose for its own task (configs/base.py, "Switching the task").

  When config.task.name differs from `own_task` (the config file's own task), each field of `tasks.TASK_CHOSEN`
  not in `overrides` and not at its default there (template "" = the task's own, stating its answer format;
  max_new_tokens 256) is set to the default, in place.

  Args:
    own_task: config.task.name as the config file (and variant) set it, before the command line's overrides.
    overrides: the dotted fields set on the command line (`task.template`, ...).
  Returns:
    The one `note:` line saying what was reset and how to choose it, or None when nothing was.
  """
  if config.task.name == own_task:
    return None
  changed = []
  for field, default in tasks.TASK_CHOSEN.items():
    group, name = field.split(".")
    value = config[group][name]
    if field not in overrides and value != default:
      config[group][name] = default
      changed.append(f"config.{field}={default!r} (was {value!r})")
  if not changed:
    return None
  return (f"note: config.task.name={config.task.name!r} is not the config's own task {own_task!r}, whose template "
          f"and token cap do not carry over: {', '.join(changed)}; set "
          f"--config.{' and --config.'.join(tasks.TASK_CHOSEN)} to choose them")


def file_task(config_flag) -> str | None:
  """config.task.name as the config file (and variant) sets it, without the command line's overrides."""
  try:
    own = config_flags_lib.ConfigFileFlagParser(name="config").parse(config_flags.get_config_filename(config_flag))
    return own.task.name
  except Exception:  # pylint: disable=broad-except  (loaded once already: this only fails for a file without task)
    return None
