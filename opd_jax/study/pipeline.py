"""The study pipeline of design.md, resumable per question: orchestration only (each stage's maths lives in
its own module, named on the right).

config -> checks, plan, task and context lengths                                      preflight.py
       -> models on this process's mesh                                                `setup`; sharding.py
       -> the process's share of the question pool, in fixed blocks                    runs.py
       -> student prompts -> base rollouts (one batch per block)                       `base_rollouts`; sampling.py
       -> verifier -> question selection                                               `verify`; tasks/
       -> teacher scoring of every view (teacher, context) -> dense predictors         `score_views`; scoring.py
          (`tokens` table)
       -> node selection -> candidate sets C(u) -> p, q_v on C(u)                      `nodes_of`; nodes.py
       -> targeted continuations -> P_succ                                             `continuations`; targeted.py
       -> g*, g_D, alignment, teacher advantage, intervals (`nodes` table)             nodes.py
       -> records (one part per question and table) and progress                       records.py, runs.py
       -> every process done -> manifest, summary and report (process 0)               `finish`; report/

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
import pathlib
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
from absl import logging

from opd_jax.study import checklist
from opd_jax.teachers import contexts
from opd_jax.teachers import cross_view
from opd_jax.study import looks
from opd_jax import models
from opd_jax.study import nodes
from opd_jax.study import preflight
from opd_jax.study import records
from opd_jax import report
from opd_jax.study import runs
from opd_jax.decode import sampling
from opd_jax.decode import scoring
from opd_jax.decode import sharding
from opd_jax import terminal
from opd_jax.study import targeted
from opd_jax.tasks import grading

# ----------------------------------------------------------------------------------------------------------
# Loading: the models, on this process's mesh.

def load_model(spec: str, config):
  """A model spec: preset, HF folder, .gguf path, "random:<seed>" (config.random_model architecture), or (a
  teacher) "flax:<python.module>:<factory>" returning a `flax_adapter.FlaxTeacher`."""
  if spec.startswith("random:"):
    r = config.random_model
    seed = preflight.random_seed(spec, "model spec")
    tok = models.byte_tokenizer()
    cfg = models.Config(arch=r.arch, vocab_size=len(tok), d_model=r.d_model, n_layers=r.n_layers,
                        n_heads=r.n_heads, n_kv_heads=r.n_kv_heads, head_dim=r.head_dim, d_ff=r.d_ff,
                        qkv_bias=r.arch == "qwen2", qk_norm=r.arch == "qwen3", max_seq_len=r.max_seq_len)
    params = models.init_params(jax.random.key(seed), cfg, scale=r.init_scale)
    return models.with_layout(models.Model(config=cfg, params=params, tokenizer=tok,
                                           stop_ids=(int(tok.eos_token_id),), name=spec, sha256=None,
                                           source="random"))
  if spec.startswith("flax:"):                   # a user's Flax module (models/flax_adapter.py), teachers only
    from opd_jax.models import flax_adapter  # pylint: disable=g-import-not-at-top
    return flax_adapter.load(spec)
  return models.load(spec, dtype=config.student.dtype or None)


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
  cross: frozenset = frozenset()         # teachers read through text (`cross.py`): another tokenizer, or forced
  work: dict = dataclasses.field(default_factory=dict)   # what this session spent (`count`; manifest "work")

  def count(self, **amounts) -> None:
    for k, v in amounts.items():
      self.work[k] = self.work.get(k, 0) + int(v)

  def teacher(self, name: str):
    return self.student if name == contexts.SELF else self.teachers[name]

  def is_cross(self, view: nodes.View) -> bool:
    return view[0] in self.cross

  def chat(self, message: str) -> list[int]:
    return contexts.study_chat(self.student.tokenizer, message, self.config)


def views_of(env: Env) -> list[nodes.View]:
  """The study's views, sorted: the (teacher, context) pairs of its configurations, each scored once."""
  return sorted({conf.scoring_key for conf in env.confs})


def candidate_rule(env: Env) -> dict:
  """The study's candidate-set rule (`nodes.candidate_rule`; manifest.json "candidate_set"): its views that add a
  top-k to C(u), i.e. all but the cross-tokenizer ones, and config.budget's top-k sizes."""
  b = env.config.budget
  return nodes.candidate_rule([view for view in views_of(env) if not env.is_cross(view)],
                              student_top_k=b.student_top_k, teacher_top_k=b.teacher_top_k)


