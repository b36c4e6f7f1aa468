r"""Run a study: `python -m opd_jax.main --config=configs/teacher_sweep.py [--workdir=runs/x] [--dry_run]`
(`--dry_run --cost_model=h200`: FLOPs, bytes and roofline times per stage on an accelerator, opd_jax/costs.py).

Override any config field on the command line, e.g. `--config.budget.continuations_per_candidate=64` or
`--config.student.name=/data/Qwen3-1.7B`; add configurations with `--configuration=mine=self:answer:reverse_kl`
(repeatable). The config's top-level groups (every field is documented in configs/base.py):
  name, seed           study name (default workdir runs/<name>) and the seed of every random draw
  student              the model studied (preset, HF folder, .gguf path or random:<seed>) and its dtype
  random_model         architecture of random:<seed> models (smoke runs, tests)
  task                 question source, pool size, prompt template, grading of truncated responses
  chat                 system prompt and chat-template flags
  sampling             the student's policy (temperature, top_p, top_k) and max_new_tokens
  configurations       name -> "teacher:context:divergence[@x]" (opd_jax/contexts.py)
  contexts             context templates
  budget               questions, rollouts, nodes, candidates, continuations R, batch sizes
  selection            "informative" | "all"
  scoring              predictor settings and the teacher temperature
  mesh                 device mesh of one process
  report               the verdict's target group, per-token pages and the predictor that colours them
  logging              verbosity and progress bars (may change on resume)
Multi-host (TPU pods, SLURM): launch one process per host; jax.distributed is initialised from the environment
and questions are split between processes. Errors print one line `error: ...` and exit 2; Ctrl-C stops with one
line and the run resumes from the same command.
"""
from __future__ import annotations

import os
import re
import signal
import sys
import threading

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

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
    "without weights (opd_jax/costs.py; tens of seconds).")
_MULTIHOST = flags.DEFINE_bool("multihost", False, "Call jax.distributed.initialize() (pods, SLURM).")
_COORDINATOR = flags.DEFINE_string("coordinator", None, "host:port of process 0 (local multi-process runs; "
                                   "pods and SLURM detect it).")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Number of processes (with --coordinator).")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index (with --coordinator).")

# Errors a user can fix (bad config, data, checkpoints, workdir): one line, exit 2. Anything else is a bug and
# keeps its traceback.
USER_ERRORS = (ValueError, OSError, RuntimeError, TimeoutError)
INTERRUPTED = "interrupted: finished questions are kept; rerun the same command to resume"


def fail(message: str, code: int = 2):
  """Print `error: <first line of message>` once on stderr and exit with `code`."""
  lines = [l.strip() for l in str(message).strip().splitlines() if l.strip()] or ["unknown error"]
  print(f"error: {lines[0]}", file=sys.stderr)
  sys.exit(code)


def _flag_error_line(message: str) -> str:
  """The informative line of an absl / ml_collections flag error (the config file's own exception when the
  message embeds its traceback, else the first line)."""
  lines = [l.strip() for l in message.splitlines() if l.strip()]
  raised = [l for l in lines if re.match(r"^\w+(Error|Exception): ", l)]
  if raised:
    return raised[-1].split(": ", 1)[1]
  no_file = [l for l in lines if "No such file or directory" in l]
  return no_file[0] if no_file else lines[0] if lines else message


def _override_error(error: Exception, argv) -> str:
  """One line for an error raised while applying --config.<field>=<value> overrides."""
  key = str(error).strip("\"' ")
  overrides = [a for a in argv if a.startswith("--config.")]
  named = [a for a in overrides if re.search(rf"[.]{re.escape(key)}([.=]|$)", a.split("=")[0] + "=")]
  if isinstance(error, (AttributeError, KeyError)):
    flag = named[0] if named else f"--config...{key}"
    return (f"unknown config field {flag.split('=')[0][2:]!r} ({flag}); ml_collections cannot add fields from "
            "the command line: see configs/base.py for the fields, or use --configuration=name=spec to add a "
            "configuration")
  return f"{_flag_error_line(str(error))} (in {' '.join(named or overrides) or '--config'})"


def parse_flags(argv):
  """absl's parse with every error as one `error:` line (exit 2) instead of usage text or a traceback; loads the
  config (and applies the overrides) so that its errors come here too."""
  try:
    rest = flags.FLAGS(argv)
    if _CONFIG.value is not None:      # loads the file and applies --config.* overrides (a failed load raises here)
      _CONFIG.value.get("name")
  except flags.Error as e:
    unknown = re.match(r"Unknown command line flag '(config\.[^']+)'", str(e))
    fail(_override_error(AttributeError(unknown.group(1).rsplit(".", 1)[1]), argv) if unknown
         else _flag_error_line(str(e)))
  except (AttributeError, KeyError, TypeError, ValueError) as e:
    fail(_override_error(e, argv))
  except OSError as e:
    fail(f"--config: {_flag_error_line(str(e))}")
  return rest


