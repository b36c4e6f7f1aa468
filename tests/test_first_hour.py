"""A newcomer's first hour (issue 27, items 1, 4, 6, 7): every bad input of the table below exits 2 with exactly
one `error:` line naming the field (one format: opd_jax.terminal.field_error), no traceback, no model loaded and no
workdir left behind (a workdir that existed is left byte for byte as it was).

All cases run in one interpreter start: `python tests/test_first_hour.py <root> <results.json>` builds the inputs
under <root> (fabricated workdirs and model files: no study or trainer runs), then runs each case's command line
(`python -m opd_jax.main` or `python -m opd_jax.report`) in a forked child, two at a time, with every model load
refused (`environment.load_model` raises): a case that reached a load would show that error instead of its own.
"""
import json
import os
import pathlib
import shutil
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
STUDY, TRAIN = "--config=configs/smoke.py", "--config=configs/opd_train.py:smoke"
LOOKAHEAD = "--config=configs/lookahead.py"
NO_LOAD = "test: a model load was attempted"


def _case(cid, argv, expect, *, module="main", workdir="new", code=2, absent=(), never=(), interrupt=None):
  """One command line. workdir: "new" (a fresh path that must not exist afterwards), the name of an input workdir
  (left unchanged), or None (no --workdir). expect: fragments of the one error line; never: texts it must not hold."""
  return dict(id=cid, argv=list(argv), expect=list(expect), module=module, workdir=workdir, code=code,
              absent=list(absent), never=list(never), interrupt=interrupt)


