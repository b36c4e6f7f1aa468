"""Nodes: the candidate set C(u), p and q restricted to C(u), and each node's estimates -> node rows.

paper.md, "Candidate set" and "Gradients in logit space": at a node u (a position of a scored rollout),
C(u) = {y_t} ∪ top-k_s(p) ∪ top-k_t(q_v) over every view v = (teacher, context); p (the student's sampled
policy) and every q_v (the scaled teacher of the view) are evaluated at C(u) from the hidden states of the
scoring pass (no second forward), restricted to C(u) and renormalised; with the successes of the targeted
continuations they give V, g*, g_D, alignment and teacher advantage per configuration (`success.node_estimates`).
One row per (node, configuration), with the columns of `records.SCHEMAS["nodes"]`.

C(u) is the study's, not a configuration's (paper.md, "Candidate set" [ours]): every configuration is scored on
the same tokens and the same P_succ estimates, so its p and q over C(u), and with them its V, g* and alignment, are
defined relative to the study's views. Adding a configuration with a view of its own (a teacher x context) adds
that view's top-k_t to C(u) and can change the other configurations' numbers (issue 34, item 7: in the smoke study
one node's solution_jsd alignment went from 0.978 to -0.935 when a context was added); it also widens the padded
K, so every continuation's row id, and with it every P_succ estimate, is redrawn. `candidate_rule` is the rule in
canonical form, written to manifest.json ("candidate_set"); `python -m opd_jax.report` refuses to put studies of
different rules side by side unless told to (`report/compare.py`).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import numpy as np
import pandas as pd

from opd_jax import records
from opd_jax.decode import sampling
from opd_jax.decode import scoring
from opd_jax.estimators import gradients
from opd_jax.estimators import success
from opd_jax.study import targeted


View = tuple[str, str]          # (teacher, context): one scoring pass, one q, shared by its configurations


@dataclasses.dataclass
class RolloutNodes:
  """The nodes of one rollout and what the models say there (`at_nodes`)."""
  positions: list[int]                     # M response positions
  candidates: np.ndarray                   # int64 [M, K]: C(u), slot 0 the sampled token, -1 padded
  p_at: np.ndarray                         # fp32 [M, K]: log-probs of the student's sampled policy at C(u)
  q_at: dict[View, np.ndarray | None]      # per view, fp32 [M, K] of its scaled teacher; None: no context
  # Per view, why a node has no q ("" where it has; records.NAN_REASONS): a cross-tokenizer view's
  # (`cross_view.score_view`); a view missing has q wherever q_at is not None.
  q_reason: dict[View, list[str]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class NodeInputs:
  """What `at_nodes` needs of one rollout: h_p [L, D] the student's final-normed hidden states along the
  response (`scoring.score`, return_hidden); teachers[view] = (teacher model, h_q [L, D]) of each view that scored
  it (a view missing has no context for it: q_at None); the response ids [L]; the M node positions."""
  h_p: np.ndarray
  teachers: dict[View, tuple[Any, np.ndarray]]
  response: Sequence[int]
  positions: Sequence[int]


def candidate_rule(views: Sequence[View], *, student_top_k: int, teacher_top_k: int) -> dict[str, Any]:
  """The study's candidate-set rule in canonical form (manifest.json "candidate_set"): how `at_nodes` forms C(u).

  C(u) = {y_t} ∪ top-k_s(p) ∪ top-k_t(q_v) over every v in `views`: the views whose top-k enters the union, i.e.
  the study's (teacher, context) pairs that share the student's tokenizer (a cross-tokenizer view reads q on C(u)
  and adds no top-k of its own: `cross_view.py`). Two studies form their candidate sets alike exactly when their
  rules are equal.

  Returns:
    {"student_top_k": k_s, "teacher_top_k": k_t (0 when no view adds a top-k), "views": the sorted
    "teacher:context" names, duplicates dropped}.
  """
  names = sorted({f"{teacher}:{context}" for teacher, context in views})
  return {"student_top_k": int(student_top_k), "teacher_top_k": int(teacher_top_k) if names else 0, "views": names}


def at_nodes(student: Any, rollouts: Sequence[NodeInputs], views: Sequence[View], *, student_top_k: int,
             teacher_top_k: int, policy: sampling.SamplingParams,
             teacher_policy: sampling.SamplingParams) -> list[RolloutNodes]:
  """C(u), p and every q_v at the nodes of some rollouts, from the hidden states of their scoring pass.

  C(u) (`targeted.candidate_set`): the sampled token first, the student's top-k_s, then each view's top-k_t in
  view order, padded to K = 1 + k_s + k_t x len(views) (so every rollout of a study has one K). The heads run
  in two phases (top-k ids, then log-probs at C(u)), each with one `scoring.head_logprobs` call per model and
  distribution for the nodes of every rollout and view together (the student and its self-teacher views share
  one). A row's result does not depend on the other rows (beyond float round-off from the batch shape).

  Args:
    student: the student model; rollouts: one `NodeInputs` per rollout.
    views: every view of the study, sorted.
    policy: the student's sampled policy (p); teacher_policy: the scaled teacher (q) (`preflight.policy`,
      `preflight.teacher_policy`).
  Returns:
    One `RolloutNodes` per rollout, in order.
  """
  size = 1 + student_top_k + teacher_top_k * len(views)
  k_top = max(1, student_top_k, teacher_top_k)
  sides = [[(None, student, x.h_p)] + [(v, *x.teachers[v]) for v in views if v in x.teachers] for x in rollouts]
  tops = _heads([[(model, h[x.positions], None) for _, model, h in side] for side, x in zip(sides, rollouts)],
                top_k=k_top)
  cands = [np.array([targeted.candidate_set(x.response[t], top[0][m][:student_top_k],
                                            [tt[m][:teacher_top_k] for tt in top[1:]], size)
                     for m, t in enumerate(x.positions)], np.int64).reshape(len(x.positions), size)
           for x, top in zip(rollouts, tops)]
  logp = _heads([[(model, h[x.positions], c) for _, model, h in side] for side, x, c in zip(sides, rollouts, cands)],
                top_k=1, policy=policy, teacher_policy=teacher_policy)
  out = []
  for side, x, c, lp in zip(sides, rollouts, cands, logp):
    q_at = {v: None for v in views}
    q_at.update({view: a for (view, _, _), a in zip(side[1:], lp[1:])})
    out.append(RolloutNodes(list(x.positions), c, lp[0], q_at))
  return out


def _heads(requests, *, top_k: int, policy=None, teacher_policy=None):
  """`scoring.head_logprobs` of every (model, h [M, D], candidates [M, K] or None) of every rollout, one call
  per (model, distribution): the rows that share a model go through its head together. Each rollout's first
  request (the student's rows) takes `policy`, every other one `teacher_policy`, even the student's own
  self-teacher rows. Returns, per rollout and request, the "topk_ids" (candidates None) or the "logp" array."""
  groups: dict = {}
  for i, reqs in enumerate(requests):
    for j, (model, h, cands) in enumerate(reqs):
      pol = policy if j == 0 else teacher_policy
      groups.setdefault((id(model), pol), (model, pol, []))[2].append((i, j, h, cands))
  out = [[None] * len(reqs) for reqs in requests]
  for model, pol, items in groups.values():
    h = np.concatenate([np.asarray(hh) for _, _, hh, _ in items])
    cands = None if items[0][3] is None else np.concatenate([c for _, _, _, c in items])
    got = scoring.head_logprobs(model, h, cands, top_k=top_k, policy=pol)
    a = got["topk_ids"] if cands is None else got["logp"]
    start = 0
    for i, j, hh, _ in items:
      out[i][j] = a[start:start + len(hh)]
      start += len(hh)
  return out


def node_rows(confs, question_id: str, rollout_id: int, correct: bool, response: Sequence[int], at: RolloutNodes,
              outcomes: targeted.Outcomes, predictors: dict[View, dict[str, np.ndarray]]) -> pd.DataFrame:
  """One row per (node, configuration) of one rollout (columns: records.SCHEMAS["nodes"]).

  Args:
    confs: the study's configurations (`contexts.TeacherConfig`), in config order.
    at: the nodes, C(u), p and q of the rollout (`at_nodes`); a view whose q_at is None (context unavailable
      for this rollout) gets NaN estimates and alignment_nan_reason records.CONTEXT_UNAVAILABLE; a node with a
      reason in at.q_reason (a cross-tokenizer view without q there) gets q empty, NaN alignment, teacher
      advantages and q_mass, and that reason (p, V and the rest are the student's, defined).
    outcomes: the targeted continuations' rewards at these nodes and candidates.
    predictors[view]: {name: float [L]} the dense predictors along the response of every view with a q
      (records.PREDICTORS).
  """
  positions, cands, p_at, q_at = at.positions, at.candidates, at.p_at, at.q_at
  rows = []
  succ, n = outcomes.successes, outcomes.n
  lo, hi = success.wilson_interval(succ, n)
  ps_all = success.p_succ(succ, n)
  # A candidate not run (n = 0: outside the sampled policy's support, or left out by weighted allocation) has no
  # estimate: NaN in the records (records.CONVENTIONS["not run"]); the estimators impute it
  # (success.estimator_p_succ).
  not_run = (cands >= 0) & (n == 0)
  lo, hi, ps_rec = (np.where(not_run, np.nan, a) for a in (lo, hi, ps_all))
  noise = None
  spent = outcomes.runs.sum(-1)                                       # continuations run per node
  spent_tokens = (np.full(len(positions), -1, np.int64) if outcomes.tokens is None
                  else np.asarray(outcomes.tokens, np.int64).sum(-1))
  for conf in confs:
    view = conf.scoring_key
    base = {"question_id": question_id, "rollout_id": rollout_id, "config_id": conf.config_id,
            "teacher": conf.teacher, "context": conf.context, "divergence": conf.divergence, "beta": conf.beta,
            "clip": conf.clip, "divergence_param": conf.param, "correct": correct}

    def per_node(m, t):
      valid = cands[m] >= 0
      return {**base, "position": int(t), "sampled_token": int(response[t]), "candidates": _ids(cands[m]),
              "successes": succ[m][valid].tolist(), "n": n[m][valid].tolist(),
              "rewards": [outcomes.replicates(m, k).tolist() for k in np.flatnonzero(valid)],
              "p_succ": ps_rec[m][valid].tolist(), "p_succ_lo": lo[m][valid].tolist(),
              "p_succ_hi": hi[m][valid].tolist(), "continuations": int(spent[m]),
              "continuation_tokens": int(spent_tokens[m])}

    if q_at[view] is None:
      for m, t in enumerate(positions):
        rows.append({**per_node(m, t), "p": [], "q": [], "value": math.nan, "alignment": math.nan,
                     "alignment_nan_reason": records.CONTEXT_UNAVAILABLE, "teacher_advantage": math.nan,
                     "sampled_advantage": math.nan, "degenerate": bool(gradients.is_degenerate(succ[m], n[m])),
                     "p_mass": math.nan, "q_mass": math.nan, "noise_ceiling": math.nan,
                     **{k: math.nan for k in records.PREDICTORS}})
      continue
    slots = np.where(cands >= 0, np.arange(cands.shape[-1]), -1)        # log-probs are already on C(u)
    p, p_mass = gradients.restrict(p_at, slots)                         # renormalised, and the mass covered
    q, q_mass = gradients.restrict(q_at[view], slots)
    p, q = _renormalise(p), _renormalise(q)
    sampled_index = np.zeros(len(positions), np.int64)                  # the sampled token is C(u)'s first
    # Full-vocabulary log q(y_t) - log p(y_t) of the scaled teacher and the sampled policy; -inf where q(y_t)
    # underflows to 0.
    adv = np.clip(np.asarray(q_at[view][:, 0], np.float64) - np.asarray(p_at[:, 0], np.float64), -1e30, 1e30)
    est = success.node_estimates(p, q, succ, n, divergence=conf.divergence, sampled_index=sampled_index,
                                  advantage=adv, **dict(conf.options))
    if noise is None:
      noise = targeted.split_half_noise_ceiling(p, outcomes)
    why = at.q_reason.get(view) or [""] * len(positions)
    for m, t in enumerate(positions):
      valid = cands[m] >= 0
      rows.append({**per_node(m, t), "p": p[m][valid].tolist(), "q": q[m][valid].tolist(),
                   "value": float(est.value[m]), "alignment": float(est.alignment[m]),
                   "alignment_nan_reason": str(est.nan_reason[m]),
                   "teacher_advantage": float(est.teacher_advantage[m]), "sampled_advantage": float(adv[m]),
                   "degenerate": bool(est.degenerate[m]), "p_mass": float(np.asarray(p_mass)[m]),
                   "q_mass": float(np.asarray(q_mass)[m]), "noise_ceiling": float(noise[m]),
                   **{k: float(predictors[view][k][t]) for k in records.PREDICTORS}})
      if why[m]:                                                       # no q at this node: nothing of q's
        rows[-1].update({"q": [], "alignment": math.nan, "alignment_nan_reason": why[m],
                         "teacher_advantage": math.nan, "sampled_advantage": math.nan, "q_mass": math.nan})
  return pd.DataFrame(rows)


def _renormalise(p):
  """Exactly normalised in float64 (restrict's fp32 sums are 1 +- 1e-7, which near-degenerate nodes feel:
  g* = p (P_succ - V) assumes sum p = 1)."""
  p = np.asarray(p, np.float64)
  return p / np.maximum(p.sum(-1, keepdims=True), 1e-300)


def _ids(c):
  return [int(x) for x in c if x >= 0]
