r"""Run a study: `python -m opd_jax.main --config=configs/teacher_sweep.py [--workdir=runs/x] [--dry_run]`.

Override any config field on the command line, e.g. `--config.budget.continuations_per_candidate=64` or
`--config.student.name=/data/Qwen3-1.7B`. Multi-host (TPU pods, SLURM): launch one process per host;
jax.distributed is initialised from the environment and questions are split between processes.
"""
from __future__ import annotations

import os
import sys

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "Study config file (configs/*.py[:variant]).",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory (default: runs/<config.name>).")
_DRY_RUN = flags.DEFINE_bool("dry_run", False, "Print the planned work and an estimated wall time; run nothing.")
_MULTIHOST = flags.DEFINE_bool("multihost", False, "Call jax.distributed.initialize() (pods, SLURM).")
_COORDINATOR = flags.DEFINE_string("coordinator", None, "host:port of process 0 (local multi-process runs; "
                                   "pods and SLURM detect it).")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Number of processes (with --coordinator).")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index (with --coordinator).")


def main(argv):
  del argv
  config = _CONFIG.value
  if config is None:
    raise app.UsageError("--config is required, e.g. --config=configs/teacher_sweep.py")
  workdir = _WORKDIR.value or os.path.join("runs", config.name)

  # --- Distributed runtime and devices ------------------------------------------------------------------
  if _MULTIHOST.value or _COORDINATOR.value:
    import jax  # pylint: disable=g-import-not-at-top
    jax.distributed.initialize(coordinator_address=_COORDINATOR.value, num_processes=_NUM_PROCESSES.value,
                               process_id=_PROCESS_ID.value)

  from opd_jax import study  # pylint: disable=g-import-not-at-top  (after distributed init)

  # --- Plan, then run --------------------------------------------------------------------------------------
  try:
    if _DRY_RUN.value:
      print(study.plan(config).describe())
      return
    summary = study.run(config, workdir)
  except (ValueError, FileNotFoundError) as e:
    logging.error("%s", e)
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  if summary:
    print(summary)


if __name__ == "__main__":
  app.run(main)
