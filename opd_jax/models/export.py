"""Write a `Model` as an HF folder (config.json, model.safetensors, tokenizer) that opd_jax and transformers load.

Tensor names and the [out, in] layout of linear weights come from `names.TABLE` (the loaders' own table), so
`models.load(folder)` returns the same state and `transformers.AutoModelForCausalLM.from_pretrained(folder)`
runs the same weights. Used by the trainer (training/loop.py: the merged LoRA student) and the benchmarks (HF
side of random models).

Each tensor is written in its own param's dtype, so params may mix dtypes: the trainer's LoRA export of a bf16
student holds its merged matrices W + s A B in fp32 beside the bf16 rest (`lora.merge(dtype=float32)`; issue 34,
item 4). config.json's "torch_dtype" is the widest of them: the dtype the model has to run in to keep every
tensor as written. transformers loads it so by default (v5: dtype "auto" reads it; v4: float32); loaded in bf16
(transformers' dtype=torch.bfloat16, or opd_jax's platform default on GPU/TPU) the update rounds away again.
"""
from __future__ import annotations

import dataclasses
import json
import os
import pathlib

import jax
import ml_dtypes
import numpy as np
from flax import nnx

from opd_jax.models import hf
from opd_jax.models import names

_HF = {"llama": ("LlamaForCausalLM", "llama"), "qwen2": ("Qwen2ForCausalLM", "qwen2"),
       "qwen3": ("Qwen3ForCausalLM", "qwen3")}
_DTYPES = {np.dtype(np.float32): "F32", np.dtype(ml_dtypes.bfloat16): "BF16", np.dtype(np.float16): "F16"}


def hf_config(model) -> dict:
  """The config.json dict of `model` (inverse of `hf.config_from_hf`, checked by a round trip); "torch_dtype" the
  widest dtype of its params (module docstring).

  Raises:
    ValueError: RoPE frequency factors (not expressible here) or a config that does not round-trip.
  """
  c = model.config
  if c.rope_freq_factors is not None:
    raise ValueError("exporting a model with RoPE frequency factors (rope_scaling) is not implemented")
  arch, model_type = _HF[c.arch]
  dtype = max({np.dtype(x.dtype) for x in jax.tree.leaves(model.params)}, key=lambda d: d.itemsize)
  out = {"architectures": [arch], "model_type": model_type, "vocab_size": c.vocab_size, "hidden_size": c.d_model,
         "num_hidden_layers": c.n_layers, "num_attention_heads": c.n_heads, "num_key_value_heads": c.n_kv_heads,
         "head_dim": c.head_dim, "intermediate_size": c.d_ff, "rope_theta": c.rope_theta, "rms_norm_eps": c.norm_eps,
         "tie_word_embeddings": c.tie_embeddings, "max_position_embeddings": c.max_seq_len, "hidden_act": "silu",
         "attention_bias": c.qkv_bias, "use_sliding_window": False, "torch_dtype": str(dtype),
         "eos_token_id": list(model.stop_ids), "bos_token_id": None, "pad_token_id": None}
  back = dataclasses.replace(hf.config_from_hf(out), n_real_ids=c.n_real_ids)   # n_real_ids: the tokenizer's
  if back != c:
    raise ValueError(f"export: config.json does not round-trip: {back} != {c}")
  return out


def write_hf(model, folder: str | os.PathLike) -> pathlib.Path:
  """Write `model` (any layout, any placement, params of one or several dtypes) to `folder` (created); each
  tensor in its param's dtype; the safetensors file written atomically.

  Returns the folder. Each leaf is copied to the host once; per-layer tensors of the stacked layout are sliced
  from it.
  """
  folder = pathlib.Path(folder)
  folder.mkdir(parents=True, exist_ok=True)
  config = hf_config(model)
  c = model.config
  params = nnx.to_pure_dict(model.params)      # layered: layers[i][leaf]; stacked: layers[leaf][i]
  layered = model.layout == "layered"
  tensors = []                                  # (HF name, leaf, layer index to slice or None, linear)
  for row in names.TABLE:
    if row.key.startswith("layers/"):
      leaf = row.key.split("/", 1)[1]
      if layered and leaf in params["layers"][0]:
        tensors += [(row.hf.format(i=i), params["layers"][i][leaf], None, row.linear) for i in range(c.n_layers)]
      elif not layered and leaf in params["layers"]:
        tensors += [(row.hf.format(i=i), params["layers"][leaf], i, row.linear) for i in range(c.n_layers)]
    elif row.key in params:
      tensors.append((row.hf, params[row.key], None, row.linear))
  header, offset = {}, 0
  for name, a, i, linear in tensors:
    shape = tuple(a.shape[1:] if i is not None else a.shape)
    shape = shape[::-1] if linear else shape
    nbytes = int(np.prod(shape)) * np.dtype(a.dtype).itemsize
    header[name] = {"dtype": _DTYPES[np.dtype(a.dtype)], "shape": list(shape),
                    "data_offsets": [offset, offset + nbytes]}
    offset += nbytes
  blob = json.dumps(header).encode()
  blob += b" " * (-len(blob) % 8)
  tmp = folder / ".model.safetensors.tmp"
  with open(tmp, "wb") as f:                    # safetensors: u64 header size, JSON header, little-endian data
    f.write(len(blob).to_bytes(8, "little"))
    f.write(blob)
    host = None
    for _, a, i, linear in tensors:
      if host is None or host[0] is not a:
        host = (a, np.asarray(a))               # one device-to-host copy per leaf
      x = host[1] if i is None else host[1][i]
      f.write(np.ascontiguousarray(x.T if linear else x).tobytes())
  os.replace(tmp, folder / "model.safetensors")
  (folder / "config.json").write_text(json.dumps(config, indent=1))
  if model.tokenizer is not None:
    model.tokenizer.save_pretrained(folder)
  return folder
