"""Side-by-side benchmark harness: each side runs in its own worker subprocess, driven over pipes.

A worker loads its model once, then answers JSON commands on stdin with JSON lines on stdout, so the driver
can interleave repetitions of both sides (A, B, A, B, ...) and take medians. Memory is measured per side as
peak RSS during a command minus the RSS after loading (VmHWM is reset before each command).
"""
from __future__ import annotations

import functools
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The formulas live in the package (the cost model uses them too); opd_jax.flops imports no jax.
from opd_jax.flops import decode_bytes_per_step, matmul_params, xla_cost  # pylint: disable=g-import-not-at-top,unused-import

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def rss_mb() -> tuple[float, float]:
  """(current RSS, peak RSS since the last reset) of this process in MiB (Linux /proc)."""
  cur = peak = 0.0
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith("VmRSS:"):
        cur = int(line.split()[1]) / 1024
      elif line.startswith("VmHWM:"):
        peak = int(line.split()[1]) / 1024
  return cur, peak


def reset_peak() -> None:
  try:
    with open("/proc/self/clear_refs", "w") as f:
      f.write("5")
  except OSError:
    pass


def serve(handler: Callable[[dict], dict]) -> None:
  """Worker loop: one JSON command per stdin line -> one JSON result per stdout line ("READY" first)."""
  out = sys.stdout
  sys.stdout = sys.stderr            # keep library prints off the protocol channel
  base, _ = rss_mb()
  out.write(json.dumps({"ready": True, "rss_after_load_mb": base}) + "\n")
  out.flush()
  for line in sys.stdin:
    cmd = json.loads(line)
    if cmd.get("quit"):
      break
    reset_peak()
    before, _ = rss_mb()
    t0 = time.perf_counter()
    result = handler(cmd)
    result.setdefault("seconds", time.perf_counter() - t0)
    _, peak = rss_mb()
    result["peak_above_load_mb"] = peak - base
    result["peak_above_before_mb"] = peak - before
    out.write(json.dumps(result) + "\n")
    out.flush()


class Worker:
  """The driver's handle on one side."""

  def __init__(self, argv: list[str], env: dict | None = None):
    self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO,
                                 env=dict(os.environ, PYTHONPATH=REPO, **(env or {})))
    t0 = time.perf_counter()
    self.ready = json.loads(self.proc.stdout.readline())
    self.ready["load_seconds"] = time.perf_counter() - t0

  def __call__(self, **cmd) -> dict:
    self.proc.stdin.write(json.dumps(cmd) + "\n")
    self.proc.stdin.flush()
    line = self.proc.stdout.readline()
    if not line:
      raise RuntimeError(f"worker {self.proc.args} died (exit {self.proc.wait()})")
    return json.loads(line)

  def close(self):
    try:
      self.proc.stdin.write(json.dumps({"quit": True}) + "\n")
      self.proc.stdin.flush()
    except BrokenPipeError:
      pass
    self.proc.wait(timeout=60)


def median(xs):
  return statistics.median(xs)


def table(rows: list[dict], columns: list[str]) -> str:
  widths = [max(len(c), *(len(_fmt(r.get(c))) for r in rows)) for c in columns]
  line = lambda vals: "  ".join(v.rjust(w) for v, w in zip(vals, widths))
  return "\n".join([line(columns), line(["-" * w for w in widths])] +
                   [line([_fmt(r.get(c)) for c in columns]) for r in rows])


def _fmt(v) -> str:
  if v is None:
    return ""
  if isinstance(v, float):
    return f"{v:,.2f}" if abs(v) < 1e5 else f"{v:,.0f}"
  return str(v)


# --------------------------------------------------------------------------------------------------------------
# Models for both sides: presets, HF folders / GGUF files, and random Qwen3 configs (GPU checks, CPU smoke runs).
# The driver imports this module without jax or torch: those are imported inside the functions.

