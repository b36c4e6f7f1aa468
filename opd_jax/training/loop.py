"""The OPD training loop (`python -m opd_jax.main --config=configs/opd_train.py`): sample, score, step, evaluate.

Each step: the student (with its LoRA adapters, `lora.adapt`) samples `rollouts_per_question` rollouts of
`batch_questions` training questions with the study's sampler; the teacher configuration
(`config.train.configuration`, the study's "teacher:context:divergence") reads them in its view; one optax step
on the chunked OPD loss (training/step.py). Held-out pass@1 is measured before training and every `eval_every`
steps with the same PRNG keys (common random numbers, training/evaluate.py), and reported as a paired difference
with its interval.

Everything random derives from (config.seed, config.train.seed, step): config.seed fixes the question pool and
the evaluation's keys, the training seed (`training_seed`: config.train.seed, or config.seed when it is -1) the
LoRA init, the training order and the rollout keys, so that a replicate changes only what training draws. A run
resumed from its last checkpoint (orbax, training/state.py: params or adapters, optimizer state, step, PRNG key, data
cursor) reaches the same final params as an uninterrupted one. Outputs under <workdir>/train: metrics.csv (one row
per step), eval.csv (one row per evaluation), samples.jsonl (every step's rollouts: step, question_id, reward,
tokens, text), metrics.png, eval_before.npy and eval_step<N>.npy (rewards [Q, S] before training and at each
evaluation; eval_questions.json: the ids of their rows), eval_gold_before.npy and eval_gold_step<N>.npy (log p of
each held-out question's gold answer given at once [Q], `evaluate.gold_logprob`), summary.json (with this session's
grades_timed_out and grades_errored: grades that scored 0 without a verdict, opd_jax/tasks/grading.py, warned about
on the console when any), and checkpoints/; with config.train.export, export/ holds the trained model as an HF
safetensors folder (LoRA: merged, the adapted matrices in fp32: `export_student`).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from opd_jax import atomic
from opd_jax import claim
from opd_jax import terminal
from opd_jax.decode import sampling
from opd_jax.models import sharding
from opd_jax.report import console
from opd_jax.study import environment
from opd_jax.study import preflight
from opd_jax.study import runs
from opd_jax.tasks import grading
from opd_jax.teachers import contexts
from opd_jax.training import checks
from opd_jax.training import evaluate
from opd_jax.training import lora
from opd_jax.training import losses
from opd_jax.training import state as state_lib
from opd_jax.training import step as step_lib


def training_seed(config) -> int:
  """The seed of the training's own draws (LoRA init, the training questions' order, rollout keys):
  config.train.seed, or config.seed when it is -1 (the default; runs before the field existed)."""
  seed = config.train.get("seed", -1)
  return config.seed if seed == -1 else seed


def validate(config) -> None:
  """config.train errors that need no model (each names the field and the fix; the optimizer's:
  `checks.validate_train`)."""
  checks.validate_train(config)
  t = config.train
  for f in ("steps", "batch_questions", "rollouts_per_question", "eval_questions", "eval_samples", "eval_every",
            "checkpoint_every", "chunk"):
    v = t[f]
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
      raise ValueError(f"config.train.{f} must be an integer > 0, got {v!r}")
  seed = t.get("seed", -1)              # its range: `checks.validate_train` (preflight.check_integers), above
  if isinstance(seed, bool) or not isinstance(seed, int):
    raise ValueError(f"config.train.seed must be an integer >= 0, or -1 (config.seed), got {seed!r}")
  at = t.get("eval_at", ())
  if not isinstance(at, (tuple, list)) or any(isinstance(s, bool) or not isinstance(s, int) or not 1 <= s <= t.steps
                                              for s in at):
    raise ValueError(f"config.train.eval_at must be a tuple of steps in 1..config.train.steps={t.steps} (empty: "
                     f"every eval_every steps), got {at!r}")
  micro = t.get("micro_batch_rows", 0)
  if isinstance(micro, bool) or not isinstance(micro, int) or micro < 0:
    raise ValueError(f"config.train.micro_batch_rows must be an integer >= 0 (0: the whole step's rollouts at "
                     f"once), got {micro!r}")
  if t.lora.rank < 0 or isinstance(t.lora.rank, bool):
    raise ValueError(f"config.train.lora.rank must be >= 0 (0: full fine-tuning), got {t.lora.rank!r}")
  if t.lora.rank > 0 and not t.lora.alpha > 0:
    raise ValueError(f"config.train.lora.alpha must be > 0, got {t.lora.alpha!r}")
  if isinstance(t.configuration, str) and "," in t.configuration:
    raise ValueError(f"config.train.configuration={t.configuration!r}: the trainer takes one configuration "
                     "(teacher:context:divergence); train each in a run of its own (its own --workdir)")
  conf = contexts.parse("train", t.configuration, field="config.train.configuration")
  kind, _ = step_lib.teacher_weights(t.teacher_weights)
  if conf.teacher != contexts.SELF and kind != "initial":
    raise ValueError(f"config.train.teacher_weights={t.teacher_weights!r} applies to the self-teacher only; an "
                     f"external teacher ({conf.teacher}) is frozen: use 'initial'")
  state_lib.OptimConfig(**t.optim.to_dict(), total_steps=t.steps)
  losses.check_policies(preflight.policy(config), preflight.teacher_policy(config), divergence_spec(conf),
                        field="config.train.configuration")


def _identity_hash(config) -> str:
  """The config hash that a resume must match: everything but logging, train.steps (a run may be extended)
  and train.export."""
  d = config.to_dict()
  d["train"] = {k: v for k, v in d["train"].items() if k not in ("steps", "export")}
  return claim.config_hash(d)


def base_identity(model) -> str:
  """What the adapters are trained on: the checkpoint's sha256 where known; for an HF folder a hash of its
  config.json and every safetensors file's header and size; for a random model its name and architecture."""
  if model.sha256:
    return model.sha256
  path = pathlib.Path(str(model.source))
  h = hashlib.sha256()
  if path.is_dir():
    h.update((path / "config.json").read_bytes())
    for f in sorted(path.glob("*.safetensors")):
      with open(f, "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        h.update(f.name.encode() + f.stat().st_size.to_bytes(8, "little") + fh.read(n))
  else:
    h.update(f"{model.name}:{model.config}".encode())
  return "sha256:" + h.hexdigest()


@dataclasses.dataclass
class _Data:
  train: list[int]        # pool indices of training questions
  held_out: list[int]     # pool indices of held-out questions


def train_and_held_out(n_pool: int, eval_questions: int, seed: int) -> _Data:
  """Held-out questions: the pool's first `eval_questions`; training: the rest, in a seeded order."""
  if n_pool <= eval_questions:
    raise ValueError(f"config.train.eval_questions={eval_questions} leaves no training questions in a pool of "
                     f"{n_pool}; raise config.task.num_problems or lower eval_questions")
  rest = np.arange(eval_questions, n_pool)
  return _Data(np.random.default_rng(seed).permutation(rest).tolist(), list(range(eval_questions)))


def step_questions(data: _Data, step: int, k: int) -> list[int]:
  """The k training questions of `step` (the data cursor is the step: cycling through the seeded order)."""
  n = len(data.train)
  return [data.train[(step * k + j) % n] for j in range(k)]


def _teacher_prompts(env, conf, problem, prompt: list[int], texts: list[str], rewards: list[float]):
  """Per rollout the ids the teacher reads before the response, or None when its context is unavailable."""
  if conf.context == "plain":
    return [prompt] * len(texts)
  rendered = {}                         # message -> ids: one chat rendering per distinct context message
  out = []
  for r in range(len(texts)):
    src = contexts.incorrect_source(conf.context, rewards, r)
    msg = contexts.context_message(conf.context, env.task, problem, templates=env.spec.templates,
                                   incorrect=None if src is None else texts[src])
    if msg is not None and msg not in rendered:
      rendered[msg] = env.chat(msg)
    out.append(None if msg is None else rendered[msg])
  return out


def place_state(st, mesh):
  """The train state on `mesh`: leaves already there (full fine-tuning: params and their optimizer moments)
  keep their sharding; the rest (LoRA adapters, step, PRNG key) are replicated."""
  rep = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
  keep = lambda x: isinstance(x.sharding, jax.sharding.NamedSharding) and x.sharding.mesh == mesh
  return jax.device_put(st, jax.tree.map(lambda x: x.sharding if keep(x) else rep, st))


def divergence_spec(conf) -> str:
  """The registry spec ("jsd@0.5", "reverse_kl") of a parsed configuration."""
  return conf.divergence + "".join(f"@{float(v)!r}" for _, v in conf.options)


def _write_csv(path: pathlib.Path, rows: list[dict]) -> None:
  atomic.write_bytes(path, pd.DataFrame(rows).to_csv(index=False))


def _plot(out: pathlib.Path, metrics: list[dict], evals: list[dict]) -> None:
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(1, 3, figsize=(12, 3.2))
  m = pd.DataFrame(metrics)
  ax[0].plot(m["step"], m["loss"])
  ax[0].set(xlabel="step", ylabel="OPD loss")
  ax[1].plot(m["step"], m["train_reward"])
  ax[1].set(xlabel="step", ylabel="train pass rate (on-policy)")
  if evals:
    e = pd.DataFrame(evals)
    ax[2].errorbar(e["step"], e["diff"], yerr=[e["diff"] - e["lo"], e["hi"] - e["diff"]], fmt="o-", capsize=3)
    ax[2].axhline(0, color="grey", lw=0.8)
  ax[2].set(xlabel="step", ylabel="held-out pass@1 - before (paired 95%)")
  fig.tight_layout()
  fig.savefig(out / "metrics.png", dpi=110)
  plt.close(fig)


def run(config, workdir: str) -> str:
  """Train with config.train's configuration; returns a one-paragraph summary (also in summary.json). Holds the
  workdir's lock (`claim.workdir_lock`, as a study does) from before the models load until it returns: a second run
  on the same workdir is refused instead of training beside the first (both would write the same checkpoints and
  samples).

  Raises:
    ValueError: a bad config.train field, another live run in `workdir`, a checkpoint directory of another config
      or base model, or any error of the study's setup (models, task, contexts), before anything is trained.
  """
  validate(config)
  terminal.ENABLED = bool(config.logging.progress)       # the bars (one flag for every job: terminal.console)
  out = pathlib.Path(workdir) / "train"
  out.mkdir(parents=True, exist_ok=True)
  with claim.workdir_lock(workdir, runs.process_index()):
    return _run(config, out)


def _run(config, out: pathlib.Path) -> str:
  """`run`'s body, under the workdir's lock; `out`: <workdir>/train."""
  t = config.train
  with config.unlocked():
    config.configurations = {"train": t.configuration}
  env = environment.setup(config, cross_ok=False)  # another tokenizer: refused at the load where headers were not cheap
  conf = env.confs[0]
  task, pool = env.task, env.task.problems
  data = train_and_held_out(len(pool), t.eval_questions, training_seed(config))
  c = config.sampling
  policy = dict(temperature=c.temperature, top_p=c.top_p, top_k=c.top_k)

  # --- Trainable params, optimizer, checkpoints ---------------------------------------------------------
  student, key = env.student, jax.random.key(training_seed(config))
  base = student.params
  scale = t.lora.alpha / t.lora.rank if t.lora.rank > 0 else None
  trainable = lambda b: (lora.init(b, jax.random.fold_in(key, 1), rank=t.lora.rank, pattern=t.lora.targets)
                         if scale is not None else b)
  weights, ema = step_lib.teacher_weights(t.teacher_weights)
  fresh = lambda b: state_lib.init_state(trainable(b), tx, jax.random.fold_in(key, 2), t.optim.accumulate,
                                         teacher=ema is not None)
  updates = -(-t.steps // t.optim.accumulate)          # the schedule counts updates (the last window may be short)
  tx = state_lib.optimizer(state_lib.OptimConfig(**t.optim.to_dict(), total_steps=updates))
  ckpts = state_lib.Checkpoints(out / "checkpoints", identity={"config_hash": _identity_hash(config),
                                                              "base_model": base_identity(student)},
                                keep=t.keep_checkpoints)
  metrics, evals = [], []
  mesh = env.mesh if env.mesh is not None and env.mesh.size > 1 else None
  if ckpts.latest_step() is not None:   # onto this run's devices, whatever count saved it (restore_target)
    st, meta = ckpts.restore(state_lib.restore_target(fresh, base, mesh=mesh))
    metrics, evals = meta["metrics"], meta["evals"]
    print(f"resumed from {ckpts.directory} step {int(st['step'])}", file=sys.stderr)
  else:
    st = fresh(base)
  teacher = None if conf.teacher == contexts.SELF else env.teacher(conf.teacher)
  t_params = None if teacher is None else teacher.params
  if teacher is None and weights == "initial":   # the base student, frozen (full fine-tuning: a copy the step
    t_params = base if scale is not None else jax.tree.map(jnp.copy, base)   # cannot donate)
  batch_rows = t.batch_questions * t.rollouts_per_question
  micro_rows = sharding.pad_rows(min(t.get("micro_batch_rows", 0) or batch_rows, batch_rows), mesh)
  micro_batches = -(-batch_rows // micro_rows)
  batch_rows = micro_batches * micro_rows               # padded with empty rows: every step has one shape
  in_shardings = None
  if mesh is not None:                                   # pjit: explicit shardings on the study's mesh
    st = place_state(st, env.mesh)
    in_shardings = (step_lib.shardings_of(st), step_lib.shardings_of(base), step_lib.shardings_of(t_params),
                    step_lib.batch_shardings(env.mesh))
  step_fn = step_lib.make_train_step(
      tx, s_graph=student.graphdef, t_graph=None if teacher is None else teacher.graphdef, lora_scale=scale,
      divergence=divergence_spec(conf), chunk=t.chunk, vocab_size=student.config.real_vocab_size,
      in_shardings=in_shardings, micro_batches=micro_batches, accumulate=t.optim.accumulate,
      policy=preflight.policy(config), teacher_policy=preflight.teacher_policy(config), ema=ema)
  # The student the adapters represent (bf16 matrices unmerged: lora.adapt), for sampling and evaluation.
  adapted = jax.jit(lambda b, a: lora.adapt(b, a, scale=scale)) if scale is not None else None
  current = lambda: dataclasses.replace(student, params=adapted(base, st["params"]) if adapted else st["params"])

  evals_at = set(evaluate.eval_steps(t))
  failures_before = grading.failures()                   # grades that time out or fail: counted, reported
  # --- Held-out evaluation (common random numbers) -------------------------------------------------------
  held = [pool[i] for i in data.held_out]
  held_prompts = [env.chat(task.prompt(p)) for p in held]
  keys = evaluate.eval_keys(config.seed, len(held), t.eval_samples)
  evaluate_now = lambda: evaluate.pass_at_1(current(), task, held, held_prompts, keys, samples=t.eval_samples,
                                            max_new_tokens=c.max_new_tokens,
                                            grade_truncated=config.task.grade_truncated, **policy)
  before_path = out / "eval_before.npy"
  if before_path.exists():
    before = np.load(before_path)
  else:
    with terminal.bar("evaluation before training"):
      before = evaluate_now()
    atomic.write_bytes(before_path, _npy(before))
  atomic.write_json(out / "eval_questions.json", [p.id for p in held])   # the rows of eval_*.npy
  gold_now = lambda: evaluate.gold_logprob(current(), task, held, held_prompts)
  if not (out / "eval_gold_before.npy").exists():        # log p(gold answer | prompt) [Q]: cheap, deterministic
    atomic.write_bytes(out / "eval_gold_before.npy", _npy(gold_now()))

  # --- Steps ----------------------------------------------------------------------------------------------
  start = int(st["step"])
  rollout_key = jax.random.fold_in(key, 3)
  samples_path = out / "samples.jsonl"         # every step's rollouts as text: what a collapse looks like
  kept = [line for line in (samples_path.read_text().splitlines() if samples_path.exists() else [])
          if json.loads(line)["step"] <= start]   # a resumed run rewrites the steps after its checkpoint
  atomic.write_bytes(samples_path, "".join(line + "\n" for line in kept).encode())
  try:
    with terminal.bar("training", total=t.steps - start, unit="step") as bar:
      for s in range(start, t.steps):
        terminal.check_interrupt()                       # a Ctrl-C acts here, between steps (terminal.py)
        t0 = time.time()
        qs = step_questions(data, s, t.batch_questions)
        prompts = [env.chat(task.prompt(pool[i])) for i in qs]
        n = t.rollouts_per_question
        row_keys = jnp.concatenate([sampling.row_keys(jax.random.fold_in(rollout_key, s * 4096 + j),
                                                      jnp.arange(n, dtype=jnp.uint32)) for j in range(len(qs))])
        model = current()
        got = sampling.sample(model, [p for p in prompts for _ in range(n)], keys=row_keys,
                              max_new_tokens=c.max_new_tokens, **policy)
        rollout_problems = [pool[i] for i in qs for _ in range(n)]
        ys, texts, rewards = evaluate.grade(model.tokenizer, task, rollout_problems, got,
                                            grade_truncated=config.task.grade_truncated)
        with samples_path.open("a") as f:
          f.writelines(json.dumps({"step": s + 1, "question_id": p.id, "reward": float(r), "tokens": int(n_y),
                                   "text": text}) + "\n"
                       for p, r, n_y, text in zip(rollout_problems, rewards, got.lengths, texts))
        del model                     # the merged copy of the adapted weights: not alive in the step or the next merge
        s_prompts, t_prompts, responses = [], [], []
        for j, i in enumerate(qs):
          rows = slice(j * n, (j + 1) * n)
          for y, tp in zip(ys[rows], _teacher_prompts(env, conf, pool[i], prompts[j], texts[rows], rewards[rows])):
            s_prompts.append(prompts[j])
            t_prompts.append(prompts[j] if tp is None else tp)
            responses.append([] if tp is None else y)       # no context: the rollout adds nothing to the loss
        batch = step_lib.make_batch(s_prompts, t_prompts, responses, rows=batch_rows)
        apply = (s + 1) % t.optim.accumulate == 0 or s + 1 == t.steps    # a window's last step, or the run's
        st, m = step_fn(st, base, t_params, batch, np.bool_(apply))
        m = {k: float(v) for k, v in m.items()}
        metrics.append({"step": s + 1, **m, "train_reward": float(np.mean(rewards)),
                        "response_tokens": float(np.mean(got.lengths)), "seconds": time.time() - t0})
        if s + 1 in evals_at:
          with terminal.bar(f"evaluation at step {s + 1}"):
            after = evaluate_now()
          atomic.write_bytes(out / f"eval_step{s + 1}.npy", _npy(after))   # [Q, S] rewards, as before's
          atomic.write_bytes(out / f"eval_gold_step{s + 1}.npy", _npy(gold_now()))
          paired = evaluate.paired_difference(before, after)
          evals.append({"step": s + 1, **dataclasses.asdict(paired)})
        if (s + 1) % t.checkpoint_every == 0 or s + 1 == t.steps:
          ckpts.save(s + 1, st, {"cursor": s + 1, "metrics": metrics, "evals": evals})
        _write_csv(out / "metrics.csv", metrics)
        _write_csv(out / "eval.csv", evals)
        bar.update(1)
  except BaseException as e:         # Ctrl-C, an error, sys.exit: finish the saves in flight and say where a rerun
    done = ckpts.wait()              # resumes (a second Ctrl-C still exits at once: main's watcher thread)
    ckpts.close()
    where = (f"step {done}'s checkpoint is complete; a rerun of the same command resumes from step {done}"
             if done is not None else "no checkpoint yet; a rerun of the same command starts from step 0")
    if isinstance(e, KeyboardInterrupt):               # main prints it as its one `interrupted:` line
      terminal.INTERRUPTED_LINE.append(f"interrupted: {where}")
    else:
      print(f"training stopped: {where}", file=sys.stderr, flush=True)
    raise
  ckpts.close()
  _plot(out, metrics, evals)
  summary = _summary(config, conf, metrics, evals, before)
  summary.update(grading.since(failures_before))         # this session's (a resumed run counts from its resume)
  warning = console.grading_warning(summary, where="train/summary.json")
  if warning:
    print(warning, file=sys.stderr)
    summary["text"] += f" {warning}"
  atomic.write_json(out / "summary.json", summary)
  if t.export:
    export_student(student, st["params"], scale, out / "export")
  return summary["text"]


def export_student(student, trained, scale: float | None, folder) -> pathlib.Path:
  """The trained student as an HF folder (`models/export.write_hf`) whose forward is the model the trainer
  evaluated (issue 34, item 4).

  Full fine-tuning (scale None): `trained` is the params, written as they are. LoRA: `trained` the adapters on
  student.params; every adapted matrix is written merged, W + scale A B summed and kept in fp32 (one fp32 rounding),
  the other tensors in the student's dtype, config.json's torch_dtype "float32" when the student is narrower.
  Evaluation ran a bf16 student's adapted matrices unmerged (`lora.adapt`); a bf16 merge would round every update
  entry below half an ulp of W away (after one step 74% of the entries, 0.59 of the update kept: peft#1388).
  Load the folder in float32 to keep the update (transformers' default does; `models.load(folder,
  dtype="float32")`). Returns the folder.
  """
  from opd_jax.models import export  # pylint: disable=g-import-not-at-top
  params = trained if scale is None else lora.merge(student.params, trained, scale=scale, dtype=jnp.float32)
  return export.write_hf(dataclasses.replace(student, params=params), folder)


def _npy(a: np.ndarray) -> bytes:
  import io  # pylint: disable=g-import-not-at-top
  buf = io.BytesIO()
  np.save(buf, a)
  return buf.getvalue()


def _summary(config, conf, metrics, evals, before) -> dict:
  last = evals[-1] if evals else None
  weights = "" if conf.teacher != contexts.SELF else f", self-teacher weights {config.train.teacher_weights}"
  text = (f"trained {config.train.configuration!r} ({divergence_spec(conf)}{weights}) for {len(metrics)} steps; "
          f"held-out pass@1 before {before.mean():.3f}")
  if last:
    within = bool(np.isfinite(last["lo"])) and last["lo"] <= 0 <= last["hi"]     # not estimable: no claim either way
    ci = (f"[{last['lo']:+.3f}, {last['hi']:+.3f}]" if np.isfinite(last["lo"]) else
          f"[interval not estimable: fewer than {evaluate.MIN_QUESTIONS} questions or no spread]")
    text += (f", after {last['after']:.3f}: paired difference {last['diff']:+.3f} {ci} over "
             f"{last['n_questions']} questions x {config.train.eval_samples} samples"
             f"{' (within noise)' if within else ''}")
  return {"text": text, "steps": len(metrics), "before": float(before.mean()), "last_eval": last,
          "configuration": config.train.configuration, "teacher_weights": config.train.teacher_weights}
