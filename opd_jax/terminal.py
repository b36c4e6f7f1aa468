"""What a job says on stderr besides its results: a progress bar per stage, warnings, and the one `error:` line
of a failure (`field_error`, `fail`: the one format of every entry point's config and flag errors).

One console (`console`, called by every entry point): when `config.logging.progress` (every job: study, trainer,
lookahead, and the report inside a study), tqdm bars on a terminal, and one line per stage when stderr is not one
(a file, a pipe: `stage_line`, e.g. `base rollouts: 1,536 tokens in 40.2 s`; no cursor codes); warnings and errors as
`warning: <message>` lines written between the bars, and absl/Python INFO lines (timestamps, thread ids) in
`<workdir>/log.txt` (`attach_log`), not on the console (`config.logging.verbosity=2`: there too). `quiet_startup`
(on `import opd_jax`) silences the startup chatter of the libraries: transformers' "PyTorch was not found"
advisory and JAX's probe of a TPU ("Unable to initialize backend 'tpu'") on machines without one; their other
warnings are kept.

  with stages.bar("base rollouts", total=rows * max_new_tokens, unit="tok") as b:
    ...; b.update(n)

Stages (study/pipeline.py, models/): reading a preset's or GGUF file's header, model assembly, hashing and conversion
(bytes, tensors), loading models, base rollouts (decoded tokens), scoring (rollouts x views), targeted
continuations (decoded tokens), report; a stage without a count shows its elapsed time, redrawn each second.
Bars and lines are off when `ENABLED` is False (`config.logging.progress=False`); each stage's time is logged at
INFO (log.txt). A job's last line (`interrupted: ...`) starts below any bar (`last_line`).

  error: config.seed must be an integer >= 0, got -3
  error: --config.sampling.temprature=0.7: unknown config field 'config.sampling.temprature'; did you mean
         config.sampling.temperature? the fields are documented in configs/base.py       (one line)
"""
from __future__ import annotations

import collections
import contextlib
import difflib
import logging as pylogging
import os
import pathlib
import re
import sys
import threading
import time
from typing import Any, Iterable, NoReturn, Sequence

from absl import flags
from absl import logging
from tqdm import tqdm

ENABLED = True
LOG_NAME = "log.txt"


def quiet_startup() -> None:
  """Silence library startup chatter that says nothing about the run; call before transformers or jax start
  (`import opd_jax` does). Environment defaults a user's own setting overrides: TRANSFORMERS_NO_ADVISORY_WARNINGS
  (transformers' "PyTorch was not found" advisory: opd_jax uses its tokenizers only), TF_CPP_MIN_LOG_LEVEL=1
  (TensorFlow's C++ INFO lines, when tfds imports it). JAX's "Unable to initialize backend 'tpu'" (its TPU probe,
  on every machine without one) is dropped by a filter on that one message; JAX's other lines are kept."""
  os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
  probe = pylogging.getLogger("jax._src.xla_bridge")
  if not any(isinstance(f, _NoTpuProbe) for f in probe.filters):
    probe.addFilter(_NoTpuProbe())


class _NoTpuProbe(pylogging.Filter):
  def filter(self, record: pylogging.LogRecord) -> bool:
    return not str(record.msg).startswith("Unable to initialize backend 'tpu'")


class _BetweenBars:
  """A stream writing through `tqdm.write` to the current sys.stderr: a line never lands inside a bar."""

  def write(self, text: str) -> None:
    if text:
      tqdm.write(text, file=sys.stderr, end="")

  def flush(self) -> None:
    sys.stderr.flush()


class _Buffer(pylogging.Handler):
  """INFO records kept until `attach_log` writes them to the log file (the last 10,000)."""

  def __init__(self):
    super().__init__(pylogging.DEBUG)
    self.records = collections.deque(maxlen=10_000)

  def emit(self, record: pylogging.LogRecord) -> None:
    self.records.append(record)


_console: dict[str, pylogging.Handler] = {}      # "console", "buffer", "file": the handlers `console` installed


def console(progress: bool = True, verbosity: int = 1) -> None:
  """Set up the one console of a job (every entry point calls it once its flags are parsed).

  Args:
    progress: tqdm bars on (config.logging.progress; sets `ENABLED`).
    verbosity: config.logging.verbosity: 2 also prints INFO lines on the console; otherwise they go to the log
      file only (`attach_log`; kept in memory until then). Warnings and errors print as `warning: <message>`.
  """
  global ENABLED
  ENABLED = bool(progress)
  root = pylogging.getLogger()
  for h in [*_console.values(), logging.get_absl_handler()]:
    root.removeHandler(h)
  _console.clear()
  if logging.get_verbosity() < logging.INFO:
    logging.set_verbosity(logging.INFO)
  root.setLevel(min(root.level or pylogging.INFO, pylogging.INFO))   # INFO records are made (for the file)
  out = pylogging.StreamHandler(_BetweenBars())
  out.setLevel(pylogging.INFO if verbosity >= 2 else pylogging.WARNING)
  out.setFormatter(pylogging.Formatter("%(levelname)s: %(message)s"))
  out.addFilter(_lower_level)
  _console.update(console=out, buffer=_Buffer())
  root.addHandler(out)
  root.addHandler(_console["buffer"])


