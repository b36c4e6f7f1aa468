"""The study pipeline of design.md, resumable per question: orchestration only (each stage's maths lives in
its own module, named on the right).

config -> checks, plan, task and context lengths                   preflight.py, planning.py, model_specs.py
       -> models on this process's mesh                             environment.py (`setup`); models/sharding.py
       -> the process's share of the question pool, in fixed blocks runs.py
       -> student prompts -> base rollouts (one batch per block)    questions.py (`base_rollouts`); decode/sampling.py
       -> verifier -> question selection                            questions.py (`verify`); tasks/
       -> teacher scoring of every view (teacher, context) -> dense questions.py (`score_views`); decode/scoring.py
          predictors (`tokens` table)
       -> node selection -> candidate sets C(u) -> p, q_v on C(u)   questions.py (`nodes_of`); nodes.py
       -> targeted continuations -> P_succ                          questions.py (`continuations`); targeted.py
       -> g*, g_D, alignment, teacher advantage, intervals          nodes.py
          (`nodes` table)
       -> records (one part per question and table) and progress    ../records.py, runs.py
       -> every process done -> manifest, summary and report        `finish` (this module); report/
          (process 0)

Randomness: question i (pool index) draws its base rollouts from fold_in(fold_in(key(seed), i), 0) and the
continuations of its rollout r from fold_in(fold_in(fold_in(key(seed), i), 1), r), with stable row ids, so a
question's records do not depend on which questions ran before it, in this process or another. The base
rollouts of `budget.question_batch` consecutive questions of a process's share are sampled in one batch (fixed
blocks: a resumed run samples the same batches as an uninterrupted one).
"""
from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import pathlib
import sys

import jax
from absl import logging

from opd_jax import atomic
from opd_jax import claim
from opd_jax import records
from opd_jax import report
from opd_jax import terminal
from opd_jax.report import looks
from opd_jax.report import verdict_text
from opd_jax.study import checklist
from opd_jax.study import environment
from opd_jax.study import model_specs
from opd_jax.study import preflight
from opd_jax.study import questions
from opd_jax.study import runs
from opd_jax.tasks import grading

# ----------------------------------------------------------------------------------------------------------
# The run: this process's questions, then (process 0) the manifest, summary and report.

def _versions() -> dict:
  out = {}
  for pkg in ("jax", "jaxlib", "numpy", "transformers", "tokenizers", "gguf", "pandas", "pyarrow",
              "reasoning-gym", "math-verify", "opd_jax"):
    try:
      out[pkg] = importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
      out[pkg] = None
  return out


def _token_text(tokenizer):
  """token id -> its text, for the report's split by token kind (None without a tokenizer)."""
  return None if tokenizer is None else (lambda t: tokenizer.decode([int(t)]))


def finish(workdir, *, rebuild: bool = True, tokenizer=None, options=None, seq=None) -> str:
  """Check the parts, rebuild the summary (`report.write_summary`, with the student's `tokenizer` for the split
  by token kind; unless rebuild is False: a read-only finished workdir keeps its summary) and warn on stderr and
  in summary.md when nothing was measured (`report.diagnose`) or grades timed out or failed
  (`report.grading_warning`, from manifest.json's work counts); `seq`: a sequential study's {design, look, final}
  (`looks.report_look`). Returns the summary markdown."""
  workdir = pathlib.Path(workdir)
  records.check_parts(workdir)
  if rebuild:
    with terminal.bar("report"):
      markdown = report.write_summary(str(workdir), decode=_token_text(tokenizer), **dict(options or {}),
                                      **(seq or {}))
  else:
    markdown = (workdir / "summary.md").read_text() if (workdir / "summary.md").is_file() else ""
  manifest = workdir / "manifest.json"
  work = (json.loads(manifest.read_text()).get("work") or {}) if manifest.is_file() else {}
  warnings = [w for w in (report.diagnose(records.read_table(workdir, "nodes")), report.grading_warning(work)) if w]
  for warning in warnings:
    print(warning, file=sys.stderr)
    if rebuild:
      markdown += f"\n**{warning}**\n"
  if warnings and rebuild:
    with atomic.writing("report"):
      atomic.write_bytes(workdir / "summary.md", markdown)
  return markdown


