"""Model FLOPs and bytes by formula (no jax import: the benchmarks' HF-side workers use it too).

Shared by the cost model (`opd_jax.cost.estimate`, `--dry_run --cost_model`), the study's checklist (its memory
line, `opd_jax.study.checklist`) and the benchmarks (`benchmarks/harness.py`); it imports nothing of opd_jax.
"""
from __future__ import annotations


def matmul_params(config) -> int:
  """N: weights multiplied per token = every param but the input embedding table, plus the output head once
  (tied or not). Model FLOPs per token = 2 N (attention scores and softmax are extra)."""
  c = config
  qd, kd = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
  per_layer = c.d_model * (qd + 2 * kd) + qd * c.d_model + 3 * c.d_model * c.d_ff
  return c.n_layers * per_layer + c.d_model * c.vocab_size


def decode_bytes_per_step(config, batch: int, cache_slots: int, bytes_per_el: int) -> int:
  """HBM bytes one decode step of our sampler reads: the matmul weights once (`matmul_params`), plus K and V of
  every layer over all cache slots (attention reads the whole fixed-size cache, masked):
  bytes = (N + 2 L B S K Dh) x bytes per element."""
  c = config
  kv = 2 * c.n_layers * batch * cache_slots * c.n_kv_heads * c.head_dim
  return (matmul_params(c) + kv) * bytes_per_el


def xla_cost(compiled) -> dict:
  """{"flops", "bytes accessed"} of `jax.jit(f).lower(...).compile().cost_analysis()` (dict or [dict])."""
  ca = compiled.cost_analysis()
  ca = ca[0] if isinstance(ca, (list, tuple)) else ca
  return {k: float(ca.get(k, float("nan"))) for k in ("flops", "bytes accessed")}
