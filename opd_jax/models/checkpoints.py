"""Checkpoints -> `Model`: the entry point `load` (a preset name, an HF folder or a GGUF file) and `peek`.

Where each concept lives (models/):
  decoder.py    the architecture: `Config`, the NNX modules (`Decoder`, `Block`), `init_params` (random values)
  names.py      the one table of checkpoint tensor names (HF, GGUF) -> module paths, with their transforms
  model.py      `Model` (config, graphdef, params = nnx.State, tokenizer, stop ids) and `build`: the abstract
                model (`nnx.eval_shape`) filled leaf by leaf, each leaf placed on its sharding; layouts
  hf.py         HF folders (config.json, safetensors, tokenizer)
  gguf_file.py  GGUF files, converted once into the cache
  cache.py      the on-disk cache ($OPD_JAX_CACHE): file hashes, converted params (memory-mapped .npy per leaf)
  presets.py    named GGUFs shipped in pip packages (`PRESETS`)
"""
from __future__ import annotations

import os
import pathlib
from typing import Any

from opd_jax import terminal
from opd_jax.models import cache
from opd_jax.models import decoder
from opd_jax.models import gguf_file
from opd_jax.models import presets
from opd_jax.models.cache import CACHE_ENV, CONVERTER_VERSION, converted_dir, file_sha256, params_dir, read_json
from opd_jax.models.gguf_file import GGUF_ARCHITECTURES, config_from_gguf, load_gguf
from opd_jax.models.hf import HF_ARCHITECTURES, config_from_hf, hf_tokenizer, load_hf
from opd_jax.models.model import (DTYPES, Model, build, default_layout, resolve_dtype, with_layout,
                                  with_real_ids)
from opd_jax.models.names import TABLE
from opd_jax.models.presets import PRESETS, Preset, preset_file

__all__ = ["CACHE_ENV", "CONVERTER_VERSION", "DTYPES", "GGUF_ARCHITECTURES", "HF_ARCHITECTURES", "Model", "PRESETS",
           "Preset", "TABLE", "build", "config_from_gguf", "config_from_hf", "converted_dir", "default_layout",
           "file_sha256", "hf_tokenizer", "load", "load_gguf", "load_hf", "params_dir", "peek", "preset_file",
           "read_json", "resolve_dtype", "with_layout", "with_real_ids"]


def __getattr__(name: str) -> Any:
  if name == "conversions":         # how many conversions ran in this process (tests count cache hits)
    return cache.conversions
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load(spec: str | os.PathLike, *, dtype=None, shardings=None, layout: str | None = None,
         tokenizer: str | os.PathLike | None = None) -> Model:
  """Loads a preset name (PRESETS), an HF folder or a `.gguf` file. See the module docstring.

  Args:
    spec: preset name, folder with config.json, or path to a .gguf file.
    dtype: params dtype, "float32" / "bfloat16" / "float16" or a numpy/jax dtype; None = the platform default
      (float32 on CPU, where bf16 matmuls are slower; bfloat16 on GPU/TPU).
    shardings: None (default device); a `jax.sharding.Mesh`: each leaf is placed on the NamedSharding of its
      logical axes (`sharding.RULES`) as it is read (no whole-model copy on one device; from a cached GGUF
      conversion each device reads only its slice); or a function ("/"-joined state path, shape) -> Sharding.
    layout: "stacked" or "layered" params (decoder.py docstring); None = `default_layout()` ("layered": a
      decode step without per-layer copies, on every platform).
    tokenizer: GGUF files and presets only: the model's original tokenizer folder, used instead of the one
      rebuilt from the metadata (needed where the metadata cannot rebuild it exactly: no tokenizer.ggml.pre).
  Raises:
    ValueError: unknown preset, architecture or dtype; checksum or shape mismatch; unsupported features.
    FileNotFoundError: missing files or preset packages (the message says what to install).
  """
  dtype = resolve_dtype(dtype)
  spec = str(spec)
  if spec in PRESETS:
    path, sha = preset_file(spec)
    return load_gguf(path, dtype=dtype, name=spec, sha256=sha, shardings=shardings, layout=layout,
                     tokenizer=tokenizer)
  path = pathlib.Path(spec).expanduser()
  if path.is_dir():
    if tokenizer is not None:
      raise ValueError(f"tokenizer={str(tokenizer)!r} applies to GGUF files only; the HF folder {spec!r} loads its "
                       "own tokenizer files: drop the argument or copy the tokenizer files into the folder")
    return load_hf(path, dtype=dtype, shardings=shardings, layout=layout)
  if path.is_file() and path.suffix == ".gguf":
    return load_gguf(path, dtype=dtype, shardings=shardings, layout=layout, tokenizer=tokenizer)
  if path.is_file():
    raise ValueError(f"cannot load {spec!r}: not a .gguf file; pass a .gguf file, an HF folder (config.json + "
                     f"safetensors + tokenizer) or a preset: {sorted(PRESETS)}")
  if os.sep not in spec and not spec.endswith(".gguf"):
    raise ValueError(f"unknown model preset {spec!r}; known presets: {sorted(PRESETS)} (or pass an HF folder "
                     "or a .gguf path)")
  raise FileNotFoundError(f"model path {spec!r} does not exist; pass an HF folder, a .gguf file or a preset: "
                          f"{sorted(PRESETS)}")