CASES = [
    # --- Item 1: config errors in one format, every entry point. Unknown fields (the line was garbled).
    _case("missing-config-file", ["--config=configs/nope.py"], ["--config: no file 'configs/nope.py'; pass "
                                                                 "configs/<job>.py[:variant] (configs/base.py, "]),
    _case("switched-to-an-unknown-task", [STUDY, "--config.task.name=reasoning_gym:no_such_task"],
          ["unknown reasoning-gym dataset 'no_such_task'"], never=["note:"]),     # the switch's note: not printed
    _case("unknown-field", [STUDY, "--config.sampling.temprature=0.7"],
          ["unknown config field 'config.sampling.temprature'", "did you mean config.sampling.temperature?"]),
    _case("unknown-group", [STUDY, "--config.samplin.top_p=0.9"],
          ["unknown config field 'config.samplin'", "did you mean config.sampling.top_p?"]),
    _case("unknown-bool-field", [STUDY, "--noconfig.budget.adaptiv"],
          ["unknown config field 'config.budget.adaptiv'", "did you mean config.budget.adaptive?"]),
    _case("unknown-train-field", [TRAIN, "--config.train.optim.clip_nrm=1.0"],
          ["unknown config field 'config.train.optim.clip_nrm'", "did you mean config.train.optim.clip_norm?"]),
    _case("train-field-on-a-study", [STUDY, "--config.train.teacher_weights=current"],
          ["unknown config field 'config.train'; config.train is the trainer's group: this config is a study",
           "--config=configs/opd_train.py"], never=["did you mean"]),
    _case("train-two-configurations", [TRAIN, "--config.train.configuration=self:solution:reverse_kl,random:1"],
          ["the trainer takes one configuration"]),
    _case("unknown-configuration", [STUDY, "--config.configurations.mine=self:answer:reverse_kl"],
          ["unknown config field 'config.configurations.mine'", "--configuration=<name>="]),
    # Values that do not parse as the field's type.
    _case("type-int", [STUDY, "--config.budget.questions=abc"],
          ["config.budget.questions must be an integer, got 'abc'"]),
    _case("type-float", [STUDY, "--config.sampling.temperature=hot"],
          ["config.sampling.temperature must be a number, got 'hot'"]),
    _case("type-bool", [STUDY, "--config.budget.adaptive=maybe"], ["config.budget.adaptive must be true or false"]),
    _case("type-train-int", [TRAIN, "--config.train.steps=1.5"], ["config.train.steps must be an integer, got '1.5'"]),
    # Values out of range or not among the choices (with the nearest ones).
    _case("choice-target", [STUDY, "--config.report.target=incorect"],
          ["config.report.target must be", "got 'incorect'; did you mean 'incorrect'"]),
    _case("choice-strategy", [STUDY, "--config.budget.node_strategy=entropi"],
          ["config.budget.node_strategy must be one of", "did you mean 'entropy'"]),
    _case("range-beta", [STUDY, "--config.scoring.beta=1.5"],
          ["config.scoring.beta must lie strictly inside (0, 1), got 1.5"]),
    _case("config-variant", [STUDY + ":foo"], ["unknown variant 'foo' of smoke"]),
    _case("choice-schedule", [TRAIN, "--config.train.optim.schedule=cosin"],
          ["config.train.optim.schedule must be 'constant' or 'cosine'", "did you mean 'cosine'"]),
    # Flags of either entry point, and the report CLI's own errors (were a traceback, usage text, exit 1).
    _case("flag-unknown", [STUDY, "--workdr=/tmp/x"], ["--workdr: unknown flag; did you mean --workdir?"]),
    _case("flag-unknown-bool", [STUDY, "--dry_rn"], ["--dry_rn: unknown flag; did you mean --dry_run?"]),
    _case("report-tokenizer", ["--workdir={inputs}/study_done", "--tokenizer=/nonexistent"],
          ["--tokenizer: folder does not exist, got '/nonexistent'"], module="report", workdir="study_done"),
    _case("report-two-workdirs", ["--workdir={inputs}/study_done", "--workdir={inputs}/no_config"],
          ["--out: is required to compare 2 studies"], module="report", workdir="study_done"),
    _case("report-unknown-flag", ["--workdr={inputs}/study_done"], ["--workdr: unknown flag; did you mean --workdir?"],
          module="report", workdir=None),
    _case("report-no-workdir", [], ["--workdir: is required"], module="report", workdir=None),
    _case("report-target", ["--workdir={inputs}/study_done", "--target=incorect"],
          ["--target must be", "did you mean 'incorrect'"], module="report", workdir="study_done"),
    _case("report-type", ["--workdir={inputs}/study_done", "--n_boot=abc"], ["--n_boot must be an integer, got 'abc'"],
          module="report", workdir="study_done"),
    _case("report-bad-manifest", ["--workdir={inputs}/bad_manifest"], ["bad_manifest/manifest.json: not valid JSON"],
          module="report", workdir="bad_manifest"),

    # --- Item 4: silent nonsense refused. Context templates with a placeholder their context does not fill.
    _case("template-unknown", [STUDY, "--config.contexts.templates={'solution': '{prompt} {nosuch}'}"],
          ["config.contexts.templates['solution']: has the placeholder {nosuch}"]),
    _case("template-typo", [STUDY, "--config.contexts.templates={'summary': '{prompt} {summray}'}"],
          ["config.contexts.templates['summary']", "{summray}", "did you mean {summary}?"]),
    _case("template-other-context", [STUDY, "--config.contexts.templates={'plain': '{prompt} {incorrect}'}"],
          ["config.contexts.templates['plain']", "{incorrect}", "'plain' context does not fill"]),
    _case("template-context-name", [TRAIN, "--config.contexts.templates={'soluton': '{prompt}'}"],
          ["config.contexts.templates: unknown context 'soluton'; did you mean 'solution'?"]),
    # Optimizer settings the trainer took as they were.
    _case("optim-clip", [TRAIN, "--config.train.optim.clip_norm=-1"],
          ["config.train.optim.clip_norm must be a number >= 0", "got -1.0"]),
    _case("optim-warmup", [TRAIN, "--config.train.optim.warmup_steps=100"],
          ["config.train.optim.warmup_steps must be <= the run's 3 updates", "got 100"]),
    _case("optim-warmup-accumulate",
          [TRAIN, "--config.train.optim.accumulate=2", "--config.train.optim.warmup_steps=3"],
          ["config.train.optim.warmup_steps must be <= the run's 2 updates"]),
    _case("optim-b2", [TRAIN, "--config.train.optim.b2=1.0"], ["config.train.optim.b2 must lie in [0, 1)"]),
    # A dtype the run would record but not use.
    _case("dtype-unknown", [STUDY, "--config.student.dtype=fp8"], ["config.student.dtype must be ''", "got 'fp8'"]),
    _case("dtype-typo", [TRAIN, "--config.student.dtype=float"],
          ["config.student.dtype must be", "did you mean 'float32'"]),
    _case("dtype-random-fp16", [STUDY, "--config.student.dtype=float16"],
          ["config.student.dtype: applies to checkpoints only; 'random:0' runs in float32"]),
    _case("dtype-random-bf16", [TRAIN, "--config.student.dtype=bfloat16"],
          ["config.student.dtype: applies to checkpoints"]),
    # One kind of job per workdir.
    _case("job-train-in-study", [TRAIN], ["holds a study run and this is a train run"], workdir="study_done"),
    _case("job-study-in-train", [STUDY], ["holds a train run and this is a study run"], workdir="train_done"),
    _case("job-study-in-old-train", [STUDY], ["holds a train run and this is a study run"], workdir="train_old"),
    _case("job-lookahead-in-study", [LOOKAHEAD, "--config.lookahead.study_workdir={inputs}/study_done"],
          ["holds a study run and this is a lookahead run"], workdir="study_done"),
    # A name that would put the default workdir outside runs/.
    _case("name-parent", [STUDY, "--config.name=../../fh_escape"], ["config.name must be a plain folder name",
                                                                    "got '../../fh_escape'"],
          workdir=None, absent=[str(REPO.parent / "fh_escape")]),
    _case("name-nested", [STUDY, "--config.name=fh_a/b"], ["config.name must be a plain folder name"], workdir=None,
          absent=[str(REPO / "runs" / "fh_a")]),
    _case("name-dots", [TRAIN, "--config.name=.."], ["config.name must be a plain folder name", "got '..'"],
          workdir=None),
    # A finished study whose config.json was deleted is not "a finished run of this config".
    _case("no-config-json", [STUDY], ["holds a study's records, progress.json, manifest.json but no config.json"],
          workdir="no_config", never=["complete"]),
    _case("no-config-json-other", [STUDY, "--config.seed=1"], ["but no config.json"], workdir="no_config"),
    # Budgets that were clamped without a word.
    _case("clamp-node-rollouts", [STUDY, "--config.budget.node_rollouts_per_question=50"],
          ["config.budget.node_rollouts_per_question must be <= config.budget.rollouts_per_question (6)", "got 50"]),
    _case("clamp-node-rollouts-7", [STUDY, "--config.budget.node_rollouts_per_question=7"],
          ["config.budget.node_rollouts_per_question must be <="]),

    # --- Item 6: texts that named the wrong cause.
    _case("pool-negative", [STUDY, "--config.task.num_problems=-5"],
          ["config.task.num_problems must be an integer >= 0", "got -5"], never=["clipped"]),
    _case("pool-negative-train", [TRAIN, "--config.task.num_problems=-1"], ["config.task.num_problems must be"]),
    _case("pool-too-large", [STUDY, "--config.task.name=gsm8k", "--config.task.path={inputs}/gsm8k.jsonl",
                             "--config.task.num_problems=50"],
          ["config.task.num_problems=50", "has only 4 problems", "set it to 0 for all"], never=["None"]),
    _case("bad-manifest", [STUDY], ["bad_manifest/manifest.json: not valid JSON (Expecting property name",
                                    "line 1, column 2"], workdir="bad_manifest"),
    _case("bad-progress", [STUDY], ["bad_progress/progress.json: not valid JSON"], workdir="bad_progress"),
    _case("bad-config-json", [STUDY], ["bad_config/config.json: not a JSON object (a list)"], workdir="bad_config"),
    _case("other-seed", [STUDY, "--config.seed=3"], ["fields differ: config.seed: 0 -> 3)"], workdir="study_done",
          never=["mesh"]),
    _case("other-two-fields", [STUDY, "--config.seed=3", "--config.budget.questions=2"],
          ["fields differ: config.budget.questions: 3 -> 2; config.seed: 0 -> 3)"], workdir="study_done"),
    _case("train-other-config", [TRAIN], ["fields differ: config.train.lora.rank: 2 -> 4)"], workdir="train_done"),
    _case("train-steps-may-change", [TRAIN, "--config.train.lora.rank=2", "--config.train.steps=5"], [NO_LOAD],
          workdir="train_done_steps"),
    _case("train-interrupted", [TRAIN], ["interrupted: nothing had finished, so the workdir was removed"], code=130,
          interrupt="train",
          never=["finished questions"]),

    # --- Item 7: checks before any model load (every case here would otherwise load the student first).
    _case("teacher-missing", [STUDY, "--config.configurations.external=/nonexistent/teacher:plain:reverse_kl"],
          ["config.configurations['external']: model path does not exist, got '/nonexistent/teacher'"]),
    _case("teacher-preset-typo",
          [STUDY, "--config.configurations.external=qwen2.5-coder-1.5b-instrct:plain:reverse_kl"],
          ["config.configurations['external']: unknown model preset", "did you mean 'qwen2.5-coder-1.5b-instruct'"]),
    _case("teacher-near-path", [STUDY, "--config.configurations.external={inputs}/garbage_s:plain:reverse_kl"],
          ["model path does not exist", "did you mean '{inputs}/garbage_st'"]),
    _case("train-teacher-preset", [TRAIN, "--config.train.configuration=qwen2.5-coder-1.5b-instrct:plain:reverse_kl"],
          ["config.train.configuration: unknown model preset"]),
    _case("train-teacher-missing", [TRAIN, "--config.train.configuration=/nonexistent/t:plain:reverse_kl"],
          ["config.train.configuration: model path does not exist"]),
    _case("garbage-safetensors", [STUDY, "--config.configurations.external={inputs}/garbage_st:plain:reverse_kl"],
          ["garbage_st/model.safetensors: not a valid safetensors file"]),
    _case("missing-shard", [TRAIN, "--config.train.configuration={inputs}/missing_shard:plain:reverse_kl"],
          ["model-00002-of-00002.safetensors: listed in", "but missing"]),
    _case("garbage-gguf", [STUDY, "--config.student.name={inputs}/garbage.gguf"],
          ["garbage.gguf: not a valid GGUF file", "config.student.name"]),
    _case("not-a-model-file", [STUDY, "--config.configurations.external={inputs}/gsm8k.jsonl:plain:reverse_kl"],
          ["config.configurations['external']: is a file but not a .gguf file"]),
    _case("eval-questions-pool", [TRAIN, "--config.train.eval_questions=12"],
          ["config.train.eval_questions must be < the task's pool of 12 questions", "got 12"]),
    _case("eval-questions-large", [TRAIN, "--config.train.eval_questions=50"],
          ["config.train.eval_questions must be <"]),
    _case("lora-no-match", [TRAIN, "--config.train.lora.targets=nomatch"],
          ["config.train.lora.targets: matches no matrix of the student, got 'nomatch'"]),
    _case("lora-bad-regex", [TRAIN, "--config.train.lora.targets=(wq"],
          ["config.train.lora.targets must be a regular"]),
    _case("lora-rank", [TRAIN, "--config.train.lora.rank=33"], ["config.train.lora.rank must be <= 32"]),
    # A failed start leaves no workdir (it created): nested new folders, a trainer's, a task that fails inside.
    _case("failed-start-study", [STUDY, "--workdir={root}/new/deep/a/b"], [NO_LOAD], workdir=None,
          absent=["{root}/new/deep"]),
    _case("failed-start-train", [TRAIN], [NO_LOAD]),
    _case("failed-start-task", [STUDY, "--config.task.name=gsm8k", "--config.task.path={inputs}/nonexistent.jsonl"],
          ["nonexistent.jsonl"]),
    _case("failed-start-existing", [TRAIN], [NO_LOAD], workdir="empty"),

    # --- Issue 35 (round 2), item 4: errors that name the field, its range and the fix. Integers that numpy and
    # JAX cannot take (the seed passed the checks, loaded the models and died with an OverflowError).
    _case("seed-overflow", [STUDY, "--config.seed=99999999999999999999"],
          ["config.seed must be an integer >= 0 and <= 2**32 - 1 = 4294967295", "pick a smaller seed"]),
    _case("seed-overflow-train", [TRAIN, "--config.seed=4294967296"], ["config.seed must be an integer >= 0 and <="]),
    _case("seed-random-model", [STUDY, "--config.student.name=random:99999999999999999999"],
          ["config.student.name: a random model spec must be 'random:<seed>' with an integer seed in [0, 2**32 - 1"]),
    _case("int-overflow", [STUDY, "--config.budget.questions=99999999999"],
          ["config.budget.questions must be an integer of at most 2**31 - 1", "pick a smaller value"]),
    _case("int-overflow-looks", [STUDY, "--config.budget.looks=(2, 99999999999)"], ["config.budget.looks[1] must be"]),
    # The field that is wrong, with its range (top_p named none; continuations_max named continuations_mean).
    _case("top-p-zero", [STUDY, "--config.sampling.top_p=0"], ["config.sampling.top_p must lie in (0, 1]", "got 0.0"]),
    _case("top-k-negative", [STUDY, "--config.sampling.top_k=-1"], ["config.sampling.top_k must be an integer >= 0"]),
    _case("continuations-max-zero", [STUDY, "--config.budget.continuations_max=0"],
          ["config.budget.continuations_max must be an integer >= 1", "got 0"]),
    _case("continuations-max-weighted",
          [STUDY, "--config.budget.continuations_max=0", "--config.budget.allocation=weighted"],
          ["config.budget.continuations_max must be an integer >= 1"], never=["continuations_mean"]),
    _case("continuations-max-adaptive", [STUDY, "--config.budget.continuations_max=2", "--config.budget.adaptive"],
          ["config.budget.continuations_max must be >= config.budget.continuations_per_candidate (4)", "raise it"]),
    # An empty task file is called empty, naming num_problems (0 said "gsm8k has no solutions; use gsm8k").
    _case("task-empty", [STUDY, "--config.task.name=gsm8k", "--config.task.path={inputs}/empty.jsonl"],
          ["config.task.path: {inputs}/empty.jsonl is empty: it holds no problems", "config.task.num_problems=12",
           "point config.task.path at a file"]),
    _case("task-empty-all", [STUDY, "--config.task.name=gsm8k", "--config.task.path={inputs}/empty.jsonl",
                             "--config.task.num_problems=0"],
          ["is empty", "config.task.num_problems=0 (all) gives none"], never=["solution"]),
    # Typos: "did you mean", a few names (not ~100).
    _case("divergence-typo", [STUDY, "--configuration=external=self:plain:revers_kl"],
          ["config.configurations['external']", "unknown divergence 'revers_kl'", "did you mean 'reverse_kl'"]),
    _case("dataset-typo", [STUDY, "--config.task.name=reasoning_gym:gsm_symbolc"],
          ["config.task.name: unknown reasoning-gym dataset 'gsm_symbolc'", "did you mean 'gsm_symbolic'?"],
          never=["acre", "arc_1d"]),
    # Item 5: a temperature at which every candidate but one has p = 0 (the study measures nothing).
    _case("temperature-tiny", [STUDY, "--config.sampling.temperature=1e-9"],
          ["config.sampling.temperature must be a number >= 0.01, got 1e-09", "p = 0",
           "use a temperature >= 0.01"]),
    _case("temperature-greedy", [STUDY, "--config.sampling.temperature=0"],
          ["config.sampling.temperature must be a number >= 0.01, got 0", "greedy decoding",
           "no question is informative"]),
    _case("teacher-temperature-tiny", [TRAIN, "--config.scoring.teacher_temperature=0.001"],
          ["config.scoring.teacher_temperature must be 0 (the sampling temperature) or a number >= 0.01"]),
]


