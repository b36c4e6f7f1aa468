"""One study run across processes, on a shared workdir: who does which question, progress, and "all done".

Across processes (jax.distributed, one process per host: TPU pods, multi-GPU nodes), nothing is shared but
the workdir, which must be on a filesystem every host sees (NFS, gcsfuse): `split_questions` deals the
question pool round-robin by pool index, each process runs its questions on its own local mesh (models/sharding.py)
and writes its own record parts and `progress.<i>-of-<n>.json` (`progress.json` with one process: the commit
point of resume, written after the question's parts); every process marks itself done, `wait_for_processes`
waits until all are, and then process 0 alone builds the summary from all parts. No collective crosses
processes. `claim.workdir_lock` keeps two runs with the same process index off one workdir; `check_workdir_for`
refuses, before anything loads, a workdir that holds another kind of job, another config or damaged files.
"""
from __future__ import annotations

import functools
import json
import os
import pathlib
import re
import time
from typing import Any, Sequence

import jax
from absl import logging
from jax.sharding import Mesh

from opd_jax import atomic
from opd_jax import claim
from opd_jax import records

# ----------------------------------------------------------------------------------------------------------
# Processes: question split and quotas.

def process_index() -> int:
  """This process's index in [0, process_count()) (`jax.process_index`; 0 without jax.distributed)."""
  return jax.process_index()


def process_count() -> int:
  """Number of processes of the run (`jax.process_count`; 1 without jax.distributed)."""
  return jax.process_count()


def _check_process(process_index: int, process_count: int) -> None:
  if not isinstance(process_count, int) or process_count < 1:
    raise ValueError(f"process_count must be an int >= 1, got {process_count!r}")
  if not isinstance(process_index, int) or not 0 <= process_index < process_count:
    raise ValueError(f"process_index must be an int in [0, {process_count}), got {process_index!r}")


def split_questions(ids: Sequence[Any], process_index: int, process_count: int) -> list:
  """This process's share of the question pool: ids[k] for k = process_index (mod process_count).

  Round-robin by pool index, so every process gets early (informative-selection) questions and the shares
  are disjoint, cover the pool, and depend on nothing but (len(ids), process_index, process_count).
  """
  _check_process(process_index, process_count)
  return list(ids)[process_index::process_count]


def question_quota(total: int, process_index: int, process_count: int) -> int:
  """Questions this process selects out of `total` (config.budget.questions): as even as possible, sum = total.

  Each process stops after its quota of selected questions from its own share, so which questions are
  selected depends on process_count (each selected question's records do not).
  """
  _check_process(process_index, process_count)
  return total // process_count + (process_index < total % process_count)


# ----------------------------------------------------------------------------------------------------------
# Progress files, and waiting for every process.

_PROGRESS = re.compile(r"^progress\.(\d+)-of-(\d+)\.json$")


def progress_path(workdir, process_index: int, process_count: int) -> pathlib.Path:
  """`<workdir>/progress.json` for one process, else `<workdir>/progress.<i>-of-<n>.json`."""
  _check_process(process_index, process_count)
  workdir = pathlib.Path(workdir)
  return workdir / ("progress.json" if process_count == 1 else f"progress.{process_index}-of-{process_count}.json")


def _check_count(workdir: pathlib.Path, process_count: int) -> None:
  """Refuse to resume a workdir started with another number of processes (the question split would differ)."""
  counts = {int(m.group(2)) for p in workdir.glob("progress.*-of-*.json") if (m := _PROGRESS.match(p.name))}
  if (workdir / "progress.json").exists():
    counts.add(1)
  other = sorted(counts - {process_count})
  if other:
    raise ValueError(f"--workdir={workdir} was started with {other[0]} process(es), this run has {process_count}; "
                     f"rerun with {other[0]} process(es) to resume, or pass a new --workdir")


def read_progress(workdir, process_index: int, process_count: int) -> dict:
  """This process's progress to resume from: {"processed": [...], "selected": [...], "done": bool, ...}.

  Raises:
    ValueError: the workdir holds progress files of another process count.
  """
  path = progress_path(workdir, process_index, process_count)
  _check_count(path.parent, process_count)
  progress = {"processed": [], "selected": [], "done": False}
  if path.exists():
    progress.update(json.loads(path.read_text()))
  return progress


def write_progress(workdir, progress: dict, process_index: int, process_count: int, *, done: bool = False,
                   error: str | None = None) -> None:
  """Write this process's progress atomically (`atomic.write_json`), with its done / error status.

  Args:
    progress: {"processed": [...], "selected": [...]} plus anything else JSON-serialisable (e.g. timings).
    done: this process has finished all its questions (`wait_for_processes` waits for every process's).
    error: a one-line failure; the processes waiting for this one then raise instead of waiting forever.
  """
  status = {"done": bool(done), "error": error, "process_index": process_index, "process_count": process_count}
  with atomic.writing("progress"):
    atomic.write_json(progress_path(workdir, process_index, process_count), {**progress, **status})


