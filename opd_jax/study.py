"""The study pipeline of design.md, resumable per question.

config -> task problems -> student prompts -> base rollouts -> verifier -> question selection
       -> teacher scoring for every (teacher, context) -> dense per-token predictors (`tokens`)
       -> node selection -> candidate sets C(u) -> p, q_c on C(u) -> targeted continuations -> P_succ
       -> g*, g_c, alignment, teacher advantage, intervals (`nodes`) -> summary

Randomness: question i (pool index) draws its base rollouts from fold_in(fold_in(key(seed), i), 0) and the
continuations of its rollout r from fold_in(fold_in(fold_in(key(seed), i), 1), r), with stable row ids, so a
question's records do not depend on which questions ran before it, in this process or another. The base
rollouts of `budget.question_batch` consecutive questions of a process's share are sampled in one batch (fixed
blocks: a resumed run samples the same batches as an uninterrupted one).
"""
from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import math
import os
import pathlib
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
from absl import logging
from tqdm import tqdm

from opd_jax import contexts
from opd_jax import divergences
from opd_jax import gradients
from opd_jax import records
from opd_jax import report
from opd_jax import sampling
from opd_jax import scoring
from opd_jax import sharding
from opd_jax import stages
from opd_jax import targeted
from opd_jax import tasks
from opd_jax import models

PREDICTORS = divergences.PREDICTORS
UNAVAILABLE = records.CONTEXT_UNAVAILABLE


