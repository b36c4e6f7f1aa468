"""Files written whole: each through a temporary file beside it and one rename (`os.replace`), so that readers
never see half a file and a failure (a full disk) leaves the previous file as it was; several files as one set
(`write_files`: a report's files are never part new, part old); strict JSON (NaN and inf as null). Every write's
failure is one `WriteError` naming the file, the stage (`writing`) and the fix."""
from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import pathlib
import tempfile
from typing import Any, Mapping


class WriteError(OSError):
  """A file that could not be written (a full disk, a quota, permissions): names the file and, once a caller
  sets it (`writing`), the stage that wrote it; errno and strerror are the cause's."""

  def __init__(self, path, cause: OSError, stage: str = ""):
    super().__init__(cause.errno, cause.strerror or str(cause), str(path))
    self.path, self.stage = str(path), stage

  def __str__(self) -> str:
    fix = {errno.ENOSPC: "free space on that disk", errno.EDQUOT: "free space under your quota",
           errno.EACCES: "make the folder writable", errno.EROFS: "write to a writable disk (--workdir)"}.get(
               self.errno, "check the disk")
    code = errno.errorcode.get(self.errno, self.errno) if self.errno is not None else "no errno"
    return (f"{self.stage + ': ' if self.stage else ''}cannot write {self.path}: {self.strerror} ({code}); {fix} "
            "and rerun the same command (files already there are whole: each is replaced at once or not at all)")


@contextlib.contextmanager
def writing(stage: str):
  """Name `stage` (e.g. "report", "records") in the `WriteError` of any write inside the block that has none."""
  try:
    yield
  except WriteError as e:
    e.stage = e.stage or stage
    raise


def _temporary(path: pathlib.Path, data: bytes | str) -> str:
  """`data` in a new temporary file beside `path` (fsynced, usual umask permissions: mkstemp alone would leave
  0600); its name. Raises WriteError naming `path` (nothing left behind)."""
  tmp = None
  try:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
      f.write(data.encode() if isinstance(data, str) else data)
      f.flush()
      os.fsync(f.fileno())
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    return tmp
  except BaseException as e:
    if tmp is not None and os.path.exists(tmp):
      os.unlink(tmp)
    if isinstance(e, OSError) and not isinstance(e, WriteError):
      raise WriteError(path, e) from e
    raise


def write_files(files: Mapping[str | os.PathLike, bytes | str | None]) -> None:
  """Write several files as one: each to a temporary file beside it (`_temporary`), and only when all are
  written, each renamed over its path (`os.replace`); then the paths whose data is None are removed. A failure
  while writing (a full disk) leaves every file as it was and no temporary file: files that belong together (a
  report: summary.md, report.html, the csvs, html/) are never part new, part old, and readers never see half a
  file.

  Raises:
    WriteError: naming the file that could not be written (`writing` adds the stage).
  """
  done = []
  try:
    for path, data in files.items():
      if data is not None:
        done.append((_temporary(pathlib.Path(path), data), path))
  except BaseException:
    for tmp, _ in done:
      pathlib.Path(tmp).unlink(missing_ok=True)
    raise
  for tmp, path in done:
    os.replace(tmp, path)
  for path, data in files.items():
    if data is None:
      pathlib.Path(path).unlink(missing_ok=True)


def write_bytes(path: str | os.PathLike, data: bytes | str) -> None:
  """Write `data` to `path` through a temporary file in the same directory and `os.replace` (readers never see
  half a file); the file gets the usual umask permissions (mkstemp alone would leave 0600).

  Raises:
    WriteError: naming `path` (a full disk, ...); `path` is left as it was.
  """
  write_files({path: data})


def strict_json(obj: Any) -> Any:
  """`obj` with every non-finite float (NaN, +-inf; numpy's too) as None: strict JSON readers reject bare NaN."""
  if isinstance(obj, dict):
    return {k: strict_json(v) for k, v in obj.items()}
  if isinstance(obj, (list, tuple)):
    return [strict_json(v) for v in obj]
  if isinstance(obj, float) and not math.isfinite(obj):
    return None
  if hasattr(obj, "dtype") and getattr(obj, "ndim", None) == 0 and obj.dtype.kind == "f":   # numpy scalars
    return float(obj) if math.isfinite(float(obj)) else None
  return obj


def json_text(obj: Any) -> str:
  """`obj` as the strict JSON text `write_json` writes (`strict_json`: NaN and inf become null)."""
  return json.dumps(strict_json(obj), indent=2, sort_keys=True, default=str, allow_nan=False) + "\n"


def write_json(path, obj: Any) -> None:
  """`obj` as strict JSON (`json_text`), written atomically."""
  write_bytes(path, json_text(obj).encode())
