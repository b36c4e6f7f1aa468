"""Teacher sweep: which teacher and which self-distillation context align with success, per token.

  python -m opd_jax.main --config=configs/teacher_sweep.py               # ~9 min on a 2-core CPU, cold cache
                                                                          # (README: measured stage times)
  python -m opd_jax.main --config=configs/teacher_sweep.py:paper \
      --config.student.name=/data/Qwen3-1.7B \
      --config.configurations.external=/data/Qwen3-8B:plain:reverse_kl   # GPU/TPU, hours

Default: the offline Qwen2.5-Coder-0.5B-Instruct student, Qwen2.5-Coder-1.5B-Instruct as external teacher and
the student itself with the solution, summary and contrastive contexts, on reasoning-gym's gsm_symbolic
(GSM8K templates with worked solutions). The CPU budget is a small sample: read its intervals, not its point
estimates. `:paper` is the paper-scale budget for Qwen3 HF folders on accelerators.
"""
from configs import base


def get_config(arg: str | None = None):
  config = base.get_config()
  config.name = "teacher_sweep"
  config.student.name = "qwen2.5-coder-0.5b-instruct"
  config.task.name = "reasoning_gym:gsm_symbolic"
  config.task.num_problems = 40
  config.task.template = ("{question}\nSolve it in a few short steps (no more than 100 words). Then write the "
                          "final answer, a number, inside <answer></answer> tags.")
  config.sampling.max_new_tokens = 256
  config.configurations = {                     # name -> "teacher:context:divergence"
      "external": "qwen2.5-coder-1.5b-instruct:plain:reverse_kl",
      "solution": "self:solution:reverse_kl",
      "summary": "self:summary:reverse_kl",
      "contrastive": "self:contrastive:reverse_kl",
      "solution_fkl": "self:solution:forward_kl",
      "solution_jsd": "self:solution:jsd@0.5",
  }
  # The 2-core CPU budget: one informative question, one correct and one incorrect node rollout, the 3 most
  # uncertain tokens of each, R = 4. The 0.5B rarely solves gsm_symbolic within 256 tokens (measured with this
  # template: 6 of 32 rollouts on a 16-question probe, 1 of 56 on the pool's first 7 questions), so informative
  # questions are rare: a decode batch of 8 questions x 4 rollouts covers twice the questions of 4 x 8 for the
  # same cost. A smoke test of the science on real models, not a measurement: every group prints UNDERPOWERED.
  config.budget.questions = 1
  config.budget.rollouts_per_question = 4
  config.budget.node_rollouts_per_question = 2
  config.budget.nodes_per_rollout = 3
  config.budget.prefer_finished = True           # an answered-wrong rollout, not a truncated one, when there is one
  config.budget.node_strategy = "entropy"        # the student's most uncertain tokens: where candidates differ
  config.budget.continuations_per_candidate = 4
  config.budget.student_top_k = 1
  config.budget.teacher_top_k = 1
  config.budget.branch_batch = 64
  config.budget.question_batch = 8               # base rollouts of 8 questions per decode batch (32 rows)
  if arg == "paper":
    config.name = "teacher_sweep_paper"
    config.student.name = "/data/Qwen3-1.7B"                      # an HF folder (config.json, safetensors)
    config.configurations.external = "/data/Qwen3-8B:plain:reverse_kl"
    config.chat.kwargs = {"enable_thinking": False}
    config.task.num_problems = 500
    config.sampling.max_new_tokens = 2048
    config.budget.questions = 100
    config.budget.rollouts_per_question = 16
    config.budget.node_rollouts_per_question = 4
    config.budget.nodes_per_rollout = 16
    config.budget.prefer_finished = False
    config.task.template = ("{question}\nSolve it step by step. Then write the final answer inside <answer></answer> "
                            "tags.")
    config.budget.node_strategy = "exponential"
    config.budget.continuations_per_candidate = 64
    config.budget.student_top_k = 4
    config.budget.teacher_top_k = 2
    config.budget.branch_batch = 512
    config.scoring.chunk = 512
    config.scoring.all_rollouts = True
  elif arg:
    raise ValueError(f"unknown variant {arg!r} of teacher_sweep; use '' or 'paper'")
  return config
