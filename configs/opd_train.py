"""OPD training with one teacher configuration, then the paired held-out gain (closing the loop, issue 13).

  python -m opd_jax.main --config=configs/opd_train.py:smoke --workdir=/tmp/opd_smoke   # tiny random models, < 1 min
  python -m opd_jax.main --config=configs/opd_train.py --workdir=runs/opd_solution      # 0.5B + LoRA, 2-core CPU
  python -m opd_jax.main --config=configs/opd_train.py --workdir=runs/opd_external \
      --config.train.configuration=qwen2.5-coder-1.5b-instruct:plain:reverse_kl
  python -m opd_jax.main --config=configs/opd_train.py:gpu --workdir=runs/opd_gpu \
      --config.student.name=/data/Qwen3-1.7B                       # one H200: 12-84 h (below)
  python -m opd_jax.main --config=configs/opd_train.py:gpu --dry_run --cost_model=h200     # the estimate

`:gpu` is teacher_sweep:paper's student, task and policy (Qwen3-1.7B HF folder, 2048-token responses), 500
updates of 32 questions x 8 rollouts (4000 steps of 4 questions x 8 rollouts, optim.accumulate=8), LoRA rank 16,
100 held-out questions x 4 samples every 100 updates. Measured on one H200 (`benchmarks/train_step.py`, random
Qwen3-1.7B, bf16): a train step of 32 rollouts x (256 + 2048) tokens takes 6.1 s and 43 GiB with self:solution,
8.0 s and 59 GiB with a Qwen3-8B teacher; 64 rollouts in one step ran out of memory, also in two micro-batches
of 32 (`micro_batch_rows`, which does bound memory on the CPU: open). The cost model (`--dry_run
--cost_model=h200`, compile and load excluded) gives 12.1 h at its assumed 50% of peak FLOP/s and 60% of HBM
bandwidth (rollouts 9.4 h, memory-bound; train steps 2.5 h), and 84 h at the efficiencies our code reached on
that H200 (17% of peak FLOP/s, 7.5% of HBM bandwidth in decode: costs.MEASURED); the decode is what to speed up.
Not run end to end (no Qwen3 weights or MATH data on the lent machine).

The task, template and policy are teacher_sweep's, so a configuration diagnosed by the study can be trained on
the same questions. Held-out questions are the pool's first `eval_questions`; the rest are trained on. Fields
(config.train): configuration ("teacher:context:divergence[@x]" as in config.configurations), steps,
batch_questions x rollouts_per_question rollouts per step, eval_questions x eval_samples held-out samples every
eval_every steps (same keys each time; eval_at: the steps to evaluate after instead, e.g. (10, 20, 40); the last step
is always evaluated), seed (the training's own draws: LoRA init, training order, rollout keys; -1: config.seed, which
also fixes the question pool and the evaluation's keys, so a replicate with another train.seed keeps those),
micro_batch_rows (rollouts per micro-batch: the step's gradients are
accumulated over micro-batches of this many rows before one update; 0: all at once), checkpoint_every,
keep_checkpoints, chunk (loss positions per chunk), teacher_weights (the self-teacher's weights: "initial", the
base student frozen, what the study diagnoses; "current", the student being trained; "ema@d", an average of its
trainable params, training/step.py),
export (write the trained model as an HF folder at the end; LoRA merged, its matrices in fp32), lora.rank (0: full
fine-tuning), lora.alpha, lora.targets (regex over param paths), optim.* (training/state.py OptimConfig: AdamW,
clipping, warmup, schedule, accumulate: one update every `accumulate` steps and at the last, steps weighted by their
rollouts with a response). Defaults: LoRA rank 16, alpha 32 on q/k/v/o and the MLP, learning rate 1e-4
(tinker-cookbook's LoRA recipe), loss = mean over response tokens per rollout, then over rollouts.

Conventions: the loss is D(p || q) with the study's p (the sampled policy: config.sampling.temperature, top_k,
top_p, renormalised) and q (the teacher at config.scoring.teacher_temperature; 0 = the sampling temperature),
from log-probabilities; temperature 0 and forward_kl under top-k/top-p are refused. optim.accumulate weights
each step by its rollouts with a response and applies a short last window. On every exit (a normal end, Ctrl-C,
an error) the trainer waits for checkpoint saves in flight; on Ctrl-C or an error it prints the step a rerun
resumes from.
"""
import ml_collections

from configs import teacher_sweep
from opd_jax.training import lora


def get_config(arg: str | None = None):
  config = teacher_sweep.get_config()
  config.name = "opd_train"
  config.job = "train"
  config.configurations = {}                    # the study's field; training reads config.train.configuration
  config.train = ml_collections.ConfigDict(dict(
      configuration="self:solution:reverse_kl",
      teacher_weights="initial",
      seed=-1, steps=12, batch_questions=4, rollouts_per_question=2,
      eval_questions=16, eval_samples=2, eval_every=6, eval_at=(),
      micro_batch_rows=0, checkpoint_every=1, keep_checkpoints=2, chunk=128, export=False,
      lora=dict(rank=16, alpha=32.0, targets=lora.DEFAULT_TARGETS),
      optim=dict(learning_rate=1e-4, warmup_steps=0, schedule="constant", weight_decay=0.0, clip_norm=1.0,
                 b1=0.9, b2=0.999, accumulate=1)))
  if arg == "smoke":                            # tiny random models on the synthetic parity task (tests)
    config.name = "opd_train_smoke"
    config.student.name = "random:0"
    config.task.name = "synthetic:parity"
    config.task.num_problems = 12
    config.task.template = ""
    config.task.grade_truncated = True
    config.sampling.max_new_tokens = 8
    config.train.configuration = "self:solution:reverse_kl"
    config.train.update(steps=3, batch_questions=2, rollouts_per_question=2, eval_questions=3, eval_samples=2,
                        eval_every=3, chunk=8)
    config.train.lora.rank = 4
    config.train.optim.learning_rate = 1e-2
  elif arg == "gpu":                            # teacher_sweep:paper's models, task and policy on one H200
    paper = teacher_sweep.get_config("paper")
    for field in ("student", "task", "chat", "sampling"):
      config[field] = paper[field]
    config.name = "opd_train_gpu"
    # 500 updates of 32 questions x 8 rollouts, as 8 accumulated steps of 4 questions x 8 rollouts: a step of
    # 32 rollouts x (256 + 2048) tokens fits an H200 (43 GiB measured; 64 rows in one step did not).
    config.train.update(steps=4000, batch_questions=4, rollouts_per_question=8, eval_questions=100,
                        eval_samples=4, eval_every=800, checkpoint_every=200, chunk=512)
    config.train.optim.accumulate = 8
  elif arg:
    raise ValueError(f"unknown variant {arg!r} of opd_train; use '', 'smoke' or 'gpu'")
  return config
