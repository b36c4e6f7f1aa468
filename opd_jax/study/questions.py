"""One question's stages, in run order (paper.md, "Method"): base rollouts (`base_rollouts`), grades (`verify`),
every view's scoring of the scored rollouts (`score_views`, `tokens_table`), the nodes and their candidate sets
(`nodes_of`), the targeted continuations (`continuations`), and the records of the question
(`process_question`). `opd_jax/study/pipeline.py` runs them over the questions, resumably. They read the
study's resolved settings (`Env.spec`, `opd_jax/study/spec.py`), never the config."""
from __future__ import annotations

import dataclasses
import json
import time

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from opd_jax import records
from opd_jax import terminal
from opd_jax.decode import sampling
from opd_jax.decode import scoring
from opd_jax.report import common
from opd_jax.study import environment
from opd_jax.study import nodes
from opd_jax.study import targeted
from opd_jax.teachers import contexts
from opd_jax.teachers import cross_view


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


def _timed(env: environment.Env, stage: str):
  class _T:
    def __enter__(self):
      self.t = time.time()

    def __exit__(self, *a):
      env.timings[stage] = env.timings.get(stage, 0.0) + time.time() - self.t
  return _T()


def _question_key(env: environment.Env, index: int) -> jax.Array:
  return jax.random.fold_in(jax.random.key(env.spec.seed), index)


def base_rollouts(env: environment.Env, block: list[int]) -> list[sampling.Samples]:
  """The base rollouts of the questions at pool indices `block`, sampled in one batch (one prefill per
  question); question i's row r draws from row_keys(fold_in(key_i, 0), r), as if sampled alone."""
  s, n = env.spec, env.spec.budget.rollouts_per_question
  prompts = [env.chat(env.task.prompt(env.task.problems[i])) for i in block]
  keys = jnp.concatenate([sampling.row_keys(jax.random.fold_in(_question_key(env, i), 0),
                                            jnp.arange(n, dtype=jnp.uint32)) for i in block])
  with _timed(env, "rollouts_s"), terminal.bar("base rollouts", total=len(block) * n * s.max_new_tokens,
                                              unit="tok") as bar:
    out = sampling.sample(env.student, [p for p in prompts for _ in range(n)], keys=keys, progress=bar.update,
                          max_new_tokens=s.max_new_tokens, temperature=s.policy.temperature,
                          top_p=s.policy.top_p, top_k=s.policy.top_k)
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


def verify(env: environment.Env, index: int, problem, prompt: list[int], out: sampling.Samples) -> Verified:
  """Decode and grade the base rollouts of one question (a truncated response scores 0 unless
  spec.grade_truncated); the question's `rollouts` records."""
  n = env.spec.budget.rollouts_per_question
  responses = [out.tokens[r, :out.lengths[r]].tolist() for r in range(n)]
  texts = [env.student.tokenizer.decode(resp, skip_special_tokens=True) for resp in responses]
  rewards = [env.task.rollout_reward(problem, t, finished=bool(out.finished[r]),
                                     grade_truncated=env.spec.grade_truncated) for r, t in enumerate(texts)]
  frame = pd.DataFrame({
      "question_id": problem.id, "question_index": index, "rollout_id": np.arange(n),
      "prompt_ids": [prompt] * n, "response_ids": responses, "text": texts,
      "length": out.lengths.astype(np.int64), "truncated": ~out.finished, "reward": rewards,
      "answer": problem.answer, "extracted": [env.task.extract(t) for t in texts],
      "logprob_sum": [float(out.logprobs[r, :out.lengths[r]].sum()) for r in range(n)],
      "fields": json.dumps(problem.fields, sort_keys=True, default=str)})
  return Verified(frame, responses, texts, rewards, [r == 1.0 for r in rewards], out.finished)