def setup(config, task=None, confs=None, *, cross_ok: bool = True) -> Env:
  """Validate, load the task (unless given, with its parsed configurations: `preflight.check`) and every model, check
  tokenizers and context lengths (clear errors before any work)."""
  t0 = time.time()
  if task is None:
    task, confs = preflight.check(config)
  with terminal.bar("loading models"):
    student = load_model(config.student.name, config)
    teachers, cross_names = {}, set()
    for c in confs:
      if c.teacher != contexts.SELF and c.teacher not in teachers:
        teachers[c.teacher] = load_model(c.teacher, config)
        if cross_view.cross_teacher(config, c.teacher, student.tokenizer, teachers[c.teacher].tokenizer,  # as loaded
                                    where=f"config.configurations[{c.config_id!r}]: teacher {c.teacher!r}",
                                    cross_ok=cross_ok):
          cross_names.add(c.teacher)
  mesh = sharding.mesh_from_config(config)
  rules = sharding.rules_from_config(config)
  student = sharding.shard_model(student, mesh, rules)
  teachers = {name: sharding.shard_model(m, mesh, rules) for name, m in teachers.items()}
  env = Env(config, task, confs, student, teachers, {"load_s": time.time() - t0}, mesh, frozenset(cross_names))
  limits = {contexts.SELF: student.config.max_seq_len, **{k: m.config.max_seq_len for k, m in teachers.items()}}
  preflight.check_context(config, task, confs, student.tokenizer, limits)
  return env


# ----------------------------------------------------------------------------------------------------------
# One question, stage by stage.

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
  with _timed(env, "rollouts_s"), terminal.bar("base rollouts", total=len(block) * n * c.sampling.max_new_tokens,
                                              unit="tok") as bar:
    out = sampling.sample(env.student, [p for p in prompts for _ in range(n)], keys=keys, progress=bar.update,
                          max_new_tokens=c.sampling.max_new_tokens, temperature=c.sampling.temperature,
                          top_p=c.sampling.top_p, top_k=c.sampling.top_k)
  env.count(base_rollouts=len(out.lengths), base_rollout_tokens=np.sum(out.lengths))
  return [sampling.Samples(*(a[j * n:(j + 1) * n] for a in (out.tokens, out.logprobs, out.lengths, out.finished)))
          for j in range(len(block))]


@dataclasses.dataclass
class Verified:
  """A question's base rollouts after the verifier (`verify`)."""
  frame: pd.DataFrame                     # the `rollouts` records of the question
  responses: list[list[int]]              # response token ids per rollout (stop token included)
  texts: list[str]
  rewards: list[float]
  correct: list[bool]
  finished: np.ndarray                    # bool [n]: stopped before sampling.max_new_tokens


def verify(env: Env, index: int, problem, prompt: list[int], out: sampling.Samples) -> Verified:
  """Decode and grade the base rollouts of one question (a truncated response scores 0 unless
  config.task.grade_truncated); the question's `rollouts` records."""
  c, n = env.config, env.config.budget.rollouts_per_question
  responses = [out.tokens[r, :out.lengths[r]].tolist() for r in range(n)]
  texts = [env.student.tokenizer.decode(resp, skip_special_tokens=True) for resp in responses]
  rewards = [env.task.rollout_reward(problem, t, finished=bool(out.finished[r]),
                                     grade_truncated=c.task.grade_truncated) for r, t in enumerate(texts)]
  frame = pd.DataFrame({
      "question_id": problem.id, "question_index": index, "rollout_id": np.arange(n),
      "prompt_ids": [prompt] * n, "response_ids": responses, "text": texts,
      "length": out.lengths.astype(np.int64), "truncated": ~out.finished, "reward": rewards,
      "answer": problem.answer, "extracted": [env.task.extract(t) for t in texts],
      "logprob_sum": [float(out.logprobs[r, :out.lengths[r]].sum()) for r in range(n)],
      "fields": json.dumps(problem.fields, sort_keys=True, default=str)})
  return Verified(frame, responses, texts, rewards, [r == 1.0 for r in rewards], out.finished)