def with_configurations(config, items) -> None:
  """Merge `--configuration=name=spec` items into config.configurations (in place).

  Raises:
    ValueError: an item without `name=` or without a spec.
  """
  for item in items:
    name, sep, spec = item.partition("=")
    if not (sep and name.strip() and spec.strip()):
      raise ValueError(f"--configuration={item!r}: expected name=teacher:context:divergence, e.g. "
                       "--configuration=mine=self:answer:reverse_kl")
    with config.unlocked(), config.configurations.unlocked():
      config.configurations[name.strip()] = spec.strip()


def main(argv):
  if len(argv) > 1:
    fail(f"unexpected arguments {argv[1:]}; flags are --name=value (see --help)")
  config = _CONFIG.value
  if config is None:
    fail("--config is required, e.g. --config=configs/teacher_sweep.py")
  workdir = _WORKDIR.value or os.path.join("runs", config.name)
  try:
    with_configurations(config, _CONFIGURATION.value)
    # --- Distributed runtime and devices ----------------------------------------------------------------
    if _MULTIHOST.value or _COORDINATOR.value:
      import jax  # pylint: disable=g-import-not-at-top
      jax.distributed.initialize(coordinator_address=_COORDINATOR.value, num_processes=_NUM_PROCESSES.value,
                                 process_id=_PROCESS_ID.value)
    from opd_jax import study  # pylint: disable=g-import-not-at-top  (after distributed init)
    if config.get("job", "study") == "train":             # configs/opd_train.py: OPD training (opd_jax/training)
      from opd_jax.training import loop  # pylint: disable=g-import-not-at-top
      if _DRY_RUN.value:
        loop.validate(config)
        from opd_jax.training import costs as train_costs  # pylint: disable=g-import-not-at-top
        print(train_costs.describe(config, _COST_MODEL.value or "cpu"))
        return
      print(loop.run(config, workdir))
      return
    if config.get("job", "study") == "lookahead":         # configs/lookahead.py: one-step lookahead on a study
      if _DRY_RUN.value or _COST_MODEL.value:
        raise ValueError("--dry_run and --cost_model plan studies; a lookahead config (job 'lookahead') has no dry run")
      from opd_jax.training import lookahead  # pylint: disable=g-import-not-at-top
      print(lookahead.run(config, workdir))
      return
    # --- Plan, then run ----------------------------------------------------------------------------------
    if _COST_MODEL.value:
      if not _DRY_RUN.value:
        raise ValueError(f"--cost_model={_COST_MODEL.value} needs --dry_run (it estimates, it does not run)")
      from opd_jax import costs  # pylint: disable=g-import-not-at-top
      costs.accelerator(_COST_MODEL.value)                 # a bad name fails before anything prints
    if _DRY_RUN.value:
      from opd_jax import preflight  # pylint: disable=g-import-not-at-top
      print(preflight.plan(config).describe())
      if _COST_MODEL.value:
        print(costs.describe(config, _COST_MODEL.value))
      return
    summary = study.run(config, workdir)
  except KeyboardInterrupt:
    print(INTERRUPTED, file=sys.stderr, flush=True)
    sys.stdout.flush()
    if _AS_COMMAND:   # records and progress are written atomically: skip a teardown that can crash mid-XLA call
      os._exit(130)
    sys.exit(130)
  except USER_ERRORS as e:
    if logging.get_verbosity() >= logging.DEBUG:          # --verbosity=1: the traceback too
      raise
    fail(f"{e}")
  if summary:
    from opd_jax import report  # pylint: disable=g-import-not-at-top
    print(report.results_text(workdir))


_AS_COMMAND = False     # set by `run` (python -m opd_jax.main), not when main() is called in-process


def exit_on_second_interrupt() -> None:
  """A second Ctrl-C exits at once (code 130, the one `interrupted:` line), whatever the main thread is doing.

  The first SIGINT raises KeyboardInterrupt in the main thread, handled in `main`, but only once the thread is
  back in Python bytecode: a long XLA call or compile holds it, and a library may catch it. The C-level handler
  also writes the signal number to `signal.set_wakeup_fd`'s pipe at once, even while the main thread runs C++;
  a daemon thread reading that pipe counts the presses. Call from the main thread.
  """
  r, w = os.pipe()
  os.set_blocking(w, False)
  signal.set_wakeup_fd(w, warn_on_full_buffer=False)

  def watch():
    presses = 0
    while data := os.read(r, 64):
      presses += data.count(bytes([signal.SIGINT]))
      if presses >= 2:
        print(INTERRUPTED, file=sys.stderr, flush=True)
        os._exit(130)
  threading.Thread(target=watch, daemon=True, name="second-interrupt").start()


def run():
  global _AS_COMMAND
  _AS_COMMAND = True
  exit_on_second_interrupt()
  app.run(main, flags_parser=parse_flags)


if __name__ == "__main__":
  run()
