"""The on-disk cache ($OPD_JAX_CACHE, default ~/.cache/opd_jax): file hashes and converted GGUF params.

  files/<preset>.gguf                    assembled presets (presets.py)
  hashes/<sha1 of the path>.json         a file's sha256, trusted while its path, size and mtime are unchanged
  converted/<sha256[:16]>-v<CONVERTER_VERSION>/
    meta.json, tokenizer.json            config, stop ids, special tokens and chat template; the vocabulary
    params-<dtype>/<key>.npy             the converted params, one uncompressed .npy per stacked leaf
                                         (`leaf_file`: layers.wq.npy, embed.npy, ...: decoder.py's stacked keys)
The converted params' cache key is (file sha256, dtype, CONVERTER_VERSION): bump CONVERTER_VERSION whenever the
conversion changes. They are restored memory-mapped (copy-on-write, `reader`): on CPU the arrays alias the page
cache, so a restore costs milliseconds and no copy; with shardings each device reads only its slice. (An orbax
checkpoint was measured first: 15-24 s to restore the 0.5B on the 2-core CPU, zstd or not, against ~0.1 s here.)
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import pathlib
import shutil

import ml_dtypes
import numpy as np

from opd_jax import terminal
from opd_jax.models import decoder
from opd_jax.models.model import resolve_dtype

CONVERTER_VERSION = 2   # 2: meta.json's config carries rope_freq_factors (GGUF rope_freqs.weight, linear)
CACHE_ENV = "OPD_JAX_CACHE"
conversions = 0


def cache_root() -> pathlib.Path:
  """$OPD_JAX_CACHE, default ~/.cache/opd_jax (created when first written).

  Raises:
    ValueError: it, or a folder above it, is a file (mkdir's bare "[Errno 17] File exists" named neither).
  """
  root = pathlib.Path(os.environ.get(CACHE_ENV) or "~/.cache/opd_jax").expanduser()
  for d in (root, *root.parents):
    if d.exists():
      if not d.is_dir():
        what = "it" if d == root else str(d)
        if os.environ.get(CACHE_ENV):
          raise ValueError(f"{CACHE_ENV}={os.environ[CACHE_ENV]}: {what} is a file, not a folder; point {CACHE_ENV} "
                           "at a folder (created if missing), or unset it for ~/.cache/opd_jax")
        raise ValueError(f"the model cache {root}: {what} is a file, not a folder; move that file, or set "
                         f"{CACHE_ENV} to a folder (created if missing)")
      break
  return root


def converted_dir(sha256: str) -> pathlib.Path:
  """Where a GGUF's tokenizer and metadata are cached (dtype independent)."""
  return cache_root() / "converted" / f"{sha256[:16]}-v{CONVERTER_VERSION}"


def params_dir(sha256: str, dtype) -> pathlib.Path:
  """Where a GGUF's converted params are cached: the key is (sha256, dtype, CONVERTER_VERSION)."""
  return converted_dir(sha256) / f"params-{resolve_dtype(dtype)}"


@contextlib.contextmanager
def locked(path: pathlib.Path):
  """An exclusive inter-process lock on `path`.lock (two processes never assemble or convert the same file)."""
  path.parent.mkdir(parents=True, exist_ok=True)
  with open(f"{path}.lock", "w") as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    try:
      yield
    finally:
      fcntl.flock(f, fcntl.LOCK_UN)


def read_json(path: str | os.PathLike):
  """The JSON in `path`. Raises ValueError naming the file, line and column when it is not valid JSON."""
  path = pathlib.Path(path)
  try:
    return json.loads(path.read_text())
  except json.JSONDecodeError as e:
    raise ValueError(f"{path}: invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}; fix or replace the "
                     "file") from None
  except UnicodeDecodeError as e:
    raise ValueError(f"{path}: not a text (UTF-8) JSON file ({e.reason}); fix or replace the file") from None


@contextlib.contextmanager
def removed_on_error(tmp: pathlib.Path):
  """Deletes `tmp` (a file or a directory) when the block raises or is interrupted (SIGINT: KeyboardInterrupt),
  so an interrupted assembly or conversion leaves no temporary files in the cache."""
  try:
    yield tmp
  except BaseException:
    if tmp.is_dir():
      shutil.rmtree(tmp, ignore_errors=True)
    elif tmp.exists():
      tmp.unlink()
    raise


def write_atomic(path: pathlib.Path, text: str):
  tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
  tmp.write_text(text)
  os.replace(tmp, path)


def hash_marker(path: pathlib.Path) -> pathlib.Path:
  key = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:20]
  return cache_root() / "hashes" / f"{key}.json"


def record_hash(path: pathlib.Path, sha: str):
  st = path.stat()
  marker = hash_marker(path)
  marker.parent.mkdir(parents=True, exist_ok=True)
  write_atomic(marker, json.dumps({"path": str(path.resolve()), "size": st.st_size,
                                    "mtime_ns": st.st_mtime_ns, "sha256": sha}))


def file_sha256(path: str | os.PathLike) -> str:
  """sha256 of a file, hashed once: later calls read a marker while the file's size and mtime are unchanged."""
  path = pathlib.Path(path)
  st, marker = path.stat(), hash_marker(path)
  if marker.is_file():
    try:
      m = json.loads(marker.read_text())
    except json.JSONDecodeError:      # a damaged marker: hash again
      m = {"path": None, "size": None, "mtime_ns": None}
    if (m["path"], m["size"], m["mtime_ns"]) == (str(path.resolve()), st.st_size, st.st_mtime_ns):
      return m["sha256"]
  h = hashlib.sha256()
  with open(path, "rb") as f, terminal.bar(f"hashing {path.name}", total=st.st_size, unit="B", unit_scale=True) as bar:
    while block := f.read(1 << 24):
      h.update(block)
      bar.update(len(block))
  record_hash(path, h.hexdigest())
  return h.hexdigest()


def leaf_file(pdir: pathlib.Path, key: str) -> pathlib.Path:
  return pdir / (key.replace("/", ".") + ".npy")


def reader(pdir: pathlib.Path, config: decoder.Config, dtype):
  """read(key, index, shape, dtype) for `model.build` from a converted cache directory (one .npy per stacked
  leaf), memory-mapped copy-on-write: a leaf, or one layer of it, is a view of the file (no copy on CPU).

  Raises (at a read):
    ValueError: a missing or damaged file, or one whose shape or dtype does not match the config ("delete the
      directory to reconvert").
  """
  dtype = resolve_dtype(dtype)
  np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
  _, stacked = decoder.abstract(config, False, dtype)

  def read(key, index, shape, leaf_dtype):
    file = leaf_file(pdir, key)
    want = stacked
    for part in key.split("/"):
      want = want[part]
    want = want.get_value()
    try:
      mm = np.load(file, mmap_mode="c")
    except (OSError, ValueError) as e:
      raise ValueError(f"converted-params cache {pdir} is damaged ({file.name}: {e}); delete {pdir} and load "
                       "again to reconvert") from e
    if mm.dtype.itemsize != np.dtype(np_dtype).itemsize or mm.shape != want.shape:
      raise ValueError(f"converted-params cache {pdir} does not match the config: {file.name} holds "
                       f"{mm.dtype}{list(mm.shape)}, expected {dtype}{list(want.shape)}; delete {pdir}")
    mm = mm.view(np_dtype)   # np.save writes bfloat16 as raw 2-byte void
    return mm if index is None else mm[index]
  return read


def count_conversion():
  """Counts a conversion of checkpoint tensors (GGUF into the cache, or an HF folder): tests see cache hits."""
  global conversions
  conversions += 1
