"""A newcomer's first hour, round 3 (issue 50, items 5-7): a data file is checked row by row and every bad line
named in one error; a run that recorded nothing leaves a workdir the corrected command takes; the dry run refuses
what the run refuses (mesh, another config's workdir) and writes nothing; messages say what is true (the pool, the
answer stop, OPD_JAX_CACHE, the data's source, what a Ctrl-C left).

The command lines run in one interpreter start: `python tests/test_first_hour_round3.py <root> <results.json>`
builds the inputs under <root> and runs the cases in order (they share a workdir), each in a forked child, with
every model load refused (`environment.load_model` raises) unless the case loads the tiny random models.
"""
import dataclasses
import json
import os
import pathlib
import re
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
NO_LOAD = "test: a model load was attempted"
# The 5-row file of the issue: line 3 without the solution the smoke config's contexts show, line 5 not a number.
ROWS = [{"question": "What is 1+1?", "answer": "2", "solution": "1+1=2"},
        {"question": "What is 2+2?", "answer": 4, "solution": "2+2=4"},
        {"question": "What is 3+3?", "answer": "6"},
        {"question": "What is 4+4?", "answer": "8", "solution": "4+4=8"},
        {"question": "What is 5+5?", "answer": "abc", "solution": "5+5=10"}]
ROWS_ERROR = ("data.jsonl: line 3: no 'solution' (needed on every line by config.configurations['clipped'] and 3 "
              "more configurations); line 5: answer 'abc' is not a number;")


def _write(path: pathlib.Path, rows) -> pathlib.Path:
  path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
  return path


# ----------------------------------------------------------------------------------------------------------
# In-process checks.

def _smoke_on(path, **fields):
  from configs import smoke  # pylint: disable=g-import-not-at-top
  config = smoke.get_config()
  config.task.name, config.task.path, config.task.num_problems = "jsonl:numeric", str(path), 0
  for k, v in fields.items():
    group, name = k.split(".")
    config[group][name] = v
  return config