def score_views(env: Env, problem, prompt: list[int], views: list[nodes.View], v: Verified, scored: list[int]):
  """Every view (teacher, context) scores the rollouts `scored` whose context exists (contrastive needs another,
  incorrect rollout): dense per-token predictors and the hidden states of both sides.

  Returns:
    dense: {view: {rollout: {name: array [L]}}} (`scoring.score`'s outputs: "logp", "logq", the predictors,
      "h_q"); h_p: {rollout: [L, D]} the student's hidden states (one student pass per rollout: later views
      reuse them and run the student's head only).
  """
  c = env.config
  dense, h_p = {}, {}
  with _timed(env, "scoring_s"), terminal.bar("scoring", total=len(views) * len(scored), unit="view") as bar:
    for view in views:
      teacher, ctx = view
      rows, t_prompts = [], []
      for r in scored:
        src = contexts.incorrect_source(ctx, v.rewards, r)
        incorrect = None if src is None else v.texts[src]
        msg = contexts.context_message(ctx, env.task, problem, incorrect=incorrect, templates=c.contexts.templates)
        if msg is not None:
          rows.append(r)
          t_prompts.append(contexts.study_chat(env.teacher(teacher).tokenizer, msg, c))
      dense[view] = {}
      if rows:
        reuse = [h_p[r] for r in rows] if all(r in h_p for r in rows) else None
        x = env.is_cross(view)            # the student's side only here; the teacher's after the nodes
        got = scoring.score(env.student, env.student if x else env.teacher(teacher), [prompt] * len(rows),
                            [prompt] * len(rows) if x else t_prompts, [v.responses[r] for r in rows],
                            chunk=c.scoring.chunk, top_k=c.scoring.top_k, beta=c.scoring.beta, return_hidden=True,
                            student_hidden=reuse)
        dense[view] = {r: {k: a[i] for k, a in got.items()} for i, r in enumerate(rows)}
        env.count(scored_tokens=sum(len(v.responses[r]) for r in rows))
        if x:
          for i, r in enumerate(rows):
            dense[view][r].update(cross_view.pending(t_prompts[i]))
        for i, r in enumerate(rows):
          h_p.setdefault(r, got["h_p"][i])
      bar.update(len(scored))
  return dense, h_p


def tokens_table(question_id: str, views: list[nodes.View], dense: dict, responses) -> pd.DataFrame:
  """The question's `tokens` records: one row per (view, scored rollout, position)."""
  frames = []
  for view in views:
    for r, d in sorted(dense[view].items()):
      L = len(responses[r])
      frame = {"question_id": question_id, "rollout_id": r, "position": np.arange(L),
               "token": np.asarray(responses[r], np.int64), "teacher": view[0], "context": view[1],
               "logp": d["logp"].astype(np.float64), "logq": d["logq"].astype(np.float64)}
      frame.update({k: d[k].astype(np.float64) for k in records.PREDICTORS})
      frames.append(pd.DataFrame(frame))
  return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def nodes_of(env: Env, views: list[nodes.View], node_rollouts: list[int], responses, dense: dict,
             h_p: dict) -> dict[int, nodes.RolloutNodes]:
  """The nodes of each node rollout (`targeted.select_nodes`, on the student entropy of the first view that
  scored it), their C(u), p and q_v (`nodes.at_nodes`, from the scoring pass's hidden states; one head call per
  model and phase for all of the question's node rollouts)."""
  c, b = env.config, env.config.budget
  with _timed(env, "scoring_s"):
    inputs = []
    for r in node_rollouts:
      first = next(view for view in views if r in dense[view])
      positions = targeted.select_nodes(len(responses[r]), b.nodes_per_rollout, b.node_strategy,
                                        entropy=dense[first][r]["entropy_p"]).tolist()
      teachers = {view: (env.teacher(view[0]), dense[view][r]["h_q"]) for view in views
                  if r in dense[view] and not env.is_cross(view)}
      inputs.append(nodes.NodeInputs(h_p[r], teachers, responses[r], positions))
    shared = [view for view in views if not env.is_cross(view)]
    at = dict(zip(node_rollouts, nodes.at_nodes(env.student, inputs, shared, student_top_k=b.student_top_k,
                                                teacher_top_k=b.teacher_top_k, policy=preflight.policy(c),
                                                teacher_policy=preflight.teacher_policy(c))))
    for view in views:
      if env.is_cross(view):
        cross_view.score_view(env.student, env.teacher(view[0]), view, responses, dense, at,
                              options=c.scoring.cross_tokenizer,
                              teacher_temperature=preflight.teacher_policy(c).temperature)
  return at


