"""Does the study predict training? The study and one OPD run per configuration on disjoint questions (issue 36).

  python benchmarks/validate_training.py --workdir=runs/validation                 # every piece not yet done
  python benchmarks/validate_training.py --workdir=runs/validation --piece=train:solution     # one piece
  python benchmarks/validate_training.py --workdir=runs/validation --piece=table   # the tables and figure, from
                                                                                   # docs/data/validation/*.csv
The driver runs each piece in a child process (`configs/validation.py:study<b>`, block b of the study, or `:train
--config.train.configuration=...`), skips what its committed CSVs already hold, and writes them to
docs/data/validation/ (docs/results.md, "The validation experiment": the pieces' runtimes, memory and results).

One student (Qwen2.5-Coder-0.5B-Instruct), the default study's task and template (sums of 2-3 numbers below 101,
answer asked only), with the response cap raised from 16 to 48 tokens so a worked sum ("12 + 34 = 46 ... The
answer is 80. <answer>80</answer>", ~30 tokens) is graded, not cut: the 16-token cap alone decided the
self:solution run of docs/results.md, experiment 3. Three disjoint question sets: the study blocks' pools
(generator seeds `block_seed(b)`, without any question of the trainer's pool: config.task.exclude), and the
trainer's pool (seed 0): its first `eval_questions` held out for pass@1 before and after, the rest trained on.
`:tiny_study` / `:tiny_train`: random models on the synthetic parity task (tests).

Validation v2 (issue 47; benchmarks/validate_v2.py, docs/data/validation_v2/PLAN.md): `:v2_study<b>`, block b of
the study on every view of stage 3 (the 1.5B teacher with four contexts, the student with five, each under three
divergences: V2_CONFIGURATIONS), V2_BLOCK_QUESTIONS questions at R = 12 per block, on pools of their own (seeds
V2_STUDY_SEED + ...) without the trainer's questions; `:v2_train`, the stage-3 trainer: the v1 trainer with 80
held-out questions x 4 samples evaluated after steps 10, 20 and 40 (a pool of 240: 80 held out, 160 trained on),
config.seed 0 for the pool and the evaluation's keys, config.train.seed for the replicate (the driver sets it).
`:tiny_v2_study` / `:tiny_v2_train`: their tiny forms.
"""
from configs import opd_train
from configs import teacher_sweep

TEACHER = "qwen2.5-coder-1.5b-instruct"
# name -> "teacher:context:divergence": the 1.5B teacher under three divergences, the student given four
# privileged contexts, and a control whose sign is known in advance (a wrong attempt shown as the reference).
CONFIGURATIONS = {
    "external": f"{TEACHER}:plain:reverse_kl",
    "external_fkl": f"{TEACHER}:plain:forward_kl",
    "external_jsd": f"{TEACHER}:plain:jsd@0.5",
    "solution": "self:solution:reverse_kl",
    "summary": "self:summary:reverse_kl",
    "answer": "self:answer:reverse_kl",
    "contrastive": "self:contrastive:reverse_kl",
    "misleading": "self:misleading:reverse_kl",
}
TINY = {"external": "random:1:plain:reverse_kl", "solution": "self:solution:reverse_kl"}
# The study's generator seed (and its draws). reasoning-gym draws item i from seed + i, so seeds 0 and 1 share 199
# of 200 questions: the study's seed is far from the trainer's (0), and config.task.exclude drops chance repeats.
STUDY_SEED = 10_000
# The study runs in blocks, each a study of its own on BLOCK_QUESTIONS questions (8-11 min alone on 2 cores), so
# that a piece fits a session and its small tables are committed before the machine goes: block b (1-based) uses
# seed STUDY_SEED + (b - 1) * BLOCK_STRIDE: its 200 generator items are none of another block's or the trainer's
# (a question text that repeats by chance in the trainer's pool is dropped: config.task.exclude).
BLOCKS = 4
BLOCK_QUESTIONS = 10
BLOCK_STRIDE = 1_000
MAX_NEW_TOKENS = 48
# A step's 8 rollouts in micro-batches of 4 (gradients accumulated, one update: the same update up to the order of
# float sums) to bound the external teacher's peak memory; the runs of runs.csv with micro_batch_rows 0 took the 8
# at once.
MICRO_BATCH_ROWS = 4


# Validation v2's study: every view of stage 3's two strata (the same nodes for every configuration), under reverse KL,
# JSD_0.5 and forward KL (the divergences cost nothing once a view is scored).
V2_DIVERGENCES = {"rkl": "reverse_kl", "jsd": "jsd@0.5", "fkl": "forward_kl"}
V2_VIEWS = {**{f"ext_{c}": f"{TEACHER}:{c}" for c in ("plain", "answer", "solution", "summary")},
            **{f"self_{c}": f"self:{c}" for c in ("solution", "summary", "answer", "misleading", "contrastive")}}