# ----------------------------------------------------------------------------------------------------------
# The batch (run as a script: one interpreter start for every case).

def make_inputs(inputs: pathlib.Path) -> None:
  """Fabricated workdirs (a finished study's bookkeeping without records, trainer workdirs) and model files."""
  from configs import opd_train  # pylint: disable=g-import-not-at-top
  from configs import smoke  # pylint: disable=g-import-not-at-top
  inputs.mkdir(parents=True)
  done = inputs / "study_done"
  for sub in ("nodes", "tokens", "rollouts"):
    (done / "records" / sub).mkdir(parents=True)
  (done / "config.json").write_text(json.dumps(smoke.get_config().to_dict(), indent=2))
  (done / "progress.json").write_text(json.dumps({"processed": ["q0"], "selected": ["q0"], "done": True}))
  (done / "manifest.json").write_text(json.dumps({"schema_version": 1}))
  for name, edit in [("no_config", lambda w: (w / "config.json").unlink()),
                     ("bad_manifest", lambda w: (w / "manifest.json").write_text("{garbage")),
                     ("bad_progress", lambda w: (w / "progress.json").write_text('{"processed": [')),
                     ("bad_config", lambda w: (w / "config.json").write_text("[1, 2]"))]:
    shutil.copytree(done, inputs / name)
    edit(inputs / name)
  train = opd_train.get_config("smoke")
  train.train.lora.rank = 2
  for name in ("train_done", "train_done_steps", "train_old"):
    (inputs / name / "train").mkdir(parents=True)
    (inputs / name / "train" / "metrics.csv").write_text("step,loss\n1,0.5\n")
    if name != "train_old":
      (inputs / name / "config.json").write_text(json.dumps(train.to_dict()))
  (inputs / "empty").mkdir()
  for folder in ("garbage_st", "missing_shard"):
    (inputs / folder).mkdir()
    (inputs / folder / "config.json").write_text(json.dumps({"architectures": ["Qwen2ForCausalLM"]}))
  garbage = bytes((i * 37 + 11) % 256 for i in range(4096))   # fixed bytes: the error lines quote headers
  (inputs / "garbage_st" / "model.safetensors").write_bytes(garbage)
  (inputs / "missing_shard" / "model.safetensors.index.json").write_text(json.dumps(
      {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}))
  (inputs / "missing_shard" / "model-00001-of-00002.safetensors").write_bytes(b"")
  (inputs / "garbage.gguf").write_bytes(b"GGML" + bytes(range(100, 160)))
  (inputs / "empty.jsonl").write_text("")
  (inputs / "gsm8k.jsonl").write_text("\n".join(json.dumps({"question": f"q{i}", "answer": f"so\n#### {i}"})
                                                for i in range(4)) + "\n")


