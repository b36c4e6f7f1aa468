"""Teacher sweep: which teacher and which self-distillation context align with success, per token.

  python -m opd_jax.main --config=configs/teacher_sweep.py               # the default study
  python -m opd_jax.main --config=configs/teacher_sweep.py:gsm           # the previous default
  python -m opd_jax.main --config=configs/teacher_sweep.py:hour          # the one-hour study (docs/results.md)
  python -m opd_jax.main --config=configs/teacher_sweep.py:paper \
      --config.student.name=/data/Qwen3-1.7B \
      --config.configurations.external=/data/Qwen3-8B:plain:reverse_kl   # GPU/TPU, hours
  python -m opd_jax.main --config=configs/teacher_sweep.py:paper_fixed ...   # the fixed R = 64 design it replaces

Time, by the dry run's estimate (`--dry_run`, opd_jax/study/planning.py: an upper bound on a quiet 2-core CPU,
every rollout at its token cap): for the default, <= 16.9 min with the models in the cache, <= 27.5 min converting
them first; for `:hour` to its cap, <= 4.2 h with the models in the cache, <= 4.4 h converting them first. Measured
runs, each with its host and load: docs/results.md (tests/test_docs_figures.py checks these figures).

Default: the offline Qwen2.5-Coder-0.5B-Instruct student, Qwen2.5-Coder-1.5B-Instruct as external teacher and
the student itself with the solution, summary and contrastive contexts, on reasoning-gym's basic_arithmetic
restricted to sums of 2-3 numbers below 101, answered directly (responses of ~10 tokens, `<answer>47</answer>`;
the 0.5B is right about 40% of the time). The reference solution is the sum worked step by step, built from the
generated expression (opd_jax/tasks/generators.py, `expression_solution`); the summary context shows its
equations. The nodes are mostly the answer's digits. The CPU budget is a small sample: read its intervals, not
its point estimates. `:gsm` is the previous default (gsm_symbolic, GSM8K templates with worked solutions,
256-token responses: one informative question, 4 defined nodes per configuration, every group UNDERPOWERED).
`:hour` is the default at up to 8x the questions and 3x R (docs/results.md: its verdict and table), looking at
its verdict at 20, 40 and 60 questions and stopping once it is decided or unlikely to be decided by the cap
(futility 0.1: it stopped at 20 questions, undecided, under the rule of 2026-12-04; docs/results.md).

`:paper` is the paper-scale study for Qwen3 HF folders on accelerators, in the design chosen by its variance split
and its cost (issue 48; opd_jax/cost/design.py): the alignment ratio (report.estimand, no small-R bias), node
rollouts from the verdict's group only (budget.node_group="target": 4 incorrect ones per question, none paid for
in the correct group the verdict does not read), 8 nodes per node rollout, r = 3 continuations per candidate, up to
131 questions with looks at 33, 66 and 98 and the futility stop 0.1. The design is the cheapest on the cost
model's H200 roofline whose standard error on every pair of configurations is at most that of the fixed design it
replaces (100 questions, 16 nodes per rollout, R = 64, balanced node rollouts: budget.precision_of) or
report.min_effect / 4 (0.0125 on the ratio's scale), whichever is larger, by the variance split of the pilot in
budget.pilot, docs/data/variance_split/v2_blocks1234.json (validation v2's study: the 0.5B student on sums, 80
questions, 27 configurations, R = 12, the continuation share measured). `--dry_run --cost_model=h200` prints
`hours for R=64's precision: 2.99` (0.041 of the fixed design's 73.8 h) for its 113 questions; the cap is 131
because a question has fewer than 4 incorrect rollouts of 16 at times (3.46 on average at the pilot's success
rates: `benchmarks/group_shortfall.py`), 3.47 h on the roofline at most (27.3 h at today's measured
efficiencies, the dry run's next line). On every pair at its own fixed-design standard error it
would be 37 h: one pair of pure continuation noise (SE 0.00016, far below any effect the verdict acts on) sets
that. The split is the pilot's task and models: the design assumes the paper-scale study's is alike; a verdict on
another node group (issue 47) needs the design chosen again (docs/results.md, "`:paper` now").

The fixed design is one override away, `:paper_fixed` (the `:paper` of before issue 48: 100 questions, 16 nodes
per rollout, R = 64, the per-node cosine, no looks; its config name, hash and default workdir are that `:paper`'s,
so a study started with it resumes under `:paper_fixed`).

Capping a study (docs/results.md, "The sequential study"): `budget.questions` is the cap;
`--config.budget.looks='(20, 40, 60)'` looks at the verdict after those many questions and stops once it is
decided (one configuration could be best, or every one that could is within `report.min_effect`, default 0.05, of
the others), with error rates that hold over the looks; `--config.budget.futility=0.1` also stops it at a look once
it is unlikely to be decided even at the cap (the error rates still hold; docs/results.md, "Futility");
`--config.budget.allocation=weighted --config.budget.continuations_mean=2` spends 2 continuations per candidate
on average, split by p and q.
"""
from configs import base


