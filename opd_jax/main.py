r"""Run a study: `python -m opd_jax.main --config=configs/teacher_sweep.py [--workdir=runs/x] [--dry_run]`
(`--dry_run --cost_model=h200`: FLOPs, bytes and roofline times per stage on an accelerator, opd_jax/cost/estimate.py).

Override any config field on the command line, e.g. `--config.budget.continuations_per_candidate=64` or
`--config.student.name=/data/Qwen3-1.7B`; add configurations with `--configuration=mine=self:answer:reverse_kl`
(repeatable). The config's top-level groups (every field is documented in configs/base.py):
  name, seed           study name (default workdir runs/<name>) and the seed of every random draw
  student              the model studied (preset, HF folder, .gguf path or random:<seed>) and its dtype
  random_model         architecture of random:<seed> models (smoke runs, tests)
  task                 question source, pool size, prompt template, grading of truncated responses
  chat                 system prompt and chat-template flags
  sampling             the student's policy (temperature, top_p, top_k) and max_new_tokens
  configurations       name -> "teacher:context:divergence[@x]" (opd_jax/teachers/contexts.py)
  contexts             context templates
  budget               questions, rollouts, nodes, candidates, continuations R, batch sizes
  selection            "informative" | "all"
  scoring              predictor settings and the teacher temperature
  mesh                 device mesh of one process
  report               the verdict's target group, per-token pages and the predictor that colours them
  logging              verbosity and progress bars (may change on resume)
Multi-host (TPU pods, SLURM): launch one process per host with --multihost (jax.distributed.initialize() from the
environment; launch/ has scripts) or --coordinator/--num_processes/--process_id; questions are split between them.
Errors print one line `error: ...` and exit 2 (the format of opd_jax/terminal.py `field_error`: the field, what is
wrong, the value, the nearest valid names, the fix), before any model loads where they can, and a dry run refuses
what the run would (`pipeline.check`) without writing; a failed start leaves no workdir behind, a study that
recorded no question leaves one another config takes over (`runs.unclaimed`), and a workdir holds one kind of job
(study, train, lookahead) of one config. Ctrl-C stops with one line saying what is left, and the run resumes from
the same command.
"""
from __future__ import annotations

import contextlib
import os
import pathlib
import re
import signal
import sys
import threading

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from opd_jax import atomic
from opd_jax import claim
from opd_jax import overrides
from opd_jax import terminal

_CONFIG = config_flags.DEFINE_config_file("config", None, "Study config file (configs/*.py[:variant]); fields: "
                                          "configs/base.py.", lock_config=True)
_CONFIGURATION = flags.DEFINE_multi_string(
    "configuration", [], "Add or replace a configuration: name=teacher:context:divergence[@x] (repeatable), e.g. "
    "--configuration=mine=self:answer:reverse_kl; merged into config.configurations before validation.")
_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory (default: runs/<config.name>).")
_DRY_RUN = flags.DEFINE_bool("dry_run", False, "Print the planned work and an estimated wall time; run nothing.")
_COST_MODEL = flags.DEFINE_string(
    "cost_model", "", "With --dry_run: also print FLOPs, HBM bytes and roofline times per stage on an accelerator "
    "(h100 | h200 | v5e | v5p, optionally -<chips>, e.g. v5e-64; or cpu), compiling single-step programs on CPU "
    "without weights (opd_jax/cost/estimate.py; tens of seconds).")
_VARIANCE_SPLIT = flags.DEFINE_string(
    "variance_split", "", "With --cost_model: a pilot's variance split (benchmarks/variance_split.py); the dry run "
    "then prints the cheapest design for the fixed design's precision and its hours (opd_jax/cost/design.py).")
_REPAIR = flags.DEFINE_bool(
    "repair", False, "A study: first drop the record parts that do not read (truncated, damaged) and compute their "
    "questions again (seeded: the same records), then go on as the same command would.")
_MULTIHOST = flags.DEFINE_bool("multihost", False, "Call jax.distributed.initialize() (pods, SLURM).")
_COORDINATOR = flags.DEFINE_string("coordinator", None, "host:port of process 0 (local multi-process runs; "
                                   "pods and SLURM detect it).")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Number of processes (with --coordinator).")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index (with --coordinator).")