def run(config, workdir: str, *, repair: bool = False) -> str:
  """Run (or resume) the study of `config` in `workdir`; returns the summary markdown.

  Order: config checks, the workdir (a writable directory, not another config's run, not locked by a live run
  with this process index: `claim.workdir_lock`, which takes over a dead run's lock with a warning), the task and
  context lengths (`preflight.check`), and only then the models. A finished run is not rerun: its parts are
  checked and its summary is rebuilt (when the workdir is writable) and returned.

  Args:
    repair: first drop the record parts that do not read (truncated, damaged) and forget their questions
      (`runs.forget_damaged`), which the run then computes again (seeded: the same records); --repair.
  Raises:
    ValueError / FileNotFoundError: bad config, data or checkpoints (before any record is written), a workdir
      holding another config's run (left untouched), one in use by another run, or a damaged record part (the
      message says to rerun with --repair).
    atomic.WriteError: a file that could not be written (a full disk), naming it and the stage (records of a
      question, progress, manifest, report); finished questions are kept.
  """
  cfg = config.to_dict()
  preflight.validate(config)
  terminal.ENABLED = bool(config.logging.progress)
  workdir = pathlib.Path(workdir)
  writable = runs.check_workdir_path(workdir)
  unclaimed = runs.unclaimed(workdir, cfg)                 # another config's, no question recorded: taken over
  if (workdir / "config.json").exists() and not unclaimed:
    records.check_workdir(workdir, cfg)                                  # refuse before loading anything
  pi, pc = runs.process_index(), runs.process_count()
  looks.check(config, pc)
  if not writable:
    if runs.is_complete(workdir, pc) and not repair:
      return _finished(config, workdir, pi, pc, rebuild=False)
    raise ValueError(f"--workdir={workdir} is not writable; pass a writable directory")
  with claim.workdir_lock(workdir, pi):
    if unclaimed and runs.unclaimed(workdir, cfg):         # still so, now that this run holds the lock
      print(f"note: --workdir={workdir} held a run of another config that recorded no question (it failed or found "
            f"nothing informative); this run replaces its {', '.join(runs.release_claim(workdir))}", file=sys.stderr,
            flush=True)
    if repair:
      redo = runs.forget_damaged(workdir, pi, pc)
      print(f"repair: {len(redo)} question(s) with damaged records to compute again{': ' if redo else ''}"
            f"{', '.join(redo)}", file=sys.stderr, flush=True)
    if runs.is_complete(workdir, pc):
      return _finished(config, workdir, pi, pc, rebuild=True)
    return _run_locked(config, cfg, workdir, pi, pc)


def check(config, workdir, *, local_mesh: bool = True):
  """What `run` (and main's run branch) checks before any model loads, writing nothing: the dry run's checks, so
  that a dry run refuses what the run would. The config (`preflight.validate`), the workdir (`runs.check_workdir_for`:
  another kind of job, another config's run, damaged bookkeeping; writable or creatable; record parts that do not
  read), the looks across processes, and `preflight.check` (the mesh, model specs, task rows, configurations,
  context lengths), except that a model path not on this machine passes: the plan names it.

  Args:
    local_mesh: check config.mesh against this machine's devices (False: a dry run that prices another machine).
  Returns:
    (task, confs), as `preflight.check`.
  Raises:
    ValueError / OSError: what the run would raise before loading a model, in the same words.
  """
  cfg = config.to_dict()
  preflight.validate(config)
  runs.check_workdir_for(workdir, cfg, "study")
  workdir, pc = pathlib.Path(workdir), runs.process_count()
  looks.check(config, pc)
  if not runs.can_create(workdir) and not (workdir.is_dir() and runs.is_complete(workdir, pc)):
    raise ValueError(f"--workdir={workdir} " + ("is not writable" if workdir.is_dir() else "cannot be created")
                     + "; pass a writable directory")
  if workdir.is_dir() and not runs.unclaimed(workdir, cfg):
    records.check_parts(workdir)
  return preflight.check(config, absent_models_ok=True, local_mesh=local_mesh)


def _finished(config, workdir: pathlib.Path, pi: int, pc: int, *, rebuild: bool) -> str:
  """A complete run: its parts checked (a damaged one raises before anything prints), `complete:`, the summary
  rebuilt (`rebuild`) by process 0 without loading a model."""
  records.check_parts(workdir)
  logging.info("%s holds a complete run of this config: nothing to run, no model loaded", workdir)
  print(f"complete: {workdir} holds a finished run of this config (nothing to run)", file=sys.stderr)
  if pi != 0:
    return ""
  found = model_specs.header(config.student.name, config)     # the tokenizer without weights, where cheap
  return finish(workdir, rebuild=rebuild, tokenizer=found and found[1], options=config.report,
                seq=looks.report_look(looks.resolve(config), runs.read_progress(workdir, 0, pc)))