def peek(spec: str | os.PathLike) -> tuple[decoder.Config, Any] | None:
  """(config, tokenizer) of a checkpoint without reading its weights, where that is cheap; else None.

  Cheap: an HF folder (config.json and tokenizer files), a preset or GGUF file already converted in the cache
  (meta.json and tokenizer.json; a GGUF file's hash must be known: `file_sha256`'s marker), a preset never
  converted (its header, read from the first part package: `presets.header_file`; ~10 s for a 151k-token
  vocabulary, the time gguf's reader takes to parse it). A GGUF file seen for the first time gives None: its
  context is checked after the load (`environment.setup`). Raises what `load` raises for a malformed folder or cache
  entry, or a preset whose packages are missing.
  """
  spec = str(spec)
  if spec in PRESETS:
    cdir = converted_dir(PRESETS[spec].sha256)
  else:
    path = pathlib.Path(spec).expanduser()
    if path.is_dir() and (path / "config.json").is_file():
      config = config_from_hf(read_json(path / "config.json"), where=str(path / "config.json"))
      tok = hf_tokenizer(path)
      return with_real_ids(config, tok, str(path)), tok
    if not (path.is_file() and path.suffix == ".gguf"):
      return None
    marker = cache.hash_marker(path)
    if not marker.is_file():
      return None
    st, m = path.stat(), read_json(marker)
    if (m.get("path"), m.get("size"), m.get("mtime_ns")) != (str(path.resolve()), st.st_size, st.st_mtime_ns):
      return None
    cdir = converted_dir(m["sha256"])
  if not ((cdir / "meta.json").is_file() and (cdir / "tokenizer.json").is_file()):
    return _peek_preset_header(spec) if spec in PRESETS else None
  info = read_json(cdir / "meta.json")
  config = decoder.Config(**info["config"])
  tok, _ = gguf_file.cached_tokenizer(cdir, info, config)
  return with_real_ids(config, tok, str(cdir)), tok


_headers: dict[Preset, tuple[decoder.Config, Any] | None] = {}     # `_peek_preset_header`'s, read once a process


def _peek_preset_header(name: str) -> tuple[decoder.Config, Any] | None:
  """`peek` of a preset not yet converted: config and tokenizer from the header in its first part (None where
  the header, or a tensor the config reads, runs past that part). Writes nothing to the cache. Read once per
  process (~10 s for a 151k-token vocabulary; the plan, the checks and the checklist all ask), under a progress
  line (`terminal.bar`)."""
  preset = PRESETS[name]
  if preset not in _headers:
    with terminal.bar(f"reading the header of {name}"):
      _headers[preset] = _read_preset_header(name)
  return _headers[preset]


def _read_preset_header(name: str) -> tuple[decoder.Config, Any] | None:
  with presets.header_file(name) as (path, n):
    try:
      reader = gguf_file._gguf_reader(path)  # pylint: disable=protected-access
    except ValueError:                        # the header runs into the hole (or part 1 is damaged: load says)
      return None
    read = [t for t in reader.tensors if t.name == "rope_freqs.weight"]
    if reader.data_offset > n or any(t.data_offset + t.n_bytes > n for t in read):
      return None
    info, tok_json = gguf_file._convert_gguf_meta(reader, path)  # pylint: disable=protected-access
    del reader, read
    cache.write_atomic(path.parent / "tokenizer.json", tok_json)
    config = decoder.Config(**info["config"])
    tok, _ = gguf_file.cached_tokenizer(path.parent, info, config)
  return with_real_ids(config, tok, name), tok
