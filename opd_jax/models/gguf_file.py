"""GGUF files (llama.cpp's single-file format, read with the `gguf` package) through the converted cache.

Quantized tensors are dequantized to fp32 one at a time (they then equal what transformers gets from the same
file, not the original checkpoint); llama-arch files store Q/K rows permuted, which is undone (names.py). The
tokenizer is rebuilt from the metadata without torch (tokenizer.py). A file is converted once per (sha256, dtype,
CONVERTER_VERSION) into the cache (cache.py: one memory-mapped .npy per stacked leaf) and restored from it leaf by
leaf, each leaf placed on its sharding.

RoPE scaling: GGUF rope_freqs.weight (how Llama 3.1+ GGUFs store llama3) and a linear rope.scaling.factor become
`decoder.Config.rope_freq_factors`; any other key that changes the forward pass is refused with an error naming it.
"""
from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shutil

import gguf
import ml_dtypes
import numpy as np
from flax import nnx
import tokenizers

from opd_jax import terminal
from opd_jax.models import cache
from opd_jax.models import decoder
from opd_jax.models import hf
from opd_jax.models import model as model_lib
from opd_jax.models import names
from opd_jax.models import tokenizer as tokenizer_lib

GGUF_ARCHITECTURES = ("llama", "qwen2", "qwen3")
_EOG_TEXTS = ("<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<|end|>",
              "<end_of_turn>", "<|return|>")


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
  info = {"converter_version": cache.CONVERTER_VERSION, "source": str(path), "config": arch,
          "stop_ids": sorted(_gguf_stop_ids(meta)), "name": meta.get("general.name")}
  if not with_tokenizer:
    return info, None
  try:
    tok = tokenizer_lib.from_gguf_metadata(meta)
  except ValueError as e:
    raise ValueError(f"{path}: {e}") from None
  info["stop_ids"] = sorted(set(info["stop_ids"]) | set(model_lib.ids(tok.eos_token_id)))
  specials = {k: getattr(tok, f"{k}_token") for k in ("bos", "eos", "pad", "unk")}
  info["tokenizer"] = {**specials, "chat_template": meta.get("tokenizer.chat_template"),
                       "add_bos": bool(meta.get("tokenizer.ggml.add_bos_token", False)),
                       "add_eos": bool(meta.get("tokenizer.ggml.add_eos_token", False))}
  return info, tok.backend_tokenizer.to_str()


def _convert_gguf_params(reader, config: decoder.Config, dtype: str, path: pathlib.Path, out_dir: pathlib.Path):
  """Dequantizes the GGUF tensor by tensor into out_dir/<key>.npy (`cache.leaf_file`), cast as it goes."""
  tensors = {t.name: t for t in reader.tensors}

  def tensor(name):
    if name not in tensors:
      raise ValueError(f"tensor {name!r} is missing from {path} (its metadata calls for it)")
    t = tensors[name]
    try:
      x = gguf.dequantize(t.data, t.tensor_type)   # numpy order: [out, in] for linear weights
      return x.reshape(tuple(int(n) for n in reversed(t.shape)))
    except (ValueError, IndexError, TypeError) as e:
      raise ValueError(f"{path}: tensor {name!r} cannot be read ({e}); the file is truncated or damaged: "
                       "re-download it") from None

  cache.count_conversion()
  np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
  leaves = nnx.to_flat_state(decoder.abstract(config, False, dtype)[1])
  with terminal.bar(f"converting {path.name}", total=len(leaves), unit="tensor") as bar:
    for key_path, var in leaves:   # file-backed: the converted params never sit in anonymous memory
      key, _ = decoder.leaf_key(key_path)
      shape = tuple(var.get_value().shape)
      out = np.lib.format.open_memmap(cache.leaf_file(out_dir, key), mode="w+", dtype=np_dtype, shape=shape)
      names.leaf(config, tensor, "gguf", key, None, shape, np_dtype, str(path), out=out)
      out.flush()
      del out
      bar.update(1)


