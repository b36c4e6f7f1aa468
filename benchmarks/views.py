"""One student pass for every (teacher, context) view: the study's scoring stage with and without reuse.

  python benchmarks/views.py                                  # 0.5B student + 1.5B teacher, fp32, 2 x 256 tokens
  python benchmarks/views.py --teacher=self --reps=2          # self-teacher views only (no 1.5B install needed)

The work of teacher_sweep's scoring stage: R rollouts (--rows) of T response tokens (--seq_len, GSM8K text),
scored under 4 views: the external teacher with the plain prompt and the student as its own teacher with three
longer contexts (the prompt behind a solution-sized preamble). "separate" calls `scoring.score` once per view
(the student's layers run 4 times); "shared" passes the first view's hidden states to the others
(`score(..., student_hidden=...)`: the student runs its layers once and only its output head afterwards).
Before timing, it prints the bound from model FLOPs (2 N per token and model, harness.matmul_params; prompts
excluded) and checks that both ways give the same numbers (max |diff| over every dense output). One warm-up of
each way (compiles) is excluded; then --reps interleaved repetitions and medians. Ends with one JSON line.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import harness  # pylint: disable=g-import-not-at-top


def main():
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--student", default="qwen2.5-coder-0.5b-instruct")
  ap.add_argument("--teacher", default="qwen2.5-coder-1.5b-instruct", help="a model spec, or 'self'")
  ap.add_argument("--dtype", default="float32")
  ap.add_argument("--rows", type=int, default=2)
  ap.add_argument("--seq_len", type=int, default=256)
  ap.add_argument("--prompt_len", type=int, default=96)
  ap.add_argument("--context_len", type=int, default=320, help="tokens of each self-teacher context")
  ap.add_argument("--chunk", type=int, default=128)
  ap.add_argument("--reps", type=int, default=3)
  ap.add_argument("--data", default=None)
  args = ap.parse_args()

  import numpy as np  # pylint: disable=g-import-not-at-top
  from opd_jax.decode import scoring  # pylint: disable=g-import-not-at-top

  student = harness.ours_model(args.student, args.dtype)
  external = student if args.teacher == "self" else harness.ours_model(args.teacher, args.dtype)
  V = student.config.real_vocab_size
  texts = harness.gsm8k_text(args.data)
  P, C, T = args.prompt_len, args.context_len, args.seq_len
  rows = harness.token_rows(student.tokenizer, texts, args.rows * 2 + 3, max(P + T, C), V)
  prompts = [r[:P] for r in rows[:args.rows]]
  responses = [r[P:P + T] for r in rows[:args.rows]]
  contexts = [rows[args.rows + i][:C - P] for i in range(3)]           # three different preambles
  views = [(external, prompts)] + [(student, [ctx + p for p in prompts]) for ctx in contexts]

  n_s = harness.matmul_params(student.config)
  head_s = student.config.d_model * student.config.vocab_size
  student_sides = len(views) * 2 * n_s
  teacher_sides = sum(2 * harness.matmul_params(m.config) for m, _ in views)
  shared_student = 2 * n_s + (len(views) - 1) * 2 * head_s
  bound = (student_sides + teacher_sides) / (shared_student + teacher_sides)
  print(f"model FLOPs per response token: separate {(student_sides + teacher_sides) / 1e9:.2f} G, shared "
        f"{(shared_student + teacher_sides) / 1e9:.2f} G: at most {bound:.3f}x faster (prompts excluded)",
        flush=True)

  kw = dict(chunk=args.chunk, return_hidden=True)

  def separate():
    return [scoring.score(student, m, prompts, tp, responses, **kw) for m, tp in views]

  def shared():
    first = scoring.score(student, views[0][0], prompts, views[0][1], responses, **kw)
    return [first] + [scoring.score(student, m, prompts, tp, responses, student_hidden=first["h_p"], **kw)
                      for m, tp in views[1:]]

  a, b = separate(), shared()                                           # warm-up (compiles) and the check
  diff = max(float(np.max(np.abs(x[k][r] - y[k][r]))) for x, y in zip(a, b) for k in scoring.DENSE_KEYS
             for r in range(len(responses)))
  print(f"max |separate - shared| over every dense output: {diff:.3g}", flush=True)
  times = {"separate": [], "shared": []}
  for _ in range(args.reps):
    for name, fn in (("separate", separate), ("shared", shared)):
      t0 = time.perf_counter()
      fn()
      times[name].append(time.perf_counter() - t0)
      print(f"{name}: {times[name][-1]:.2f} s", flush=True)
  sep, sh = harness.median(times["separate"]), harness.median(times["shared"])
  harness.final_json({"rows": args.rows, "seq_len": T, "views": len(views), "separate_s": harness.sig(sep),
                      "shared_s": harness.sig(sh), "speedup": harness.sig(sep / sh),
                      "flop_bound": harness.sig(bound), "max_abs_diff": harness.sig(diff)})


if __name__ == "__main__":
  main()