V2_CONFIGURATIONS = {f"{v}_{d}": f"{view}:{div}" for v, view in V2_VIEWS.items() for d, div in V2_DIVERGENCES.items()}
V2_TINY = {f"{v}_{d}": f"{view}:{div}" for v, view in {"ext_plain": "random:1:plain", "self_solution":
           "self:solution"}.items() for d, div in V2_DIVERGENCES.items()}
V2_STUDY_SEED = 20_000
V2_BLOCKS = 4
V2_BLOCK_QUESTIONS = 20
V2_CONTINUATIONS = 12
V2_EVAL_QUESTIONS = 80
V2_EVAL_SAMPLES = 4
V2_EVAL_AT = (10, 20)                        # and the last step, 40


def _task(config, tiny: bool):
  if tiny:
    config.student.name = "random:0"
    config.task.name = "synthetic:parity"
    config.task.template = ""
    config.task.grade_truncated = True
    config.sampling.max_new_tokens = 8
  else:
    config.sampling.max_new_tokens = MAX_NEW_TOKENS
  return config


def block_seed(block: int) -> int:
  """The generator seed (and draws) of study block `block` (1-based)."""
  return STUDY_SEED + (block - 1) * BLOCK_STRIDE


def v2_block_seed(block: int) -> int:
  """The generator seed (and draws) of v2 study block `block` (1-based): none of v1's blocks' or the trainer's."""
  return V2_STUDY_SEED + (block - 1) * BLOCK_STRIDE


def get_config(arg: str | None = None):
  """`study[<b>]` (block b, default 1), `train`, `v2_study[<b>]`, `v2_train`, or their `tiny_` forms."""
  arg = arg or "study"
  tiny = arg.startswith("tiny")
  kind = arg.removeprefix("tiny").strip("_") or ("study" if tiny else arg)
  if kind.startswith("v2_study"):
    block = int(kind.removeprefix("v2_study") or 1)
    config = get_config(f"{'tiny_' if tiny else ''}study")
    config.seed = v2_block_seed(block)
    config.configurations = dict(V2_TINY if tiny else V2_CONFIGURATIONS)
    if not tiny:
      config.budget.update(questions=V2_BLOCK_QUESTIONS, continuations_per_candidate=V2_CONTINUATIONS)
    return config
  if kind == "v2_train":
    config = get_config(f"{'tiny_' if tiny else ''}train")
    if not tiny:
      config.task.num_problems = V2_EVAL_QUESTIONS + 160
      config.train.update(eval_questions=V2_EVAL_QUESTIONS, eval_samples=V2_EVAL_SAMPLES, eval_at=V2_EVAL_AT)
    else:
      config.train.eval_at = (1,)
    return config
  if kind.startswith("study"):
    block = int(kind.removeprefix("study") or 1)
    config = _task(teacher_sweep.get_config(), tiny)
    config.name = "validation_study"
    config.seed = block_seed(block)
    config.configurations = dict(TINY if tiny else CONFIGURATIONS)
    config.task.num_problems = 200           # the pool the study's informative questions are drawn from
    config.task.exclude = ""                 # the driver: a JSON list of the trainer's pool's questions
    config.budget.questions = BLOCK_QUESTIONS
    config.budget.looks = ()                 # a fixed design: every configuration on the same questions
    config.report.target = "incorrect"       # the group v1's and v2's verdicts named before training were read on
    if tiny:
      config.task.num_problems = 24
      config.budget.update(questions=2, rollouts_per_question=4, node_rollouts_per_question=2, nodes_per_rollout=1,
                           continuations_per_candidate=2, student_top_k=1, branch_batch=32, question_batch=2,
                           stop_at_answer=False)
      config.scoring.update(chunk=8, top_k=4)
      config.report.pages = 0
      config.logging.progress = False
    return config
  if kind == "train":
    config = _task(opd_train.get_config(), tiny)
    config.name = "validation_train"
    config.seed = 0
    config.task.num_problems = 200           # 40 held out, 160 trained on (40 steps x 4 questions: one pass)
    config.train.update(steps=40, batch_questions=4, rollouts_per_question=2, eval_questions=40, eval_samples=8,
                        eval_every=40, checkpoint_every=10, chunk=16, micro_batch_rows=MICRO_BATCH_ROWS)
    if tiny:
      config.task.num_problems = 12
      config.train.update(steps=2, batch_questions=2, rollouts_per_question=2, eval_questions=4, eval_samples=2,
                          eval_every=2, checkpoint_every=1, chunk=8)
      config.train.lora.rank = 4
      config.train.optim.learning_rate = 1e-2
      config.logging.progress = False
    return config
  raise ValueError(f"unknown variant {arg!r} of validation; use 'study<b>' (a block, 1-{BLOCKS}), 'train', "
                   f"'v2_study<b>' (1-{V2_BLOCKS}), 'v2_train', or one of them with the prefix 'tiny_'")
