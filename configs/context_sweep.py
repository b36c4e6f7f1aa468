"""Context sweep: the student as its own teacher, given each privileged context, with two divergences.

  python -m opd_jax.main --config=configs/context_sweep.py       # 2-core CPU: longer than teacher_sweep (not
                                                                  # yet timed); --dry_run prints an estimate

Contexts: the final answer only, the reference solution, its equations (summary), and the solution plus one
of the student's own incorrect rollouts (contrastive), each with reverse KL and with sampled-token OPD.
"""
from configs import base


def get_config(arg: str | None = None):
  if arg:
    raise ValueError(f"unknown variant {arg!r} of context_sweep; it has none")
  config = base.get_config()
  config.name = "context_sweep"
  config.student.name = "qwen2.5-coder-0.5b-instruct"
  config.task.name = "reasoning_gym:gsm_symbolic"
  config.task.num_problems = 40
  config.sampling.max_new_tokens = 320
  config.configurations = {
      f"{ctx}{suffix}": f"self:{ctx}:{div}"
      for ctx in ("answer", "solution", "summary", "contrastive")
      for suffix, div in (("", "reverse_kl"), ("_sampled", "sampled_token"))
  }
  config.budget.questions = 2
  config.budget.rollouts_per_question = 6
  config.budget.continuations_per_candidate = 4
  config.budget.student_top_k = 1
  config.budget.teacher_top_k = 1
  config.budget.branch_batch = 32
  return config