def _snapshot(path: pathlib.Path) -> dict:
  return {str(p.relative_to(path)): p.read_bytes() if p.is_file() else None for p in sorted(path.rglob("*"))}


def _resolve(case: dict, root: pathlib.Path) -> dict:
  fill = lambda s: s.replace("{inputs}", str(root / "inputs")).replace("{root}", str(root))
  case = dict(case, argv=[fill(a) for a in case["argv"]], expect=[fill(e) for e in case["expect"]],
              absent=[fill(a) for a in case["absent"]])
  if case["workdir"] == "new":
    case["workdir_path"] = str(root / "new" / case["id"])
    case["absent"].append(case["workdir_path"])
  elif case["workdir"]:
    case["workdir_path"] = str(root / "inputs" / case["workdir"])
  if case["module"] == "main" and case["workdir"]:
    case["argv"].append(f"--workdir={case['workdir_path']}")
  if case["module"] == "main":
    case["argv"].append("--config.logging.progress=False")
  return case


def _refuse_load(*args, **kwargs):
  raise RuntimeError(NO_LOAD)


def _interrupted(*args, **kwargs):
  raise KeyboardInterrupt


def _child(case: dict) -> dict:
  from opd_jax.study import environment  # pylint: disable=g-import-not-at-top
  from opd_jax.training import loop  # pylint: disable=g-import-not-at-top
  from tests import cli_batch  # pylint: disable=g-import-not-at-top
  environment.load_model = _refuse_load
  if case["interrupt"] == "train":
    loop.run = _interrupted
  return cli_batch.run_cli(case["argv"], case["module"])