def wait_for_processes(workdir, process_count: int, *, timeout_s: float | None = None,
                       poll_s: float = 1.0) -> list[dict]:
  """Block until every process has written its progress with done=True; returns them in process order.

  File-based (the workdir is shared), so it needs no collective and works on any platform; call it in every
  process after `write_progress(..., done=True)` so no process exits (and enters jax.distributed's shutdown
  barrier) long before the others, then let process 0 build the summary.

  With one process it returns at once ([its progress], or [{}] when none was written).

  Raises:
    RuntimeError: a process reported an error.
    TimeoutError: not all done after timeout_s seconds (None: wait forever); names the processes missing.
  """
  paths = [progress_path(workdir, i, process_count) for i in range(process_count)]
  if process_count == 1:                                   # nobody to wait for
    return [json.loads(paths[0].read_text()) if paths[0].exists() else {}]
  start, last_log = time.monotonic(), time.monotonic()
  while True:
    states = [claim.read_json(p) for p in paths]
    failed = [(i, s["error"]) for i, s in enumerate(states) if s and s.get("error")]
    if failed:
      raise RuntimeError(f"process {failed[0][0]} of {process_count} failed: {failed[0][1]}; fix it and rerun all "
                         "processes with the same --workdir to resume")
    missing = [i for i, s in enumerate(states) if not (s and s.get("done"))]
    if not missing:
      return states
    now = time.monotonic()
    if timeout_s is not None and now - start > timeout_s:
      raise TimeoutError(f"processes {missing} of {process_count} did not finish within {timeout_s:.0f} s (no "
                         f"done status in {paths[missing[0]].name}); check their logs, then rerun all processes "
                         "with the same --workdir to resume")
    if now - last_log > 60:
      logging.info("waiting for processes %s of %d to finish", missing, process_count)
      last_log = now
    time.sleep(poll_s)


# ----------------------------------------------------------------------------------------------------------
# The workdir: a writable directory, complete or not, held by one run per process index.

def check_workdir_path(workdir: pathlib.Path) -> bool:
  """Refuse a workdir that is a file or cannot be created (before any work); returns whether it is writable.

  Raises:
    ValueError: naming the path and the fix.
  """
  if workdir.exists() and not workdir.is_dir():
    raise ValueError(f"--workdir={workdir} is a file, not a directory; pass a directory (it is created if missing)")
  try:
    workdir.mkdir(parents=True, exist_ok=True)
  except OSError as e:
    raise ValueError(f"--workdir={workdir} cannot be created ({e.strerror}); pass a writable directory") from None
  records.check_json_files(workdir)
  _check_study_config(workdir)
  return os.access(workdir, os.W_OK | os.X_OK)


# What each kind of job writes in its workdir: one kind per workdir (config.json's "job" says which; a study's
# config has none). A study: config.json, records/, progress*.json, manifest.json and the report beside them.
JOB_FOLDERS = {"train": "train", "lookahead": "lookahead"}
_STUDY_FILES = ("records", "progress.json", "manifest.json")
# Fields that may change when a run is resumed, per job (besides claim.VOLATILE_FIELDS): the trainer may be
# extended (training.loop._identity_hash).
RESUMABLE_FIELDS = {"study": (), "train": ("train.steps", "train.export"), "lookahead": ()}


def workdir_jobs(workdir) -> set[str]:
  """The kinds of job whose outputs `workdir` holds ("study", "train", "lookahead"; empty when none)."""
  workdir = pathlib.Path(workdir)
  found = {job for job, folder in JOB_FOLDERS.items() if (workdir / folder).is_dir()}
  if any((workdir / f).exists() for f in _STUDY_FILES) or any(workdir.glob("progress.*-of-*.json")):
    found.add("study")
  if (workdir / "config.json").is_file():
    found.add(records.json_object(workdir / "config.json", "restore it, or pass a new --workdir").get("job", "study"))
  return found


def _check_study_config(workdir: pathlib.Path) -> None:
  """A study's outputs without config.json cannot be matched to a config: refused, not taken for this one's."""
  made = [f for f in _STUDY_FILES if (workdir / f).exists()] + [p.name for p in workdir.glob("progress.*-of-*.json")]
  if made and not (workdir / "config.json").is_file():
    raise ValueError(f"--workdir={workdir} holds a study's {', '.join(made)} but no config.json, so which config "
                     "made them is unknown; restore config.json, or pass a new --workdir")