def _run_locked(config, cfg: dict, workdir: pathlib.Path, pi: int, pc: int) -> str:
  records.check_parts(workdir)                              # a damaged part says so before any model loads
  task, confs = preflight.check(config)                     # task, gold answers, context lengths: no model yet
  text = checklist.describe(config, task)
  terminal.flush_notes()                                    # main's notes (a task switch): the run starts here
  print(text, file=sys.stderr, flush=True)
  env = environment.setup(config, task, confs)
  records.check_workdir(workdir, cfg)
  timings = run_questions(env, workdir, claim.config_hash(cfg), pi, pc)
  states = runs.wait_for_processes(workdir, pc)             # every process waits: none exits early
  if pi != 0:
    return ""
  selected = [q for s in states for q in s["selected"]]
  if not selected:                    # no manifest: the same command says so again; another config takes the workdir
    raise ValueError(f"no question of the pool ({len(env.task.problems)}) was informative (both a correct and "
                     "an incorrect rollout); raise config.task.num_problems or config.budget.rollouts_per_question"
                     ", or set config.selection='all' (the same --workdir takes the changed command: nothing was "
                     "recorded)")
  work = {}
  for s in states:                                          # every process's spending, summed
    for k, v in (s.get("work") or {}).items():
      work[k] = work.get(k, 0) + int(v)
  write_manifest(env, cfg, workdir, processed=sum(len(s["processed"]) for s in states), selected=len(selected),
                 timings=timings, work=work, taken=states[0].get("looks") if env.spec.looks.sequential else None)
  processed = {str(q) for s in states for q in s["processed"]}    # what a new study must not see again (verdict_text)
  atomic.write_json(pathlib.Path(workdir) / verdict_text.SEEN,
                    [p.question for p in env.task.problems if str(p.id) in processed])
  seq = looks.report_look(env.spec.looks, states[0])
  seq["unplanned"] = looks.unplanned(workdir, selected, env.spec.looks.design.looks)    # a look nobody planned
  markdown = finish(workdir, tokenizer=env.student.tokenizer, options=config.report, seq=seq)
  looks.note_look(workdir, selected, len(selected), env.spec.looks.design.looks)
  return markdown


