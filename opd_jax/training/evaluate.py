"""Held-out pass@1 with common random numbers, and the paired before/after difference.

Every evaluation samples the same held-out questions with the same per-row PRNG keys (`eval_keys`), so the
difference between two checkpoints is paired twice over: by question and by random draw. A change of the
weights that leaves a row's tokens unchanged leaves its reward unchanged, and the noise of the difference is
far below that of two independent estimates (which is why a paired interval, not two Wilson intervals).
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import scipy.stats

from opd_jax.decode import sampling
from opd_jax.decode import scoring
from opd_jax.report import common as report_common


def eval_steps(t) -> list[int]:
  """The steps after which held-out pass@1 is measured (and after the last step, always): config.train.eval_at
  when given, else every eval_every steps."""
  at = sorted({int(s) for s in t.get("eval_at", ())})
  return sorted({*at, t.steps} if at else {*range(t.eval_every, t.steps + 1, t.eval_every), t.steps})


def eval_keys(seed: int, n_questions: int, samples: int) -> jax.Array:
  """Per-row keys [Q * S] of the evaluation: row (i, s) uses row_keys(fold_in(key(seed), 2**31 - 1), i * S + s),
  the same at every step and in every run of this seed (a stream no other draw of the trainer uses)."""
  base = jax.random.fold_in(jax.random.key(seed), 2**31 - 1)
  return sampling.row_keys(base, jnp.arange(n_questions * samples, dtype=jnp.uint32))


def grade(tokenizer, task, problems, out: sampling.Samples, *, grade_truncated: bool):
  """Per row of `out` (row r answers problems[r]): the response ids, their text and the reward
  (`Task.rollout_reward`). Returns (responses: list of int lists, texts: list of str, rewards: float32 [B])."""
  responses = [out.tokens[r, :out.lengths[r]].tolist() for r in range(len(problems))]
  texts = [tokenizer.decode(y, skip_special_tokens=True) for y in responses]
  rewards = np.array([task.rollout_reward(p, x, finished=bool(out.finished[r]), grade_truncated=grade_truncated)
                      for r, (p, x) in enumerate(zip(problems, texts))], np.float32)
  return responses, texts, rewards


def pass_at_1(model, task, problems, prompts, keys: jax.Array, *, samples: int, max_new_tokens: int,
              temperature: float, top_p: float = 1.0, top_k: int = 0, grade_truncated: bool = False) -> np.ndarray:
  """Rewards [Q, S] (float32 in {0, 1}) of S samples per held-out question under `model`.

  Args:
    model: an `opd_jax.models.Model` (e.g. the student with its LoRA adapters merged).
    task, problems, prompts: the task (its verifier), Q problems and their prompt ids.
    keys: [Q * S] per-row keys (`eval_keys`); row i * S + s is sample s of question i.
    grade_truncated: grade responses cut at max_new_tokens (else they score 0, as in the study).
  """
  rows = [p for p in prompts for _ in range(samples)]
  out = sampling.sample(model, rows, keys=keys, max_new_tokens=max_new_tokens, temperature=temperature,
                        top_p=top_p, top_k=top_k)
  _, _, rewards = grade(model.tokenizer, task, [p for p in problems for _ in range(samples)], out,
                       grade_truncated=grade_truncated)
  return rewards.reshape(len(problems), samples)


def gold_response(task, problem) -> str:
  """The gold answer as a response gives it directly: inside the task's answer span ("<answer>72</answer>") when the
  task has one, else the answer string itself."""
  return f"{task.answer_span[0]}{problem.answer}{task.answer_span[1]}" if task.answer_span else problem.answer


def gold_logprob(model, task, problems, prompts, *, batch_size: int = 8) -> np.ndarray:
  """log p(gold response | prompt) [Q] (float64, nats; `gold_response`, tokenized without special tokens) of each
  held-out question under `model`: a deterministic, low-noise companion of pass@1 (issue 47). It scores the answer
  given at once, so a change of format (reasoning before the answer) moves it as well as a change of knowledge.

  Raises:
    ValueError: as `scoring.score` (e.g. a prompt and answer longer than the model's context).
  """
  gold = [model.tokenizer.encode(gold_response(task, p), add_special_tokens=False) for p in problems]
  logp = scoring.score(model, model, prompts, prompts, gold, batch_size=batch_size)["logp"]
  return np.array([float(np.sum(x, dtype=np.float64)) for x in logp])


@dataclasses.dataclass(frozen=True, kw_only=True)
class Paired:
  """after - before, paired by question (means over samples per question, then over questions)."""
  before: float           # pass@1 before
  after: float            # pass@1 after
  diff: float             # mean paired difference
  lo: float               # 95% interval of diff (paired t over questions, within [-1, 1]); NaN: not estimable
                          # (< MIN_QUESTIONS questions, or every question changed alike while some rows changed)
  hi: float
  p_value: float          # two-sided paired t-test (scipy.stats.ttest_rel); NaN when every difference is 0
  n_questions: int
  n_changed_rows: int     # rows (question, sample) whose reward changed


MIN_QUESTIONS = report_common.MIN_SHARED_QUESTIONS   # fewer held-out questions: no interval (as the verdict)


def paired_difference(before: np.ndarray, after: np.ndarray, level: float = 0.95) -> Paired:
  """The paired difference of two [Q, S] reward arrays sampled with the same keys.

  The interval is the paired t interval over questions (scipy.stats.ttest_rel), cut to [-1, 1], the range a
  difference of pass rates can take; NaN ("not estimable") with fewer than MIN_QUESTIONS questions (3 questions
  gave +0.333 [-1.564, +2.231]), or when every question's difference is the same but some rewards changed (the
  t interval would have zero width: false certainty). Nothing changed at all: the interval is [0, 0].

  Raises:
    ValueError: shapes differ.
  """
  before, after = np.asarray(before, np.float64), np.asarray(after, np.float64)
  if before.shape != after.shape or before.ndim != 2:
    raise ValueError(f"before {before.shape} and after {after.shape} must be the same [Q, S] reward arrays")
  b, a = before.mean(axis=1), after.mean(axis=1)
  d = a - b
  lo = hi = p = float("nan")
  changed = int(np.sum(before != after))
  if not changed:
    lo = hi = 0.0
  elif len(d) >= MIN_QUESTIONS and np.any(d != d[0]):
    test = scipy.stats.ttest_rel(a, b)
    ci = test.confidence_interval(level)
    lo, hi, p = max(float(ci.low), -1.0), min(float(ci.high), 1.0), float(test.pvalue)
  return Paired(before=float(b.mean()), after=float(a.mean()), diff=float(d.mean()), lo=lo, hi=hi, p_value=p,
                n_questions=len(d), n_changed_rows=changed)
