"""One OPD train step (`training.step.make_train_step`): seconds per step, memory, MFU, and the cost model's
prediction for the same shapes (issue 13: memory of the LoRA step; issue 15: the trainer's cost model).

  python benchmarks/train_step.py                     # 0.5B preset, self-teacher, LoRA r16, 8 x 256 (CPU memory)
  python benchmarks/train_step.py --student=random:qwen3-tiny --rows=2 --resp_len=32 --prompt_len=16 --reps=2
  python benchmarks/train_step.py --student=random:qwen3-0.6b --dtype=bfloat16 --rows=32 --resp_len=1024 \
      --accelerator=h200                              # GPU (benchmarks/device_check.sh)

Ours only (no HF reference: transformers has no OPD trainer to compare with). Random token rows: the student
reads [prompt; response], the self-teacher [prompt + privileged context; response] (--ctx_len more tokens), an
external teacher (--teacher=<spec>) [prompt; response]. The first call (compile) is timed apart, then --reps
steps, median. Memory: on CPU the peak RSS during the steps minus the RSS after loading and building the state
(process-wide: XLA's buffers, the optimizer state and the batch); on a GPU the device's peak allocation.

Model FLOPs per step = grad x 2 N_s B (Ps + T) + 2 N_t B (Pt + T) with grad = 2 for LoRA (forward + input
gradients) and 3 for full fine-tuning, plus one more student forward with --remat (recomputed activations);
MFU = model FLOPs / s / --peak_flops. The cost model's time is `opd_jax.cost.estimate.cost` of
`opd_jax.training.costs.step_calls` for these shapes: the roofline on --accelerator, or its CPU estimate.
Ends with one JSON line.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import harness  # pylint: disable=g-import-not-at-top


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--student", default="qwen2.5-coder-0.5b-instruct")
  ap.add_argument("--teacher", default="self", help="self (privileged context) or a model spec")
  ap.add_argument("--dtype", default="float32")
  ap.add_argument("--rows", type=int, default=8)
  ap.add_argument("--prompt_len", type=int, default=112)
  ap.add_argument("--ctx_len", type=int, default=128, help="extra teacher-context tokens of the self-teacher")
  ap.add_argument("--resp_len", type=int, default=256)
  ap.add_argument("--lora_rank", type=int, default=16, help="0: full fine-tuning")
  ap.add_argument("--divergence", default="reverse_kl")
  ap.add_argument("--chunk", type=int, default=128)
  ap.add_argument("--remat", type=int, default=1)
  ap.add_argument("--micro_rows", type=int, default=0, help="rows per micro-batch (accumulated); 0: all --rows")
  ap.add_argument("--reps", type=int, default=3)
  ap.add_argument("--peak_flops", type=float, default=None, help="default: the accelerator's bf16 peak")
  ap.add_argument("--accelerator", default="cpu", help="name in opd_jax.cost.estimate.ACCELERATORS, or cpu")
  ap.add_argument("--json_out", default=None)
  args = ap.parse_args(argv)

  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from opd_jax.cost import estimate  # pylint: disable=g-import-not-at-top
  from opd_jax.training import costs as train_costs  # pylint: disable=g-import-not-at-top
  from opd_jax.training import lora, state as state_lib, step as step_lib  # pylint: disable=g-import-not-at-top

  t_load = time.perf_counter()
  student = harness.ours_model(args.student, args.dtype)
  teacher = None if args.teacher == "self" else harness.ours_model(args.teacher, args.dtype)
  load_s = time.perf_counter() - t_load
  B, P, T, V = args.rows, args.prompt_len, args.resp_len, student.config.vocab_size
  Pt = P + args.ctx_len if teacher is None else P
  rng = np.random.default_rng(0)
  ids = lambda n: rng.integers(1, min(V, 30000), size=n).tolist()
  prompts_s = [ids(P) for _ in range(B)]
  prompts_t = [p + ids(Pt - P) for p in prompts_s] if teacher is None else prompts_s
  batch = step_lib.make_batch(prompts_s, prompts_t, [ids(T) for _ in range(B)])

  key = jax.random.key(0)
  scale = 2.0 if args.lora_rank > 0 else None
  trainable = lora.init(student.params, key, rank=args.lora_rank) if scale else student.params
  tx = state_lib.optimizer(state_lib.OptimConfig(learning_rate=1e-4))
  st = state_lib.init_state(trainable, tx, jax.random.fold_in(key, 2))
  step = step_lib.make_train_step(tx, s_graph=student.graphdef, t_graph=None if teacher is None else teacher.graphdef,
                                  lora_scale=scale, divergence=args.divergence, chunk=args.chunk,
                                  vocab_size=student.config.real_vocab_size, remat=bool(args.remat),
                                  micro_batches=B // (args.micro_rows or B))
  base = student.params if scale else None
  t_params = None if teacher is None else teacher.params
  jax.block_until_ready(st)
  rss0, _ = harness.rss_mb()
  dev0 = harness.jax_device_memory_mb()
  harness.reset_peak()

  times, losses = [], []
  for i in range(args.reps + 1):
    t0 = time.perf_counter()
    st, m = step(st, base, t_params, batch)
    losses.append(float(m["loss"]))          # blocks
    times.append(time.perf_counter() - t0)
    print(f"step {i}: {times[-1]:.2f} s, loss {losses[-1]:.5g}, grad_norm {float(m['grad_norm']):.4g}", flush=True)
  _, rss_peak = harness.rss_mb()
  dev = harness.jax_device_memory_mb()
  secs = harness.median(times[1:])

  n_s = harness.matmul_params(student.config)
  n_t = n_s if teacher is None else harness.matmul_params(teacher.config)
  Ps, Ptb = batch.tokens_s.shape[1] - batch.response.shape[1], batch.tokens_t.shape[1] - batch.response.shape[1]
  Tb = batch.response.shape[1]
  grad = 2 if scale else 3
  flops = (grad + int(bool(args.remat))) * 2 * n_s * B * (Ps + Tb) + 2 * n_t * B * (Ptb + Tb)
  chip, chips = estimate.accelerator(args.accelerator)
  t_cfg = student.config if teacher is None else teacher.config
  calls = train_costs.step_calls(student.config, t_cfg, B, Ps, Ptb, Tb, lora=bool(scale), remat=bool(args.remat))
  predicted = estimate.cost(calls, chip, chips, cpu_bytes_per_el=np.dtype(args.dtype).itemsize)
  pred_s = predicted.acc_s if chip else predicted.cpu_s
  peak_flops = args.peak_flops or (chip.peak_flops * chips if chip else None)
  figures = {
      "benchmark": "train_step", "student": args.student, "teacher": args.teacher, "dtype": args.dtype,
      "device": jax.default_backend(), "rows": B, "prompt_tokens": Ps, "teacher_prompt_tokens": Ptb,
      "response_tokens": Tb, "lora_rank": args.lora_rank, "remat": bool(args.remat), "chunk": args.chunk,
      "micro_rows": args.micro_rows or B,
      "load_s": round(load_s, 1), "first_call_s": round(times[0], 2), "step_s": harness.sig(secs),
      "tokens_per_s": harness.sig(B * Tb / secs), "model_flops_per_step": flops,
      "gflops_per_s": harness.sig(flops / secs / 1e9),
      "mfu": harness.sig(flops / secs / peak_flops) if peak_flops else None,
      "cost_model_s": harness.sig(pred_s), "measured_over_cost_model": harness.sig(secs / pred_s),
      "cost_model_basis": f"roofline on {args.accelerator}" if chip else "CPU estimate",
      "rss_after_setup_mb": round(rss0), "rss_peak_mb": round(rss_peak),
      "rss_peak_above_setup_mb": round(rss_peak - rss0), "losses": [harness.sig(x) for x in losses],
  }
  if dev is not None:
    figures.update(device_mem_after_setup_mb=round(dev0[0]), device_peak_mb=round(dev[1]))
  print(f"train step {B} x ({Ps}+{Tb}) {args.dtype} on {figures['device']}: {secs:.3g} s/step "
        f"({figures['gflops_per_s']} GFLOP/s of model FLOPs, MFU {figures['mfu']}), compile+first "
        f"{times[0]:.1f} s; cost model {pred_s:.3g} s ({figures['cost_model_basis']}): measured/model "
        f"{figures['measured_over_cost_model']}; RSS peak {rss_peak / 1024:.2f} GiB"
        + (f", device peak {dev[1] / 1024:.2f} GiB" if dev else ""))
  harness.final_json(figures, args.json_out)


if __name__ == "__main__":
  main()