def run_questions(env: environment.Env, workdir: pathlib.Path, config_hash: str, pi: int, pc: int) -> dict[str, float]:
  """This process's share of the question pool (`runs.split_questions`), in fixed blocks of
  budget.question_batch, until its quota of selected questions: each question's record parts, then its progress
  (the commit point of resume). Marks the process done (or failed, for the others to stop waiting).
  Returns the stage timings of this run, earlier sessions included."""
  spec = env.spec
  progress = runs.read_progress(workdir, pi, pc)            # progress.json, or progress.<i>-of-<n>.json
  processed, selected = list(progress["processed"]), list(progress["selected"])
  before = dict(progress.get("timings_s") or {})           # stage times of earlier sessions of this run
  spent = dict(progress.get("work") or {})                  # and what they spent (environment.Env.count)

  def timings():
    return {k: round(before.get(k, 0.0) + env.timings.get(k, 0.0), 3) for k in sorted(set(before) | set(env.timings))}

  def work():
    return {k: spent.get(k, 0) + env.work.get(k, 0) for k in sorted(set(spent) | set(env.work))}

  done = set(processed)
  quota = runs.question_quota(spec.questions, pi, pc)
  if processed:
    print(f"resuming: {len(processed)} questions processed in earlier sessions ({len(selected)} of {quota} selected); "
          "their records are kept", file=sys.stderr, flush=True)
  taken = list(progress.get("looks") or [])                 # the sequential design's looks (report/looks.py)

  def save(**kw):
    state = {"processed": processed, "selected": selected, "timings_s": timings(), "work": work()}
    runs.write_progress(workdir, {**state, **({"looks": taken} if spec.looks.sequential else {})}, pi, pc,
                        **kw)

  def look() -> bool:
    """Takes the looks `selected` has reached (in order); True once one stopped the study (decided or futile)."""
    for k in looks.pending(spec.looks, selected, taken):
      taken.append(looks.take(workdir, spec.looks, selected, k))
      logging.info("%s", taken[-1]["line"])
      t = taken[-1]
      what = (f"decided ({t['decision']}), stopping" if t["decided"] else "futile (unlikely to decide by the cap), "
              "stopping" if looks.stops(t) else "not decided, going on")
      print(f"look {k} of {spec.looks.design.n_looks} ({t['questions']} questions): {what}", file=sys.stderr)
      save()
      if looks.stops(t):
        return True
    return looks.stopped(taken) is not None

  mine, G = runs.split_questions(range(len(env.task.problems)), pi, pc), spec.question_batch
  try:
    with terminal.bar("questions", total=quota, unit="q", initial=len(selected), fill=False, leave=True,
                    shown=quota > 1) as bar:                # one question: the stage lines show progress
      stop = look()                                         # a resumed run takes the looks it had not taken
      for block in (mine[s:s + G] for s in range(0, len(mine), G)):   # fixed blocks: resuming changes no batch
        redo = set(selected) - set(processed)               # selected, records dropped (`runs.forget_damaged`)
        if (stop or len(selected) >= quota) and not redo:
          break
        if all(env.task.problems[i].id in done for i in block):
          continue
        for index, out in zip(block, questions.base_rollouts(env, block)):
          terminal.check_interrupt()                        # a Ctrl-C acts here, between questions (terminal.py)
          problem = env.task.problems[index]
          if problem.id in done or ((stop or len(selected) >= quota) and problem.id not in redo):
            continue
          before = grading.failures()
          tables = questions.process_question(env, index, problem, out)
          env.count(**grading.since(before))              # grades that timed out or failed: manifest "work"
          if tables is not None:
            with atomic.writing(f"records of question {problem.id}"):
              for name in records.TABLES:
                records.write_part(workdir, name, problem.id, tables[name], config_hash=config_hash)
            if problem.id not in redo:
              selected.append(problem.id)
              bar.update(1)
          processed.append(problem.id)
          save()
          stop = look()
  except Exception as e:
    if pc > 1:                                             # the other processes stop waiting and raise too
      runs.write_progress(workdir, {"processed": processed, "selected": selected}, pi, pc,
                          error=f"{type(e).__name__}: {e}")
    raise
  save(done=True)
  if len(selected) < quota and not stop:
    logging.warning("only %d of this process's %d questions (config.budget.questions=%d over %d processes) were "
                    "informative in its share of the pool of %d", len(selected), quota, spec.questions,
                    pc, len(env.task.problems))
  return timings()


def write_manifest(env: environment.Env, cfg: dict, workdir: pathlib.Path, *, processed: int, selected: int,
                   timings: dict[str, float], work: dict[str, int], taken: list | None = None) -> None:
  """<workdir>/manifest.json: schema, config hash, versions, seed, devices and mesh, models, counts, timings
  (seconds per stage), work (base rollouts and their tokens, scored tokens, continuations and their tokens, and
  the grades that timed out or failed, grades_timed_out and grades_errored (opd_jax/tasks/grading.py), over
  every session and process of the run), the sequential design's looks taken (`report/looks.py`; absent for the fixed
  design), the policies, the candidate-set rule (`nodes.candidate_rule`: a configuration's alignment is defined on
  its study's C(u)), the design (`looks.design_record`: r, the estimand, the looks, the pilot and its variance
  split) and the schema's column docs (records.describe_schema)."""
  devices = jax.devices()
  manifest = {
      "schema_version": records.SCHEMA_VERSION, "config_hash": claim.config_hash(cfg),
      "versions": _versions(), "seed": env.spec.seed, "device_count": len(devices),
      "platform": devices[0].platform, "mesh_shape": runs.describe(env.mesh),
      "models": {m.name: {"sha256": m.sha256, "source": m.source, "dtype": str(m.dtype)}
                 for m in [env.student, *env.teachers.values()]},
      "questions_processed": processed, "questions_selected": selected, "timings_s": timings, "work": work,
      "policy": {"student": dataclasses.asdict(env.spec.policy),
                 "teacher": dataclasses.asdict(env.spec.teacher_policy)},
      "candidate_set": environment.candidate_rule(env), "design": looks.design_record(cfg),
      "schema": records.describe_schema(), **({"looks": taken} if taken is not None else {}),
  }
  with atomic.writing("manifest"):
    atomic.write_json(workdir / "manifest.json", manifest)