def continuations(env: Env, index: int, problem, prompt: list[int], responses,
                  at: dict[int, nodes.RolloutNodes]) -> list[targeted.Outcomes]:
  """Targeted continuations of every (node, candidate) of the question's node rollouts (in `at`'s order), each
  verified: R per candidate, weighted by p and q, or adaptive (config.budget.allocation). Rollout r draws from
  fold_in(key_question, 1).
  Candidates outside the sampled policy's support (log p = -inf under top-k / top-p) get none unless
  budget.continue_unsupported (they cannot move V or g*; records.CONVENTIONS, "not run")."""
  c, b, n_tok = env.config, env.config.budget, env.config.sampling.max_new_tokens
  sp = preflight.policy(c)
  continuer = targeted.ModelPolicy(env.student, batch_size=b.branch_batch, temperature=sp.temperature,
                                   top_p=sp.top_p, top_k=sp.top_k,
                                   answer_span=env.task.answer_span if b.get("stop_at_answer", False) else None)

  def reward(resp, finished):
    return env.task.rollout_reward(problem, env.student.tokenizer.decode(resp, skip_special_tokens=True),
                                   finished=finished, grade_truncated=c.task.grade_truncated)

  how = preflight.allocation(c)
  adaptive = (targeted.Adaptive(r_max=b.continuations_max, mean=b.continuations_mean, tolerance=b.adaptive_tolerance)
              if how == "adaptive" else None)
  weighted = (targeted.Weighted(r_max=b.continuations_max, mean=b.continuations_mean,
                                minimum=b.get("allocation_minimum", 2), min_mass=b.get("allocation_min_mass", 0.01))
              if how == "weighted" else None)
  run = None if b.get("continue_unsupported", False) else [(a.candidates >= 0) & (a.p_at > -np.inf)
                                                            for a in at.values()]
  slots = sum(int(g.sum()) for g in (run if run is not None else [a.candidates >= 0 for a in at.values()]))
  branches = slots * (b.continuations_per_candidate if how == "uniform" else b.continuations_mean)
  with _timed(env, "continuations_s"), terminal.bar("targeted continuations", total=int(branches * n_tok),
                                                  unit="tok") as bar:
    continuer.progress = bar.update
    outcomes = targeted.estimate_successes(
        continuer, reward, prompt, [(r, responses[r], a.positions, a.candidates) for r, a in at.items()],
        R=b.continuations_per_candidate, key=jax.random.fold_in(_question_key(env, index), 1),
        max_response_len=n_tok, adaptive=adaptive, probs=[np.exp(a.p_at) for a in at.values()], run=run,
        weighted=weighted, teacher_probs=[[np.exp(q) for q in a.q_at.values() if q is not None] for a in at.values()])
  env.count(continuations=sum(o.continuations for o in outcomes),
            continuation_tokens=sum(int(np.sum(o.tokens)) for o in outcomes if o.tokens is not None))
  return outcomes


def choose_node_rollouts(env: Env, v: Verified) -> list[int]:
  """The question's node rollouts: balanced correct / incorrect (`budget.node_rollouts_per_question`; finished
  ones first when budget.prefer_finished), non-empty responses only."""
  b = env.config.budget
  order = sorted(range(len(v.responses)), key=lambda r: (bool(b.prefer_finished and not v.finished[r]), r))
  return [r for r in _balanced(v.correct, b.node_rollouts_per_question, order) if v.responses[r]]


def process_question(env: Env, index: int, problem, out: sampling.Samples) -> dict[str, pd.DataFrame] | None:
  """All records of one question from its base rollouts `out` (`base_rollouts`), or None when selection skips
  it (not informative: every rollout correct, or none)."""
  c = env.config
  prompt = env.chat(env.task.prompt(problem))
  v = verify(env, index, problem, prompt, out)
  if c.selection == "informative" and (all(v.correct) or not any(v.correct)):
    return None
  node_rollouts = choose_node_rollouts(env, v)
  scored = [r for r, resp in enumerate(v.responses) if resp] if c.scoring.all_rollouts else node_rollouts
  views = views_of(env)
  dense, h_p = score_views(env, problem, prompt, views, v, scored)
  node_rollouts = [r for r in node_rollouts if any(r in dense[view] for view in views)]
  at = nodes_of(env, views, node_rollouts, v.responses, dense, h_p)
  outcomes = continuations(env, index, problem, prompt, v.responses, at)
  frames = [nodes.node_rows(env.confs, problem.id, r, v.correct[r], v.responses[r], at[r], o,
                            {view: dense[view][r] for view in views if r in dense[view]})
            for r, o in zip(node_rollouts, outcomes)]
  return {"rollouts": v.frame, "tokens": tokens_table(problem.id, views, dense, v.responses),
          "nodes": pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()}


