"""What a job says on stderr besides its results: a progress bar and a log line per stage, and the one `error:`
line of a failure (`field_error`, `fail`: the one format of every entry point's config and flag errors).

  with stages.bar("base rollouts", total=rows * max_new_tokens, unit="tok") as b:
    ...; b.update(n)

Stages (study.py, models/checkpoints.py): model assembly and conversion (bytes, tensors), base rollouts (decoded
tokens), scoring (rollouts x views), targeted continuations (decoded tokens), report. Bars are off when
`ENABLED` is False (`config.logging.progress=False`, set by study.run); the log lines are always written.

  error: config.seed must be an integer >= 0, got -3
  error: --config.sampling.temprature=0.7: unknown config field 'config.sampling.temprature'; did you mean
         config.sampling.temperature? the fields are documented in configs/base.py       (one line)
"""
from __future__ import annotations

import contextlib
import difflib
import re
import sys
import time
from typing import Any, Iterable, NoReturn, Sequence

from absl import flags
from absl import logging
from tqdm import tqdm

ENABLED = True


@contextlib.contextmanager
def bar(stage: str, total: float | None = None, unit: str = "it", unit_scale: bool = False):
  """A tqdm bar for `stage` (closed on exit, even on error), then `INFO <stage>: <seconds> s`.

  Args:
    stage: what runs, e.g. "base rollouts".
    total: the planned amount (an upper bound is fine: the bar is filled on a normal exit); None: no total.
    unit, unit_scale: tqdm's.
  Yields:
    the tqdm bar (call .update(n)); disabled bars accept .update too.
  """
  t0 = time.time()
  b = tqdm(total=total, desc=stage, unit=unit, unit_scale=unit_scale, disable=not ENABLED, leave=False,
           dynamic_ncols=True)
  ok = False
  try:
    yield b
    ok = True
  finally:
    if ok and total is not None and b.n < total:
      b.update(total - b.n)
    b.close()
    logging.info("%s: %.1f s", stage, time.time() - t0)


# ----------------------------------------------------------------------------------------------------------
# The one line of a failure.

UNSET = object()


def nearest(query: str, choices: Iterable[str], n: int = 3) -> list[str]:
  """The `choices` closest to `query` (difflib ratio >= 0.6, best first, at most n); [] when none is close."""
  return difflib.get_close_matches(str(query), [str(c) for c in choices], n=n, cutoff=0.6)


def field_error(field: str, problem: str, value: Any = UNSET, *, choices: Iterable[str] = (),
                near: Any = UNSET, quote: bool = True, suggest: Sequence[str] = (), fix: str = "") -> str:
  """One line for a bad config field or flag, the format of every config error of every entry point:

    <field>: <problem>, got <value>; did you mean <a> or <b>? <fix>

  A problem that reads as a predicate of the field ("must be ...") follows it after a space instead of ': '
  (`config.seed must be an integer >= 0, got -3`); parts without content are left out.

  Args:
    field: what the user wrote: `config.budget.questions`, `--workdir`, `--config.foo=1`.
    problem: what is wrong.
    value: the offending value (rendered with repr for strings).
    choices: valid names; the ones closest to `near` (default: the value) are suggested (`nearest`), rendered
      with repr when `quote`, as they are otherwise (field names).
    suggest: suggestions found otherwise, shown as they are (instead of the ones from `choices`).
    fix: what to do, one sentence.
  Returns:
    The line, without the `error: ` prefix (`fail` adds it).
  """
  line = field + (" " if problem.startswith("must ") else ": ") + problem
  if value is not UNSET:
    line += f", got {value!r}" if isinstance(value, str) else f", got {value}"
  near = value if near is UNSET else near
  close = nearest(str(near), choices) if near is not UNSET else []
  shown = list(suggest) or [repr(c) if quote else c for c in close]
  if shown:
    line += f"; did you mean {' or '.join(shown)}?"
  if fix:
    line += ("" if shown else ";") + " " + fix
  return line.replace("\n", " ")


def fail(message: Any, code: int = 2) -> NoReturn:
  """Print `error: <first line of message>` once on stderr and exit with `code` (2: the user can fix it)."""
  lines = [l.strip() for l in str(message).strip().splitlines() if l.strip()] or ["unknown error"]
  print(f"error: {lines[0]}", file=sys.stderr, flush=True)
  sys.exit(code)


_KINDS = {"IntegerParser": "an integer", "FloatParser": "a number", "BooleanParser": "true or false",
          "_ConfigDictParser": "a dict literal, e.g. \"{'key': 1}\"", "TupleParser": "a tuple literal, e.g. '(1, 2)'",
          "EnumParser": "one of the listed values", "EnumClassParser": "one of the listed values"}


def flag_error(error: flags.Error, argv: list[str], flag_values: flags.FlagValues = flags.FLAGS) -> str:
  """`field_error`'s line for an absl flag error: an unknown flag (with the nearest defined flags), a value that
  does not parse as the flag's type, a missing required flag; else the error's first line.

  Args:
    error: what `flag_values(argv)` raised.
    argv: the command line (the value shown is the one typed).
  """
  text = str(error).strip()
  if isinstance(error, flags.UnrecognizedFlagError):
    name = error.flagname
    return field_error(f"--{name}", "unknown flag", choices=[f"--{n}" for n in flag_values], near=f"--{name}",
                       quote=False, fix="see --help for the flags")
  missing = re.match(r"flag --(\S+)=None: Flag --\S+ must have a value other than None", text)
  if missing:
    return field_error(f"--{missing.group(1)}", "is required", fix="see --help")
  bad = re.match(r"flag --([^=\s]+)=", text)
  if bad and bad.group(1) in flag_values:
    name = bad.group(1)
    typed = [a.split("=", 1)[1] for a in argv if "=" in a and a.split("=", 1)[0].lstrip("-") == name]
    flag = flag_values[name]
    kind = _KINDS.get(type(flag.parser).__name__)
    choices = getattr(flag.parser, "enum_values", None) or ()
    value = typed[-1] if typed else text.split("=", 1)[1].split(": ", 1)[0]
    if kind:
      return field_error(name if name.startswith("config.") else f"--{name}", f"must be {kind}", value,
                         choices=choices)
  return error_line(text) or type(error).__name__


def error_line(message: str) -> str:
  """The informative line of an error message that embeds a traceback (a config file's own exception, as
  ml_collections reports it: the last `<Name>Error: ...` line), else its first line."""
  lines = [l.strip() for l in str(message).splitlines() if l.strip()]
  raised = [l for l in lines if re.match(r"^\w+(Error|Exception): ", l)]
  if raised:
    return raised[-1].split(": ", 1)[1]
  no_file = [l for l in lines if "No such file or directory" in l]
  return no_file[0] if no_file else lines[0] if lines else ""