def get_config(arg: str | None = None):
  config = base.get_config()
  config.name = "teacher_sweep"
  config.student.name = "qwen2.5-coder-0.5b-instruct"
  config.configurations = {                     # name -> "teacher:context:divergence"
      "external": "qwen2.5-coder-1.5b-instruct:plain:reverse_kl",
      "solution": "self:solution:reverse_kl",
      "summary": "self:summary:reverse_kl",
      "contrastive": "self:contrastive:reverse_kl",
      "solution_fkl": "self:solution:forward_kl",
      "solution_jsd": "self:solution:jsd@0.5",
  }
  # The 2-core CPU default: sums of 2-3 numbers below 101, answer only (~10-token responses, the 0.5B right
  # about 40% of the time: benchmarks/task_probe.py, docs/results.md). Reference solutions are the sums step by step
  # (opd_jax/tasks/generators.py, expression_solution). 10 informative questions (a correct and an incorrect
  # rollout among 8), 4 node rollouts each (2 correct + 2 incorrect where there are), the 3 most uncertain tokens
  # of each (mostly the
  # answer's digits), the sampled token + the student's top 2 + each teacher's top 1 as candidates, R = 4.
  config.task.name = ('reasoning_gym:basic_arithmetic:min_terms=2,max_terms=3,min_digits=2,max_digits=2,'
                      'operators=("+",),allow_parentheses=False,allow_negation=False')
  config.task.num_problems = 40
  config.task.template = "{question}\nPut only the final answer inside <answer></answer> tags."
  config.sampling.max_new_tokens = 16            # responses are 4-13 tokens; continuations stop by 15
  config.budget.questions = 10
  config.budget.rollouts_per_question = 8
  config.budget.node_rollouts_per_question = 4
  config.budget.nodes_per_rollout = 3
  config.budget.prefer_finished = True           # an answered-wrong rollout, not a truncated one, when there is one
  config.budget.node_strategy = "entropy"        # the student's most uncertain tokens: where candidates differ
  config.budget.continuations_per_candidate = 4
  config.budget.student_top_k = 2
  config.budget.teacher_top_k = 1
  config.budget.branch_batch = 64
  config.budget.question_batch = 8               # base rollouts of 8 questions per decode batch (64 rows)
  # Continuations stop where their first <answer> tag closes (12.7% of the default's continuation tokens, no reward
  # changed: docs/performance.md, "Stopping continuations at the answer").
  config.budget.stop_at_answer = True
  if arg == "gsm":
    # The previous default: gsm_symbolic (GSM8K templates with worked solutions), 256-token responses. One
    # informative question, one correct and one incorrect node rollout, the 3 most uncertain tokens of each,
    # R = 4: the 0.5B rarely solves gsm_symbolic within 256 tokens (6 of 32 rollouts on a 16-question probe,
    # 1 of 56 on the pool's first 7 questions), so every group prints UNDERPOWERED (4 defined nodes per
    # configuration, ~9 min cold).
    config.name = "teacher_sweep_gsm"
    config.task.name = "reasoning_gym:gsm_symbolic"
    config.task.template = ("{question}\nSolve it in a few short steps (no more than 100 words). Then write the "
                            "final answer, a number, inside <answer></answer> tags.")
    config.sampling.max_new_tokens = 256
    config.budget.questions = 1
    config.budget.rollouts_per_question = 4
    config.budget.node_rollouts_per_question = 2
    config.budget.student_top_k = 1
    config.budget.question_batch = 8             # 8 questions x 4 rollouts per decode batch (32 rows)
  elif arg == "hour":
    # The default's task and views at up to an hour and more of the 2-core CPU (63 min for the fixed design
    # measured, docs/results.md, "The one-hour study"; 17 min with the futility stop below, which ended it at 20
    # questions under the rule of 2026-12-04): 8x the informative questions (80, from a pool of 280; 127 were
    # sampled) and R = 12 continuations per candidate (3x), so P_succ is less noisy (noise ceiling 0.87-0.91) and
    # every group is far above the decision threshold (257-465 defined nodes per group over 60-80 questions).
    config.name = "teacher_sweep_hour"
    config.task.num_problems = 280
    config.budget.questions = 80
    config.budget.continuations_per_candidate = 12
    config.budget.looks = (20, 40, 60)           # the sequential design: stop once decided (cap 80)
    config.report.min_effect = 0.05              # its equivalence margin (required with looks: docs/results.md)
    config.budget.futility = 0.1                 # or once unlikely to decide by the cap (docs/results.md)
  elif arg in ("paper", "paper_fixed"):
    config.name = "teacher_sweep_paper"
    config.student.name = "/data/Qwen3-1.7B"                      # an HF folder (config.json, safetensors)
    config.task.name = "reasoning_gym:gsm_symbolic"
    config.configurations.external = "/data/Qwen3-8B:plain:reverse_kl"
    config.chat.kwargs = {"enable_thinking": False}
    config.task.num_problems = 500
    config.sampling.max_new_tokens = 2048
    config.budget.questions = 100
    config.budget.rollouts_per_question = 16
    config.budget.node_rollouts_per_question = 4
    config.budget.nodes_per_rollout = 16
    config.budget.prefer_finished = False
    config.report.target = "incorrect"     # the group its design was chosen for (issue 48), kept after the default
                                           # became "trained" (validation v2): re-deriving the design is its own step
    config.task.template = ("{question}\nSolve it step by step. Then write the final answer inside <answer></answer> "
                            "tags.")
    config.budget.node_strategy = "exponential"
    config.budget.continuations_per_candidate = 64
    config.budget.student_top_k = 4
    config.budget.teacher_top_k = 2
    config.budget.branch_batch = 256             # 512 rows need 141 GB in bf16: more than an H200 gives JAX
    config.scoring.chunk = 512
    config.scoring.all_rollouts = True
    if arg == "paper":
      # The design by variance split and cost (module docstring; `--dry_run --cost_model=h200` recomputes it and
      # says whether this config runs it). The pool: 5 per question studied, as the fixed design's 500 for 100.
      config.name = "teacher_sweep_paper_design"
      config.task.num_problems = 3000
      config.budget.questions = 131              # the cap, the last look (the design's 113 / the shortfall below)
      config.budget.nodes_per_rollout = 8
      config.budget.continuations_per_candidate = 3
      config.budget.node_group = "target"        # node rollouts from the verdict's group (incorrect) only
      config.budget.looks = (33, 66, 98)
      config.budget.futility = 0.1
      config.report.estimand = "alignment_ratio"
      config.report.min_effect = 0.05            # the equivalence margin, on the ratio's cosine scale
      config.budget.pilot = "docs/data/variance_split/v2_blocks1234.json"
      config.budget.precision_of = (100, 16, 64)  # the fixed design's questions, nodes_per_rollout, R
  elif arg:
    raise ValueError(f"unknown variant {arg!r} of teacher_sweep; use '', 'gsm', 'hour', 'paper' or 'paper_fixed'")
  return config