def check_workdir_for(workdir, config_dict: dict, job: str) -> None:
  """Refuse, before anything loads or is written, a workdir that cannot hold this run: outputs of another kind
  of job (a workdir holds one: `workdir_jobs`), damaged JSON (`records.check_json_files`), a study's outputs without
  config.json, or config.json of another config (naming the fields that differ, with both values; the fields of
  RESUMABLE_FIELDS[job] and claim.VOLATILE_FIELDS may change) unless that study recorded no question
  (`unclaimed`: this run takes it over). A missing or empty workdir passes. Writes nothing.

  Raises:
    ValueError: naming the workdir, what it holds and the fix.
  """
  workdir = pathlib.Path(workdir)
  if workdir.exists() and not workdir.is_dir():
    raise ValueError(f"--workdir={workdir} is a file, not a directory; pass a directory (it is created if missing)")
  if not workdir.is_dir():
    return
  records.check_json_files(workdir)
  other = sorted(workdir_jobs(workdir) - {job})
  if other:
    raise ValueError(f"--workdir={workdir} holds a {other[0]} run and this is a {job} run (config.job="
                     f"{job!r}); a workdir holds one kind of job: pass another --workdir")
  if job == "study":
    _check_study_config(workdir)
  path = workdir / "config.json"
  if path.is_file():
    old = json.loads(path.read_text())
    ignore = tuple(claim.VOLATILE_FIELDS) + RESUMABLE_FIELDS.get(job, ())
    changed = claim.config_difference(old, config_dict, ignore)
    if changed and not (job == "study" and unclaimed(workdir, config_dict)):
      flat = lambda d, f: functools.reduce(
          lambda x, k: x.get(k, claim.MISSING) if isinstance(x, dict) else claim.MISSING, f.split("."), d)
      shown = [f"config.{f}: {_short(flat(old, f))} -> {_short(flat(config_dict, f))}" for f in changed[:4]]
      more = f" and {len(changed) - 4} more" if len(changed) > 4 else ""
      raise ValueError(f"--workdir={workdir} holds a run of a different config{claim.whose(old, config_dict)} "
                       f"(fields differ: {'; '.join(shown)}{more}); pass another --workdir, or rerun with the same "
                       "config to resume")


def unclaimed(workdir, config_dict: dict) -> bool:
  """A study workdir that another config (config.json) claimed without recording any question and without
  finishing (a run that failed, was stopped, or found no question informative, before any record part was
  written; no manifest): nothing of it is lost when this config takes it over (`release_claim`), so the command
  that fixes what that run's error named runs in the same workdir. One process only (another process of a run may
  be writing its claim)."""
  workdir = pathlib.Path(workdir)
  path = workdir / "config.json"
  if (not path.is_file() or (workdir / "manifest.json").exists() or process_count() != 1
      or any(records.part_files(workdir, t) for t in records.TABLES)):
    return False
  return claim.config_hash(records.json_object(path, "restore it, or pass a new --workdir")) != claim.config_hash(
      config_dict)


def release_claim(workdir) -> list[str]:
  """Remove an unclaimed workdir's claim (`unclaimed`): its config.json and progress files (the log and anything
  else stay). Call holding the lock. Returns the names removed."""
  workdir = pathlib.Path(workdir)
  paths = [workdir / "config.json", workdir / "progress.json", *sorted(workdir.glob("progress.*-of-*.json"))]
  removed = [p.name for p in paths if p.is_file()]
  for name in removed:
    (workdir / name).unlink()
  return removed


def can_create(workdir) -> bool:
  """Whether `workdir` exists as a writable folder or could be created, checked without writing anything (the
  dry run's `check_workdir_path`): its nearest existing folder is a writable folder."""
  d = pathlib.Path(workdir).absolute()
  while not d.exists() and d != d.parent:
    d = d.parent
  return d.is_dir() and os.access(d, os.W_OK | os.X_OK)


def _short(value, width: int = 40) -> str:
  if value is claim.MISSING:
    return "(absent)"
  text = repr(value) if isinstance(value, str) else json.dumps(value, default=str)
  return text if len(text) <= width else text[:width - 3] + "..."


def is_complete(workdir: pathlib.Path, process_count: int) -> bool:
  """Every process of the run marked itself done and the manifest was written: nothing left to run."""
  if not (workdir / "manifest.json").is_file():
    return False
  return all(read_progress(workdir, i, process_count)["done"] for i in range(process_count))


def forget_damaged(workdir, process_index: int, process_count: int) -> list[str]:
  """Drop the record parts that do not read (`records.damaged_parts`) with every other part of their questions,
  and forget those questions in this process's progress (no longer processed, still selected, not done) and the
  manifest, so that the run computes them again (study.run_questions): --repair. Call holding the lock.

  Returns:
    the question ids forgotten, sorted.
  """
  workdir = pathlib.Path(workdir)
  ids = sorted({records.question_of(p) for p in records.damaged_parts(workdir)})
  if not ids:
    return []
  for table in records.TABLES:
    for part in records.part_files(workdir, table):
      if records.question_of(part) in ids:
        part.unlink()
  progress = read_progress(workdir, process_index, process_count)
  status = ("done", "error", "process_index", "process_count")
  progress["processed"] = [q for q in progress["processed"] if q not in ids]
  write_progress(workdir, {k: v for k, v in progress.items() if k not in status}, process_index, process_count)
  (workdir / "manifest.json").unlink(missing_ok=True)
  return ids


def describe(mesh: Mesh) -> dict:
  """Where this process ran, for the run manifest ("mesh_shape"): {"data": n, "model": m, "devices": n * m,
  "platform": ..., "process_index": i, "process_count": n}."""
  return {"data": mesh.shape["data"], "model": mesh.shape["model"], "devices": int(mesh.devices.size),
          "platform": mesh.devices.flat[0].platform, "process_index": process_index(), "process_count": process_count()}
