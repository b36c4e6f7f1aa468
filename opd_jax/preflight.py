"""Before any model loads: config checks, the student's and the teacher's policies, the planned work, and the
preflight of the task (gold answers, context lengths).

Everything here runs in seconds and fails with one clear error naming the field (or question) and the fix, so a
bad config never costs a model load. `plan` is what `--dry_run` prints; `check` is the study's first stage.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

from opd_jax import contexts
from opd_jax import models
from opd_jax import records
from opd_jax import sampling
from opd_jax import sharding
from opd_jax import targeted
from opd_jax import tasks


# ----------------------------------------------------------------------------------------------------------
# Configuration checks and the policies.

def _positive(config, field: str) -> int:
  section, name = field.split(".")
  value = config[section][name]
  if not isinstance(value, int) or value <= 0:
    raise ValueError(f"config.{field} must be a positive integer, got {value!r}")
  return value


def _non_finite(tree, prefix: str = "config"):
  """(field, value) of the first float in the config that is NaN or infinite, else None."""
  for k, v in tree.items():
    if isinstance(v, dict):
      found = _non_finite(v, f"{prefix}.{k}")
      if found:
        return found
    elif isinstance(v, float) and not math.isfinite(v):
      return f"{prefix}.{k}", v
  return None


def random_seed(spec: str, field: str) -> int | None:
  """The seed of a "random:<seed>" model spec (None for other specs). Raises ValueError naming `field`."""
  if not spec.startswith("random:"):
    return None
  try:
    seed = int(spec.split(":", 1)[1])
  except ValueError:
    seed = -1
  if seed < 0:
    raise ValueError(f"{field}: a random model spec must be 'random:<seed>' with an integer seed >= 0, got {spec!r}")
  return seed


def validate(config) -> None:
  """Config errors that need no model or data (each names the field and the fix)."""
  bad = _non_finite(config.to_dict())
  if bad:
    raise ValueError(f"{bad[0]} must be a finite number, got {bad[1]}")
  if isinstance(config.seed, bool) or not isinstance(config.seed, int) or config.seed < 0:
    raise ValueError(f"config.seed must be an integer >= 0, got {config.seed!r}")
  r = config.report
  if r.target not in ("incorrect", "correct", "all"):
    raise ValueError(f"config.report.target must be 'incorrect', 'correct' or 'all', got {r.target!r}")
  if isinstance(r.pages, bool) or not isinstance(r.pages, int) or r.pages < 0:
    raise ValueError(f"config.report.pages must be an integer >= 0, got {r.pages!r}")
  if r.colour_by not in records.PREDICTORS:
    raise ValueError(f"config.report.colour_by must be one of {records.PREDICTORS}, got {r.colour_by!r}")
  if not isinstance(config.task.get("skip_bad_answers", False), bool):
    raise ValueError(f"config.task.skip_bad_answers must be True or False, got {config.task.skip_bad_answers!r}")
  for f in ("budget.questions", "budget.rollouts_per_question", "budget.node_rollouts_per_question",
            "budget.nodes_per_rollout", "budget.continuations_per_candidate", "budget.branch_batch",
            "budget.question_batch",
            "sampling.max_new_tokens", "scoring.chunk", "scoring.top_k"):
    _positive(config, f)
  for f in ("budget.student_top_k", "budget.teacher_top_k"):
    if config.budget[f.split(".")[1]] < 0:
      raise ValueError(f"config.{f} must be >= 0, got {config.budget[f.split('.')[1]]}")
  b = config.budget
  if not isinstance(b.get("adaptive", False), bool):
    raise ValueError(f"config.budget.adaptive must be True or False, got {b.adaptive!r}")
  if b.get("adaptive", False) and not (b.continuations_per_candidate <= b.continuations_mean <= b.continuations_max
                                       and b.adaptive_tolerance >= 0):
    raise ValueError(f"config.budget with adaptive=True needs continuations_per_candidate <= continuations_mean <= "
                     f"continuations_max and adaptive_tolerance >= 0, got {b.continuations_per_candidate}, "
                     f"{b.continuations_mean}, {b.continuations_max}, {b.adaptive_tolerance}")
  if config.budget.node_strategy not in targeted.STRATEGIES:
    raise ValueError(f"config.budget.node_strategy must be one of {targeted.STRATEGIES}, got "
                     f"{config.budget.node_strategy!r}")
  if config.selection not in ("informative", "all"):
    raise ValueError(f"config.selection must be 'informative' or 'all', got {config.selection!r}")
  if not 0.0 < config.scoring.beta < 1.0:
    raise ValueError(f"config.scoring.beta must lie strictly inside (0, 1), got {config.scoring.beta}")
  policy(config)
  t_q = config.scoring.teacher_temperature
  if not (isinstance(t_q, (int, float)) and math.isfinite(t_q) and t_q >= 0):
    raise ValueError(f"config.scoring.teacher_temperature must be a finite number >= 0 (0 = the sampling "
                     f"temperature), got {t_q!r}")
  sharding.rules_from_config(config)
  random_seed(config.student.name, "config.student.name")
  for cid, spec in config.configurations.items():
    conf = contexts.parse(cid, spec)
    random_seed(conf.teacher, f"config.configurations[{cid!r}]")


def policy(config) -> sampling.SamplingParams:
  """The student's sampled policy: base rollouts and continuations draw from it, and it is the p of every
  estimator (paper.md, "Policy"). Raises ValueError on bad sampling settings."""
  s = config.sampling
  return sampling.SamplingParams(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k)


def teacher_policy(config) -> sampling.SamplingParams:
  """The scaled teacher q: softmax(z_q / T_q), never truncated. T_q = config.scoring.teacher_temperature, or
  when 0 the sampling temperature (GKD and TRL divide both sides' logits by one temperature), or 1 when
  sampling is greedy (temperature 0)."""
  t_q = config.scoring.teacher_temperature or config.sampling.temperature or 1.0
  return sampling.SamplingParams(temperature=float(t_q))


@dataclasses.dataclass(frozen=True)
class Plan:
  """Planned work (upper bounds: every question selected, every rollout at the token cap)."""
  questions: int
  rollouts: int
  scored_rollouts: int
  scoring_passes: int
  nodes: int
  candidates_per_node: int
  continuations: int
  tokens_generated: int
  tokens_scored: int
  seconds: float
  load_compile_seconds: float = 0.0

  def describe(self) -> str:
    total = self.seconds + self.load_compile_seconds
    when = f"{total / 3600:.1f} h" if total >= 5400 else f"{total / 60:.1f} min"
    return "\n".join([
        f"planned: {self.questions} questions, {self.rollouts} base rollouts, {self.scored_rollouts} scored "
        f"rollouts x {self.scoring_passes} (teacher, context) scorings",
        f"         {self.nodes} nodes x <= {self.candidates_per_node} candidates -> <= {self.continuations} "
        f"targeted continuations",
        f"         <= {self.tokens_generated:,} tokens generated, <= {self.tokens_scored:,} tokens scored",
        f"         estimated wall time <= {when} (2-core CPU rates of the 0.5B student, cold cache: "
        f"{self.load_compile_seconds / 60:.1f} min of model loading and compiles; scale by model size and "
        "hardware)"])


# Rates of the default study on the 2-core CPU, fp32 (0.5B student, 1.5B teacher), for the dry-run estimate
# only, measured in a cold `configs/teacher_sweep.py` run (manifest timings_s): base rollouts 2 x 32 rows x 256
# token slots in 334 s (49 slots/s); scoring 2 rollouts x 4 (teacher, context) passes of <= 256 response tokens
# in 151 s, compiles included (the contexts' prompts are prefilled too).
DECODE_TOKENS_PER_S = 49.0
SCORE_TOKENS_PER_S = 14.0
# Model loading (cold: preset assembly and conversion, 51 s measured for the 0.5B) and jit compiles (prefill, decode,
# branch and one scoring program per (teacher, context); the scoring compiles are inside SCORE_TOKENS_PER_S), per
# checkpoint; random models load and compile in seconds.
LOAD_S = {"checkpoint": 60.0, "random": 2.0}
COMPILE_S = {"checkpoint": 40.0, "random": 4.0}


def plan(config) -> Plan:
  """The work a config asks for, printed by `--dry_run` and before a run (no model or data loaded)."""
  validate(config)
  b, n_tok = config.budget, config.sampling.max_new_tokens
  confs = [contexts.parse(k, v) for k, v in config.configurations.items()]
  views = {c.scoring_key for c in confs}                 # (teacher, context) pairs: one scoring pass each
  q = b.questions
  rollouts = -(-q // b.question_batch) * b.question_batch * b.rollouts_per_question   # whole decode batches
  scored = q * (b.rollouts_per_question if config.scoring.all_rollouts else b.node_rollouts_per_question)
  nodes = q * b.node_rollouts_per_question * (n_tok if b.node_strategy == "all" else b.nodes_per_rollout)
  cand = 1 + b.student_top_k + b.teacher_top_k * len(views)
  cont = int(nodes * cand * (b.continuations_mean if b.get("adaptive", False) else b.continuations_per_candidate))
  gen = rollouts * n_tok + cont * n_tok // 2
  scored_tokens = scored * n_tok * len(views)
  secs = gen / DECODE_TOKENS_PER_S + scored_tokens / SCORE_TOKENS_PER_S
  specs = {config.student.name} | {c.teacher for c in confs if c.teacher != contexts.SELF}
  kind = lambda spec: "random" if spec.startswith("random:") else "checkpoint"
  fixed = sum(LOAD_S[kind(m)] for m in specs) + 3 * COMPILE_S[kind(config.student.name)]
  return Plan(q, rollouts, scored, len(views), nodes, cand, cont, gen, scored_tokens, secs, fixed)


# ----------------------------------------------------------------------------------------------------------
# The task and the context lengths.

def load_task(config):
  """The study's task; gold answers that do not grade against themselves are refused (or skipped with a
  warning when config.task.skip_bad_answers: `tasks.check_answers`)."""
  t = config.task
  task = tasks.load_task(t.name, path=t.path or None, split=t.split, num_problems=t.num_problems or None,
                         seed=config.seed, data_dir=t.data_dir or None, download=t.download,
                         template=t.template or None)
  return tasks.check_answers(task, skip=bool(t.get("skip_bad_answers", False)))


def check_context(config, task, confs, tokenizer, limits: dict[str, int]) -> None:
  """Every question fits the models' contexts: the student prompt + sampling.max_new_tokens in every model's
  (the plain view scores it), and each teacher's context message (+ an incorrect rollout of at most
  max_new_tokens for contrastive) + max_new_tokens in that teacher's.

  Args:
    tokenizer: the student's (teachers share it: `study.setup` checks).
    limits: model spec ("self" = the student) -> its context length (max_seq_len).
  Raises:
    ValueError: naming the question, the lengths and the fields to change.
  """
  c, n_tok = config, config.sampling.max_new_tokens
  chat = lambda m: contexts.study_chat(tokenizer, m, c)
  fix = "lower config.sampling.max_new_tokens or config.task.num_problems to skip long questions"
  views = sorted({conf.scoring_key for conf in confs})
  for problem in task.problems:
    length, limit = len(chat(task.prompt(problem))), min(limits.values())
    if length + n_tok > limit:
      raise ValueError(f"question {problem.id}: prompt of {length} tokens + config.sampling.max_new_tokens={n_tok} "
                       f"exceeds the models' context ({limit} tokens); {fix}")
    for teacher, ctx in views:
      if ctx == "plain":
        continue
      msg = contexts.context_message(ctx, task, problem, incorrect="", templates=c.contexts.templates)
      need = len(chat(msg)) + n_tok * (2 if ctx == "contrastive" else 1)
      if need > limits[teacher]:
        raise ValueError(f"question {problem.id}: the {ctx!r} context of teacher {teacher!r} needs up to {need} "
                         f"tokens (message + response{' + an incorrect rollout' if ctx == 'contrastive' else ''}), "
                         f"more than its context ({limits[teacher]} tokens); {fix}, or drop that configuration")


def header(spec: str, config) -> tuple[int, Any] | None:
  """(context length, tokenizer) of a model spec without its weights: a random:<seed> model's
  (config.random_model.max_seq_len, the byte tokenizer), else the checkpoint's header where it is cheap to read
  (`models.checkpoints.peek`); None otherwise."""
  if spec.startswith("random:"):
    return config.random_model.max_seq_len, models.byte_tokenizer()
  peeked = models.checkpoints.peek(spec)
  return None if peeked is None else (peeked[0].max_seq_len, peeked[1])


def check(config):
  """Everything checkable before any model loads (seconds): config, task and gold answers, configurations
  against the task, and the context lengths from the checkpoints' headers where they are cheap to read
  (`models.checkpoints.peek`; otherwise `study.setup` checks them after the load). Returns (task, confs)."""
  validate(config)
  task = load_task(config)
  confs = contexts.parse_all(dict(config.configurations), has_solutions=task.has_solutions, task_name=task.name)
  specs = {contexts.SELF: config.student.name}
  specs.update({conf.teacher: conf.teacher for conf in confs if conf.teacher != contexts.SELF})
  headers = {}
  for name, spec in specs.items():
    headers[name] = header(spec, config)
    if headers[name] is None:
      return task, confs
  check_context(config, task, confs, headers[contexts.SELF][1], {k: v[0] for k, v in headers.items()})
  return task, confs
