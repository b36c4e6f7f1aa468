"""What the run loop and a question's stages read, resolved once from the config (issue 37, item 3): frozen, typed
values.

`resolve(config)` runs after preflight's checks (`environment.setup` stores it as `Env.spec`), so every value here
has passed its check; `opd_jax/study/questions.py` and the question loop of `pipeline.py` read only this, never the
config. A field keeps the config's
value as it is (no cast), so a study's records do not depend on the route a value took. configs/base.py documents
each field under its config name (`Budget.rollouts_per_question` is `config.budget.rollouts_per_question`).
"""
from __future__ import annotations

import dataclasses
import types
from typing import Mapping

from opd_jax.decode import sampling
from opd_jax.report import looks as looks_lib
from opd_jax.study import preflight


@dataclasses.dataclass(frozen=True, kw_only=True)
class Budget:
  """config.budget as the stages use it. allocation is resolved ("uniform", "weighted" or "adaptive":
  `preflight.allocation`, where the older budget.adaptive=True reads as "adaptive")."""
  rollouts_per_question: int
  node_rollouts_per_question: int
  node_group: str
  nodes_per_rollout: int
  node_strategy: str
  prefer_finished: bool
  student_top_k: int
  teacher_top_k: int
  branch_batch: int
  allocation: str
  continuations_per_candidate: int
  continuations_max: int
  continuations_mean: float
  adaptive_tolerance: float
  allocation_minimum: int
  allocation_min_mass: float
  continue_unsupported: bool
  stop_at_answer: bool


@dataclasses.dataclass(frozen=True, kw_only=True)
class CrossTokenizer:
  """config.scoring.cross_tokenizer: how a teacher with another tokenizer is read through text (`cross.py`)."""
  mode: str
  prune: float
  max_tree_nodes: int
  force: bool


@dataclasses.dataclass(frozen=True, kw_only=True)
class Scoring:
  """config.scoring: the divergence reduction's chunk (response positions), the top-k overlap's k, the JSD_beta
  predictor's beta, whether every non-empty rollout is scored (else the node rollouts), the cross-tokenizer read."""
  chunk: int
  top_k: int
  beta: float
  all_rollouts: bool
  cross_tokenizer: CrossTokenizer


@dataclasses.dataclass(frozen=True, kw_only=True)
class Spec:
  """Everything `questions.py` and the question loop read.

  Attributes:
    seed: config.seed; question i's key is fold_in(key(seed), i).
    questions: config.budget.questions, the selected questions of the study over every process (its cap).
    question_batch: config.budget.question_batch, questions whose base rollouts are sampled in one batch.
    looks: the sequential design, its verdict's group and estimand (`looks.resolve`; one look: the fixed design).
    selection: "informative" (questions with a correct and an incorrect rollout) or "all".
    grade_truncated: config.task.grade_truncated (a truncated response is graded instead of scoring 0).
    max_new_tokens: config.sampling.max_new_tokens, the response cap of base rollouts and continuations (tokens).
    policy: the student's sampled policy (`preflight.policy`): base rollouts and continuations draw from it.
    teacher_policy: the scaled teacher q's temperature (`preflight.teacher_policy`).
    templates: config.contexts.templates, context name -> the teacher's user message (read-only).
    budget, scoring: `Budget`, `Scoring`.
  """
  seed: int
  questions: int
  question_batch: int
  looks: looks_lib.Looks
  selection: str
  grade_truncated: bool
  max_new_tokens: int
  policy: sampling.SamplingParams
  teacher_policy: sampling.SamplingParams
  templates: Mapping[str, str]
  budget: Budget
  scoring: Scoring


def resolve(config) -> Spec:
  """The `Spec` of a checked config (call after `preflight.check`: the policies raise ValueError on bad sampling
  fields, nothing else is checked here)."""
  b, s = config.budget, config.scoring
  budget = Budget(
      rollouts_per_question=b.rollouts_per_question, node_rollouts_per_question=b.node_rollouts_per_question,
      node_group=b.get("node_group", "balanced"), nodes_per_rollout=b.nodes_per_rollout, node_strategy=b.node_strategy, prefer_finished=b.prefer_finished,
      student_top_k=b.student_top_k, teacher_top_k=b.teacher_top_k, branch_batch=b.branch_batch,
      allocation=preflight.allocation(config), continuations_per_candidate=b.continuations_per_candidate,
      continuations_max=b.continuations_max, continuations_mean=b.continuations_mean,
      adaptive_tolerance=b.adaptive_tolerance, allocation_minimum=b.get("allocation_minimum", 2),
      allocation_min_mass=b.get("allocation_min_mass", 0.01), continue_unsupported=b.get("continue_unsupported", False),
      stop_at_answer=b.get("stop_at_answer", False))
  xt = s.cross_tokenizer
  scoring = Scoring(chunk=s.chunk, top_k=s.top_k, beta=s.beta, all_rollouts=s.all_rollouts,
                    cross_tokenizer=CrossTokenizer(mode=xt.mode, prune=xt.prune, max_tree_nodes=xt.max_tree_nodes,
                                                   force=bool(xt.force)))
  return Spec(seed=config.seed, questions=b.questions, question_batch=b.question_batch, looks=looks_lib.resolve(config),
              selection=config.selection, grade_truncated=config.task.grade_truncated,
              max_new_tokens=config.sampling.max_new_tokens, policy=preflight.policy(config),
              teacher_policy=preflight.teacher_policy(config),
              templates=types.MappingProxyType(dict(config.contexts.templates or {})), budget=budget, scoring=scoring)