def run_batch(root: pathlib.Path, results_path: pathlib.Path, parallel: int = 2) -> None:
  """Every case in a forked child (`parallel` at a time); results: id -> code, stderr, and whether the case's
  input workdir was left unchanged and its paths absent."""
  from opd_jax import main  # pylint: disable=g-import-not-at-top,unused-import  (imported once, before the forks)
  from opd_jax.study import environment  # pylint: disable=g-import-not-at-top,unused-import
  from opd_jax.study import pipeline  # pylint: disable=g-import-not-at-top,unused-import
  from opd_jax.study import preflight  # pylint: disable=g-import-not-at-top,unused-import
  from opd_jax.report import build  # pylint: disable=g-import-not-at-top,unused-import
  from opd_jax.training import loop  # pylint: disable=g-import-not-at-top,unused-import
  make_inputs(root / "inputs")
  cases = [_resolve(c, root) for c in CASES]
  before = {c["id"]: _snapshot(pathlib.Path(c["workdir_path"])) for c in cases if c["workdir"] not in (None, "new")}
  results, running = {}, {}
  for case in cases + [None] * parallel:
    while running and (case is None or len(running) >= parallel):
      pid, _ = os.wait()
      done = running.pop(pid)
      path = root / f"{done['id']}.json"
      results[done["id"]] = json.loads(path.read_text()) if path.is_file() else {"code": -2, "stderr": "child died"}
    if case is None:
      continue
    pid = os.fork()
    if pid == 0:
      try:
        (root / f"{case['id']}.json").write_text(json.dumps(_child(case)))
      finally:
        os._exit(0)
    running[pid] = case
  for c in cases:                  # cases share inputs: compare after all ran
    unchanged = c["id"] not in before or _snapshot(pathlib.Path(c["workdir_path"])) == before[c["id"]]
    results[c["id"]]["unchanged"] = unchanged
    results[c["id"]]["left"] = [p for p in c["absent"] if os.path.exists(p)]
    results[c["id"]]["case"] = c
  results_path.write_text(json.dumps(results))


