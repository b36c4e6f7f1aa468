"""Decode speed: our on-device sampler vs HF transformers `generate`, same model, same device, side by side.

  python benchmarks/sampling.py                         # real Qwen2.5-Coder-0.5B (offline preset), ~15 min
  python benchmarks/sampling.py --batches=1,8 --new_tokens=32 --reps=3
  python benchmarks/sampling.py --model=random:qwen3-0.6b --dtype=bfloat16 --batches=128 --peak_bw=4.8e12  # GPU

Pure sampling on both sides: temperature 1, top_k 0, top_p 1, exactly --new_tokens new tokens per row (no
stop tokens: our stop_ids=(); HF min_new_tokens = max_new_tokens), same prompt, same dtype and threads.
Each side runs in its own subprocess; repetitions are interleaved and medians reported. Our first call per
shape includes compilation: it is reported as compile_s and excluded from the medians. Random models
(`random:<name>[@seed]`, benchmarks/harness.py) are drawn by our side and exported for the HF side (same
weights). With --peak_bw, the HBM-bandwidth fraction of our decode: bytes read per step
(harness.decode_bytes_per_step: weights + the whole KV cache) x steps/s / peak. Ends with one JSON line.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import harness  # pylint: disable=g-import-not-at-top

PROMPT = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips to her friends "
          "in May. How many clips did Natalia sell altogether in April and May?")


def _prompt_ids(tokenizer):
  msgs = [{"role": "user", "content": PROMPT}]
  text = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
  return tokenizer(text, add_special_tokens=False)["input_ids"]


def ours(args):
  import time  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  from opd_jax.decode import sampling  # pylint: disable=g-import-not-at-top
  from opd_jax import models  # pylint: disable=g-import-not-at-top
  model = models.with_layout(harness.ours_model(args.model, args.dtype, args.export_dir), args.layout or None)
  prompt = _prompt_ids(model.tokenizer)
  n_params = harness.matmul_params(model.config)
  itemsize = jax.numpy.dtype(args.dtype).itemsize
  seen = set()

  ceiling = {}

  def handle(cmd):
    B, N = cmd["batch"], cmd["new_tokens"]
    compile_s = None
    if B not in ceiling:
      ceiling[B] = matmul_ceiling(model, B)
    if (B, N) not in seen:
      t0 = time.perf_counter()
      sampling.sample(model, [prompt] * B, key=jax.random.key(0), max_new_tokens=N, stop_ids=())
      compile_s = time.perf_counter() - t0
      seen.add((B, N))
    trace = args.profile_dir if cmd["rep"] == 0 and args.profile_dir else None
    if trace:                                            # a jax.profiler trace of the first timed repetition
      jax.profiler.start_trace(os.path.join(trace, f"b{B}"))
    t0 = time.perf_counter()
    out = sampling.sample(model, [prompt] * B, key=jax.random.key(cmd["rep"] + 1), max_new_tokens=N, stop_ids=())
    jax.block_until_ready(out.tokens)
    dt = time.perf_counter() - t0
    if trace:
      jax.profiler.stop_trace()
    assert int(out.lengths.sum()) == B * N
    slots = sampling.bucket(len(prompt), 16) + N        # sampling.sample's cache size  pylint: disable=protected-access
    return {"seconds": dt, "tokens": B * N, "first_call_s": compile_s, "n_params": n_params,
            "dtype": args.dtype, "threads": os.cpu_count(), "prompt_len": len(prompt), "device": jax.default_backend(),
            "matmul_gflops": ceiling[B],
            "bytes_per_step": harness.decode_bytes_per_step(model.config, B, slots, itemsize)}
  harness.serve(handle)


MATMULS = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down", "lm_head")   # decoder.py's matmul weights


def matmul_ceiling(model, B: int, reps: int = 5) -> float:
  """GFLOP/s of XLA's matmuls at one decode step's shapes: [B, K] @ every matmul weight of the model (`MATMULS`,
  per layer; the state's own arrays, so they stream from memory as in decode; the embedding table is a gather,
  not a matmul) and the head, in one jitted program with nothing else; median of `reps` after a warm-up. The
  decode's ceiling."""
  import time  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  c = model.config
  leaves = {}                                           # param name (last dict key) -> its arrays
  for path, w in jax.tree_util.tree_leaves_with_path(model.params):
    name = [k.key for k in path if isinstance(getattr(k, "key", None), str)][-1]   # an nnx.State leaf ends in .value
    leaves.setdefault(name, []).append(w)
  weights = [w for name in MATMULS for w in leaves.get(name, [])]
  if c.tie_embeddings:
    weights += [w.T for w in leaves["embed"]]
  mats = [m for w in weights for m in (w if w.ndim == 3 else [w])]      # stacked layout: [L, K, N]
  flops = 2 * B * sum(m.shape[0] * m.shape[1] for m in mats)
  assert flops == 2 * B * harness.matmul_params(c), (flops, 2 * B * harness.matmul_params(c))

  @jax.jit
  def step(ws, x):
    return sum(jnp.sum(x[:, :w.shape[0]] @ w) for w in ws)
  x = jnp.ones((B, max(m.shape[0] for m in mats)), mats[0].dtype)
  jax.block_until_ready(step(mats, x))
  times = []
  for _ in range(reps):
    t0 = time.perf_counter()
    jax.block_until_ready(step(mats, x))
    times.append(time.perf_counter() - t0)
  return flops / harness.median(times) / 1e9


