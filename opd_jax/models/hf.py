"""HF folders: config.json -> decoder.Config, safetensors -> the model's state (through names.TABLE), tokenizer.

A folder holds config.json (architectures LlamaForCausalLM / Qwen2ForCausalLM / Qwen3ForCausalLM),
model.safetensors or model.safetensors.index.json + shards, tokenizer files with a chat template, and
generation_config.json (optional). Tensors are read straight from the safetensors (memory-mapped, validated by
`safetensors.safe_open`), one state leaf at a time, each placed on its sharding at once: nothing is cached and
`Model.sha256` is None (hashing 16 GB of shards on every load would cost more than it buys).

RoPE scaling: "linear" / "llama3" become `decoder.Config.rope_freq_factors`; any other field that changes the
forward pass (yarn, dynamic, longrope, partial rotary, sliding windows, ...) is refused with an error naming it.
"""
from __future__ import annotations

import json
import os
import pathlib
import struct

from absl import logging
import ml_dtypes
import numpy as np
from flax import nnx
import safetensors
import transformers

from opd_jax import terminal
from opd_jax.models import cache
from opd_jax.models import decoder
from opd_jax.models import model as model_lib
from opd_jax.models import names
from opd_jax.models import tokenizer as tokenizer_lib

HF_ARCHITECTURES = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3"}


def config_from_hf(cfg: dict, where: str = "config.json") -> decoder.Config:
  """decoder.Config from an HF config.json dict (transformers v4 `rope_theta` / `rope_scaling` or v5
  `rope_parameters`; as in transformers, a set `rope_scaling` replaces `rope_parameters`).

  Raises:
    ValueError: unknown architecture, or a feature decoder.py does not implement (RoPE scaling other than
      linear and llama3, partial rotary, sliding windows, o_proj / MLP biases, activations other than SiLU),
      naming the field.
  """
  archs = cfg.get("architectures") or []
  known = [a for a in archs if a in HF_ARCHITECTURES]
  if not known:
    raise ValueError(f"{where}: architectures={archs} is not supported; known: {sorted(HF_ARCHITECTURES)}")
  arch = HF_ARCHITECTURES[known[0]]
  rope_field = "rope_scaling" if cfg.get("rope_scaling") else "rope_parameters"
  rope = cfg.get(rope_field) or {}
  if any(isinstance(v, dict) for v in rope.values()):
    raise ValueError(f"{where}: {rope_field} per layer type ({sorted(rope)}) is not implemented")
  partial = rope.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))
  if partial != 1.0:
    raise ValueError(f"{where}: partial_rotary_factor={partial} is not implemented (decoder._rope rotates all "
                     "of head_dim)")
  unsupported = {"attention_bias": cfg.get("attention_bias") and arch != "qwen2",
                 "mlp_bias": cfg.get("mlp_bias"), "use_sliding_window": cfg.get("use_sliding_window"),
                 "layer_types": any(t != "full_attention" for t in cfg.get("layer_types") or []),
                 "hidden_act": cfg.get("hidden_act", "silu") != "silu"}
  for field, bad in unsupported.items():
    if bad:
      raise ValueError(f"{where}: {field}={cfg.get(field)!r} is not implemented by opd_jax.models.decoder")
  heads = cfg["num_attention_heads"]
  head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
  theta = float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0)))
  return decoder.Config(
      arch=arch, vocab_size=cfg["vocab_size"], d_model=cfg["hidden_size"], n_layers=cfg["num_hidden_layers"],
      n_heads=heads, n_kv_heads=cfg.get("num_key_value_heads") or heads, head_dim=head_dim,
      d_ff=cfg["intermediate_size"], rope_theta=theta,
      rope_freq_factors=_hf_rope_factors(cfg, rope_field, theta, head_dim, where),
      norm_eps=float(cfg.get("rms_norm_eps", 1e-6)), qkv_bias=arch == "qwen2", qk_norm=arch == "qwen3",
      tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
      max_seq_len=int(cfg.get("max_position_embeddings", 32768)))


_HF_ROPE_TYPES = {"linear": ("factor",), "llama3": ("factor", "low_freq_factor", "high_freq_factor")}