def _lower_level(record: pylogging.LogRecord) -> bool:
  record.levelname = record.levelname.lower()
  return True


def attach_log(workdir, name: str = LOG_NAME) -> pathlib.Path | None:
  """Append this job's INFO lines (absl's format: time, thread, file:line) to <workdir>/<name>, those logged
  since `console` first. Returns the path, or None when the workdir is not a writable folder (the job's own
  checks say so; the lines are dropped)."""
  path = pathlib.Path(workdir) / name
  detach_log()
  try:
    handler = pylogging.FileHandler(path, mode="a", encoding="utf-8")
  except OSError:
    return None
  handler.setFormatter(logging.PythonFormatter())
  buffer = _console.pop("buffer", None)
  root = pylogging.getLogger()
  if buffer is not None:
    root.removeHandler(buffer)
    for record in buffer.records:
      if record.levelno >= pylogging.INFO:
        handler.handle(record)
  _console["file"] = handler
  root.addHandler(handler)
  return path


def detach_log() -> None:
  """Close the log file of `attach_log` (if any); later INFO lines are dropped."""
  handler = _console.pop("file", None)
  if handler is not None:
    pylogging.getLogger().removeHandler(handler)
    handler.close()


# A Ctrl-C is recorded, never raised where it lands (issue 50, item 1): main's SIGINT handler sets INTERRUPT, and
# the program raises KeyboardInterrupt at points it controls (`check_interrupt`: every stage's start and end, each
# question and each train step). A KeyboardInterrupt raised by the handler itself could land in a callback whose
# exceptions Python ignores (XLA's garbage-collection callback: "Exception ignored in ..."), and the run went on.
# Where no such point comes within main.GRACE_S (a compile, a long jitted call), main's watcher thread exits.
INTERRUPT = threading.Event()    # a Ctrl-C was pressed
ACTED = threading.Event()        # the main thread raised KeyboardInterrupt for it
INTERRUPTED_LINE: list[str] = []  # a job's own `interrupted:` line, once it knows more (the trainer's step); main's
                                  # one line on a Ctrl-C is the last set here, else its job's


def check_interrupt() -> None:
  """Raise KeyboardInterrupt when a Ctrl-C was recorded (INTERRUPT) and this is the main thread; else nothing."""
  if INTERRUPT.is_set() and threading.current_thread() is threading.main_thread():
    ACTED.set()
    raise KeyboardInterrupt


def live() -> bool:
  """Bars are drawn (tqdm, redrawn in place) when on (`ENABLED`) and stderr is a terminal. On but not a terminal
  (stderr redirected to a file or a pipe): no bar, and each stage prints one line when it ends (`stage_line`)."""
  isatty = getattr(sys.stderr, "isatty", None)
  return ENABLED and bool(isatty and isatty())


class _Count:
  """What a stage's bar counts when no bar is drawn (a disabled tqdm counts nothing): `update(n)` and `n`."""

  def __init__(self, initial: float = 0):
    self.n = initial

  def update(self, n: float = 1) -> None:
    self.n += n


def stage_line(stage: str, seconds: float, n: float | None = None, unit: str = "it", unit_scale: bool = False) -> str:
  """The one line of a finished stage when no bar is drawn: `base rollouts: 1,536 tokens in 40.2 s`, or
  `loading models: 21.6 s` for a stage without a count (n None)."""
  if n is None:
    return f"{stage}: {seconds:.1f} s"
  if unit_scale:                                    # 491MB: the SI prefix on the unit, no space between
    return f"{stage}: {tqdm.format_sizeof(n)}{unit} in {seconds:.1f} s"
  unit = WORDS.get(unit, unit)
  word = unit if int(n) == 1 else unit + "s"              # 10 views, 1 view, 3,744 tokens, 3 questions
  return f"{stage}: {int(n):,} {word} in {seconds:.1f} s"


WORDS = {"tok": "token", "q": "question", "it": "item", "B": "byte"}   # a bar's short unit (tok/s) as a word


_open: list = []          # the bars drawn now (innermost last): a last line printed by another thread starts below
_depth = 0                # stages open now when no bar is drawn: an inner stage's line is indented under its own


def _ticker(b, every_s: float = 1.0):
  """Redraws bar `b` every `every_s` seconds until the returned event is set: tqdm redraws on `update` only, so a
  bar without a total (the elapsed time alone) would show 00:00 for the whole stage."""
  stop = threading.Event()

  def tick():
    while not stop.wait(every_s):
      b.refresh()
  threading.Thread(target=tick, daemon=True, name=f"ticker {b.desc}").start()
  return stop