# Random models: "random:<name>[@seed]". Same shapes as the published checkpoints (config.json of Qwen3-0.6B and
# Qwen3-1.7B); the tiny ones exercise the same code paths in seconds. Our side draws the params
# (param_init.init_params, normal(0, 0.02)); with --export_dir it writes them as an HF folder (config.json,
# model.safetensors, tokenizer) that the HF side loads: both sides run the same weights.
RANDOM = {
    "qwen3-0.6b": dict(vocab_size=151936, d_model=1024, n_layers=28, n_heads=16, n_kv_heads=8, head_dim=128,
                       d_ff=3072, rope_theta=1e6, tie_embeddings=True, max_seq_len=40960),
    "qwen3-1.7b": dict(vocab_size=151936, d_model=2048, n_layers=28, n_heads=16, n_kv_heads=8, head_dim=128,
                       d_ff=6144, rope_theta=1e6, tie_embeddings=True, max_seq_len=40960),
    "qwen3-8b": dict(vocab_size=151936, d_model=4096, n_layers=36, n_heads=32, n_kv_heads=8, head_dim=128,
                     d_ff=12288, rope_theta=1e6, tie_embeddings=False, max_seq_len=40960),
    "qwen3-tiny": dict(vocab_size=512, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, d_ff=128,
                       rope_theta=1e6, tie_embeddings=True, max_seq_len=4096),
    "qwen3-tiny-teacher": dict(vocab_size=512, d_model=96, n_layers=3, n_heads=6, n_kv_heads=2, head_dim=16,
                               d_ff=192, rope_theta=1e6, tie_embeddings=True, max_seq_len=4096),
}


def parse_random(spec: str) -> tuple[str, int] | None:
  """"random:<name>[@seed]" -> (name, seed); None for any other spec. Raises ValueError on unknown names."""
  if not spec.startswith("random:"):
    return None
  name, _, seed = spec[len("random:"):].partition("@")
  if name not in RANDOM:
    raise ValueError(f"unknown random model {name!r} in {spec!r}; known: {sorted(RANDOM)}")
  return name, int(seed or 0)


def random_config(name: str):
  """decoder.Config of a RANDOM entry (arch qwen3: q/k RMSNorm, no qkv bias)."""
  from opd_jax.models import decoder  # pylint: disable=g-import-not-at-top
  return decoder.Config(arch="qwen3", qk_norm=True, qkv_bias=False, norm_eps=1e-6, **RANDOM[name])


def ours_model(spec: str, dtype: str, export_dir: str | None = None):
  """Our `Model` for a preset / HF folder / .gguf path (models.load) or a random spec (see RANDOM).

  A random model is drawn from its seed with param_init.init_params; with export_dir it is also written to
  `<export_dir>/<name>@<seed>` as an HF folder for the HF side (`hf_model`).
  """
  from opd_jax import models  # pylint: disable=g-import-not-at-top
  rnd = parse_random(spec)
  if rnd is None:
    model = models.load(spec, dtype=dtype)
  else:
    import jax  # pylint: disable=g-import-not-at-top
    import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
    config = random_config(rnd[0])
    params = models.init_params(jax.random.key(rnd[1]), config, dtype=jnp.dtype(dtype))
    tok = models.byte_tokenizer()
    model = models.Model(config=config, params=params, tokenizer=tok, stop_ids=(int(tok.eos_token_id),),
                         name=spec, sha256=None, source="random")
    if export_dir:
      export_hf(model, os.path.join(export_dir, f"{rnd[0]}@{rnd[1]}"))
  touch(model.params)
  return model


def touch(params) -> None:
  """Reads every param once (memory-mapped weights become resident), so post-load RSS includes the weights."""
  import jax  # pylint: disable=g-import-not-at-top
  jax.block_until_ready([x.sum() for x in jax.tree.leaves(params)])


def export_hf(model, folder: str) -> None:
  """Writes `model` as an HF folder the HF side loads (`opd_jax.models.export.write_hf`)."""
  from opd_jax.models import export  # pylint: disable=g-import-not-at-top
  export.write_hf(model, folder)