# ----------------------------------------------------------------------------------------------------------
# The run: this process's questions, then (process 0) the manifest, summary and report.

def _versions() -> dict:
  out = {}
  for pkg in ("jax", "jaxlib", "numpy", "transformers", "tokenizers", "gguf", "pandas", "pyarrow",
              "reasoning-gym", "math-verify", "opd_jax"):
    try:
      out[pkg] = importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
      out[pkg] = None
  return out


def _token_text(tokenizer):
  """token id -> its text, for the report's split by token kind (None without a tokenizer)."""
  return None if tokenizer is None else (lambda t: tokenizer.decode([int(t)]))


def finish(workdir, *, rebuild: bool = True, tokenizer=None, options=None, seq=None) -> str:
  """Check the parts, rebuild the summary (`report.write_summary`, with the student's `tokenizer` for the split
  by token kind; unless rebuild is False: a read-only finished workdir keeps its summary) and warn on stderr and
  in summary.md when nothing was measured (`report.diagnose`) or grades timed out or failed
  (`report.grading_warning`, from manifest.json's work counts); `seq`: a sequential study's {design, look, final}
  (`looks.report_look`). Returns the summary markdown."""
  workdir = pathlib.Path(workdir)
  records.check_parts(workdir)
  if rebuild:
    with terminal.bar("report"):
      markdown = report.write_summary(str(workdir), decode=_token_text(tokenizer), **dict(options or {}),
                                      **(seq or {}))
  else:
    markdown = (workdir / "summary.md").read_text() if (workdir / "summary.md").is_file() else ""
  manifest = workdir / "manifest.json"
  work = (json.loads(manifest.read_text()).get("work") or {}) if manifest.is_file() else {}
  warnings = [w for w in (report.diagnose(records.read_table(workdir, "nodes")), report.grading_warning(work)) if w]
  for warning in warnings:
    print(warning, file=sys.stderr)
    if rebuild:
      markdown += f"\n**{warning}**\n"
  if warnings and rebuild:
    with records.writing("report"):
      records.atomic_write_bytes(workdir / "summary.md", markdown)
  return markdown


def run(config, workdir: str, *, repair: bool = False) -> str:
  """Run (or resume) the study of `config` in `workdir`; returns the summary markdown.

  Order: config checks, the workdir (a writable directory, not another config's run, not locked by a live run
  with this process index: `runs.workdir_lock`, which takes over a dead run's lock with a warning), the task and
  context lengths (`preflight.check`), and only then the models. A finished run is not rerun: its parts are
  checked and its summary is rebuilt (when the workdir is writable) and returned.

  Args:
    repair: first drop the record parts that do not read (truncated, damaged) and forget their questions
      (`runs.forget_damaged`), which the run then computes again (seeded: the same records); --repair.
  Raises:
    ValueError / FileNotFoundError: bad config, data or checkpoints (before any record is written), a workdir
      holding another config's run (left untouched), one in use by another run, or a damaged record part (the
      message says to rerun with --repair).
    records.WriteError: a file that could not be written (a full disk), naming it and the stage (records of a
      question, progress, manifest, report); finished questions are kept.
  """
  cfg = config.to_dict()
  preflight.validate(config)
  terminal.ENABLED = bool(config.logging.progress)
  workdir = pathlib.Path(workdir)
  writable = runs.check_workdir_path(workdir)
  if (workdir / "config.json").exists():
    records.check_workdir(workdir, cfg)                                  # refuse before loading anything
  pi, pc = runs.process_index(), runs.process_count()
  looks.check(config, pc)
  if not writable:
    if runs.is_complete(workdir, pc) and not repair:
      return _finished(config, workdir, pi, pc, rebuild=False)
    raise ValueError(f"--workdir={workdir} is not writable; pass a writable directory")
  with runs.workdir_lock(workdir, pi):
    if repair:
      redo = runs.forget_damaged(workdir, pi, pc)
      print(f"repair: {len(redo)} question(s) with damaged records to compute again{': ' if redo else ''}"
            f"{', '.join(redo)}", file=sys.stderr, flush=True)
    if runs.is_complete(workdir, pc):
      return _finished(config, workdir, pi, pc, rebuild=True)
    return _run_locked(config, cfg, workdir, pi, pc)