# Errors a user can fix (bad config, data, checkpoints, workdir): one line, exit 2. Anything else is a bug and
# keeps its traceback.
USER_ERRORS = (ValueError, OSError, RuntimeError, TimeoutError)
INTERRUPTED = "interrupted: finished questions are kept; rerun the same command to resume"
INTERRUPTED_BY_JOB = {
    "study": INTERRUPTED,
    "train": "interrupted: complete checkpoints are kept; rerun the same command to resume from the last one",
    "lookahead": "interrupted: the configurations finished so far are written; rerun the same command to run again",
}
JOBS = tuple(INTERRUPTED_BY_JOB)
NOTHING_STARTED = "interrupted before the run started: nothing was written; rerun the same command to start"
NOTHING_KEPT = ("interrupted: nothing had finished, so the workdir was removed; rerun the same command to start "
                "again")
NOTHING_ADDED = ("interrupted: nothing had finished, so what this run wrote in --workdir={} was removed (what was "
                 "there before is kept); rerun the same command to start again")
NOTHING_FINISHED = ("interrupted: nothing had finished ({} left in --workdir={}); rerun the same command to start "
                    "again")
_job_line = INTERRUPTED                  # the line of this run's job once something may have finished (set by `main`)
_interrupted_line = None                 # the line `failed_start_undone` set after its clean-up, else None
_under_way = None                        # (workdir, its files before) from when `failed_start_undone` began its block
fail = terminal.fail


def parse_flags(argv):
  """absl's parse with every error as one `error:` line (exit 2) instead of usage text or a traceback; loads the
  config (and applies the overrides) so that its errors come here too, and checks it against its job's schema
  (`overrides.schema_error`). --help exits 0 (`terminal.help_exits_zero`)."""
  try:
    with terminal.help_exits_zero(argv):
      rest = flags.FLAGS(argv)
    if _CONFIG.value is not None:      # loads the file and applies --config.* overrides (a failed load raises here)
      _CONFIG.value.get("name")
      unknown = overrides.schema_error(_CONFIG.value)
      if unknown:
        fail(unknown)
  except SyntaxError as e:              # the user's config file: where, in one line
    fail(f"--config: {e.filename}:{e.lineno}: {e.msg}")
  except flags.Error as e:
    fail(overrides.override_error(argv) or terminal.flag_error(e, argv))
  except (AttributeError, KeyError, TypeError, ValueError) as e:
    fail(overrides.override_error(argv) or f"{terminal.error_line(str(e)) or e!r} (in --config)")
  except OSError as e:
    path = next((a.split("=", 1)[1].split(":")[0] for a in argv if a.startswith("--config=")), None)
    if path is not None and not pathlib.Path(path).is_file():
      fail(f"--config: no file {path!r}; pass configs/<job>.py[:variant] ({', '.join(overrides.config_files())})")
    fail(f"--config: {terminal.error_line(str(e))}")
  return rest


def _files(workdir: pathlib.Path) -> set[pathlib.Path]:
  return {p.relative_to(workdir) for p in workdir.rglob("*")} if workdir.is_dir() else set()


_OWN = re.compile(r"config\.json|log(\.\d+-of-\d+)?\.txt|lock\.\d+\.json")   # a run's claim, log and lock


def _own(workdir: pathlib.Path, p: pathlib.Path) -> bool:
  """A path (relative to `workdir`) a run writes before anything finishes: `_OWN` at the top, or a folder."""
  return (workdir / p).is_dir() or (len(p.parts) == 1 and _OWN.fullmatch(p.name) is not None)


def interrupted_line() -> str:
  """The one `interrupted:` line that is true now: the job's own (terminal.INTERRUPTED_LINE: the trainer's step),
  else what `failed_start_undone` removed, else nothing started (no job's block began: nothing was written), else
  nothing finished (the job added only its claim, log and lock: named) or the job's line (finished work is kept)."""
  if terminal.INTERRUPTED_LINE:
    return terminal.INTERRUPTED_LINE[-1]
  if _interrupted_line is not None:
    return _interrupted_line
  if _under_way is None:
    return NOTHING_STARTED
  workdir, before = _under_way
  try:
    new = _files(workdir) - before
    left = sorted(str(p) for p in new if (workdir / p).is_file() and not p.name.startswith("lock."))
  except OSError:                    # a file went while the folder was read (the main thread is still writing)
    return _job_line
  if all(_own(workdir, p) for p in new):
    return NOTHING_FINISHED.format(" and ".join(left) or "nothing new", workdir)
  return _job_line