def cached_tokenizer(cdir: pathlib.Path, info: dict, config: decoder.Config, tokenizer=None):
  """(tokenizer, stop ids) of a converted GGUF: rebuilt from the cached tokenizer.json, or `tokenizer`'s folder."""
  stop = set(info["stop_ids"])
  if tokenizer is None:
    t = info["tokenizer"]
    tok = tokenizer_lib.wrap(tokenizers.Tokenizer.from_file(str(cdir / "tokenizer.json")), bos=t["bos"],
                             eos=t["eos"], pad=t["pad"], unk=t["unk"], chat_template=t["chat_template"],
                             add_bos=t["add_bos"], add_eos=t["add_eos"], model_max_length=config.max_seq_len)
  else:
    tok = hf.hf_tokenizer(tokenizer)
    stop |= set(model_lib.ids(tok.eos_token_id))
  return tok, stop


def load_gguf(path: str | os.PathLike, *, dtype=None, name: str | None = None, sha256: str | None = None,
              shardings=None, layout: str | None = None,
              tokenizer: str | os.PathLike | None = None) -> model_lib.Model:
  """Loads a GGUF file through the cache: converted once per (sha256, dtype, cache.CONVERTER_VERSION).

  Args:
    path: the .gguf file.
    dtype: as in `load`.
    name: the model's name (default: the file stem).
    sha256: the file's checksum when already verified (presets); hashed (once, see file_sha256) otherwise.
    shardings, layout: as in `checkpoints.load` (each device reads only its slice of the cached leaves).
    tokenizer: None: the tokenizer rebuilt from the metadata (tokenizer.py; refused, with the reason, where the
      metadata cannot rebuild it exactly); or the model's original tokenizer folder (`hf_tokenizer`), used as
      is: it must be the tokenizer the GGUF was converted from.
  """
  path, dtype = pathlib.Path(path), model_lib.resolve_dtype(dtype)
  if not path.is_file():
    raise FileNotFoundError(f"GGUF file {path} does not exist")
  sha = sha256 or cache.file_sha256(path)
  cdir, pdir = cache.converted_dir(sha), cache.params_dir(sha, dtype)
  with cache.locked(cdir):
    reader = None
    if not (cdir / "meta.json").is_file() or (tokenizer is None and not (cdir / "tokenizer.json").is_file()):
      with terminal.bar(f"reading the header of {path.name}"):            # ~10 s for a 151k-token vocabulary
        reader = _gguf_reader(path)
        info, tok_json = _convert_gguf_meta(reader, path, with_tokenizer=tokenizer is None)
      cdir.mkdir(parents=True, exist_ok=True)
      if tok_json is not None:
        cache.write_atomic(cdir / "tokenizer.json", tok_json)
      cache.write_atomic(cdir / "meta.json", json.dumps(info, indent=1))
    info = cache.read_json(cdir / "meta.json")
    config = decoder.Config(**info["config"])
    if not pdir.is_dir():
      if reader is None:
        reader = _gguf_reader(path)
      tmp = pdir.with_name(f".{pdir.name}.tmp{os.getpid()}")
      shutil.rmtree(tmp, ignore_errors=True)
      tmp.mkdir(parents=True)
      with cache.removed_on_error(tmp):
        _convert_gguf_params(reader, config, dtype, path, tmp)
      os.replace(tmp, pdir)   # atomic: a cache directory is complete or absent
    del reader
  tok, stop = cached_tokenizer(cdir, info, config, tokenizer)
  config = model_lib.with_real_ids(config, tok, str(path))
  graphdef, state = model_lib.build(config, cache.reader(pdir, config, dtype), layout=layout, dtype=dtype,
                                    shardings=shardings)
  return model_lib.Model(config=config, graphdef=graphdef, params=state, tokenizer=tok,
                         stop_ids=tuple(sorted(stop)), name=name or path.stem, sha256=sha, source=str(path))
