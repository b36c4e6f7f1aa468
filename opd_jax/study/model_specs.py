"""Model specs checked from names and file headers only, before any weights load: a preset, an HF folder, a .gguf
file, `random:<seed>` or `flax:<module>:<factory>` (`check_model`), and a spec's decoder config where it is cheap
(`model_config`), else from the shapes of published checkpoints by name (`architecture`, `ARCHITECTURES`)."""
from __future__ import annotations

import os
import pathlib
import struct
from typing import Any

from opd_jax import models
from opd_jax import terminal
from opd_jax.models import decoder
from opd_jax.models import presets


def header(spec: str, config) -> tuple[int, Any] | None:
  """(context length, tokenizer) of a model spec without its weights: a random:<seed> model's
  (config.random_model.max_seq_len, the byte tokenizer), else the checkpoint's header where it is cheap to read
  (`models.checkpoints.peek`); None otherwise (or when the weights are not on this machine: `preflight.absent`)."""
  from opd_jax.study import preflight  # pylint: disable=g-import-not-at-top  (preflight imports this module)
  if spec.startswith("random:"):
    return config.random_model.max_seq_len, models.byte_tokenizer()
  if preflight.absent(spec):          # weights not on this machine: `check_model` refused it, or a dry run says so
    return None
  peeked = models.checkpoints.peek(spec)
  return None if peeked is None else (peeked[0].max_seq_len, peeked[1])


def check_model(spec: str, field: str) -> None:
  """A model spec names something loadable, checked in milliseconds without weights: "random:<seed>", a preset,
  an HF folder with config.json and valid safetensors headers (`safetensors.safe_open`: header size, offsets
  covering the file, dtypes; every file of the index), or a .gguf file starting with GGUF's magic and version
  ("flax:" specs are imported at load). A typo in a teacher then fails before the student's load (tens of
  seconds for a checkpoint), not after it.

  Raises:
    ValueError / FileNotFoundError: naming `field`, the spec or file and the fix, with the nearest presets or
      paths.
  """
  if spec in models.PRESETS and not presets.installed(spec):
    raise FileNotFoundError(f"{field}: model preset {spec!r} needs packages that are not installed; install them "
                            f"with: {models.PRESETS[spec].install}")
  if spec.startswith(("random:", "flax:")) or spec in models.PRESETS:   # random:<seed>: `preflight.random_seed`
    return
  path = pathlib.Path(spec).expanduser()
  if path.is_dir():
    _check_hf_folder(path, field)
  elif path.is_file() and path.suffix == ".gguf":
    _check_gguf(path, field)
  elif path.is_file():
    raise terminal.bad_field(field, "is a file but not a .gguf file", spec,
               fix="pass a .gguf file, an HF folder (config.json + safetensors + tokenizer) or a preset")
  elif os.sep not in spec and not spec.endswith(".gguf"):
    raise terminal.bad_field(field, "unknown model preset", spec, choices=sorted(models.PRESETS),
               fix=f"known presets: {sorted(models.PRESETS)} (or pass an HF folder or a .gguf path)")
  else:
    parent = path.parent
    near = [str(parent / p.name) for _, p in zip(range(1000), parent.iterdir())] if parent.is_dir() else []
    raise FileNotFoundError(terminal.field_error(field, "model path does not exist", spec, choices=near,
                                               fix="pass an HF folder, a .gguf file or a preset"))


def _check_hf_folder(path: pathlib.Path, field: str) -> None:
  import safetensors  # pylint: disable=g-import-not-at-top
  if not (path / "config.json").is_file():
    raise FileNotFoundError(f"{field}: no config.json in {path}; an HF folder needs config.json, model.safetensors "
                            "(or an index and its shards) and the tokenizer files")
  index = path / "model.safetensors.index.json"
  if index.is_file():
    weight_map = models.checkpoints.read_json(index).get("weight_map")
    if not isinstance(weight_map, dict):
      raise ValueError(f"{index}: no 'weight_map' object; re-download the checkpoint's index")
    files = sorted({path / f for f in weight_map.values()})
  elif (path / "model.safetensors").is_file():
    files = [path / "model.safetensors"]
  else:
    raise FileNotFoundError(f"{field}: no model.safetensors or model.safetensors.index.json in {path}; only "
                            "safetensors checkpoints are supported (resave a pytorch_model.bin with save_pretrained)")
  for f in files:
    if not f.is_file():
      raise FileNotFoundError(f"{f}: listed in {index} but missing; re-download the checkpoint")
  for f in files:
    try:
      with safetensors.safe_open(str(f), framework="numpy"):
        pass
    except Exception as e:  # pylint: disable=broad-except  (SafetensorError, OSError, ...)
      raise ValueError(f"{f}: not a valid safetensors file ({e}); re-download or resave it with "
                       "save_pretrained") from None