@contextlib.contextmanager
def failed_start_undone(workdir, enabled: bool = True):
  """Run the block; when it raises (an error, Ctrl-C) having written no file in `workdir` but config.json (the
  claim a study writes after its models load, or `record_train_config`'s) and the log (terminal.LOG_NAME), remove
  what it added: those files (a log that existed is cut back to its size before), the folders it created, and the
  workdir itself (with the parents it created) when it did not exist before. A failed start leaves no empty
  workdir behind; a run that wrote anything else keeps everything. A run refused because another live run holds
  the workdir (`claim.WorkdirInUse`) removes only the files it created, never cutting a log that existed (the live
  run's lines since are its own) or removing a folder (the live run may have made it meanwhile). Off for multi-process runs (another process
  may be writing there). A Ctrl-C's line (`interrupted_line`) says what is left.
  """
  workdir = pathlib.Path(workdir)
  log = workdir / terminal.LOG_NAME
  log_size = log.stat().st_size if log.is_file() else None
  root = None
  for d in (workdir, *workdir.parents):                   # the top-most folder this run would create
    if d.exists():
      break
    root = d
  before = _files(workdir)
  global _under_way, _interrupted_line
  _under_way = (workdir, before)                          # for `interrupted_line`
  try:
    yield
  except BaseException as e:
    new = _files(workdir) - before
    own = (pathlib.Path("config.json"), pathlib.Path(terminal.LOG_NAME))
    in_use = isinstance(e, claim.WorkdirInUse)              # a live run holds the workdir
    if enabled and workdir.is_dir() and all(p in own or (workdir / p).is_dir() for p in new):
      terminal.detach_log()
      if log_size is not None and not in_use:            # a live run's log: its lines since are its own
        with open(log, "r+b") as f:
          f.truncate(log_size)
      for p in sorted(new, key=lambda p: len(p.parts), reverse=True):   # deepest first: files, then their folders
        q = workdir / p
        if not q.is_dir():
          q.unlink(missing_ok=True)
        elif not any(q.iterdir()) and not in_use:        # a folder the live run made meanwhile: keep it
          q.rmdir()
      d = workdir
      while root is not None and d.is_dir() and not any(d.iterdir()):
        try:
          d.rmdir()
        except OSError:                                   # another run created something there meanwhile: keep it
          break
        if d == root:
          break
        d = d.parent
      if isinstance(e, KeyboardInterrupt):               # nothing finished: say what is left, not "finished ... kept"
        _interrupted_line = NOTHING_KEPT if not workdir.exists() else NOTHING_ADDED.format(workdir)
    raise


def _log_to(workdir, multi_process: bool) -> None:
  """INFO lines of this job into <workdir>/log.txt (log.<i>-of-<n>.txt per process of a multi-process run)."""
  try:
    pathlib.Path(workdir).mkdir(parents=True, exist_ok=True)
  except OSError:
    return                                                 # not a folder: the job's own checks say so
  if multi_process:
    import jax  # pylint: disable=g-import-not-at-top
    terminal.attach_log(workdir, f"log.{jax.process_index()}-of-{jax.process_count()}.txt")
  else:
    terminal.attach_log(workdir)


def record_train_config(workdir, config) -> None:
  """<workdir>/config.json for a trainer run (the study writes its own): the config the run started with, what
  `runs.check_workdir_for` compares a rerun with (naming the fields that differ; runs.RESUMABLE_FIELDS may
  change). Written once; left out in a trainer workdir of an older version (train/ without config.json), whose
  checkpoints' config hash (training/state.py) is the only record of its config."""
  workdir = pathlib.Path(workdir)
  if (workdir / "config.json").is_file() or (workdir / "train").is_dir():
    return
  workdir.mkdir(parents=True, exist_ok=True)
  atomic.write_json(workdir / "config.json", config.to_dict())