def score_views(env: environment.Env, problem, prompt: list[int], views: list[nodes.View], v: Verified,
                scored: list[int]):
  """Every view (teacher, context) scores the rollouts `scored` whose context exists (contrastive needs another,
  incorrect rollout): dense per-token predictors and the hidden states of both sides.

  Returns:
    dense: {view: {rollout: {name: array [L]}}} (`scoring.score`'s outputs: "logp", "logq", the predictors,
      "h_q"); h_p: {rollout: [L, D]} the student's hidden states (one student pass per rollout: later views
      reuse them and run the student's head only).
  """
  s = env.spec
  dense, h_p = {}, {}
  with _timed(env, "scoring_s"), terminal.bar("scoring", total=len(views) * len(scored), unit="view") as bar:
    for view in views:
      teacher, ctx = view
      rows, t_prompts = [], []
      for r in scored:
        src = contexts.incorrect_source(ctx, v.rewards, r)
        incorrect = None if src is None else v.texts[src]
        msg = contexts.context_message(ctx, env.task, problem, incorrect=incorrect, templates=s.templates)
        if msg is not None:
          rows.append(r)
          t_prompts.append(contexts.study_chat(env.teacher(teacher).tokenizer, msg, env.chat_settings))
      dense[view] = {}
      if rows:
        reuse = [h_p[r] for r in rows] if all(r in h_p for r in rows) else None
        x = env.is_cross(view)            # the student's side only here; the teacher's after the nodes
        got = scoring.score(env.student, env.student if x else env.teacher(teacher), [prompt] * len(rows),
                            [prompt] * len(rows) if x else t_prompts, [v.responses[r] for r in rows],
                            chunk=s.scoring.chunk, top_k=s.scoring.top_k, beta=s.scoring.beta, return_hidden=True,
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


def nodes_of(env: environment.Env, views: list[nodes.View], node_rollouts: list[int], responses, dense: dict,
             h_p: dict) -> dict[int, nodes.RolloutNodes]:
  """The nodes of each node rollout (`targeted.select_nodes`, on the student entropy of the first view that
  scored it), their C(u), p and q_v (`nodes.at_nodes`, from the scoring pass's hidden states; one head call per
  model and phase for all of the question's node rollouts)."""
  s, b = env.spec, env.spec.budget
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
                                                teacher_top_k=b.teacher_top_k, policy=s.policy,
                                                teacher_policy=s.teacher_policy)))
    for view in views:
      if env.is_cross(view):
        cross_view.score_view(env.student, env.teacher(view[0]), view, responses, dense, at,
                              options=s.scoring.cross_tokenizer, teacher_temperature=s.teacher_policy.temperature)
  return at


def continuations(env: environment.Env, index: int, problem, prompt: list[int], responses,
                  at: dict[int, nodes.RolloutNodes]) -> list[targeted.Outcomes]:
  """Targeted continuations of every (node, candidate) of the question's node rollouts (in `at`'s order), each
  verified: R per candidate, weighted by p and q, or adaptive (spec.budget.allocation). Rollout r draws from
  fold_in(key_question, 1).
  Candidates outside the sampled policy's support (log p = -inf under top-k / top-p) get none unless
  budget.continue_unsupported (they cannot move V or g*; records.CONVENTIONS, "not run")."""
  b, n_tok, sp = env.spec.budget, env.spec.max_new_tokens, env.spec.policy
  continuer = targeted.ModelPolicy(env.student, batch_size=b.branch_batch, temperature=sp.temperature,
                                   top_p=sp.top_p, top_k=sp.top_k,
                                   answer_span=env.task.answer_span if b.stop_at_answer else None)

  def reward(resp, finished):
    return env.task.rollout_reward(problem, env.student.tokenizer.decode(resp, skip_special_tokens=True),
                                   finished=finished, grade_truncated=env.spec.grade_truncated)

  how = b.allocation
  adaptive = (targeted.Adaptive(r_max=b.continuations_max, mean=b.continuations_mean, tolerance=b.adaptive_tolerance)
              if how == "adaptive" else None)
  weighted = (targeted.Weighted(r_max=b.continuations_max, mean=b.continuations_mean,
                                minimum=b.allocation_minimum, min_mass=b.allocation_min_mass)
              if how == "weighted" else None)
  run = None if b.continue_unsupported else [(a.candidates >= 0) & (a.p_at > -np.inf)
                                                            for a in at.values()]
  slots = sum(int(g.sum()) for g in (run if run is not None else [a.candidates >= 0 for a in at.values()]))
  branches = slots * (b.continuations_per_candidate if how == "uniform" else b.continuations_mean)
  with _timed(env, "continuations_s"), terminal.bar("targeted continuations", total=int(branches * n_tok),
                                                  unit="tok", fill=False) as bar:   # its line: tokens generated
    continuer.progress = bar.update
    outcomes = targeted.estimate_successes(
        continuer, reward, prompt, [(r, responses[r], a.positions, a.candidates) for r, a in at.items()],
        R=b.continuations_per_candidate, key=jax.random.fold_in(_question_key(env, index), 1),
        max_response_len=n_tok, adaptive=adaptive, probs=[np.exp(a.p_at) for a in at.values()], run=run,
        weighted=weighted, teacher_probs=[[np.exp(q) for q in a.q_at.values() if q is not None] for a in at.values()])
  env.count(continuations=sum(o.continuations for o in outcomes),
            continuation_tokens=sum(int(np.sum(o.tokens)) for o in outcomes if o.tokens is not None))
  return outcomes