# ----------------------------------------------------------------------------------------------------------
# Configuration checks and the plan.

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
  if r.colour_by not in PREDICTORS:
    raise ValueError(f"config.report.colour_by must be one of {PREDICTORS}, got {r.colour_by!r}")
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
  keys = {c.scoring_key for c in confs}
  q = b.questions
  rollouts = -(-q // b.question_batch) * b.question_batch * b.rollouts_per_question   # whole decode batches
  scored = q * (b.rollouts_per_question if config.scoring.all_rollouts else b.node_rollouts_per_question)
  nodes = q * b.node_rollouts_per_question * (n_tok if b.node_strategy == "all" else b.nodes_per_rollout)
  cand = 1 + b.student_top_k + b.teacher_top_k * len(keys)
  cont = int(nodes * cand * (b.continuations_mean if b.get("adaptive", False) else b.continuations_per_candidate))
  gen = rollouts * n_tok + cont * n_tok // 2
  scored_tokens = scored * n_tok * len(keys)          # one pass per (teacher, context)
  secs = gen / DECODE_TOKENS_PER_S + scored_tokens / SCORE_TOKENS_PER_S
  specs = {config.student.name} | {c.teacher for c in confs if c.teacher != contexts.SELF}
  kind = lambda spec: "random" if spec.startswith("random:") else "checkpoint"
  fixed = sum(LOAD_S[kind(m)] for m in specs) + 3 * COMPILE_S[kind(config.student.name)]
  return Plan(q, rollouts, scored, len(keys), nodes, cand, cont, gen, scored_tokens, secs, fixed)


# ----------------------------------------------------------------------------------------------------------
# Loading.

def load_model(spec: str, config):
  """A model spec: preset, HF folder, .gguf path, or "random:<seed>" (config.random_model architecture)."""
  if spec.startswith("random:"):
    r = config.random_model
    seed = random_seed(spec, "model spec")
    tok = models.byte_tokenizer()
    cfg = models.Config(arch=r.arch, vocab_size=len(tok), d_model=r.d_model, n_layers=r.n_layers,
                        n_heads=r.n_heads, n_kv_heads=r.n_kv_heads, head_dim=r.head_dim, d_ff=r.d_ff,
                        qkv_bias=r.arch == "qwen2", qk_norm=r.arch == "qwen3", max_seq_len=r.max_seq_len)
    params = models.init_params(jax.random.key(seed), cfg, scale=r.init_scale)
    return models.with_layout(models.Model(config=cfg, params=params, tokenizer=tok,
                                           stop_ids=(int(tok.eos_token_id),), name=spec, sha256=None,
                                           source="random"))
  return models.load(spec, dtype=config.student.dtype or None)


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
    tokenizer: the student's (teachers share it: `setup` checks).
    limits: model spec ("self" = the student) -> its context length (max_seq_len).
  Raises:
    ValueError: naming the question, the lengths and the fields to change.
  """
  c, n_tok = config, config.sampling.max_new_tokens
  chat = lambda m: contexts.render_chat(tokenizer, m, system_prompt=c.chat.system_prompt, chat_kwargs=c.chat.kwargs)
  fix = "lower config.sampling.max_new_tokens or config.task.num_problems to skip long questions"
  keys = sorted({conf.scoring_key for conf in confs})
  for problem in task.problems:
    length, limit = len(chat(task.prompt(problem))), min(limits.values())
    if length + n_tok > limit:
      raise ValueError(f"question {problem.id}: prompt of {length} tokens + config.sampling.max_new_tokens={n_tok} "
                       f"exceeds the models' context ({limit} tokens); {fix}")
    for teacher, ctx in keys:
      if ctx == "plain":
        continue
      msg = contexts.context_message(ctx, task, problem, incorrect="", templates=c.contexts.templates)
      need = len(chat(msg)) + n_tok * (2 if ctx == "contrastive" else 1)
      if need > limits[teacher]:
        raise ValueError(f"question {problem.id}: the {ctx!r} context of teacher {teacher!r} needs up to {need} "
                         f"tokens (message + response{' + an incorrect rollout' if ctx == 'contrastive' else ''}), "
                         f"more than its context ({limits[teacher]} tokens); {fix}, or drop that configuration")


def preflight(config):
  """Everything checkable before any model loads (seconds): config, task and gold answers, configurations
  against the task, and the context lengths from the checkpoints' headers where they are cheap to read
  (`models.checkpoints.peek`; otherwise `setup` checks them after the load). Returns (task, confs)."""
  validate(config)
  task = load_task(config)
  confs = contexts.parse_all(dict(config.configurations), has_solutions=task.has_solutions, task_name=task.name)
  specs = {contexts.SELF: config.student.name}
  specs.update({conf.teacher: conf.teacher for conf in confs if conf.teacher != contexts.SELF})
  headers = {}
  for name, spec in specs.items():
    if spec.startswith("random:"):
      headers[name] = (config.random_model.max_seq_len, models.byte_tokenizer())
    else:
      peeked = models.checkpoints.peek(spec)
      if peeked is None:
        return task, confs
      headers[name] = (peeked[0].max_seq_len, peeked[1])
  check_context(config, task, confs, headers[contexts.SELF][1], {k: v[0] for k, v in headers.items()})
  return task, confs


@dataclasses.dataclass
class Env:
  """Everything a question needs: config, task, parsed configurations and loaded models."""
  config: Any
  task: Any
  confs: list
  student: Any
  teachers: dict
  timings: dict
  mesh: Any = None                       # this process's ("data", "model") mesh; params are placed on it

  def teacher(self, name: str):
    return self.student if name == contexts.SELF else self.teachers[name]

  def chat(self, message: str) -> list[int]:
    return contexts.render_chat(self.student.tokenizer, message, system_prompt=self.config.chat.system_prompt,
                                chat_kwargs=self.config.chat.kwargs)


def setup(config, task=None, confs=None) -> Env:
  """Validate, load the task (unless given, with its parsed configurations: `preflight`) and every model, check
  tokenizers and context lengths (clear errors before any work)."""
  t0 = time.time()
  if task is None:
    task, confs = preflight(config)
  with stages.bar("loading models"):
    student = load_model(config.student.name, config)
    teachers = {}
    for c in confs:
      if c.teacher != contexts.SELF and c.teacher not in teachers:
        teachers[c.teacher] = load_model(c.teacher, config)
        diff = models.tokenizer_difference(student.tokenizer, teachers[c.teacher].tokenizer)
        if diff is not None:
          raise ValueError(f"config.configurations[{c.config_id!r}]: teacher {c.teacher!r} does not share the "
                           f"student's tokenizer ({diff}); per-token distillation needs identical tokenizers: "
                           "pick a teacher of the student's family")
  mesh = sharding.mesh_from_config(config)
  student = sharding.shard_model(student, mesh)
  teachers = {name: sharding.shard_model(m, mesh) for name, m in teachers.items()}
  env = Env(config, task, confs, student, teachers, {"load_s": time.time() - t0}, mesh)
  limits = {contexts.SELF: student.config.max_seq_len, **{k: m.config.max_seq_len for k, m in teachers.items()}}
  check_context(config, task, confs, student.tokenizer, limits)
  return env


# ----------------------------------------------------------------------------------------------------------
# One question.

def _balanced(correct: list[bool], k: int, order: list[int] | None = None) -> list[int]:
  """Up to k rollout ids alternating correct / incorrect while both last, each group taken in `order`
  (default: lowest ids first)."""
  order = list(range(len(correct))) if order is None else order
  pos = [i for i in order if correct[i]]
  neg = [i for i in order if not correct[i]]
  out = []
  while len(out) < k and (pos or neg):
    for pool in (pos, neg):
      if pool and len(out) < k:
        out.append(pool.pop(0))
  return sorted(out)


def _timed(env: Env, stage: str):
  class _T:
    def __enter__(self):
      self.t = time.time()

    def __exit__(self, *a):
      env.timings[stage] = env.timings.get(stage, 0.0) + time.time() - self.t
  return _T()


def _question_key(env: Env, index: int) -> jax.Array:
  return jax.random.fold_in(jax.random.key(env.config.seed), index)


def base_rollouts(env: Env, block: list[int]) -> list[sampling.Samples]:
  """The base rollouts of the questions at pool indices `block`, sampled in one batch (one prefill per
  question); question i's row r draws from row_keys(fold_in(key_i, 0), r), as if sampled alone."""
  c, n = env.config, env.config.budget.rollouts_per_question
  prompts = [env.chat(env.task.prompt(env.task.problems[i])) for i in block]
  keys = jnp.concatenate([sampling.row_keys(jax.random.fold_in(_question_key(env, i), 0),
                                            jnp.arange(n, dtype=jnp.uint32)) for i in block])
  with _timed(env, "rollouts_s"), stages.bar("base rollouts", total=len(block) * n * c.sampling.max_new_tokens,
                                              unit="tok") as bar:
    out = sampling.sample(env.student, [p for p in prompts for _ in range(n)], keys=keys, progress=bar.update,
                          max_new_tokens=c.sampling.max_new_tokens, temperature=c.sampling.temperature,
                          top_p=c.sampling.top_p, top_k=c.sampling.top_k)
  return [sampling.Samples(*(a[j * n:(j + 1) * n] for a in (out.tokens, out.logprobs, out.lengths, out.finished)))
          for j in range(len(block))]


def process_question(env: Env, index: int, problem, out: sampling.Samples) -> dict[str, pd.DataFrame] | None:
  """All records of one question from its base rollouts `out` (`base_rollouts`), or None when selection skips
  it (not informative)."""
  c, student = env.config, env.student
  key_q = _question_key(env, index)
  prompt = env.chat(env.task.prompt(problem))
  n_tok = c.sampling.max_new_tokens
  n = c.budget.rollouts_per_question

  # --- Verification of the base rollouts -----------------------------------------------------------------
  responses = [out.tokens[r, :out.lengths[r]].tolist() for r in range(n)]
  texts = [student.tokenizer.decode(resp, skip_special_tokens=True) for resp in responses]
  rewards = [env.task.reward(problem, t) if out.finished[r] or c.task.grade_truncated else 0.0
             for r, t in enumerate(texts)]
  correct = [r == 1.0 for r in rewards]
  rollouts = pd.DataFrame({
      "question_id": problem.id, "question_index": index, "rollout_id": np.arange(n),
      "prompt_ids": [prompt] * n, "response_ids": responses, "text": texts,
      "length": out.lengths.astype(np.int64), "truncated": ~out.finished, "reward": rewards,
      "answer": problem.answer, "extracted": [env.task.extract(t) for t in texts],
      "logprob_sum": [float(out.logprobs[r, :out.lengths[r]].sum()) for r in range(n)],
      "fields": json.dumps(problem.fields, sort_keys=True, default=str)})
  if c.selection == "informative" and (all(correct) or not any(correct)):
    return None

  # --- Teacher scoring: dense predictors of every (teacher, context) ------------------------------------
  order = sorted(range(n), key=lambda r: (bool(c.budget.prefer_finished and not out.finished[r]), r))
  node_rows = [r for r in _balanced(correct, c.budget.node_rollouts_per_question, order) if responses[r]]
  scored = [r for r in range(n) if responses[r]] if c.scoring.all_rollouts else node_rows
  keys = sorted({conf.scoring_key for conf in env.confs})
  t_prompts, dense, h_p = {}, {}, {}
  with _timed(env, "scoring_s"), stages.bar("scoring", total=len(keys) * len(scored), unit="view") as bar:
    for key in keys:
      teacher, ctx = key
      rows, tp = [], []
      for r in scored:
        incorrect = None
        if ctx == "contrastive":
          src = contexts.contrastive_source(rewards, r)
          incorrect = None if src is None else texts[src]
        msg = contexts.context_message(ctx, env.task, problem, incorrect=incorrect,
                                       templates=c.contexts.templates)
        if msg is not None:
          rows.append(r)
          tp.append(env.chat(msg))
      t_prompts[key] = dict(zip(rows, tp))
      if rows:
        # One student pass per rollout: later views reuse its hidden states (the student runs its head only).
        reuse = [h_p[r] for r in rows] if all(r in h_p for r in rows) else None
        got = scoring.score(student, env.teacher(teacher), [prompt] * len(rows), tp, [responses[r] for r in rows],
                            chunk=c.scoring.chunk, top_k=c.scoring.top_k, beta=c.scoring.beta, return_hidden=True,
                            student_hidden=reuse)
        dense[key] = {r: {k: v[i] for k, v in got.items()} for i, r in enumerate(rows)}
        for i, r in enumerate(rows):
          h_p.setdefault(r, got["h_p"][i])
      else:
        dense[key] = {}
      bar.update(len(scored))
  tokens = _tokens_table(problem, keys, dense, responses)

  # --- Nodes, candidate sets C(u), and p, q_c on C(u) (from the hidden states of the scoring pass) -------
  # One student pass per rollout (the first scoring key that scored it) serves every configuration.
  first = {r: next(k for k in keys if r in dense[k]) for r in node_rows if any(r in dense[k] for k in keys)}
  node_rows = [r for r in node_rows if r in first]
  nodes = {r: targeted.select_nodes(len(responses[r]), c.budget.nodes_per_rollout, c.budget.node_strategy,
                                    entropy=dense[first[r]][r]["entropy_p"]).tolist() for r in node_rows}
  k_top = max(1, c.budget.student_top_k, c.budget.teacher_top_k)
  size = 1 + c.budget.student_top_k + c.budget.teacher_top_k * len(keys)
  cand, p_at, q_at = {}, {}, {key: {} for key in keys}
  with _timed(env, "scoring_s"):
    for r in node_rows:
      s_top = scoring.head_logprobs(student, h_p[r][nodes[r]], top_k=k_top)["topk_ids"]
      t_tops = {key: scoring.head_logprobs(env.teacher(key[0]), dense[key][r]["h_q"][nodes[r]],
                                           top_k=k_top)["topk_ids"] for key in keys if r in dense[key]}
      cand[r] = np.stack([
          targeted.candidate_set(responses[r][t], s_top[m][:c.budget.student_top_k],
                                 [t_tops[key][m][:c.budget.teacher_top_k] for key in keys if key in t_tops], size)
          for m, t in enumerate(nodes[r])])
      p_at[r] = scoring.head_logprobs(student, h_p[r][nodes[r]], cand[r], top_k=1, policy=policy(c))["logp"]
      for key in t_tops:
        q_at[key][r] = scoring.head_logprobs(env.teacher(key[0]), dense[key][r]["h_q"][nodes[r]], cand[r],
                                             top_k=1, policy=teacher_policy(c))["logp"]

  # --- Targeted continuations -> P_succ ------------------------------------------------------------------
  sp = policy(c)
  continuer = targeted.ModelPolicy(student, batch_size=c.budget.branch_batch, temperature=sp.temperature,
                                   top_p=sp.top_p, top_k=sp.top_k)

  def verify(resp, finished):
    if not (finished or c.task.grade_truncated):
      return 0.0
    return env.task.reward(problem, student.tokenizer.decode(resp, skip_special_tokens=True))

  key_c = jax.random.fold_in(key_q, 1)
  b = c.budget
  adaptive = (targeted.Adaptive(r_max=b.continuations_max, mean=b.continuations_mean, tolerance=b.adaptive_tolerance)
              if b.get("adaptive", False) else None)
  branches = sum(int((cand[r] >= 0).sum()) for r in node_rows) * (b.continuations_mean if adaptive else
                                                                     b.continuations_per_candidate)
  with _timed(env, "continuations_s"), stages.bar("targeted continuations", total=int(branches * n_tok),
                                                  unit="tok") as bar:
    continuer.progress = bar.update
    outcomes = targeted.estimate_successes(
        continuer, verify, prompt, [(r, responses[r], nodes[r], cand[r]) for r in node_rows],
        R=c.budget.continuations_per_candidate, key=key_c, max_response_len=n_tok, adaptive=adaptive,
        probs=[np.exp(p_at[r]) for r in node_rows])
  node_frames = [_node_rows(env, problem, r, correct[r], responses[r], nodes[r], cand[r], out, p_at[r],
                            {key: q_at[key].get(r) for key in keys}, dense)
                 for r, out in zip(node_rows, outcomes)]
  nodes_df = pd.concat(node_frames, ignore_index=True) if node_frames else pd.DataFrame()
  return {"rollouts": rollouts, "tokens": tokens, "nodes": nodes_df}


def _tokens_table(problem, keys, dense, responses) -> pd.DataFrame:
  frames = []
  for key in keys:
    for r, d in sorted(dense[key].items()):
      L = len(responses[r])
      frame = {"question_id": problem.id, "rollout_id": r, "position": np.arange(L),
               "token": np.asarray(responses[r], np.int64), "teacher": key[0], "context": key[1],
               "logp": d["logp"].astype(np.float64), "logq": d["logq"].astype(np.float64)}
      frame.update({k: d[k].astype(np.float64) for k in PREDICTORS})
      frames.append(pd.DataFrame(frame))
  return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _node_rows(env, problem, r, correct, response, positions, cands, outcomes, p_at, q_at, dense):
  """One row per (node, configuration) of rollout r (columns: records.SCHEMAS["nodes"]).

  p_at [M, K]: full-vocabulary log-probs of the student's sampled policy at C(u); q_at[key] [M, K]: those of the
  scaled teacher of each view (None where its context is unavailable). Slot 0 of C(u) is the sampled token.
  """
  rows = []
  succ, n = outcomes.successes, outcomes.n
  lo, hi = targeted.wilson_interval(succ, n)
  ps_all = targeted.p_succ(succ, n)
  noise = None
  for conf in env.confs:
    key = conf.scoring_key
    base = {"question_id": problem.id, "rollout_id": r, "config_id": conf.config_id, "teacher": conf.teacher,
            "context": conf.context, "divergence": conf.divergence, "beta": conf.beta, "clip": conf.clip,
            "correct": correct}

    def per_node(m, t):
      valid = cands[m] >= 0
      return {**base, "position": int(t), "sampled_token": int(response[t]), "candidates": _ids(cands[m]),
              "successes": succ[m][valid].tolist(), "n": n[m][valid].tolist(),
              "rewards": [outcomes.replicates(m, k).tolist() for k in np.flatnonzero(valid)],
              "p_succ": ps_all[m][valid].tolist(), "p_succ_lo": lo[m][valid].tolist(),
              "p_succ_hi": hi[m][valid].tolist()}

    if q_at[key] is None:
      for m, t in enumerate(positions):
        rows.append({**per_node(m, t), "p": [], "q": [], "value": math.nan, "alignment": math.nan,
                     "alignment_nan_reason": UNAVAILABLE, "teacher_advantage": math.nan,
                     "sampled_advantage": math.nan, "degenerate": bool(gradients.is_degenerate(succ[m], n[m])),
                     "p_mass": math.nan, "q_mass": math.nan, "noise_ceiling": math.nan,
                     **{k: math.nan for k in PREDICTORS}})
      continue
    slots = np.where(cands >= 0, np.arange(cands.shape[-1]), -1)        # log-probs are already on C(u)
    p, p_mass = gradients.restrict(p_at, slots)                         # renormalised, and the mass covered
    q, q_mass = gradients.restrict(q_at[key], slots)
    p, q = _renormalise(p), _renormalise(q)
    sampled_index = np.zeros(len(positions), np.int64)                  # the sampled token is C(u)'s first
    # Full-vocabulary log q(y_t) - log p(y_t) of the scaled teacher and the sampled policy; -inf where q(y_t)
    # underflows to 0.
    adv = np.clip(np.asarray(q_at[key][:, 0], np.float64) - np.asarray(p_at[:, 0], np.float64), -1e30, 1e30)
    est = targeted.node_estimates(p, q, succ, n, divergence=conf.divergence, sampled_index=sampled_index,
                                  advantage=adv, **dict(conf.options))
    if noise is None:
      noise = targeted.split_half_noise_ceiling(p, outcomes)
    for m, t in enumerate(positions):
      valid = cands[m] >= 0
      rows.append({**per_node(m, t), "p": p[m][valid].tolist(), "q": q[m][valid].tolist(),
                   "value": float(est.value[m]), "alignment": float(est.alignment[m]),
                   "alignment_nan_reason": str(est.nan_reason[m]),
                   "teacher_advantage": float(est.teacher_advantage[m]), "sampled_advantage": float(adv[m]),
                   "degenerate": bool(est.degenerate[m]), "p_mass": float(np.asarray(p_mass)[m]),
                   "q_mass": float(np.asarray(q_mass)[m]), "noise_ceiling": float(noise[m]),
                   **{k: float(dense[key][r][k][t]) for k in PREDICTORS}})
  return pd.DataFrame(rows)


def _renormalise(p):
  """Exactly normalised in float64 (restrict's fp32 sums are 1 +- 1e-7, which near-degenerate nodes feel:
  g* = p (P_succ - V) assumes sum p = 1)."""
  p = np.asarray(p, np.float64)
  return p / np.maximum(p.sum(-1, keepdims=True), 1e-300)


def _ids(c):
  return [int(x) for x in c if x >= 0]


# ----------------------------------------------------------------------------------------------------------
# The study.

def _versions() -> dict:
  out = {}
  for pkg in ("jax", "jaxlib", "numpy", "transformers", "tokenizers", "gguf", "pandas", "pyarrow",
              "reasoning-gym", "math-verify", "opd_jax"):
    try:
      out[pkg] = importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
      out[pkg] = None
  return out


def check_workdir_path(workdir: pathlib.Path) -> bool:
  """Refuse a workdir that is a file or cannot be created (before any work); returns whether it is writable.

  Raises:
    ValueError: naming the path and the fix.
  """
  if workdir.exists() and not workdir.is_dir():
    raise ValueError(f"--workdir={workdir} is a file, not a directory; pass a directory (it is created if missing)")
  try:
    workdir.mkdir(parents=True, exist_ok=True)
  except OSError as e:
    raise ValueError(f"--workdir={workdir} cannot be created ({e.strerror}); pass a writable directory") from None
  return os.access(workdir, os.W_OK | os.X_OK)


def is_complete(workdir: pathlib.Path, process_count: int) -> bool:
  """Every process of the run marked itself done and the manifest was written: nothing left to run."""
  if not (workdir / "manifest.json").is_file():
    return False
  return all(sharding.read_progress(workdir, i, process_count)["done"] for i in range(process_count))


def diagnose(nodes: pd.DataFrame) -> str | None:
  """A loud one-paragraph warning when the study measured nothing (no node, or no defined alignment), with the
  likely cause; None when some alignment is defined."""
  if len(nodes) and nodes["alignment"].notna().any():
    return None
  if not len(nodes):
    return ("WARNING: the study recorded no node, so the alignment table and plot are empty; likely cause: no "
            "node rollout had a response (raise config.sampling.max_new_tokens)")
  degenerate = nodes["degenerate"].astype(bool)
  if degenerate.all():
    return (f"WARNING: all {len(nodes)} node rows are degenerate (P_succ equal on every candidate), so no alignment "
            "is defined and the alignment table and plot are empty; likely cause: no informative question (every "
            "continuation succeeds or every one fails: check the task's accuracy and its gold answers), or "
            "R = config.budget.continuations_per_candidate too small to tell candidates apart: raise it")
  reasons = nodes.loc[~degenerate, "alignment_nan_reason"].fillna("").value_counts().to_dict()
  return (f"WARNING: every alignment is NaN ({int(degenerate.sum())} of {len(nodes)} node rows degenerate; the "
          f"others: {reasons}), so the alignment table and plot are empty; likely cause: too few nodes "
          "(config.budget) or contexts unavailable for the scored rollouts")


def _token_text(tokenizer):
  """token id -> its text, for the report's split by token kind (None without a tokenizer)."""
  return None if tokenizer is None else (lambda t: tokenizer.decode([int(t)]))


def _cheap_tokenizer(config):
  """The student's tokenizer without loading weights where that is cheap (`checkpoints.peek`), else None."""
  spec = config.student.name
  if spec.startswith("random:"):
    return models.byte_tokenizer()
  found = models.checkpoints.peek(spec)
  return None if found is None else found[1]


def finish(workdir, *, rebuild: bool = True, tokenizer=None, options=None) -> str:
  """Check the parts, rebuild the summary (`report.write_summary`, with the student's `tokenizer` for the split
  by token kind; unless rebuild is False: a read-only finished workdir keeps its summary) and warn on stderr and
  in summary.md when nothing was measured (`diagnose`). Returns the summary markdown."""
  workdir = pathlib.Path(workdir)
  records.check_parts(workdir)
  if rebuild:
    with stages.bar("report"):
      markdown = report.write_summary(str(workdir), decode=_token_text(tokenizer), **dict(options or {}))
  else:
    markdown = (workdir / "summary.md").read_text() if (workdir / "summary.md").is_file() else ""
  warning = diagnose(records.read_table(workdir, "nodes"))
  if warning:
    print(warning, file=sys.stderr)
    if rebuild:
      markdown += f"\n**{warning}**\n"
      records.atomic_write_bytes(workdir / "summary.md", markdown)
  return markdown


TABLE_COLUMNS = ("config_id", "group", "n_nodes", "n_defined", "mean_alignment", "alignment_ci_lo", "alignment_ci_hi",
                 "mean_noise_ceiling", "underpowered")


def results_text(workdir) -> str:
  """What a finished run prints on stdout: the verdict (verdict.json's line), the alignment table
  (`TABLE_COLUMNS` of summary.csv that exist), then one line saying where the records, report and figures are."""
  workdir = pathlib.Path(workdir)
  lines = []
  if (workdir / "verdict.json").is_file():
    lines += [json.loads((workdir / "verdict.json").read_text())["line"], ""]
  csv = workdir / "summary.csv"
  if csv.is_file():
    table = pd.read_csv(csv)
    cols = [c for c in TABLE_COLUMNS if c in table.columns]
    fmt = lambda v: f"{v:.3f}" if isinstance(v, float) and not isinstance(v, bool) else str(v)
    body = [[fmt(v) for v in row] for row in table[cols].itertuples(index=False)]
    widths = [max(len(c), *(len(r[i]) for r in body)) if body else len(c) for i, c in enumerate(cols)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(cols, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in body]
  figures = [p.name for p in sorted(workdir.glob("*.png"))]
  lines.append(f"records: {workdir / 'records'}  report: {workdir / 'report.html'}  summary: "
               f"{workdir / 'summary.md'} (table: summary.csv)" + (f"  figures: {', '.join(figures)}" if figures else ""))
  return "\n".join(lines)


def run(config, workdir: str) -> str:
  """Run (or resume) the study of `config` in `workdir`; returns the summary markdown.

  Order: config checks, the workdir (a writable directory, not another config's run, not locked by a live run
  with this process index: `sharding.workdir_lock`), the task and context lengths (`preflight`), and only then
  the models. A finished run is not rerun: its summary is rebuilt (when the workdir is writable) and returned.

  Raises:
    ValueError / FileNotFoundError: bad config, data or checkpoints (before any record is written), a workdir
      holding another config's run (left untouched), or one in use by another run.
  """
  cfg = config.to_dict()
  validate(config)
  stages.ENABLED = bool(config.logging.progress)
  workdir = pathlib.Path(workdir)
  writable = check_workdir_path(workdir)
  if (workdir / "config.json").exists():
    records.check_workdir(workdir, cfg)                                  # refuse before loading anything
  pi, pc = sharding.process_index(), sharding.process_count()
  if is_complete(workdir, pc):
    logging.info("%s holds a complete run of this config: nothing to run, no model loaded", workdir)
    print(f"complete: {workdir} holds a finished run of this config (nothing to run)", file=sys.stderr)
    return (finish(workdir, rebuild=writable, tokenizer=_cheap_tokenizer(config), options=config.report)
            if pi == 0 else "")
  if not writable:
    raise ValueError(f"--workdir={workdir} is not writable; pass a writable directory")
  with sharding.workdir_lock(workdir, pi):
    return _run_locked(config, cfg, workdir, pi, pc)


def _run_locked(config, cfg: dict, workdir: pathlib.Path, pi: int, pc: int) -> str:
  task, confs = preflight(config)                           # task, gold answers, context lengths: no model yet
  print(plan(config).describe(), file=sys.stderr, flush=True)
  env = setup(config, task, confs)
  records.check_workdir(workdir, cfg)
  records.check_parts(workdir)
  h = records.config_hash(cfg)
  progress = sharding.read_progress(workdir, pi, pc)        # progress.json, or progress.<i>-of-<n>.json
  processed, selected = list(progress["processed"]), list(progress["selected"])
  before = dict(progress.get("timings_s") or {})           # stage times of earlier sessions of this run

  def timings():
    return {k: round(before.get(k, 0.0) + env.timings.get(k, 0.0), 3) for k in sorted(set(before) | set(env.timings))}

  done = set(processed)
  quota = sharding.question_quota(config.budget.questions, pi, pc)
  bar = tqdm(total=quota, initial=len(selected), desc="questions", unit="q",
             disable=not config.logging.progress or quota <= 1)     # one question: the stage bars show progress
  try:
    mine, G = sharding.split_questions(range(len(env.task.problems)), pi, pc), config.budget.question_batch
    for block in (mine[s:s + G] for s in range(0, len(mine), G)):   # fixed blocks: resuming changes no batch
      if len(selected) >= quota:
        break
      if all(env.task.problems[i].id in done for i in block):
        continue
      for index, out in zip(block, base_rollouts(env, block)):
        problem = env.task.problems[index]
        if len(selected) >= quota:
          break
        if problem.id in done:
          continue
        tables = process_question(env, index, problem, out)
        if tables is not None:
          for name in records.TABLES:
            records.write_part(workdir, name, problem.id, tables[name], config_hash=h)
          selected.append(problem.id)
          bar.update(1)
        processed.append(problem.id)
        sharding.write_progress(workdir, {"processed": processed, "selected": selected, "timings_s": timings()},
                                pi, pc)
  except Exception as e:
    if pc > 1:                                             # the other processes stop waiting and raise too
      sharding.write_progress(workdir, {"processed": processed, "selected": selected}, pi, pc,
                              error=f"{type(e).__name__}: {e}")
    raise
  bar.close()
  sharding.write_progress(workdir, {"processed": processed, "selected": selected, "timings_s": timings()}, pi, pc,
                          done=True)
  if len(selected) < quota:
    logging.warning("only %d of this process's %d questions (config.budget.questions=%d over %d processes) were "
                    "informative in its share of the pool of %d", len(selected), quota, config.budget.questions,
                    pc, len(env.task.problems))
  states = sharding.wait_for_processes(workdir, pc)          # every process waits: none exits early
  if pi != 0:
    return ""
  processed = [q for s in states for q in s["processed"]]
  selected = [q for s in states for q in s["selected"]]
  devices = jax.devices()
  manifest = {
      "schema_version": records.SCHEMA_VERSION, "config_hash": records.config_hash(cfg),
      "versions": _versions(), "seed": config.seed, "device_count": len(devices),
      "platform": devices[0].platform, "mesh_shape": sharding.describe(env.mesh),
      "models": {m.name: {"sha256": m.sha256, "source": m.source, "dtype": str(m.params["embed"].dtype)}
                 for m in [env.student, *env.teachers.values()]},
      "questions_processed": len(processed), "questions_selected": len(selected),
      "timings_s": timings(),
      "policy": {"student": dataclasses.asdict(policy(config)), "teacher": dataclasses.asdict(teacher_policy(config))},
      "schema": records.describe_schema(),
  }
  records.atomic_write_json(workdir / "manifest.json", manifest)
  if not selected:
    raise ValueError(f"no question of the pool ({len(env.task.problems)}) was informative (both a correct and "
                     "an incorrect rollout); raise config.task.num_problems or config.budget.rollouts_per_question"
                     ", or set config.selection='all'")
  return finish(workdir, tokenizer=env.student.tokenizer, options=config.report)