def test_every_bad_line_of_a_data_file_is_named_once(tmp_path, monkeypatch):
  """Seeded defects on 40 lines (blank lines between): the one error names exactly the lines an independent rule
  finds, in order; skipping bad answers drops exactly the non-numbers; the trainer's field is named as its own."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from opd_jax.study import question_pool  # pylint: disable=g-import-not-at-top
  from opd_jax.tasks import files  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  lines, why = [], {}
  for i in range(40):
    row = {"question": f"What is {i} + 1?", "answer": str(i + 1), "solution": f"{i} + 1 = {i + 1}"}
    kind = rng.choice(["ok"] * 5 + ["no_solution", "not_number", "no_answer", "not_json"])
    if kind == "no_solution":
      del row["solution"]
    elif kind == "not_number":
      row["answer"] = f"{i} apples and then some"
    elif kind == "no_answer":
      del row["answer"]
    if rng.random() < 0.2:
      lines.append("")                                    # blank lines count in the line numbers, not as rows
    lines.append("{not json" if kind == "not_json" else row)
    if kind != "ok":
      why[len(lines)] = kind
  path = _write(tmp_path / "data.jsonl", lines)
  config = _smoke_on(path)
  with pytest.raises(ValueError) as e:
    question_pool.load_task(config)
  message = str(e.value)
  assert message.startswith(f"{path}: line ") and "\n" not in message
  named = [int(n) for n in re.findall(r"(?:^|; )line (\d+)", message.split(": ", 1)[1])]
  assert len(why) > files.MAX_LINES_SHOWN and named == sorted(why)[:files.MAX_LINES_SHOWN]
  assert f"and {len(why) - files.MAX_LINES_SHOWN} more bad lines" in message
  for n in named:                                         # what each line lacks, in its words
    text = re.search(rf"(?:^|; )line {n}\b([^;]*)", message.split(": ", 1)[1]).group(1)
    assert {"no_solution": ": no 'solution'", "not_number": "is not a number", "no_answer": "needs a string",
            "not_json": "is not valid JSON"}[why[n]] in text, (n, why[n], text)
  # All of them, with the limit raised; skipping bad answers keeps the rows that are only that.
  monkeypatch.setattr(files, "MAX_LINES_SHOWN", 1000)
  with pytest.raises(ValueError) as e:
    question_pool.load_task(config)
  assert [int(n) for n in re.findall(r"(?:^|; )line (\d+)", str(e.value).split(": ", 1)[1])] == sorted(why)
  keep = [n for n, k in why.items() if k != "not_number"]
  only_numbers = _write(tmp_path / "numbers.jsonl", [l for n, l in enumerate(lines, 1) if n not in keep])
  config = _smoke_on(only_numbers, **{"task.skip_bad_answers": True})
  task = question_pool.load_task(config)
  assert [p.question for p in task.problems] == [l["question"] for n, l in enumerate(lines, 1)
                                                 if l and n not in why]
  # The trainer's configuration is named as its field; no context that shows a solution: no solution needed.
  config = _smoke_on(path := _write(tmp_path / "five.jsonl", ROWS))
  config.configurations = {"train": "self:summary:reverse_kl"}
  with pytest.raises(ValueError, match=r"line 3: no 'solution' \(needed on every line by config\.train\.configuration"
                                       r"\); line 5: answer 'abc' is not a number; 1 of 5 gold answers"):
    question_pool.load_task(config, {"train": "config.train.configuration"})
  config.configurations = {"plain": "self:plain:reverse_kl"}
  with pytest.raises(ValueError) as e:
    question_pool.load_task(config)
  assert "line 5: answer 'abc'" in str(e.value) and "solution" not in str(e.value)


def test_gsm8k_lines_are_named_by_line_not_row(tmp_path):
  from opd_jax import tasks  # pylint: disable=g-import-not-at-top
  path = _write(tmp_path / "gsm8k_test.jsonl", [{"question": "q0", "answer": "so\n#### 4"}, "",
                                                 {"question": "q1", "answer": "#### two"}, {"answer": "#### 3"},
                                                 {"question": "q3", "answer": "3"}])
  with pytest.raises(ValueError, match=r"gsm8k_test\.jsonl: line 4: no 'question'; line 5: no '#### <answer>' in "
                                       r"its 'answer'; expected GSM8K rows"):
    tasks.load_task("gsm8k", path=path)                 # the API's default leaves gold answers to check_answers
  with pytest.raises(ValueError, match=r"gsm8k_test\.jsonl: line 3: answer 'two' is not a number; line 4: no "
                                       r"'question'; line 5: no '#### <answer>' in its 'answer'; expected GSM8K"):
    tasks.load_task("gsm8k", path=path, bad_answers="refuse")
  with pytest.raises(ValueError, match=r"num_problems=9 \(config.task.num_problems\) asks for more than its 4 rows"):
    tasks.load_task("gsm8k", path=path, num_problems=9)
  _write(path, [{"question": "q0", "answer": "so\n#### 4"}, "", {"question": "q1", "answer": "#### two"}])
  assert [p.answer for p in tasks.load_task("gsm8k", path=path).problems] == ["4", "two"]
  assert [p.answer for p in tasks.load_task("gsm8k", path=path, bad_answers="skip").problems] == ["4"]
  with pytest.raises(ValueError, match=r"download it from https://github\.com/openai/grade-school-math.*"
                                       r"--config\.task\.path") as e:
    tasks.load_task("gsm8k")
  assert "shared" not in str(e.value)


def test_the_plan_says_when_the_pool_is_smaller_and_the_answer_stop_only_with_a_tag(tmp_path):
  from opd_jax.study import checklist  # pylint: disable=g-import-not-at-top
  from opd_jax.study import planning  # pylint: disable=g-import-not-at-top
  from opd_jax.study import question_pool  # pylint: disable=g-import-not-at-top
  from opd_jax.decode import stops  # pylint: disable=g-import-not-at-top
  rows = [dict(r, answer=str(2 * i + 2), solution="x") for i, r in enumerate(ROWS)]
  config = _smoke_on(_write(tmp_path / "five.jsonl", rows), **{"budget.questions": 10, "budget.stop_at_answer": True})
  task = question_pool.load_task(config)
  text = checklist.describe(config, task)
  assert ("task:     jsonl:numeric: 5 questions in the pool, fewer than config.budget.questions=10: at most 5 "
          "studied") in text
  five = _smoke_on(tmp_path / "five.jsonl", **{"budget.questions": 5, "budget.stop_at_answer": True})
  assert dataclasses.replace(planning.plan(config, task), design=()) == dataclasses.replace(
      planning.plan(five, task), design=())                # the pool bounds the plan as budget.questions=5 does
  saving = f"{stops.MEASURED_SAVING:.1%} of continuation tokens saved"
  assert task.answer_span is None and saving not in text and "stop_at_answer saves nothing here" in text
  tagged = dataclasses.replace(task, answer_span=("<answer>", "</answer>"))
  assert any(saving in line for line in planning.plan(config, tagged).design)
  assert any(saving in line for line in planning.plan(config).design)      # task unknown: as before


def test_the_cache_variable_naming_a_file_says_so(tmp_path, monkeypatch):
  from opd_jax.models import cache  # pylint: disable=g-import-not-at-top
  a_file = tmp_path / "cache"
  a_file.write_text("")
  for value, what in ((a_file, "it"), (a_file / "sub", str(a_file))):
    monkeypatch.setenv(cache.CACHE_ENV, str(value))
    with pytest.raises(ValueError) as e:
      cache.params_dir("0" * 64, None)
    assert str(e.value) == (f"OPD_JAX_CACHE={value}: {what} is a file, not a folder; point OPD_JAX_CACHE at a "
                            "folder (created if missing), or unset it for ~/.cache/opd_jax")
  monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "new" / "cache"))
  assert cache.cache_root() == tmp_path / "new" / "cache" and not (tmp_path / "new").exists()


def test_the_interrupted_line_says_what_is_left(tmp_path, monkeypatch):
  from opd_jax import main  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(main, "_under_way", None)
  monkeypatch.setattr(main, "_interrupted_line", None)
  monkeypatch.setattr(main.terminal, "INTERRUPTED_LINE", [])
  assert main.interrupted_line() == main.NOTHING_STARTED                # before any job began: nothing written
  work = tmp_path / "w"
  with pytest.raises(KeyboardInterrupt), main.failed_start_undone(work):
    work.mkdir()
    (work / "config.json").write_text("{}")
    raise KeyboardInterrupt
  assert not work.exists() and main.interrupted_line() == main.NOTHING_KEPT
  work.mkdir()
  (work / "log.txt").write_text("an earlier run\n")
  monkeypatch.setattr(main, "_interrupted_line", None)
  with pytest.raises(KeyboardInterrupt), main.failed_start_undone(work):
    (work / "log.txt").write_text("an earlier run\nthis run\n")
    (work / "config.json").write_text("{}")
    raise KeyboardInterrupt
  line = main.interrupted_line()
  assert (work / "log.txt").read_text() == "an earlier run\n" and sorted(p.name for p in work.iterdir()) == ["log.txt"]
  assert line == main.NOTHING_ADDED.format(work) and "workdir was removed" not in line
  # A forced exit (no clean-up runs): nothing finished names what is left; a progress file is finished work.
  monkeypatch.setattr(main, "_interrupted_line", None)
  monkeypatch.setattr(main, "_under_way", (work, main._files(work)))
  (work / "config.json").write_text("{}")
  (work / "lock.0.json").write_text("{}")
  assert main.interrupted_line() == main.NOTHING_FINISHED.format("config.json", work)
  (work / "progress.json").write_text("{}")
  assert main.interrupted_line() == main.INTERRUPTED


# ----------------------------------------------------------------------------------------------------------
# The command lines (one interpreter start; run in order: later cases use the workdir earlier ones left).

TINY = ["--config.task.num_problems=0", "--config.sampling.max_new_tokens=4", "--config.budget.rollouts_per_question=2",
        "--config.budget.node_rollouts_per_question=1", "--config.budget.questions=2",
        "--config.configurations={'p': 'self:plain:reverse_kl'}", "--config.logging.progress=False"]


def _cases(root: pathlib.Path) -> list[dict]:
  study = ["--config=configs/smoke.py", "--config.task.name=jsonl:numeric"]
  data, hard = root / "data.jsonl", root / "hard.jsonl"
  nothing = [*study, f"--config.task.path={hard}", f"--workdir={root / 'nothing'}", *TINY]
  case = lambda cid, argv, load=False, env=None: dict(id=cid, argv=argv, load=load, env=env or {})
  return [
      case("rows", [*study, f"--config.task.path={data}", f"--workdir={root / 'rows'}"]),
      case("rows-dry", [*study, f"--config.task.path={data}", f"--workdir={root / 'rows'}", "--dry_run"]),
      case("nothing", nothing, load=True),                 # random models never answer 987654321: none informative
      case("nothing-again", nothing, load=True),
      case("fix-dry", [*nothing, "--config.selection=all", "--dry_run"]),
      case("fix", [*nothing, "--config.selection=all"]),
      case("mesh-dry", [*study, f"--config.task.path={hard}", *TINY, "--config.mesh.data=0", "--dry_run",
                        f"--workdir={root / 'm'}"]),
      case("mesh", [*study, f"--config.task.path={hard}", *TINY, "--config.mesh.data=0", f"--workdir={root / 'm'}"]),
      case("other-dry", [*study, f"--config.task.path={hard}", "--config.task.num_problems=0", "--config.seed=3",
                         "--dry_run", f"--workdir={root / 'recorded'}"]),
      case("train-dry", [*study, f"--config.task.path={hard}", *TINY, "--dry_run", f"--workdir={root / 'train'}"]),
      case("new-dry", [*study, f"--config.task.path={hard}", *TINY, "--dry_run", f"--workdir={root / 'new' / 'w'}"]),
      case("interrupted", ["--config=configs/smoke.py", f"--workdir={root / 'has_log'}", "--config.logging.progress=False"],
           env={"interrupt": "1"}),
  ]


def _inputs(root: pathlib.Path) -> None:
  from configs import smoke  # pylint: disable=g-import-not-at-top
  _write(root / "data.jsonl", ROWS)
  _write(root / "hard.jsonl", [{"question": f"What is {i} + 1?", "answer": "987654321", "solution": "s"}
                               for i in range(2)])
  config = smoke.get_config()                               # as "other-dry" runs it, but for the seed
  config.task.name, config.task.path, config.task.num_problems = "jsonl:numeric", str(root / "hard.jsonl"), 0
  config.sampling.max_new_tokens = 256                      # what the task switch resets (overrides.switch_task)
  recorded = root / "recorded" / "records" / "nodes"
  recorded.mkdir(parents=True)
  (recorded / "part-q0.parquet").write_bytes(b"x")          # a question recorded: another config must not take it
  (root / "recorded" / "config.json").write_text(json.dumps(config.to_dict()))
  (root / "train" / "train").mkdir(parents=True)
  (root / "has_log").mkdir()
  (root / "has_log" / "log.txt").write_text("an earlier run\n")


def _snapshot(path: pathlib.Path) -> dict:
  return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def _refuse_load(*args, **kwargs):
  raise RuntimeError(NO_LOAD)


def _interrupted(*args, **kwargs):
  raise KeyboardInterrupt


def run_batch(root: pathlib.Path, results_path: pathlib.Path) -> None:
  from opd_jax import main  # pylint: disable=g-import-not-at-top,unused-import  (imported once, before the forks)
  from opd_jax.study import environment  # pylint: disable=g-import-not-at-top
  from opd_jax.study import pipeline  # pylint: disable=g-import-not-at-top
  from tests import cli_batch  # pylint: disable=g-import-not-at-top
  _inputs(root)
  results = {}
  for case in _cases(root):
    before = {d.name: _snapshot(d) for d in root.iterdir() if d.is_dir()}
    out = root / f"{case['id']}.json"
    pid = os.fork()
    if pid == 0:
      try:
        if not case["load"]:
          environment.load_model = _refuse_load
        if case["env"].get("interrupt"):
          pipeline.run = _interrupted
        out.write_text(json.dumps(cli_batch.run_cli(case["argv"])))
      finally:
        os._exit(0)
    os.waitpid(pid, 0)
    got = json.loads(out.read_text()) if out.is_file() else {"code": -2, "stderr": "child died"}
    got["before"] = {k: sorted(v) for k, v in before.items()}
    got["after"] = {d.name: sorted(_snapshot(d)) for d in root.iterdir() if d.is_dir()}
    got["unchanged"] = sorted(k for k, v in before.items() if (root / k).is_dir() and _snapshot(root / k) == v)
    results[case["id"]] = got
  results_path.write_text(json.dumps(results))


@pytest.fixture(scope="module")
def results(tmp_path_factory):
  root = tmp_path_factory.mktemp("first_hour_3")
  from tests import cli_batch  # pylint: disable=g-import-not-at-top
  return root, cli_batch.run_test_script(__file__, root)


def _line(got: dict, prefix: str = "error:") -> str:
  lines = [l for l in got["stderr"].splitlines() if l.startswith(("error:", "interrupted"))]
  assert len(lines) == 1 and lines[0].startswith(prefix) and "Traceback" not in got["stderr"], got["stderr"][-2000:]
  return lines[0]


def test_the_bad_rows_fail_in_one_line_before_anything_and_the_dry_run_agrees(results):
  root, got = results
  line = _line(got["rows"])
  assert got["rows"]["code"] == 2 and line.startswith(f"error: {root}/{ROWS_ERROR}")
  assert "num_problems=12 (config.task.num_problems) asks for more than its 5 rows" in line   # smoke's 12, too
  assert got["rows-dry"]["code"] == 2 and _line(got["rows-dry"]) == line and not (root / "rows").exists()


def test_a_run_that_recorded_nothing_leaves_a_workdir_its_fix_runs_in(results):
  root, got = results
  informative = "error: no question of the pool (2) was informative"
  assert got["nothing"]["code"] == 2 and _line(got["nothing"]).startswith(informative)
  assert got["nothing"]["after"]["nothing"] == ["config.json", "log.txt", "progress.json"]    # no manifest: not done
  again = got["nothing-again"]
  assert again["code"] == 2 and _line(again).startswith(informative) and "complete:" not in again["stderr"]
  fix_dry = got["fix-dry"]                                  # another config: planned, and nothing written
  assert fix_dry["code"] == 0 and "planned: 2 questions" in fix_dry["stdout"] and "nothing" in fix_dry["unchanged"]
  fix = got["fix"]                                          # taken over, up to the model load (refused here)
  assert _line(fix) == f"error: {NO_LOAD}" and (f"note: --workdir={root / 'nothing'} held a run of another config "
                                                "that recorded no question") in fix["stderr"]
  assert "replaces its config.json, progress.json" in fix["stderr"] and fix["after"]["nothing"] == ["log.txt"]


def test_the_dry_run_refuses_what_the_run_refuses_and_writes_nothing(results):
  root, got = results
  mesh = "mesh data (config.mesh.data) must be a positive int or -1"
  assert got["mesh-dry"]["code"] == 2 and mesh in _line(got["mesh-dry"])
  assert got["mesh"]["code"] == 2 and mesh in _line(got["mesh"]) and not (root / "m").exists()   # before the load
  other = _line(got["other-dry"])
  assert "holds a run of a different config (fields differ: config.seed: 0 -> 3)" in other
  assert "holds a train run and this is a study run" in _line(got["train-dry"])
  assert {"recorded", "train"} <= set(got["train-dry"]["unchanged"]) and "recorded" in got["other-dry"]["unchanged"]
  assert got["new-dry"]["code"] == 0 and not (root / "new").exists()


def test_an_interrupt_in_a_workdir_that_existed_does_not_say_it_was_removed(results):
  root, got = results
  line = _line(got["interrupted"], "interrupted:")
  assert got["interrupted"]["code"] == 130 and line.startswith("interrupted: nothing had finished, so what this run "
                                                              f"wrote in --workdir={root / 'has_log'} was removed")
  assert (root / "has_log" / "log.txt").read_text() == "an earlier run\n" and "has_log" in got["interrupted"]["unchanged"]


if __name__ == "__main__":
  run_batch(pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]))