def node_rollouts(correct: list[bool], k: int, order: list[int], group: str = "all") -> list[int]:
  """Up to k rollout ids, sorted: balanced correct / incorrect for `group` "all" (`_balanced`), else the first k
  of `order` in `group` ("correct" or "incorrect"; fewer where fewer are)."""
  if group == "all":
    return _balanced(correct, k, order)
  return sorted([r for r in order if correct[r] == (group == "correct")][:k])


def choose_node_rollouts(env: environment.Env, v: Verified) -> list[int]:
  """The question's node rollouts (`node_rollouts` of budget.node_rollouts_per_question; finished ones first when
  budget.prefer_finished), non-empty responses only: balanced correct / incorrect, or with budget.node_group
  "target" only rollouts of the verdict's group (report.target "correct" or "incorrect"; the "all" and "trained"
  groups are both, balanced)."""
  b = env.spec.budget
  order = sorted(range(len(v.responses)), key=lambda r: (bool(b.prefer_finished and not v.finished[r]), r))
  group = common.sampled_group(b.node_group, env.spec.looks.target)
  return [r for r in node_rollouts(v.correct, b.node_rollouts_per_question, order, group) if v.responses[r]]


def process_question(env: environment.Env, index: int, problem,
                     out: sampling.Samples) -> dict[str, pd.DataFrame] | None:
  """All records of one question from its base rollouts `out` (`base_rollouts`), or None when selection skips
  it (not informative: every rollout correct, or none)."""
  s = env.spec
  prompt = env.chat(env.task.prompt(problem))
  v = verify(env, index, problem, prompt, out)
  if s.selection == "informative" and (all(v.correct) or not any(v.correct)):
    return None
  node_rollouts = choose_node_rollouts(env, v)
  scored = [r for r, resp in enumerate(v.responses) if resp] if s.scoring.all_rollouts else node_rollouts
  views = environment.views_of(env)
  dense, h_p = score_views(env, problem, prompt, views, v, scored)
  node_rollouts = [r for r in node_rollouts if any(r in dense[view] for view in views)]
  at = nodes_of(env, views, node_rollouts, v.responses, dense, h_p)
  outcomes = continuations(env, index, problem, prompt, v.responses, at)
  frames = [nodes.node_rows(env.confs, problem.id, r, v.correct[r], v.responses[r], at[r], o,
                            {view: dense[view][r] for view in views if r in dense[view]})
            for r, o in zip(node_rollouts, outcomes)]
  return {"rollouts": v.frame, "tokens": tokens_table(problem.id, views, dense, v.responses),
          "nodes": pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()}