def _hf_rope_factors(cfg: dict, field: str, theta: float, head_dim: int, where: str) -> tuple[float, ...] | None:
  """decoder.Config.rope_freq_factors [head_dim / 2] of `cfg[field]`'s RoPE scaling; None when unscaled.

  As transformers (modeling_rope_utils): "linear" divides every inverse frequency by `factor`; "llama3"
  (`_compute_llama3_parameters`, Llama 3.1+) keeps wavelengths below original / high_freq_factor, divides those
  above original / low_freq_factor by `factor` and interpolates in between (original =
  original_max_position_embeddings); llama.cpp's convert_hf_to_gguf.py stores the same numbers as rope_freqs.weight.
  """
  rope = cfg.get(field) or {}
  kind = rope.get("rope_type", rope.get("type", "default"))
  if kind == "default":
    return None
  if kind not in _HF_ROPE_TYPES:
    raise ValueError(f"{where}: {field} type {kind!r} is not implemented (decoder._rope implements default, "
                     f"{' and '.join(_HF_ROPE_TYPES)}); use a checkpoint without it or add it to decoder._rope")
  missing = [k for k in _HF_ROPE_TYPES[kind] if rope.get(k) is None]
  if missing:
    raise ValueError(f"{where}: {field} type {kind!r} lacks {missing}")
  factor = float(rope["factor"])
  if kind == "linear":
    return (factor,) * (head_dim // 2)
  low, high = float(rope["low_freq_factor"]), float(rope["high_freq_factor"])
  if not high > low:
    raise ValueError(f"{where}: {field} llama3 needs high_freq_factor > low_freq_factor, got {high} and {low}")
  original = float(cfg.get("original_max_position_embeddings") or rope.get("original_max_position_embeddings")
                   or cfg["max_position_embeddings"])
  inv_freq = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))   # fp32, as transformers
  wavelen = 2 * np.pi / inv_freq.astype(np.float64)
  smooth = (original / wavelen - low) / (high - low)
  factors = np.where(wavelen < original / high, 1.0,
                     np.where(wavelen > original / low, factor, 1.0 / ((1 - smooth) / factor + smooth)))
  return tuple(float(f) for f in factors)


_ST_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16,
              "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def _safetensors(path: pathlib.Path) -> dict[str, np.ndarray]:
  """name -> read-only memory-mapped array of one .safetensors file (numpy has no bf16 reader of its own).

  The file is validated by `safetensors.safe_open` first (header size, offsets covering the file, dtypes), so the
  offsets read below are the checked ones. Raises ValueError naming the file when it is not valid safetensors.
  """
  try:
    with safetensors.safe_open(str(path), framework="numpy") as f:
      names = list(f.keys())
  except Exception as e:  # pylint: disable=broad-except  (safetensors raises SafetensorError, OSError, ...)
    raise ValueError(f"{path}: not a valid safetensors file ({e}); re-download or resave it with "
                     "save_pretrained") from None
  if not names:
    raise ValueError(f"{path}: a safetensors file without tensors; re-download or resave it")
  with open(path, "rb") as f:
    (n,) = struct.unpack("<Q", f.read(8))
    header = json.loads(f.read(n))
  header.pop("__metadata__", None)
  data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
  out = {}
  for name, info in header.items():
    start, end = info["data_offsets"]
    if info["dtype"] not in _ST_DTYPES:
      raise ValueError(f"{path}: tensor {name!r} has dtype {info['dtype']}, not one of {sorted(_ST_DTYPES)}")
    dtype = np.dtype(_ST_DTYPES[info["dtype"]])
    out[name] = data[start:end].view(dtype).reshape(info["shape"])
  return out


def _hf_tensor_files(folder: pathlib.Path) -> dict[str, pathlib.Path]:
  index = folder / "model.safetensors.index.json"
  if index.is_file():
    weight_map = cache.read_json(index).get("weight_map")
    if not isinstance(weight_map, dict):
      raise ValueError(f"{index}: no 'weight_map' object; re-download the checkpoint's index")
    return {name: folder / file for name, file in weight_map.items()}
  single = folder / "model.safetensors"
  if single.is_file():
    return {name: single for name in _safetensors(single)}
  raise FileNotFoundError(f"no model.safetensors or model.safetensors.index.json in {folder}; only safetensors "
                          "checkpoints are supported (resave a pytorch_model.bin with save_pretrained)")