def _check_gguf(path: pathlib.Path, field: str) -> None:
  """GGUF's header: magic b"GGUF", version 1-3, tensor and key-value counts that fit the file."""
  with open(path, "rb") as f:
    head = f.read(24)
  size = path.stat().st_size
  ok = len(head) == 24 and head[:4] == b"GGUF"
  if ok:
    version, n_tensors, n_kv = struct.unpack("<IQQ", head[4:])
    ok = 1 <= version <= 3 and n_tensors <= size and n_kv <= size
  if not ok:
    raise ValueError(f"{path}: not a valid GGUF file (header {head[:8]!r}; a GGUF file starts with b'GGUF' and "
                     f"version 1-3), named by {field}; the file is damaged or not GGUF: re-download it")


def model_config(spec: str, config) -> models.Config | None:
  """The decoder config of a model spec without weights: a random:<seed> model's (config.random_model, the byte
  tokenizer's vocabulary), else the checkpoint's header where it is cheap (`models.checkpoints.peek`); None
  otherwise."""
  if spec.startswith("random:"):
    r = config.random_model
    return models.Config(arch=r.arch, vocab_size=len(models.byte_tokenizer()), d_model=r.d_model,
                         n_layers=r.n_layers, n_heads=r.n_heads, n_kv_heads=r.n_kv_heads, head_dim=r.head_dim,
                         d_ff=r.d_ff, qkv_bias=r.arch == "qwen2", qk_norm=r.arch == "qwen3",
                         max_seq_len=r.max_seq_len)
  if spec.startswith("flax:"):
    return None
  peeked = models.checkpoints.peek(spec)
  return None if peeked is None else peeked[0]


# Architectures of checkpoints that may be absent (HF folders named in `:paper`), by the lower-cased last path
# component of the spec (config.json of the published checkpoints).
_QWEN3 = dict(arch="qwen3", vocab_size=151936, n_real_ids=151669, n_kv_heads=8, head_dim=128, rope_theta=1e6,
              qk_norm=True, norm_eps=1e-6, max_seq_len=40960)
_QWEN25 = dict(arch="qwen2", vocab_size=151936, n_real_ids=151665, rope_theta=1e6, qkv_bias=True, norm_eps=1e-6,
               max_seq_len=32768)
ARCHITECTURES = {
    "qwen3-0.6b": decoder.Config(**_QWEN3, d_model=1024, n_layers=28, n_heads=16, d_ff=3072, tie_embeddings=True),
    "qwen3-1.7b": decoder.Config(**_QWEN3, d_model=2048, n_layers=28, n_heads=16, d_ff=6144, tie_embeddings=True),
    "qwen3-4b": decoder.Config(**_QWEN3, d_model=2560, n_layers=36, n_heads=32, d_ff=9728, tie_embeddings=True),
    "qwen3-8b": decoder.Config(**_QWEN3, d_model=4096, n_layers=36, n_heads=32, d_ff=12288),
    "qwen3-32b": decoder.Config(**_QWEN3, d_model=5120, n_layers=64, n_heads=64, d_ff=25600),
    "qwen2.5-coder-0.5b-instruct": decoder.Config(**_QWEN25, d_model=896, n_layers=24, n_heads=14, n_kv_heads=2,
                                                  head_dim=64, d_ff=4864),
    "qwen2.5-coder-1.5b-instruct": decoder.Config(**_QWEN25, d_model=1536, n_layers=28, n_heads=12, n_kv_heads=2,
                                                  head_dim=128, d_ff=8960),
}


def known_architecture(spec: str, config) -> decoder.Config | None:
  """`architecture`, or None where it has none (no readable header and not in ARCHITECTURES)."""
  try:
    return architecture(spec, config)
  except (ValueError, OSError):
    return None


def architecture(spec: str, config) -> decoder.Config:
  """Architecture of a model spec without its weights: random:<seed> (config.random_model, as
  `environment.load_model`), a checkpoint's header (`checkpoints.peek`), else (weights not on this
  machine: `preflight.absent`) `ARCHITECTURES` by name. The cost
  model (opd_jax/cost/estimate.py) and the checklist's caps and memory lines read it.

  Raises:
    ValueError: a spec that is neither cheap to peek nor in ARCHITECTURES (names the known ones).
  """
  from opd_jax.study import preflight  # pylint: disable=g-import-not-at-top  (preflight imports this module)
  if preflight.random_seed(spec, "model spec") is not None:
    r = config.random_model
    return decoder.Config(arch=r.arch, vocab_size=len(models.byte_tokenizer()), d_model=r.d_model,
                          n_layers=r.n_layers, n_heads=r.n_heads, n_kv_heads=r.n_kv_heads, head_dim=r.head_dim,
                          d_ff=r.d_ff, qkv_bias=r.arch == "qwen2", qk_norm=r.arch == "qwen3",
                          max_seq_len=r.max_seq_len)
  peeked = None if preflight.absent(spec) else models.checkpoints.peek(spec)
  if peeked is not None:
    return peeked[0]
  name = os.path.basename(os.path.normpath(spec)).lower()
  if name in ARCHITECTURES:
    return ARCHITECTURES[name]
  raise ValueError(f"cost model: no architecture for {spec!r} (not a readable checkpoint header, and "
                   f"{name!r} is not in opd_jax.study.model_specs.ARCHITECTURES: {sorted(ARCHITECTURES)}); add its "
                   "shapes there")