def main(argv):
  global _job_line
  if len(argv) > 1:
    fail(f"unexpected arguments {argv[1:]}; flags are --name=value (see --help)")
  config = _CONFIG.value
  if config is None:
    fail("--config is required, e.g. --config=configs/teacher_sweep.py")
  job = config.get("job", "study")
  if job not in JOBS:
    fail(terminal.field_error("config.job", f"must be one of {JOBS}", job, choices=JOBS))
  _job_line = INTERRUPTED_BY_JOB[job]
  multi_process = bool(_MULTIHOST.value or _COORDINATOR.value)
  terminal.console(progress=config.logging.progress, verbosity=config.logging.verbosity)
  summary, workdir = None, _WORKDIR.value
  if job != "lookahead":                                   # a lookahead's task is its study's (config.json)
    note = overrides.switch_task(config, overrides.file_task(flags.FLAGS["config"]) or config.task.name,
                       config_flags.get_override_values(flags.FLAGS["config"]))
    if note:
      terminal.note(note)              # printed once the run starts (its plan), not before an error line
  try:
    for note in overrides.with_configurations(config, _CONFIGURATION.value):
      terminal.note(note)
    # --- Distributed runtime and devices ----------------------------------------------------------------
    if multi_process:
      import jax  # pylint: disable=g-import-not-at-top
      jax.distributed.initialize(coordinator_address=_COORDINATOR.value, num_processes=_NUM_PROCESSES.value,
                                 process_id=_PROCESS_ID.value)
    # pylint: disable=g-import-not-at-top  (after distributed init)
    from opd_jax.study import pipeline
    from opd_jax.study import preflight
    from opd_jax.study import runs
    # pylint: enable=g-import-not-at-top
    workdir = workdir or os.path.join("runs", preflight.check_name(config.name))
    if _REPAIR.value and (job != "study" or _DRY_RUN.value):
      raise ValueError(f"--repair rewrites a study's damaged records; it does not apply to a {job} "
                       f"{'dry run' if _DRY_RUN.value else 'run'}: drop it")
    if job == "train":                                     # configs/opd_train.py: OPD training (opd_jax/training)
      from opd_jax.training import checks as train_checks  # pylint: disable=g-import-not-at-top
      from opd_jax.training import loop  # pylint: disable=g-import-not-at-top
      loop.validate(config)                                # config.train, the optimizer's too (validate_train)
      if _DRY_RUN.value:
        from opd_jax.training import costs as train_costs  # pylint: disable=g-import-not-at-top
        text = train_costs.describe(config, _COST_MODEL.value or "cpu")
        terminal.flush_notes()
        print(text)
        return
      train_checks.check_train(config)                     # task, model specs, LoRA targets: before any load
      runs.check_workdir_for(workdir, config.to_dict(), "train")
      with failed_start_undone(workdir, enabled=not multi_process):
        _log_to(workdir, multi_process)
        record_train_config(workdir, config)
        print(loop.run(config, workdir))
      return
    if job == "lookahead":                                 # configs/lookahead.py: one-step lookahead on a study
      if _DRY_RUN.value or _COST_MODEL.value:
        raise ValueError("--dry_run and --cost_model plan studies; a lookahead config (job 'lookahead') has no dry run")
      from opd_jax.validation import lookahead  # pylint: disable=g-import-not-at-top
      runs.check_workdir_for(workdir, config.to_dict(), "lookahead")
      with failed_start_undone(workdir, enabled=not multi_process):
        _log_to(workdir, multi_process)
        print(lookahead.run(config, workdir))
      return
    # --- Plan, then run ----------------------------------------------------------------------------------
    if _COST_MODEL.value:
      if not _DRY_RUN.value:
        raise ValueError(f"--cost_model={_COST_MODEL.value} needs --dry_run (it estimates, it does not run)")
      from opd_jax.cost import estimate  # pylint: disable=g-import-not-at-top
      estimate.accelerator(_COST_MODEL.value)                 # a bad name fails before anything prints
      if _VARIANCE_SPLIT.value:
        from opd_jax.cost import design  # pylint: disable=g-import-not-at-top
        design.read_split(_VARIANCE_SPLIT.value)              # an unreadable split: one line, before the plan
    elif _VARIANCE_SPLIT.value:
      raise ValueError("--variance_split needs --dry_run --cost_model=<accelerator> (it prices a design)")
    if _DRY_RUN.value:                                    # every check of the run before its load, writing nothing
      from opd_jax.study import checklist  # pylint: disable=g-import-not-at-top
      elsewhere = bool(_COST_MODEL.value) and estimate.accelerator(_COST_MODEL.value)[0] is not None
      task, _ = pipeline.check(config, workdir, local_mesh=not elsewhere)
      text = checklist.describe(config, task)
      terminal.flush_notes()
      print(text)
      if _COST_MODEL.value:
        print(estimate.describe(config, _COST_MODEL.value, _VARIANCE_SPLIT.value or None))
      return
    preflight.validate(config)
    runs.check_workdir_for(workdir, config.to_dict(), "study")
    with failed_start_undone(workdir, enabled=not multi_process):
      _log_to(workdir, multi_process)
      summary = pipeline.run(config, workdir, repair=_REPAIR.value)
  except KeyboardInterrupt:
    terminal.last_line(interrupted_line())
    sys.stdout.flush()
    if _AS_COMMAND:   # records and progress are written atomically: skip a teardown that can crash mid-XLA call
      os._exit(130)
    sys.exit(130)
  except USER_ERRORS as e:
    if logging.get_verbosity() >= logging.DEBUG:          # --verbosity=1: the traceback too
      raise
    fail(f"{e}")
  terminal.flush_notes()                                   # a run that printed neither a plan nor a stage
  if summary:
    from opd_jax import report  # pylint: disable=g-import-not-at-top
    from opd_jax.study import planning  # pylint: disable=g-import-not-at-top
    print(report.results_text(workdir, larger=planning.larger_advice(config.get("name"))))


