"""Cost model of an OPD training run (`--dry_run --cost_model=h200` on configs/opd_train.py): the study's
compile-only FLOPs, analytic bytes and rooflines (opd_jax/cost/estimate.py) applied to the trainer's programs.

Per step: the student's rollouts (one prefill of the questions' prompts, `max_new_tokens` decode steps over
batch_questions x rollouts_per_question rows); the student's forward over [prompt; response] of every rollout
and the full-vocabulary head at the response positions, times 3 for forward + backward with full fine-tuning
(weight and input gradients) or 2 with LoRA (input gradients only, the adapters' own FLOPs are negligible),
plus one forward of the layers that the trainer's per-layer remat recomputes in the backward pass;
the teacher's forward and head (its context + response). Evaluations: before training and every eval_every
steps, eval_questions x eval_samples rollouts. Upper bounds as in the study: every response at the token cap;
prompt and context lengths measured on the task (`estimate.planned_work`).
"""
from __future__ import annotations

import math

from opd_jax.cost import estimate
from opd_jax.decode import sampling
from opd_jax.study import model_specs
from opd_jax.teachers import contexts
from opd_jax.training import evaluate

STAGES = ("rollouts", "train step", "evaluation")


def calls(config) -> list[estimate.Call]:
  """The program calls of `config.train` (module docstring)."""
  t, n_tok = config.train, config.sampling.max_new_tokens
  conf = contexts.parse("train", t.configuration, field="config.train.configuration")
  s_cfg = model_specs.architecture(config.student.name, config)
  t_cfg = s_cfg if conf.teacher == contexts.SELF else model_specs.architecture(conf.teacher, config)
  bucket = sampling.bucket  # pylint: disable=protected-access
  work = estimate.planned_work(config, {conf.context})
  prompt = math.ceil(work.prompt_tokens)
  P = bucket(prompt, 16)
  ctx = 0 if conf.context == "plain" else math.ceil(work.extra(conf.context, n_tok))
  rows = t.batch_questions * t.rollouts_per_question
  out = [estimate.Call("rollouts", "prefill", "student", s_cfg, t.batch_questions, P, P + n_tok, t.steps),
         estimate.Call("rollouts", "decode", "student", s_cfg, rows, 1, P + n_tok, t.steps * n_tok)]
  out += step_calls(s_cfg, t_cfg, rows, P, bucket(prompt + ctx, 16), n_tok, lora=t.lora.rank > 0,
                    steps=t.steps)
  evals = 1 + len(evaluate.eval_steps(t))
  e_rows = t.eval_questions * t.eval_samples
  out += [estimate.Call("evaluation", "prefill", "student", s_cfg, t.eval_questions, P, P + n_tok, evals),
          estimate.Call("evaluation", "decode", "student", s_cfg, e_rows, 1, P + n_tok, evals * n_tok)]
  return out


def step_calls(s_cfg, t_cfg, rows: int, prompt_s: int, prompt_t: int, response: int, *, lora: bool,
               remat: bool = True, steps: int = 1) -> list[estimate.Call]:
  """The calls of `steps` train steps of `rows` rollouts: the student's forward over [prompt_s; response] and its
  head at the response positions, x 2 with LoRA (forward + input gradients) or x 3 with full fine-tuning, plus one
  forward of the layers with remat (`step.make_train_step`'s default; the head is not recomputed); the teacher's
  forward over [prompt_t; response] and its head, once."""
  grad = 2 if lora else 3
  seq_s, seq_t = prompt_s + response, prompt_t + response
  return [estimate.Call("train step", "prompt", "student", s_cfg, rows, seq_s, seq_s, (grad + int(remat)) * steps),
          estimate.Call("train step", "head", "student", s_cfg, rows, response, 0, grad * steps),
          estimate.Call("train step", "prompt", "teacher", t_cfg, rows, seq_t, seq_t, steps),
          estimate.Call("train step", "head", "teacher", t_cfg, rows, response, 0, steps)]


def describe(config, name: str) -> str:
  """The dry-run report of a training config: per stage FLOPs, bytes, CPU estimate and roofline, and the hours
  of the whole run on `name` (an accelerator of opd_jax.cost.estimate.ACCELERATORS, or cpu)."""
  chip, chips = estimate.accelerator(name)
  cs = calls(config)
  t = config.train
  self_teacher = contexts.parse("train", t.configuration).teacher == contexts.SELF
  weights = f"; self-teacher weights {t.teacher_weights}" if self_teacher else ""
  lines = [f"training: {t.configuration}{weights}; student {config.student.name}; {t.steps} steps of "
           f"{t.batch_questions} questions x {t.rollouts_per_question} rollouts, lr {t.optim.learning_rate:g}, "
           + (f"LoRA rank {t.lora.rank}" if t.lora.rank > 0 else "full fine-tuning"),
           f"training cost model ({'cpu' if chip is None else f'{chips} x {chip.name}'}; {config.train.steps} "
           "steps, compile-only XLA FLOPs, analytic bytes, upper bounds):"]
  for stage in STAGES + ("total",):
    c = estimate.cost([x for x in cs if stage in ("total", x.stage)], chip, chips)
    acc = (f", roofline {estimate._secs(c.acc_s)} ({c.bound()}-bound)"  # pylint: disable=protected-access
           if chip else "")
    lines.append(f"  {stage:<11} {c.flops:.3g} FLOPs, {c.bytes:.3g} bytes, CPU est "
                 f"{estimate._secs(c.cpu_s)}{acc}")  # pylint: disable=protected-access
  total = estimate.cost(cs, chip, chips)
  if chip:
    lines.append(f"  expected: {total.acc_s / 3600:.3g} h of roofline time on {chips} x {chip.name} (efficiencies "
                 f"{estimate.EFF_FLOPS:.0%} of peak FLOP/s, {estimate.EFF_BW:.0%} of HBM bandwidth; compile, load and "
                 "Python overheads excluded)")
    lines.append(estimate.measured_line(cs, name, chip, chips))
  return "\n".join(lines)
