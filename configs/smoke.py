"""Smoke study: tiny random models on the synthetic parity task; every stage of the pipeline in seconds.

  python -m opd_jax.main --config=configs/smoke.py --workdir=/tmp/smoke     # 30 s-1.5 min, 2-core CPU (docs/data/smoke/)

Used by the tests (resume, records cross-checks, bad inputs). Numbers are meaningless: random models.
"""
from configs import base


def get_config(arg: str | None = None):
  config = base.get_config()
  config.name = "smoke"
  config.student.name = "random:0"
  config.task.name = "synthetic:parity"
  config.task.num_problems = 12
  config.task.grade_truncated = True
  config.sampling.max_new_tokens = 12
  config.configurations = {
      "external": "random:1:plain:reverse_kl",
      "self_plain": "self:plain:reverse_kl",
      "solution_fkl": "self:solution:forward_kl",
      "solution_jsd": "self:solution:jsd@0.5",
      "contrastive": "self:contrastive:sampled_token",
      "clipped": "self:summary:clipped_reverse_kl@0.5",
  }
  config.budget.questions = 3
  config.budget.rollouts_per_question = 6
  config.budget.nodes_per_rollout = 3
  config.budget.continuations_per_candidate = 4
  config.budget.branch_batch = 32
  config.budget.question_batch = 2               # blocks of 2 questions: the resume test kills mid-block
  config.scoring.chunk = 8
  config.scoring.top_k = 4
  if arg == "all":
    config.selection = "all"
  elif arg:
    raise ValueError(f"unknown variant {arg!r} of smoke; use '' or 'all'")
  return config