# ----------------------------------------------------------------------------------------------------------
# The tests.

@pytest.fixture(scope="module")
def results(tmp_path_factory):
  root = tmp_path_factory.mktemp("first_hour")
  from tests import cli_batch  # pylint: disable=g-import-not-at-top
  return cli_batch.run_test_script(__file__, root)


@pytest.mark.parametrize("cid", [c["id"] for c in CASES])
def test_bad_input_fails_in_one_line_naming_the_cause(results, cid):
  got = results[cid]
  case = got["case"]
  lines = [l for l in got["stderr"].splitlines() if l.startswith(("error:", "interrupted:"))]
  assert got["code"] == case["code"] and len(lines) == 1, got
  for fragment in case["expect"]:
    assert fragment in lines[0], (fragment, lines[0])
  for text in case["never"]:
    assert text not in got["stderr"], (text, got["stderr"])
  assert "Traceback" not in got["stderr"] and "\\n" not in lines[0] and "\\'" not in lines[0], got["stderr"]
  assert NO_LOAD in case["expect"] or NO_LOAD not in got["stderr"], lines[0]      # no model load was attempted
  assert not got["left"], f"left behind: {got['left']}"
  assert got["unchanged"], f"{case['workdir_path']} changed"


def test_field_error_shapes():
  from opd_jax import terminal  # pylint: disable=g-import-not-at-top
  assert terminal.field_error("config.seed", "must be an integer >= 0", -3) == ("config.seed must be an integer >= 0, "
                                                                              "got -3")
  assert (terminal.field_error("config.report.target", "must be 'incorrect', 'correct' or 'all'", "incorect",
                             choices=("incorrect", "correct", "all"), fix="see configs/base.py") ==
          "config.report.target must be 'incorrect', 'correct' or 'all', got 'incorect'; did you mean 'incorrect' or "
          "'correct'? see configs/base.py")
  assert (terminal.field_error("--x", "unknown flag", suggest=["--y"], fix="see --help") ==
          "--x: unknown flag; did you mean --y? see --help")
  assert terminal.field_error("f", "bad", "a\nb", fix="fix") == "f: bad, got 'a\\nb'; fix"        # one line, always