_AS_COMMAND = False     # set by `run` (python -m opd_jax.main), not when main() is called in-process


GRACE_S = 2.0     # how long the main thread has to reach a `terminal.check_interrupt` point before the exit is forced


def _on_interrupt(signum, frame):  # pylint: disable=unused-argument
  """SIGINT's Python handler: records the press (terminal.INTERRUPT), raises nothing (terminal's comment)."""
  terminal.INTERRUPT.set()


def exit_on_interrupt() -> None:
  """Ctrl-C exits within GRACE_S seconds (code 130, the one `interrupted:` line), whatever the main thread does.

  A SIGINT is recorded (`_on_interrupt` sets terminal.INTERRUPT) and the main thread raises KeyboardInterrupt at
  the next point the program controls (`terminal.check_interrupt`), handled in `main`. An XLA compile or a long
  jitted call holds that thread in C++ (e.g. the first base rollouts of a checkpoint), so a point may not come
  for a minute: CPython's C-level handler also writes the signal number to `signal.set_wakeup_fd`'s pipe at once,
  from any thread, and a daemon thread reading that pipe forces the exit (`_force_exit`) when the main thread has
  not acted on the press within GRACE_S (terminal.ACTED), or at a second press. Records and progress are written
  atomically and the lock is released, so what finished is kept and the same command resumes. Call from the main
  thread.
  """
  r, w = os.pipe()
  os.set_blocking(w, False)
  signal.set_wakeup_fd(w, warn_on_full_buffer=False)
  signal.signal(signal.SIGINT, _on_interrupt)
  import opd_jax  # pylint: disable=g-import-not-at-top
  if opd_jax.EARLY_INTERRUPT:             # pressed while the modules loaded: nothing has started
    _force_exit("interrupted before anything started: nothing was written; rerun the command to start")

  def watch():
    presses = 0
    while data := os.read(r, 64):
      presses += data.count(bytes([signal.SIGINT]))
      if presses >= 2 or (presses == 1 and not terminal.ACTED.wait(GRACE_S)):
        _force_exit()
  threading.Thread(target=watch, daemon=True, name="interrupt").start()


def _force_exit(line: str | None = None) -> None:
  """The `interrupted:` line (`line`, or the job's), this process's workdir locks released (`claim.release_locks`),
  exit 130 at once."""
  terminal.last_line(line or interrupted_line())
  claim.release_locks()
  os._exit(130)


def run():
  global _AS_COMMAND
  _AS_COMMAND = True
  exit_on_interrupt()
  app.run(main, flags_parser=parse_flags)


if __name__ == "__main__":
  run()
