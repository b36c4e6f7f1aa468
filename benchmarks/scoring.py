"""Teacher scoring: ours (`opd_jax.decode.scoring.score`, every predictor, streamed in chunks) vs HF transformers +
PyTorch doing the same computation on the same models and tokens, side by side.

  python benchmarks/scoring.py                                  # 0.5B student + 1.5B teacher, fp32, B=1, T=2048
  python benchmarks/scoring.py --batch=1 --seq_len=64 --reps=3   # quick look
  python benchmarks/scoring.py --teacher=self                    # self-distillation teacher (the student)
  python benchmarks/scoring.py --student=random:qwen3-0.6b --teacher=random:qwen3-1.7b@1 --dtype=bfloat16 \
      --batch=8 --seq_len=1024 --chunk=512 --peak_flops=989e12  # H200 (what benchmarks/device_check.sh runs)

The work: B rows of P + T tokens of GSM8K text (--data, default /work/shared/data/gsm8k_test.jsonl, else a
built-in paragraph); the first P tokens are the prompt of both models, the next T the scored response. Per
response token, both sides produce log p(y_t), log q(y_t) and every predictor of `predictors.PREDICTORS`
(KL both ways, JS, JSD_beta, TV, cosine, both entropies, top-k overlap, log q - log p):
  ours  `scoring.score(student, teacher, prompts, prompts, responses)`: prefill + chunks of C positions, so
        no [B, T, V] tensor exists (memory O(B C V)).
  HF    both models' full forwards under torch.no_grad (use_cache=False), fp32 log_softmax over the whole
        vocabulary, and the predictors in torch on the full [B, T, V] tensors: the straightforward way.
Same dtype, same tokens, same thread count (torch.set_num_threads; XLA uses every core). Each side runs in its
own subprocess; one warm-up call per side (our compile) is excluded, then --reps interleaved repetitions and
medians. Memory: peak RSS during a call minus RSS after loading (weights touched first), or, on a GPU, the
device's peak allocation above the post-load allocation. Our side also counts XLA compilations per call
(steady-state repetitions must show 0) and cross-checks the FLOP count with `compiled.cost_analysis()`.
Where both sides' weights and HF's [B, T, V] tensors do not fit in host memory together (the default 0.5B +
1.5B fp32 at T = 2048 on a 23 GB host), --isolate=auto keeps one side alive at a time: every repetition starts
a fresh worker for each side (load, one warm-up call, the timed call), still interleaved.
Ends with one JSON line: tokens/s, "speedup" (ours / HF), "peak_mem_ratio" (ours / HF), MFU when --peak_flops.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import harness  # pylint: disable=g-import-not-at-top

FLOPS_FORMULA = "model FLOPs = sum over both models of 2 x N x B x (P + T), N = harness.matmul_params (weights)"


def ours(args):
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from opd_jax.decode import scoring  # pylint: disable=g-import-not-at-top
  counter = harness.CompileCounter()
  student = harness.ours_model(args.student, args.dtype, args.export_dir)
  teacher = student if args.teacher == "self" else harness.ours_model(args.teacher, args.dtype, args.export_dir)
  P = args.prompt_len
  rows = harness.token_rows(student.tokenizer, harness.gsm8k_text(args.data), args.batch, P + args.seq_len,
                            student.config.vocab_size)
  prompts, responses = [r[:P] for r in rows], [r[P:] for r in rows]
  kw = dict(chunk=args.chunk, top_k=args.top_k, beta=args.beta)
  mem0 = harness.jax_device_memory_mb()

  def info():
    return {"rows": rows, "n_student": harness.matmul_params(student.config),
            "n_teacher": harness.matmul_params(teacher.config), "backend": jax.default_backend(),
            "vocab": student.config.vocab_size}

  def analyze():
    """FLOPs of the compiled program three ways (see harness.jaxpr_flops); the arrays `score` builds."""
    # pylint: disable-next=protected-access
    *arrays, s_rows, t_rows = scoring._pad_rows(prompts, prompts, responses, list(range(len(rows))), len(rows),
                                                args.chunk)
    arrays = (*arrays, None, s_rows, t_rows)      # score_arrays(..., s_hidden, s_rows, t_rows), as scoring.score
    shared = teacher is student
    t_params, t_graphdef = scoring._teacher_args(student, teacher, shared, arrays)  # pylint: disable=protected-access
    static = dict(s_graphdef=student.graphdef, t_graphdef=t_graphdef, return_hidden=False, **kw)
    n = counter.count
    try:
      xla = harness.xla_cost(scoring.score_arrays.lower(student.params, t_params, *arrays, **static).compile())
    except Exception as e:  # pylint: disable=broad-except  (an API change must not cost the timings)
      print(f"cost_analysis failed: {e!r}", file=sys.stderr)
      xla = {"flops": float("nan"), "bytes accessed": float("nan")}
    all_loops, _ = harness.jaxpr_flops(scoring.score_arrays, student.params, t_params, *arrays, **static)
    once, _ = harness.jaxpr_flops(scoring.score_arrays, student.params, t_params, *arrays, loops=False, **static)
    return {"xla_flops": xla["flops"], "xla_bytes": xla["bytes accessed"], "jaxpr_flops": all_loops,
            "jaxpr_flops_loop_bodies_once": once, "padded_shapes": [list(a.shape) for a in arrays if a is not None],
            "analysis_compiles": counter.count - n}

  def handle(cmd):
    if cmd["what"] == "info":
      return info()
    if cmd["what"] == "analyze":
      return analyze()
    cache_size = getattr(scoring.score_arrays, "_cache_size", lambda: -1)   # private jax API: optional
    programs, n = cache_size(), counter.count
    t0 = time.perf_counter()
    out = scoring.score(student, teacher, prompts, prompts, responses, batch_size=len(rows), **kw)
    dt = time.perf_counter() - t0
    result = {"seconds": dt, "compiles": counter.count - n,
              "new_programs": cache_size() - programs,
              "means": {k: float(np.mean(np.concatenate(out[k]))) for k in scoring.DENSE_KEYS},
              "dtype": args.dtype, "threads": os.cpu_count(), "device": jax.default_backend()}
    mem = harness.jax_device_memory_mb()
    if mem is not None and mem0 is not None:
      result["device_peak_above_load_mb"] = mem[1] - mem0[0]
    return result

  harness.serve(handle)


def hf(args):
  import torch  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(args.threads)
  device = "cuda" if torch.cuda.is_available() else "cpu"
  student, _ = harness.hf_model(args.student, args.dtype, device, args.export_dir)
  teacher = student if args.teacher == "self" else harness.hf_model(args.teacher, args.dtype, device,
                                                                     args.export_dir)[0]
  P, k, beta = args.prompt_len, args.top_k, args.beta
  state = {}
  sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
  alloc0 = torch.cuda.memory_allocated() if device == "cuda" else 0

  def kl(p, loga, logb):
    return (p * (loga - logb)).sum(-1)

  def jsd(p, q, logp, logq, b):                  # GKD: b KL(q || m) + (1 - b) KL(p || m), m = b q + (1 - b) p
    logm = torch.log(b * q + (1 - b) * p)
    return b * kl(q, logq, logm) + (1 - b) * kl(p, logp, logm)

  def predictors(logp, logq, y):                 # [B, T, V] fp32 each, y [B, T]
    p, q = logp.exp(), logq.exp()
    js = jsd(p, q, logp, logq, 0.5)
    top_p, top_q = logp.topk(k, dim=-1).indices, logq.topk(k, dim=-1).indices
    at = lambda lp: lp.gather(-1, y[..., None])[..., 0]
    return {
        "logp": at(logp), "logq": at(logq), "kl_pq": kl(p, logp, logq), "kl_qp": kl(q, logq, logp), "js": js,
        "jsd_beta": js if beta == 0.5 else jsd(p, q, logp, logq, beta),
        "tv": 0.5 * (p - q).abs().sum(-1),
        "cosine": (p * q).sum(-1) / (p.norm(dim=-1) * q.norm(dim=-1)),
        "entropy_p": -(p * logp).sum(-1), "entropy_q": -(q * logq).sum(-1),
        "topk_overlap": (top_p[..., :, None] == top_q[..., None, :]).any(-1).sum(-1).float() / k,
        "logq_minus_logp": at(logq) - at(logp)}

  def handle(cmd):
    if cmd["what"] == "set_rows":
      state["ids"] = torch.tensor(cmd["rows"], device=device)
      return {}
    ids = state["ids"]
    if device == "cuda":
      torch.cuda.reset_peak_memory_stats()
    sync()
    t0 = time.perf_counter()
    with torch.no_grad():
      logits_s = student(ids, use_cache=False).logits                        # [B, P + T, V]
      logits_t = teacher(ids, use_cache=False).logits
      logp = torch.log_softmax(logits_s[:, P - 1:-1].float(), dim=-1)       # predicts response tokens [B, T, V]
      logq = torch.log_softmax(logits_t[:, P - 1:-1].float(), dim=-1)
      out = predictors(logp, logq, ids[:, P:])
    sync()
    dt = time.perf_counter() - t0
    result = {"seconds": dt, "means": {name: float(v.float().mean()) for name, v in out.items()},
              "dtype": args.dtype, "threads": torch.get_num_threads(), "device": device}
    if device == "cuda":
      result["device_peak_above_load_mb"] = (torch.cuda.max_memory_allocated() - alloc0) / 2**20
    return result

  harness.serve(handle)


def _isolate(args, ours_rss_mb: float, vocab: int) -> bool:
  """--isolate: yes / no, or auto: isolate when both sides cannot be resident at once in host memory.

  Estimate (CPU): twice our RSS after loading (both sides hold the weights) plus 10 fp32 [B, P + T, V] tensors
  (HF's logits, log-softmaxes and predictor temporaries), against MemTotal in /proc/meminfo.
  """
  if args.isolate != "auto" or args.reference != "hf":
    return args.isolate == "yes" and args.reference == "hf"
  try:
    with open("/proc/meminfo") as f:
      total_mb = next(int(line.split()[1]) / 1024 for line in f if line.startswith("MemTotal:"))
  except (OSError, StopIteration):
    return False
  need_mb = 2 * ours_rss_mb + 10 * args.batch * (args.prompt_len + args.seq_len) * vocab * 4 / 2**20
  return need_mb > 0.9 * total_mb


def main():
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--student", default="qwen2.5-coder-0.5b-instruct", help="preset, HF folder, random:<name>[@seed]")
  ap.add_argument("--teacher", default="qwen2.5-coder-1.5b-instruct", help="like --student, or 'self'")
  ap.add_argument("--data", default=None, help="GSM8K JSONL (default: /work/shared/data/gsm8k_test.jsonl)")
  ap.add_argument("--batch", type=int, default=1, help="B rows")
  ap.add_argument("--seq_len", type=int, default=2048, help="T scored response tokens per row")
  ap.add_argument("--prompt_len", type=int, default=16, help="P prompt tokens per row (both models)")
  ap.add_argument("--chunk", type=int, default=128, help="our positions per chunk C")
  ap.add_argument("--top_k", type=int, default=8)
  ap.add_argument("--beta", type=float, default=0.5)
  ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="params dtype, both sides")
  ap.add_argument("--reps", type=int, default=3)
  ap.add_argument("--threads", type=int, default=os.cpu_count())
  ap.add_argument("--reference", default="hf", choices=["hf", "none"], help="none: our side only (no torch)")
  ap.add_argument("--peak_flops", type=float, default=0.0, help="device peak FLOP/s for MFU (H200 bf16: 989e12)")
  ap.add_argument("--export_dir", default=None, help="where random models are written for the HF side")
  ap.add_argument("--json_out", default=None, help="also write the final JSON line to this file")
  ap.add_argument("--isolate", default="auto", choices=["auto", "yes", "no"],
                  help="one side alive at a time (a fresh worker per repetition; auto: when both do not fit)")
  ap.add_argument("--side", choices=["ours", "hf"], help=argparse.SUPPRESS)
  args = ap.parse_args()
  if args.reps < 1 or args.batch < 1 or args.seq_len < 1 or args.prompt_len < 1:
    raise ValueError(f"--reps, --batch, --seq_len and --prompt_len must be >= 1, got {args.reps}, {args.batch}, "
                     f"{args.seq_len}, {args.prompt_len}")
  if args.side:
    return (ours if args.side == "ours" else hf)(args)

  tmp = None
  if args.export_dir is None:
    tmp = args.export_dir = tempfile.mkdtemp(prefix="opd_bench_", dir="/dev/shm" if os.access("/dev/shm", os.W_OK)
                                             else None)
  argv = [sys.executable, os.path.abspath(__file__)] + [f"--{k}={v}" for k, v in vars(args).items()
                                                        if v is not None and k not in ("side", "json_out")]
  env = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}        # both sides share one accelerator
  names = ["ours"] + (["hf"] if args.reference == "hf" else [])
  runs, first, load_seconds, workers = {s: [] for s in names}, {}, {}, {}
  try:
    def start(side):
      w = workers[side] = harness.Worker(argv + [f"--side={side}"], env)
      load_seconds.setdefault(side, w.ready["load_seconds"])
      if side == "hf":
        w(what="set_rows", rows=info["rows"])
      return w

    start("ours")                                                    # first: it exports random models
    info = workers["ours"](what="info")
    isolate = _isolate(args, workers["ours"].ready["rss_after_load_mb"], info["vocab"])
    first["ours"] = workers["ours"](what="run")                      # compile / warm-up: not in the medians
    analysis = workers["ours"](what="analyze")
    for rep in range(args.reps):                                     # interleaved: ours, hf, ours, hf, ...
      for s in names:
        if s not in workers:                                         # isolated: a fresh worker, warmed up
          start(s)
          first.setdefault(s, workers[s](what="run"))
        runs[s].append(workers[s](what="run"))
        if isolate:
          workers.pop(s).close()
    print("sides: " + ("one alive at a time (--isolate): each repetition a fresh worker, warmed up" if isolate
                       else "both alive, interleaved"))
  finally:
    for w in workers.values():
      w.close()
    if tmp:
      shutil.rmtree(tmp, ignore_errors=True)

  B, T, P = args.batch, args.seq_len, args.prompt_len
  n_total = info["n_student"] + info["n_teacher"]
  model_flops = 2.0 * n_total * B * (P + T)
  on_device = all("device_peak_above_load_mb" in rs[0] for rs in runs.values())
  mem_key = "device_peak_above_load_mb" if on_device else "peak_above_load_mb"
  rows, figures = [], {}
  for s, rs in runs.items():
    sec = harness.median([r["seconds"] for r in rs])
    mem = harness.median([r[mem_key] for r in rs])
    rows.append({"side": s, "device": rs[0]["device"], "dtype": rs[0]["dtype"], "threads": rs[0]["threads"],
                 "B": B, "P": P, "T": T, "tokens/s": B * T / sec, "GFLOP/s": model_flops / sec / 1e9,
                 "first_call_s": first[s]["seconds"], "median_s": sec, "mem_above_load_MB": mem,
                 "compiles/rep": max(r.get("compiles", 0) for r in rs) if s == "ours" else "-"})
    figures[f"{s}_tokens_per_s"] = round(B * T / sec, 3)
    figures[f"{s}_seconds"] = round(sec, 4)
    figures[f"{s}_mem_above_load_mb"] = round(mem, 1)
  print(harness.table(rows, ["side", "device", "dtype", "threads", "B", "P", "T", "tokens/s", "GFLOP/s",
                             "first_call_s", "median_s", "mem_above_load_MB", "compiles/rep"]))
  print(f"{FLOPS_FORMULA}\n  = 2 x ({info['n_student']:,} + {info['n_teacher']:,}) x {B} x ({P} + {T}) = "
        f"{model_flops:.4g} per call; tokens/s counts the B x T scored tokens.")
  print(f"memory: {mem_key} (peak during a call minus after loading; weights excluded). Our first call "
        f"includes compilation; steady-state compiles per repetition: "
        f"{[r['compiles'] for r in runs['ours']]} (new score_arrays programs: "
        f"{[r['new_programs'] for r in runs['ours']]}).")

  ours_s = figures["ours_seconds"]
  prog = analysis["jaxpr_flops"]
  print(f"FLOP cross-check of our compiled program (padded shapes {analysis['padded_shapes']}):\n"
        f"  matmul FLOPs in the jaxpr, scan bodies x trip count: {prog:.4g} ({prog / model_flops:.3f} x model "
        "FLOPs; the rest is attention over the cache and padding)\n"
        f"  compiled.cost_analysis()['flops'] = {analysis['xla_flops']:.4g}; the jaxpr count with every loop body "
        f"once = {analysis['jaxpr_flops_loop_bodies_once']:.4g} (ratio "
        f"{analysis['xla_flops'] / analysis['jaxpr_flops_loop_bodies_once']:.3f}; XLA counts a while-loop body "
        f"once, so it is ~1 when the jaxpr count is right; vs the trip-counted jaxpr: "
        f"{analysis['xla_flops'] / prog:.3f})")
  if args.peak_flops:
    mfu = model_flops / ours_s / args.peak_flops
    print(f"MFU = model FLOPs / median seconds / peak = {model_flops:.4g} / {ours_s:.4g} / {args.peak_flops:.4g} = "
          f"{mfu:.4g}  (with the program's matmul FLOPs: {prog / ours_s / args.peak_flops:.4g})")
    figures.update(mfu=harness.sig(mfu), program_mfu=harness.sig(prog / ours_s / args.peak_flops),
                   peak_flops=args.peak_flops)
  if "hf" in runs:
    diffs = {k: abs(runs["ours"][-1]["means"][k] - runs["hf"][-1]["means"][k]) for k in runs["ours"][-1]["means"]}
    worst = max(diffs, key=diffs.get)
    print(f"parity: mean of every predictor, ours vs HF: max |difference| {diffs[worst]:.3g} ({worst})")
    figures.update(speedup=round(figures["ours_tokens_per_s"] / figures["hf_tokens_per_s"], 3),
                   peak_mem_ratio=(harness.sig(figures["ours_mem_above_load_mb"] / figures["hf_mem_above_load_mb"])
                                   if figures["hf_mem_above_load_mb"] > 0 else None),
                   parity_max_abs_diff=float(f"{diffs[worst]:.3g}"))
  else:
    figures.update(speedup=None, peak_mem_ratio=None)
  figures.update(benchmark="scoring", student=args.student, teacher=args.teacher, dtype=args.dtype, B=B, P=P, T=T,
                 chunk=args.chunk, reps=args.reps, device=runs["ours"][0]["device"], mem_metric=mem_key,
                 model_flops_per_call=model_flops, program_flops_per_call=prog, xla_flops=analysis["xla_flops"],
                 ours_gflops=round(model_flops / ours_s / 1e9, 2),
                 compiles_steady_state=sum(r["compiles"] for r in runs["ours"]),
                 first_call_s={s: round(f["seconds"], 2) for s, f in first.items()},
                 load_seconds={s: round(v, 1) for s, v in load_seconds.items()}, isolated=isolate)
  harness.final_json(figures, args.json_out)


if __name__ == "__main__":
  main()