def test_config_difference_agrees_with_the_config_hash():
  """Fields differ exactly when claim.config_hash differs (JSON: a tuple equals its list), leaves named."""
  from opd_jax import claim  # pylint: disable=g-import-not-at-top
  old = {"mesh": {"rules": [], "data": -1}, "seed": 0, "train": {"steps": 3, "optim": {"lr": 1e-4}}}
  pairs = [({"mesh": {"rules": (), "data": -1}}, []), ({"seed": 3}, ["seed"]),
           ({"train": {"steps": 9, "optim": {"lr": 1e-3}}}, ["train.optim.lr", "train.steps"]),
           ({"extra": {"a": 1}}, ["extra"])]
  for change, fields in pairs:
    new = {**old, **change}
    assert claim.config_difference(old, new) == fields
    assert (claim.config_hash(old) != claim.config_hash(new)) == bool(fields)
  assert claim.config_difference(old, {**old, "train": {"steps": 9, "optim": {"lr": 1e-4}}}, ("train.steps",)) == []


def test_template_check_refuses_exactly_the_placeholders_a_context_leaves_unfilled():
  """Each context x placeholder: `check_templates` refuses it iff `context_message` (called as the study calls it)
  leaves it verbatim or empty; the default templates and literal braces pass."""
  import types  # pylint: disable=g-import-not-at-top
  from opd_jax.teachers import contexts  # pylint: disable=g-import-not-at-top
  from opd_jax.tasks import base as task_base  # pylint: disable=g-import-not-at-top
  task = types.SimpleNamespace(name="gsm8k", prompt=lambda p: p.question)
  problem = task_base.Problem(id="q", question="What is 2 + 2?", answer="4", solution="2 + 2 = 4")
  contexts.check_templates({c.name: c.template for c in contexts.REGISTRY.values()})
  contexts.check_templates({"answer": "{prompt} Put it in \\boxed{}, as {x: 1} or { x }."})
  for context in contexts.REGISTRY:
    for name in ("prompt", "solution", "answer", "summary", "incorrect", "nosuch"):
      template = f"<{{{name}}}>"
      msg = contexts.context_message(context, task, problem, templates={context: template},
                                     incorrect="a wrong attempt" if contexts.get(context).needs_incorrect else None)
      filled = msg not in (template, "<>")
      try:
        contexts.check_templates({context: template})
        refused = False
      except ValueError:
        refused = True
      assert filled != refused, (context, name, msg)