@contextlib.contextmanager
def bar(stage: str, total: float | None = None, unit: str = "it", unit_scale: bool = False, *, initial: float = 0,
        fill: bool = True, leave: bool = False, shown: bool = True):
  """A progress bar for `stage` (closed on exit, even on error), then `INFO <stage>: <seconds> s` (log.txt).

  On a terminal (`live`): a tqdm bar, redrawn each second when it has no total. Not a terminal: no bar, and one
  `stage_line` on stderr when the stage ends normally, indented two spaces per enclosing stage (the stages of
  each question block under the `questions` line that follows them). Off (`ENABLED` False): nothing on stderr.

  Args:
    stage: what runs, e.g. "base rollouts".
    total: the planned amount (an upper bound is fine: with `fill` the bar is filled on a normal exit); None: no
      total (the bar shows the elapsed time only).
    unit, unit_scale: tqdm's.
    initial: the amount done before (a resumed run's questions).
    fill: fill the bar to `total` on a normal exit (False: a total that may not be reached, e.g. a quota).
    leave: keep the drawn bar on the terminal after the stage.
    shown: False: neither bar nor line (the stage is logged only).
  Yields:
    an object with .update(n) (the tqdm bar, or a counter when none is drawn).
  """
  check_interrupt()
  flush_notes()                     # the run has started: what was held about it prints before its first stage
  t0, draw = time.time(), live() and shown
  if draw:
    b = tqdm(total=total, initial=initial, desc=stage, unit=unit, unit_scale=unit_scale, leave=leave,
             dynamic_ncols=True, bar_format=None if total is not None else "{desc}: {elapsed}")   # no "0it"
    _open.append(b)
  else:
    b = _Count(initial)
  ticker = _ticker(b) if draw and total is None else None
  ok = False
  global _depth
  depth, _depth = _depth, _depth + (not draw and shown)
  try:
    yield b
    ok = True
  finally:
    _depth = depth
    if ticker is not None:
      ticker.set()
    if ok and fill and total is not None and b.n < total:
      b.update(total - b.n)
    seconds = time.time() - t0
    if draw:
      _open.remove(b)
      b.close()
    elif ok and shown and ENABLED:
      print("  " * depth + stage_line(stage, seconds, None if total is None else b.n, unit, unit_scale),
            file=sys.stderr, flush=True)    # a stage inside another (a question block's) indented under it
    logging.info("%s: %.1f s", stage, seconds)
  check_interrupt()                 # after the stage's own cleanup, on a normal exit only (an error propagates)


def last_line(line: str) -> None:
  """Print a job's last line (`interrupted: ...`) on stderr on a line of its own, below any bar still drawn (this
  may run on another thread than the bars')."""
  print(("\n" if _open else "") + line, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------------------
# The one line of a failure.

UNSET = object()


def nearest(query: str, choices: Iterable[str], n: int = 3) -> list[str]:
  """The `choices` closest to `query` (difflib ratio >= 0.6, best first, at most n); [] when none is close."""
  return difflib.get_close_matches(str(query), [str(c) for c in choices], n=n, cutoff=0.6)


def bad_field(field: str, problem: str, value: Any = UNSET, **kwargs) -> ValueError:
  """The ValueError of a bad config field, in `field_error`'s one-line format (same arguments)."""
  return ValueError(field_error(field, problem, value, **kwargs))


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


NOTES: list[str] = []     # `note:` lines about a run, held until it is known to start (`note`)


def note(line: str) -> None:
  """Hold a `note:` line until the run it is about starts (`flush_notes`: its plan, its first stage); a run that
  fails first prints its one `error:` line alone (`fail` drops the notes)."""
  NOTES.append(line)


def flush_notes() -> None:
  """Print the held notes on stderr, once."""
  while NOTES:
    print(NOTES.pop(0), file=sys.stderr, flush=True)


def fail(message: Any, code: int = 2) -> NoReturn:
  """Print `error: <first line of message>` once on stderr and exit with `code` (2: the user can fix it); the
  held notes (`note`) are dropped: the error is the one line."""
  NOTES.clear()
  lines = [l.strip() for l in str(message).strip().splitlines() if l.strip()] or ["unknown error"]
  print(f"error: {lines[0]}", file=sys.stderr, flush=True)
  sys.exit(code)


_HELP = re.compile(r"--?(\?|help|helpfull|helpshort|helpxml)(=(true|t|1))?", re.IGNORECASE)


@contextlib.contextmanager
def help_exits_zero(argv: Sequence[str]):
  """Around absl's flag parse: its --help (-?, --helpfull, --helpshort, --helpxml) prints the flags, then exits
  with status 1 (absl.app's HelpFlag); when `argv` asked for that help, the exit status is 0 instead (the user
  got what was asked). Every other exit passes through unchanged."""
  try:
    yield
  except SystemExit as e:
    if e.code == 1 and any(_HELP.fullmatch(a) for a in argv[1:]):
      sys.exit(0)
    raise


def parse_flags(argv: Sequence[str], flag_values: flags.FlagValues = flags.FLAGS) -> list[str]:
  """absl's parse for an `app.run(main, flags_parser=...)`: a flag error is one `error:` line (`flag_error`, exit 2)
  instead of usage text, and --help exits 0 (`help_exits_zero`). Returns the arguments left after the flags."""
  try:
    with help_exits_zero(argv):
      return flag_values(argv)
  except flags.Error as e:
    fail(flag_error(e, list(argv), flag_values))


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
