"""Checkpoint tensor names of the decoder family: the one table from module paths to HF and GGUF names.

`TABLE` rows are (our key, HF name, GGUF name, linear). Our key is the state path of `decoder.Decoder` in the
"stacked" layout ("layers/wq"; layered: layers/<i>/wq, `decoder.leaf_key`); per-layer names take the layer
index `{i}`. Transforms: linear weights are stored [out, in] in both files and [in, out] here (transposed);
llama-arch GGUFs store Q/K rows permuted (`GGUF_UNPERMUTE`, undone by `unpermute`). Tensors that the config does
not call for are never read (a tied model ignores a stray `lm_head`).

`leaf` assembles one state leaf from a checkpoint's tensors (read, transformed, stacked over layers, cast), so
every reader (HF safetensors, GGUF) fills the model through this table.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from opd_jax.models import decoder


class Row(NamedTuple):
  key: str        # state path, "/"-joined ("layers/..." = one per layer)
  hf: str         # HF safetensors name
  gguf: str       # GGUF tensor name
  linear: bool    # stored [out, in]: transposed on load


TABLE = (
    Row("embed", "model.embed_tokens.weight", "token_embd.weight", False),
    Row("final_norm", "model.norm.weight", "output_norm.weight", False),
    Row("lm_head", "lm_head.weight", "output.weight", True),
    Row("layers/attn_norm", "model.layers.{i}.input_layernorm.weight", "blk.{i}.attn_norm.weight", False),
    Row("layers/wq", "model.layers.{i}.self_attn.q_proj.weight", "blk.{i}.attn_q.weight", True),
    Row("layers/wk", "model.layers.{i}.self_attn.k_proj.weight", "blk.{i}.attn_k.weight", True),
    Row("layers/wv", "model.layers.{i}.self_attn.v_proj.weight", "blk.{i}.attn_v.weight", True),
    Row("layers/bq", "model.layers.{i}.self_attn.q_proj.bias", "blk.{i}.attn_q.bias", False),
    Row("layers/bk", "model.layers.{i}.self_attn.k_proj.bias", "blk.{i}.attn_k.bias", False),
    Row("layers/bv", "model.layers.{i}.self_attn.v_proj.bias", "blk.{i}.attn_v.bias", False),
    Row("layers/q_norm", "model.layers.{i}.self_attn.q_norm.weight", "blk.{i}.attn_q_norm.weight", False),
    Row("layers/k_norm", "model.layers.{i}.self_attn.k_norm.weight", "blk.{i}.attn_k_norm.weight", False),
    Row("layers/wo", "model.layers.{i}.self_attn.o_proj.weight", "blk.{i}.attn_output.weight", True),
    Row("layers/mlp_norm", "model.layers.{i}.post_attention_layernorm.weight", "blk.{i}.ffn_norm.weight", False),
    Row("layers/w_gate", "model.layers.{i}.mlp.gate_proj.weight", "blk.{i}.ffn_gate.weight", True),
    Row("layers/w_up", "model.layers.{i}.mlp.up_proj.weight", "blk.{i}.ffn_up.weight", True),
    Row("layers/w_down", "model.layers.{i}.mlp.down_proj.weight", "blk.{i}.ffn_down.weight", True),
)
ROWS = {r.key: r for r in TABLE}
FORMATS = ("hf", "gguf")
# llama-arch GGUF rows permuted per head (convert_hf_to_gguf.py): our key -> the config field of the head count.
GGUF_UNPERMUTE = {"layers/wq": "n_heads", "layers/bq": "n_heads", "layers/wk": "n_kv_heads",
                  "layers/bk": "n_kv_heads"}


def unpermute(x: np.ndarray, n_heads: int) -> np.ndarray:
  """Undoes llama.cpp's Q/K row permutation (llama arch): within each head, rows were reordered from
  HF's rotate-half layout [first halves; second halves] to interleaved pairs. x [n_heads * Dh, ...]."""
  return x.reshape(n_heads, x.shape[0] // n_heads // 2, 2, *x.shape[1:]).swapaxes(1, 2).reshape(x.shape)


def leaf(config: decoder.Config, read: Callable[[str], np.ndarray], fmt: str, key: str, index: int | None,
         shape: tuple[int, ...], np_dtype, where: str, out: np.ndarray | None = None) -> np.ndarray:
  """One state leaf from checkpoint tensors: read by name, transformed (`TABLE`), stacked, cast.

  Args:
    read: checkpoint tensor name -> array in the file's layout ([out, in] for linear weights).
    fmt: "hf" or "gguf" (the name column; "gguf" also undoes the llama Q/K permutation).
    key, index: `decoder.leaf_key` of the leaf: a per-layer key with index None is all L layers stacked.
    shape: the leaf's shape; np_dtype: its dtype; out: the array to fill (default a new np.empty).
  Raises:
    ValueError: a tensor whose shape differs from what the config implies, naming both.
  """
  row = ROWS[key]
  template = getattr(row, fmt)
  stacked = key.startswith("layers/") and index is None
  out = np.empty(shape, np_dtype) if out is None else out
  want = tuple(shape[1:] if stacked else shape)
  for i in range(config.n_layers) if stacked else [index]:
    name = template.format(i=i)
    x = read(name)
    if fmt == "gguf" and config.arch == "llama" and key in GGUF_UNPERMUTE:
      x = unpermute(x, getattr(config, GGUF_UNPERMUTE[key]))
    stored = want[::-1] if row.linear else want
    if tuple(x.shape) != stored:
      raise ValueError(f"shape mismatch in {where}: tensor {name!r} has shape {tuple(x.shape)}, the config "
                       f"implies {stored} (our {key!r}); the weights do not match the config")
    if stacked:
      out[i] = x.T if row.linear else x
    else:
      out[...] = x.T if row.linear else x
    del x
  return out