def _finished(config, workdir: pathlib.Path, pi: int, pc: int, *, rebuild: bool) -> str:
  """A complete run: its parts checked (a damaged one raises before anything prints), `complete:`, the summary
  rebuilt (`rebuild`) by process 0 without loading a model."""
  records.check_parts(workdir)
  logging.info("%s holds a complete run of this config: nothing to run, no model loaded", workdir)
  print(f"complete: {workdir} holds a finished run of this config (nothing to run)", file=sys.stderr)
  if pi != 0:
    return ""
  found = preflight.header(config.student.name, config)     # the tokenizer without weights, where cheap
  return finish(workdir, rebuild=rebuild, tokenizer=found and found[1], options=config.report,
                seq=looks.report_look(config, runs.read_progress(workdir, 0, pc)))


def _run_locked(config, cfg: dict, workdir: pathlib.Path, pi: int, pc: int) -> str:
  records.check_parts(workdir)                              # a damaged part says so before any model loads
  task, confs = preflight.check(config)                     # task, gold answers, context lengths: no model yet
  print(checklist.describe(config, task), file=sys.stderr, flush=True)
  env = setup(config, task, confs)
  records.check_workdir(workdir, cfg)
  timings = run_questions(env, workdir, records.config_hash(cfg), pi, pc)
  states = runs.wait_for_processes(workdir, pc)             # every process waits: none exits early
  if pi != 0:
    return ""
  selected = [q for s in states for q in s["selected"]]
  work = {}
  for s in states:                                          # every process's spending, summed
    for k, v in (s.get("work") or {}).items():
      work[k] = work.get(k, 0) + int(v)
  write_manifest(env, cfg, workdir, processed=sum(len(s["processed"]) for s in states), selected=len(selected),
                 timings=timings, work=work, taken=states[0].get("looks") if looks.is_sequential(config) else None)
  if not selected:
    raise ValueError(f"no question of the pool ({len(env.task.problems)}) was informative (both a correct and "
                     "an incorrect rollout); raise config.task.num_problems or config.budget.rollouts_per_question"
                     ", or set config.selection='all'")
  return finish(workdir, tokenizer=env.student.tokenizer, options=config.report,
                seq=looks.report_look(config, states[0]))