def test_a_failed_start_removes_only_what_it_added(tmp_path):
  from opd_jax import main  # pylint: disable=g-import-not-at-top
  work = tmp_path / "a" / "b"
  with pytest.raises(ValueError):                           # created (with a parent), only config.json written
    with main.failed_start_undone(work):
      (work / "train").mkdir(parents=True)
      (work / "config.json").write_text("{}")
      raise ValueError("load failed")
  assert not (tmp_path / "a").exists()
  work.mkdir(parents=True)
  (work / "notes.txt").write_text("mine")
  with pytest.raises(KeyboardInterrupt):                    # existed: what it added goes, the folder stays
    with main.failed_start_undone(work):
      (work / "config.json").write_text("{}")
      raise KeyboardInterrupt
  assert sorted(p.name for p in work.iterdir()) == ["notes.txt"]
  with pytest.raises(RuntimeError):                         # wrote a record: everything is kept
    with main.failed_start_undone(work):
      (work / "config.json").write_text("{}")
      (work / "records").mkdir()
      (work / "records" / "part-q0.parquet").write_bytes(b"x")
      raise RuntimeError("crash")
  assert sorted(p.name for p in work.iterdir()) == ["config.json", "notes.txt", "records"]


if __name__ == "__main__":
  run_batch(pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]))


def test_the_all_nan_warning_names_its_cause():
  """Every alignment NaN: a zero distillation gradient everywhere names the view, not the budget; other reasons
  keep the budget hint; a defined alignment gives no warning."""
  import pandas as pd  # pylint: disable=g-import-not-at-top
  from opd_jax.report import console  # pylint: disable=g-import-not-at-top
  nodes = pd.DataFrame({"alignment": [float("nan")] * 3, "degenerate": [True, False, False],
                        "alignment_nan_reason": ["degenerate", "zero_distillation_gradient",
                                                 "zero_distillation_gradient"]})
  line = console.diagnose(nodes)
  assert "zero distillation gradient" in line and "another context or teacher" in line and "budget" not in line
  nodes.loc[2, "alignment_nan_reason"] = "zero_ideal_gradient"
  assert "config.budget" in console.diagnose(nodes)
  nodes.loc[2, "alignment"] = 0.5
  assert console.diagnose(nodes) is None
