"""A workdir's claim: the config hash that ties a workdir (and every record part) to the config that wrote it, the
fields in which two configs differ, and the lock one live run holds on it (`workdir_lock`). Fields added after
studies had run hash as before at their old value (`ADDED_FIELDS`), so an older study resumes. Imports nothing of
opd_jax (records.py reads it; every entry point that writes a workdir takes its lock: the study, the trainer, the
lookahead, the report's rebuild, the validation drivers)."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pathlib
import socket
import time

from absl import logging

# Config fields that may change between a run and its resume (they do not change any record).
VOLATILE_FIELDS = ("logging",)

MISSING = object()   # a field one config dict has and the other lacks (`config_difference`)


# Config fields added after studies had run, with the value that does what a config without them did: at that
# value the field is left out of the hash and the comparison, so a run started before it resumes.
ADDED_FIELDS = {"report.estimand": "alignment", "budget.futility": 0.0, "train.teacher_weights": "current",
                "task.exclude": "", "train.seed": -1, "train.eval_at": [], "budget.pilot": "",
                "budget.precision_of": [], "budget.node_group": "balanced"}   # JSON values: () reads []


def _without_added(config_dict: dict) -> dict:
  """A copy of config_dict without the ADDED_FIELDS that hold their old behaviour's value."""
  d = json.loads(json.dumps(config_dict, default=str))
  for field, value in ADDED_FIELDS.items():
    *groups, leaf = field.split(".")
    node = d
    for g in groups:
      node = node.get(g) if isinstance(node, dict) else None
    if isinstance(node, dict) and node.get(leaf, MISSING) == value:
      del node[leaf]
  return d


def config_hash(config_dict: dict) -> str:
  """sha256 of the resolved config without VOLATILE_FIELDS and ADDED_FIELDS at their old value (canonical JSON)."""
  d = {k: v for k, v in _without_added(config_dict).items() if k not in VOLATILE_FIELDS}
  return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()


def config_difference(old: dict, new: dict, ignore: tuple[str, ...] = ()) -> list[str]:
  """Dotted paths of the fields that differ between two config dicts, compared as JSON (a tuple equals its list),
  leaves first where both sides are groups; `ignore` drops fields (and the groups' fields under them), and
  ADDED_FIELDS at their old value are left out on both sides."""
  norm = lambda d: json.loads(json.dumps(_without_added(d), sort_keys=True, default=str))
  out = []

  def walk(a, b, prefix):
    if isinstance(a, dict) and isinstance(b, dict):
      for k in sorted(set(a) | set(b)):
        walk(a.get(k, MISSING), b.get(k, MISSING), f"{prefix}.{k}" if prefix else k)
    elif a != b and not any(prefix == f or prefix.startswith(f + ".") for f in ignore):
      out.append(prefix)
  walk(norm(old), norm(new), "")
  return out


def whose(old: dict, new: dict) -> str:
  """" ('<old name>'; this one is '<new name>')" when two config dicts' names differ, else "": what a refused
  workdir's error says first, before the fields that differ."""
  names = old.get("name"), new.get("name")
  return f" ({names[0]!r}; this one is {names[1]!r})" if names[0] != names[1] else ""


def read_json(path: pathlib.Path) -> dict | None:
  """A workdir bookkeeping file's JSON (a lock, a process's progress), or None while it is absent or (on a
  filesystem without atomic rename) half written."""
  try:
    return json.loads(path.read_text())
  except (FileNotFoundError, json.JSONDecodeError):
    return None


def lock_path(workdir, process_index: int) -> pathlib.Path:
  return pathlib.Path(workdir) / f"lock.{process_index}.json"


def _alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:                      # another user's live process
    return True
  return True


class WorkdirInUse(ValueError):
  """`workdir_lock`'s refusal: another live run holds the workdir (what it wrote there is its own: leave it)."""


@contextlib.contextmanager
def workdir_lock(workdir, process_index: int):
  """Hold `<workdir>/lock.<process_index>.json` (pid and hostname) while the block runs: one run per process
  index on a workdir. Created with O_CREAT | O_EXCL, which NFS and gcsfuse honour (flock is unreliable there);
  processes of one multi-process run hold different indices, so they share the workdir by design.

  A lock whose pid is gone on this host is stale (a killed run): it is taken over with a warning. A lock held by
  another host cannot be checked: it is refused like a live one.

  Raises:
    WorkdirInUse (a ValueError): the lock is held by a live run; the message names its pid, host and the lock file.
  """
  path, host = lock_path(workdir, process_index), socket.gethostname()
  mine = json.dumps({"pid": os.getpid(), "host": host, "started": time.time()})
  for _ in range(3):
    try:
      fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
      holder = read_json(path) or {}
      pid, other = holder.get("pid"), holder.get("host")
      if other == host and isinstance(pid, int) and not _alive(pid):
        logging.warning("taking over the stale lock %s of pid %d on %s (that run is gone)", path, pid, host)
        path.unlink(missing_ok=True)
        continue
      raise WorkdirInUse(f"--workdir={path.parent} is in use by another run with process index {process_index} "
                         f"(pid {pid} on host {other}, lock {path}); wait for it to finish, or delete the lock "
                         "file if that run is gone") from None
    with os.fdopen(fd, "w") as f:
      f.write(mine)
    break
  else:
    raise WorkdirInUse(f"could not take the lock {path}: it keeps reappearing; another run is starting on this "
                       "--workdir")
  _HELD.add(path)
  try:
    yield path
  finally:
    _HELD.discard(path)
    if (read_json(path) or {}).get("pid") == os.getpid():
      path.unlink(missing_ok=True)


_HELD: set[pathlib.Path] = set()          # the locks `workdir_lock` holds in this process


def release_locks() -> None:
  """Remove the locks this process holds (`workdir_lock`), for an exit that skips their `finally` (main's
  `os._exit` on Ctrl-C); safe from any thread."""
  for path in list(_HELD):
    if (read_json(path) or {}).get("pid") == os.getpid():
      path.unlink(missing_ok=True)