def run_questions(env: Env, workdir: pathlib.Path, config_hash: str, pi: int, pc: int) -> dict[str, float]:
  """This process's share of the question pool (`runs.split_questions`), in fixed blocks of
  budget.question_batch, until its quota of selected questions: each question's record parts, then its progress
  (the commit point of resume). Marks the process done (or failed, for the others to stop waiting).
  Returns the stage timings of this run, earlier sessions included."""
  config = env.config
  progress = runs.read_progress(workdir, pi, pc)            # progress.json, or progress.<i>-of-<n>.json
  processed, selected = list(progress["processed"]), list(progress["selected"])
  before = dict(progress.get("timings_s") or {})           # stage times of earlier sessions of this run
  spent = dict(progress.get("work") or {})                  # and what they spent (Env.count)

  def timings():
    return {k: round(before.get(k, 0.0) + env.timings.get(k, 0.0), 3) for k in sorted(set(before) | set(env.timings))}

  def work():
    return {k: spent.get(k, 0) + env.work.get(k, 0) for k in sorted(set(spent) | set(env.work))}

  done = set(processed)
  quota = runs.question_quota(config.budget.questions, pi, pc)
  if processed:
    print(f"resuming: {len(processed)} questions processed in earlier sessions ({len(selected)} of {quota} selected); "
          "their records are kept", file=sys.stderr, flush=True)
  taken = list(progress.get("looks") or [])                 # the sequential design's looks (looks.py)

  def save(**kw):
    state = {"processed": processed, "selected": selected, "timings_s": timings(), "work": work()}
    runs.write_progress(workdir, {**state, **({"looks": taken} if looks.is_sequential(config) else {})}, pi, pc,
                        **kw)

  def look() -> bool:
    """Takes the looks `selected` has reached (in order); True once one decided the verdict."""
    for k in looks.pending(config, selected, taken):
      taken.append(looks.take(workdir, config, selected, k))
      logging.info("%s", taken[-1]["line"])
      t = taken[-1]
      what = f"decided ({t['decision']}), stopping" if t["decided"] else "not decided, going on"
      print(f"look {k} of {len(looks.schedule(config))} ({t['questions']} questions): {what}", file=sys.stderr)
      save()
      if taken[-1]["decided"]:
        return True
    return looks.stopped(taken) is not None

  mine, G = runs.split_questions(range(len(env.task.problems)), pi, pc), config.budget.question_batch
  try:
    with terminal.bar("questions", total=quota, unit="q", initial=len(selected), fill=False, leave=True,
                    shown=quota > 1) as bar:                # one question: the stage lines show progress
      stop = look()                                         # a resumed run takes the looks it had not taken
      for block in (mine[s:s + G] for s in range(0, len(mine), G)):   # fixed blocks: resuming changes no batch
        redo = set(selected) - set(processed)               # selected, records dropped (`runs.forget_damaged`)
        if (stop or len(selected) >= quota) and not redo:
          break
        if all(env.task.problems[i].id in done for i in block):
          continue
        for index, out in zip(block, base_rollouts(env, block)):
          problem = env.task.problems[index]
          if problem.id in done or ((stop or len(selected) >= quota) and problem.id not in redo):
            continue
          before = grading.failures()
          tables = process_question(env, index, problem, out)
          env.count(**grading.since(before))              # grades that timed out or failed: manifest "work"
          if tables is not None:
            with records.writing(f"records of question {problem.id}"):
              for name in records.TABLES:
                records.write_part(workdir, name, problem.id, tables[name], config_hash=config_hash)
            if problem.id not in redo:
              selected.append(problem.id)
              bar.update(1)
          processed.append(problem.id)
          save()
          stop = look()
  except Exception as e:
    if pc > 1:                                             # the other processes stop waiting and raise too
      runs.write_progress(workdir, {"processed": processed, "selected": selected}, pi, pc,
                          error=f"{type(e).__name__}: {e}")
    raise
  save(done=True)
  if len(selected) < quota and not stop:
    logging.warning("only %d of this process's %d questions (config.budget.questions=%d over %d processes) were "
                    "informative in its share of the pool of %d", len(selected), quota, config.budget.questions,
                    pc, len(env.task.problems))
  return timings()


def write_manifest(env: Env, cfg: dict, workdir: pathlib.Path, *, processed: int, selected: int,
                   timings: dict[str, float], work: dict[str, int], taken: list | None = None) -> None:
  """<workdir>/manifest.json: schema, config hash, versions, seed, devices and mesh, models, counts, timings
  (seconds per stage), work (base rollouts and their tokens, scored tokens, continuations and their tokens, and
  the grades that timed out or failed, grades_timed_out and grades_errored (opd_jax/tasks/grading.py), over
  every session and process of the run), the sequential design's looks taken (`looks.py`; absent for the fixed
  design), the policies, the candidate-set rule (`nodes.candidate_rule`: a configuration's alignment is defined on
  its study's C(u)) and the schema's column docs (records.describe_schema)."""
  devices = jax.devices()
  manifest = {
      "schema_version": records.SCHEMA_VERSION, "config_hash": records.config_hash(cfg),
      "versions": _versions(), "seed": env.config.seed, "device_count": len(devices),
      "platform": devices[0].platform, "mesh_shape": runs.describe(env.mesh),
      "models": {m.name: {"sha256": m.sha256, "source": m.source, "dtype": str(m.dtype)}
                 for m in [env.student, *env.teachers.values()]},
      "questions_processed": processed, "questions_selected": selected, "timings_s": timings, "work": work,
      "policy": {"student": dataclasses.asdict(preflight.policy(env.config)),
                 "teacher": dataclasses.asdict(preflight.teacher_policy(env.config))},
      "candidate_set": candidate_rule(env),
      "schema": records.describe_schema(), **({"looks": taken} if taken is not None else {}),
  }
  with records.writing("manifest"):
    records.atomic_write_json(workdir / "manifest.json", manifest)
