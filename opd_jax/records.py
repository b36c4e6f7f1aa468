"""Records: directory datasets of parquet parts, written atomically; resume bookkeeping; config hash.

Layout (design.md, "Records"):
  <workdir>/config.json            the resolved config
  <workdir>/manifest.json          schema version, config hash, versions, seeds, checksums, mesh, timings
  <workdir>/progress.json          questions processed so far (the commit point of resume)
  <workdir>/records/{rollouts,tokens,nodes}/part-<question_id>.parquet
Read a table whole with `pandas.read_parquet("<workdir>/records/nodes")`.

A question's parts are written first (each atomically: temporary file, then rename), then progress.json
(also atomically). A run killed anywhere and rerun redoes at most the question in flight, whose parts are
deterministic, so the records end equal to an uninterrupted run's.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import pathlib
import tempfile
from typing import Any

import pandas as pd

SCHEMA_VERSION = 1
TABLES = ("rollouts", "tokens", "nodes")
# Config fields that may change between a run and its resume (they do not change any record).
VOLATILE_FIELDS = ("logging",)


def atomic_write_bytes(path: str | os.PathLike, data: bytes | str) -> None:
  """Write `data` to `path` through a temporary file in the same directory and `os.replace` (readers never see
  half a file); the file gets the usual umask permissions (mkstemp alone would leave 0600)."""
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
  try:
    with os.fdopen(fd, "wb") as f:
      f.write(data.encode() if isinstance(data, str) else data)
      f.flush()
      os.fsync(f.fileno())
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    raise


def atomic_write_json(path, obj: Any) -> None:
  atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n").encode())


def write_part(workdir, table: str, question_id: str, frame: pd.DataFrame) -> pathlib.Path:
  """Write one question's rows of `table` as records/<table>/part-<question_id>.parquet, atomically."""
  if table not in TABLES:
    raise ValueError(f"unknown table {table!r}; use one of {TABLES}")
  path = pathlib.Path(workdir) / "records" / table / f"part-{question_id}.parquet"
  buffer = io.BytesIO()
  frame.reset_index(drop=True).to_parquet(buffer, index=False)
  atomic_write_bytes(path, buffer.getvalue())
  return path


def read_table(workdir, table: str) -> pd.DataFrame:
  """All parts of one table (empty DataFrame when none)."""
  d = pathlib.Path(workdir) / "records" / table
  parts = sorted(d.glob("part-*.parquet")) if d.is_dir() else []
  if not parts:
    return pd.DataFrame()
  return pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True)


def config_hash(config_dict: dict) -> str:
  """sha256 of the resolved config without VOLATILE_FIELDS (canonical JSON)."""
  d = {k: v for k, v in config_dict.items() if k not in VOLATILE_FIELDS}
  return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()


def check_workdir(workdir, config_dict: dict) -> dict:
  """Claim `workdir` for this config, or refuse one written by another config (leaving it untouched).

  Returns the progress dict ({"processed": [...], "selected": [...]}) to resume from.
  Raises:
    ValueError: the workdir's config.json has a different hash (any field but logging).
  """
  workdir = pathlib.Path(workdir)
  h = config_hash(config_dict)
  cfg_path = workdir / "config.json"
  if cfg_path.exists():
    old = json.loads(cfg_path.read_text())
    if config_hash(old) != h:
      changed = sorted(k for k in set(old) | set(config_dict)
                       if k not in VOLATILE_FIELDS and old.get(k) != config_dict.get(k))
      raise ValueError(f"--workdir={workdir} holds a run of a different config (fields differ: "
                       f"{', '.join(changed) or 'nested values'}); pass a new --workdir or rerun with the "
                       "same config to resume")
  else:
    atomic_write_json(cfg_path, config_dict)
  prog = workdir / "progress.json"
  return json.loads(prog.read_text()) if prog.exists() else {"processed": [], "selected": []}


def write_progress(workdir, progress: dict) -> None:
  atomic_write_json(pathlib.Path(workdir) / "progress.json", progress)