def hf_model(spec: str, dtype: str, device: str, export_dir: str | None = None):
  """(transformers model in eval mode on `device` with params of `dtype`, tokenizer) for the same spec as
  `ours_model`: presets load their GGUF file, random specs the folder `ours_model` exported."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  torch_dtype = getattr(torch, dtype)
  rnd = parse_random(spec)
  if rnd is not None:
    if not export_dir:
      raise ValueError(f"{spec}: the HF side of a random model needs --export_dir (written by our side first)")
    folder, kw = os.path.join(export_dir, f"{rnd[0]}@{rnd[1]}"), {}
  elif os.path.isdir(spec):
    folder, kw = spec, {}
  else:
    from opd_jax.models import checkpoints  # pylint: disable=g-import-not-at-top
    path = str(checkpoints.preset_file(spec)[0]) if spec in checkpoints.PRESETS else spec
    folder, kw = os.path.dirname(path), {"gguf_file": os.path.basename(path)}
  tok = transformers.AutoTokenizer.from_pretrained(folder, **kw)
  model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch_dtype, **kw)
  if next(model.parameters()).dtype != torch_dtype:    # older transformers spell it torch_dtype
    model = model.to(torch_dtype)
  return model.to(device).eval(), tok


def jaxpr_flops(fn, *args, loops: bool = True, **kwargs) -> tuple[float, bool]:
  """Matmul FLOPs of fn(*args, **kwargs) read off its jaxpr: 2 x (output size) x (contracted size) for every
  dot_general, each scan body times its length (loops=True) or once (loops=False: the convention of XLA's
  cost_analysis, which counts a while-loop body once). Returns (flops, has_while): a while_loop's trip count
  is unknown, so its body is counted once either way."""
  import math  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  found_while = [False]

  def subs(params):
    for v in params.values():
      for x in (v if isinstance(v, (tuple, list)) else (v,)):
        if hasattr(x, "eqns"):
          yield x
        elif hasattr(x, "jaxpr") and hasattr(x.jaxpr, "eqns"):
          yield x.jaxpr

  def count(jaxpr) -> float:
    total = 0.0
    for eqn in jaxpr.eqns:
      name = eqn.primitive.name
      if name == "dot_general":
        (lhs_contract, _), _ = eqn.params["dimension_numbers"]
        lhs = eqn.invars[0].aval.shape
        total += 2.0 * math.prod(eqn.outvars[0].aval.shape) * math.prod(lhs[d] for d in lhs_contract)
      inner = [count(j) for j in subs(eqn.params)]
      if name == "cond":
        total += max(inner, default=0.0)
      else:
        found_while[0] |= name == "while"
        total += (eqn.params.get("length", 1) if name == "scan" and loops else 1) * sum(inner)
    return total

  return count(jax.make_jaxpr(functools.partial(fn, **kwargs))(*args).jaxpr), found_while[0]


class CompileCounter:
  """Counts XLA backend compilations (jax.monitoring events) in this process, e.g. to show that steady-state
  repetitions do not recompile: `n = counter.count; f(...); assert counter.count == n`."""

  def __init__(self):
    from jax import monitoring  # pylint: disable=g-import-not-at-top
    self.count = 0

    def listen(event, *_, **__):
      if event.endswith("backend_compile_duration"):
        self.count += 1
    monitoring.register_event_duration_secs_listener(listen)


def jax_device_memory_mb() -> tuple[float, float] | None:
  """(bytes in use, peak bytes in use) of jax's first device in MiB, or None where unreported (CPU)."""
  import jax  # pylint: disable=g-import-not-at-top
  stats = jax.devices()[0].memory_stats() if jax.default_backend() != "cpu" else None
  if not stats:
    return None
  return stats.get("bytes_in_use", 0) / 2**20, stats.get("peak_bytes_in_use", 0) / 2**20


def gsm8k_text(path: str | None) -> list[str]:
  """Real text for the benchmarks: GSM8K items ("Question: ...\nAnswer: ...") from a JSONL file (default
  /work/shared/data/gsm8k_test.jsonl when present), or a built-in paragraph."""
  default = os.path.join("/work/shared/data", "gsm8k_test.jsonl")
  if path and not os.path.isfile(path):
    raise FileNotFoundError(f"--data {path!r} does not exist; pass a GSM8K JSONL file or omit --data")
  path = path or (default if os.path.isfile(default) else None)
  if path:
    with open(path) as f:
      rows = [json.loads(line) for line in f if line.strip()]
    return [f"Question: {r['question']}\nAnswer: {r['answer']}\n\n" for r in rows]
  return [("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips to her friends "
           "in May. How many clips did Natalia sell altogether in April and May? Natalia sold 48/2 = 24 clips in "
           "May. Natalia sold 48+24 = 72 clips altogether in April and May. #### 72\n\n")]


def token_rows(tokenizer, texts: list[str], rows: int, length: int, vocab: int) -> list[list[int]]:
  """`rows` consecutive, disjoint windows of `length` token ids of the concatenated texts (cycled when short;
  each text tokenized on its own), ids < vocab."""
  need, ids = rows * length, []
  for start in range(0, len(texts), 256):
    for piece in tokenizer(texts[start:start + 256], add_special_tokens=False)["input_ids"]:
      ids += [i for i in piece if i < vocab]
    if len(ids) >= need:
      break
  if not ids:
    raise ValueError("the benchmark text tokenized to nothing; pass --data with a GSM8K JSONL file")
  ids = (ids * (need // len(ids) + 1))[:need]
  return [ids[r * length:(r + 1) * length] for r in range(rows)]


def sig(x: float, digits: int = 4) -> float:
  """x rounded to `digits` significant digits (small figures such as a CPU's MFU stay visible)."""
  return float(f"{x:.{digits}g}")


def final_json(figures: dict, path: str | None = None) -> None:
  """Prints the closing JSON line (and writes it to `path` when given)."""
  line = json.dumps(figures)
  print(line, flush=True)
  if path:
    with open(path, "w") as f:
      f.write(line + "\n")