def hf(args):
  import time  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(args.threads)
  device = "cuda" if torch.cuda.is_available() else "cpu"
  model, tok = harness.hf_model(args.model, args.dtype, device, args.export_dir)
  prompt = _prompt_ids(tok)
  sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

  def handle(cmd):
    B, N = cmd["batch"], cmd["new_tokens"]
    ids = torch.tensor([prompt] * B, device=device)
    torch.manual_seed(cmd["rep"])
    sync()
    t0 = time.perf_counter()
    with torch.no_grad():
      out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=1.0, top_k=0,
                           top_p=1.0, min_new_tokens=N, max_new_tokens=N,
                           pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)
    sync()
    dt = time.perf_counter() - t0
    assert out.shape[1] - len(prompt) == N
    return {"seconds": dt, "tokens": B * N, "dtype": args.dtype, "threads": torch.get_num_threads(),
            "prompt_len": len(prompt), "device": device}
  harness.serve(handle)


def main():
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--model", default="qwen2.5-coder-0.5b-instruct", help="preset, HF folder, random:<name>[@seed]")
  ap.add_argument("--batches", default="1,8,32")
  ap.add_argument("--new_tokens", type=int, default=64)
  ap.add_argument("--reps", type=int, default=3)
  ap.add_argument("--threads", type=int, default=os.cpu_count())
  ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="params dtype, both sides")
  ap.add_argument("--layout", default="", choices=["", "stacked", "layered"],
                  help="our params' layout (decoder.py); '' = the platform default (models.default_layout)")
  ap.add_argument("--reference", default="hf", choices=["hf", "none"], help="none: our side only (no torch)")
  ap.add_argument("--peak_bw", type=float, default=0.0, help="device HBM bytes/s for the bandwidth fraction")
  ap.add_argument("--export_dir", default=None, help="where random models are written for the HF side")
  ap.add_argument("--json_out", default=None, help="also write the final JSON line to this file")
  ap.add_argument("--profile_dir", default=None, help="write a jax.profiler trace of our first timed repetition")
  ap.add_argument("--side", choices=["ours", "hf"], help=argparse.SUPPRESS)
  args = ap.parse_args()
  if args.side:
    return (ours if args.side == "ours" else hf)(args)
  tmp = None
  if args.export_dir is None:
    tmp = args.export_dir = tempfile.mkdtemp(prefix="opd_bench_", dir="/dev/shm" if os.access("/dev/shm", os.W_OK)
                                             else None)
  argv = [sys.executable, os.path.abspath(__file__), f"--model={args.model}", f"--threads={args.threads}",
          f"--dtype={args.dtype}", f"--export_dir={args.export_dir}", f"--layout={args.layout}"]
  env = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}        # both sides share one accelerator
  try:
    sides = {"ours": harness.Worker(argv + ["--side=ours"], env)}   # first: it exports random models
    if args.reference == "hf":
      sides["hf"] = harness.Worker(argv + ["--side=hf"], env)
    rows, figures = [], {}
    for B in [int(b) for b in args.batches.split(",")]:
      runs = {s: [] for s in sides}
      for rep in range(args.reps):
        for s, w in sides.items():
          runs[s].append(w(batch=B, new_tokens=args.new_tokens, rep=rep))
      n_params = runs["ours"][0]["n_params"]
      figures["prompt_len"] = runs["ours"][0]["prompt_len"]
      for s, rs in runs.items():
        sec = harness.median([r["seconds"] for r in rs])
        tps = rs[0]["tokens"] / sec
        row = {"side": s, "device": rs[0]["device"], "batch": B, "new_tokens": args.new_tokens,
               "dtype": rs[0]["dtype"], "threads": rs[0]["threads"], "tokens/s": tps,
               "GFLOP/s": 2 * n_params * tps / 1e9, "first_call_s": rs[0].get("first_call_s") or 0.0,
               "mem_above_load_MB": harness.median([r["peak_above_load_mb"] for r in rs])}
        if s == "ours":
          row["matmul_GFLOP/s"] = rs[0]["matmul_gflops"]
          row["of_matmul"] = row["GFLOP/s"] / rs[0]["matmul_gflops"]
          figures[f"matmul_gflops_b{B}"], figures[f"of_matmul_b{B}"] = (harness.sig(rs[0]["matmul_gflops"]),
                                                                      harness.sig(row["of_matmul"]))
        if s == "ours" and args.peak_bw:
          row["HBM_frac"] = rs[0]["bytes_per_step"] * (tps / B) / args.peak_bw
          figures[f"hbm_fraction_b{B}"] = harness.sig(row["HBM_frac"])
          figures[f"bytes_per_step_b{B}"] = rs[0]["bytes_per_step"]
        rows.append(row)
        figures[f"{s}_tokens_per_s_b{B}"] = round(tps, 2)
      if "hf" in sides:
        figures[f"speedup_b{B}"] = round(figures[f"ours_tokens_per_s_b{B}"] / figures[f"hf_tokens_per_s_b{B}"], 3)
    for w in sides.values():
      w.close()
  finally:
    if tmp:
      shutil.rmtree(tmp, ignore_errors=True)
  print(harness.table(rows, ["side", "device", "batch", "new_tokens", "dtype", "threads", "tokens/s", "GFLOP/s",
                             "first_call_s", "mem_above_load_MB", "matmul_GFLOP/s", "of_matmul"]
                      + (["HBM_frac"] if args.peak_bw else [])))
  print("GFLOP/s = 2 x N x tokens/s, N = matmul weights (harness.matmul_params). first_call_s (ours) includes "
        "compilation. matmul_GFLOP/s: XLA's matmuls alone at a decode step's shapes over the same weights "
        "(matmul_ceiling); of_matmul = GFLOP/s / matmul_GFLOP/s." + (f" HBM_frac = bytes read per step (weights + whole KV cache) x steps/s / {args.peak_bw:.3g}"
                          if args.peak_bw else ""))
  last = max(int(b) for b in args.batches.split(","))
  figures.update(benchmark="sampling", model=args.model, dtype=args.dtype, new_tokens=args.new_tokens,
                 reps=args.reps,
                 speedup=figures.get(f"speedup_b{last}"),
                 load_seconds={s: round(w.ready["load_seconds"], 1) for s, w in sides.items()})
  harness.final_json(figures, args.json_out)


if __name__ == "__main__":
  main()