def hf_tokenizer(folder: str | os.PathLike) -> tokenizer_lib.PreTrainedTokenizerFast:
  """The fast tokenizer of an HF folder (tokenizer.json / tokenizer_config.json, chat template included).

  Raises:
    FileNotFoundError: no tokenizer files in the folder. ValueError: it loads as a slow tokenizer.
  """
  folder = pathlib.Path(folder)
  if not any((folder / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")):
    raise FileNotFoundError(f"no tokenizer files (tokenizer.json, tokenizer_config.json) in {folder}")
  tok = transformers.AutoTokenizer.from_pretrained(str(folder))
  if not isinstance(tok, tokenizer_lib.PreTrainedTokenizerFast):
    raise ValueError(f"the tokenizer in {folder} loads as {type(tok).__name__}, not a fast tokenizer; add a "
                     "tokenizer.json to the folder")
  return tok


def _warn_narrowed(folder: pathlib.Path, stored: dict, dtype: str) -> None:
  """A warning when a folder of mixed float dtypes loads narrower than its widest tensors: opd_jax's LoRA export
  of a bf16 student (training/loop.export_student) keeps its merged matrices in fp32, and cast to bf16 they lose
  the update (issue 34, item 4). A checkpoint stored in one dtype loads in any without a word."""
  floats = {d: n for d, n in stored.items() if np.issubdtype(d, np.floating) or d == ml_dtypes.bfloat16}
  wide = {d: n for d, n in floats.items() if d.itemsize > np.dtype(dtype).itemsize}
  if len(floats) > 1 and wide:
    logging.warning("%s: %d of its %d tensors are stored in %s and load as %s (dtype=%r); if it is a LoRA export "
                    "(merged matrices kept in float32), the rounding removes small updates: load it with "
                    "dtype='float32' (--config.student.dtype=float32)", folder, sum(wide.values()),
                    sum(floats.values()), "/".join(sorted(d.name for d in wide)), dtype, dtype)


def load_hf(folder: str | os.PathLike, *, dtype=None, shardings=None, layout: str | None = None) -> model_lib.Model:
  """Loads an HF folder (see the module docstring); stop ids = config, generation config and tokenizer EOS.

  Args:
    dtype, layout: as in `checkpoints.load`.
    shardings: as in `model.placement` (None, a mesh, or a function (path, shape) -> Sharding).
  """
  folder, dtype = pathlib.Path(folder), model_lib.resolve_dtype(dtype)
  cfg_path = folder / "config.json"
  if not cfg_path.is_file():
    raise FileNotFoundError(f"no config.json in {folder}; an HF folder needs config.json, model.safetensors "
                            "(or a sharded index) and tokenizer files")
  cfg = cache.read_json(cfg_path)
  config = config_from_hf(cfg, where=str(cfg_path))
  files = _hf_tensor_files(folder)
  opened: dict[pathlib.Path, dict] = {}
  stored: dict[np.dtype, int] = {}              # dtype as stored -> tensors read

  def tensor(name):
    if name not in files:
      raise ValueError(f"tensor {name!r} is missing from the checkpoint in {folder} (config.json calls for it)")
    file = files[name]
    if file not in opened:
      if not file.is_file():
        raise FileNotFoundError(f"checkpoint shard {file} (listed in the index) is missing")
      opened[file] = _safetensors(file)
    x = opened[file][name]
    stored[x.dtype] = stored.get(x.dtype, 0) + 1
    return x

  tok = hf_tokenizer(folder)
  config = model_lib.with_real_ids(config, tok, str(folder))
  cache.count_conversion()
  n_leaves = len(nnx.to_flat_state(decoder.abstract(config, model_lib.check_layout(layout) == "layered")[1]))
  with terminal.bar(f"converting {folder.name}", total=n_leaves, unit="tensor") as bar:
    def read(key, index, shape, np_dtype):
      bar.update(1)
      return names.leaf(config, tensor, "hf", key, index, shape, np_dtype, str(folder))
    graphdef, state = model_lib.build(config, read, layout=layout, dtype=dtype, shardings=shardings)
  opened.clear()
  _warn_narrowed(folder, stored, dtype)
  stop = set(model_lib.ids(cfg.get("eos_token_id"))) | set(model_lib.ids(tok.eos_token_id))
  gen = folder / "generation_config.json"
  if gen.is_file():
    stop |= set(model_lib.ids(cache.read_json(gen).get("eos_token_id")))
  return model_lib.Model(config=config, graphdef=graphdef, params=state, tokenizer=tok,
                         stop_ids=tuple(sorted(stop)), name=folder.name, sha256=None, source=str(folder))
