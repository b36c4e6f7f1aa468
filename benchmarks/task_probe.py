"""Probe a task for the default study: the student's pass rate and response lengths on a few questions.

  python benchmarks/task_probe.py --task=reasoning_gym:chain_sum:min_terms=3,max_terms=3 --questions=16 \
      --rollouts=4 --max_new_tokens=64 [--template='{question}\\n...']
  python benchmarks/task_probe.py --task='A;B' --template='T1||T2'      # every (task, template) pair, one load

Samples `rollouts` responses per question with the study's policy (temperature 1, the student's chat template,
one batch: sampling.sample) and prints one JSON line: pass rate, share of questions with both a correct and an
incorrect rollout (informative), mean response tokens (all, and of finished rollouts), the share that hit the
cap, and decode tokens/s (rows x tokens generated / seconds, the first call compiles: reported apart).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--task", default="reasoning_gym:gsm_symbolic")
  ap.add_argument("--template", default="")
  ap.add_argument("--student", default="qwen2.5-coder-0.5b-instruct")
  ap.add_argument("--questions", type=int, default=16)
  ap.add_argument("--rollouts", type=int, default=4)
  ap.add_argument("--max_new_tokens", type=int, default=64)
  ap.add_argument("--num_problems", type=int, default=100)
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--show", type=int, default=2, help="responses printed")
  args = ap.parse_args()
  from opd_jax import models, tasks  # pylint: disable=g-import-not-at-top
  t0 = time.perf_counter()
  student = models.load(args.student)
  load_s = time.perf_counter() - t0
  for name in args.task.split(";"):
    for template in args.template.split("||"):
      task = tasks.load_task(name, num_problems=args.num_problems, seed=args.seed, template=template or None)
      probe(args, task, name, student, load_s)


def probe(args, task, name, student, load_s):
  """Samples and prints one JSON line for one (task, template)."""
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from opd_jax.teachers import contexts  # pylint: disable=g-import-not-at-top
  from opd_jax.decode import sampling
  problems = task.problems[:args.questions]
  prompts = [contexts.render_chat(student.tokenizer, task.prompt(p)) for p in problems]
  rows = [p for p in prompts for _ in range(args.rollouts)]
  t0 = time.perf_counter()
  out = sampling.sample(student, rows, key=jax.random.key(args.seed), max_new_tokens=args.max_new_tokens)
  sample_s = time.perf_counter() - t0
  texts = [student.tokenizer.decode(out.tokens[i, :out.lengths[i]], skip_special_tokens=True) for i in range(len(rows))]
  rewards = np.array([task.reward(problems[i // args.rollouts], t) for i, t in enumerate(texts)])
  per_q = rewards.reshape(len(problems), args.rollouts)
  for i in range(min(args.show, len(texts))):
    print(f"--- reward {rewards[i]} ({out.lengths[i]} tokens): {texts[i]!r}", file=sys.stderr)
  gen = int(out.lengths.sum())
  print(json.dumps({
      "task": name, "template": task.template, "questions": len(problems), "rollouts": args.rollouts,
      "max_new_tokens": args.max_new_tokens, "pass_rate": round(float(rewards.mean()), 3),
      "informative_questions": round(float(((per_q.max(1) == 1) & (per_q.min(1) == 0)).mean()), 3),
      "mean_tokens": round(float(out.lengths.mean()), 1),
      "mean_tokens_finished": round(float(out.lengths[out.finished].mean()), 1) if out.finished.any() else None,
      "truncated": round(float(1 - out.finished.mean()), 3),
      "prompt_tokens_mean": round(float(np.mean([len(p) for p in prompts])), 1),
      "sample_s": round(sample_s, 1), "tokens_generated": gen, "tokens_per_s_incl_compile": round(gen / sample_s, 1),
      "load_s": round(load_s, 1), "has_solutions": task.has_solutions}))


if __name__ == "__main__":
  main()
