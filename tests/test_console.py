"""One console (issue 27, items 5 and 8): a task switch does not keep the config's template and token cap, the
dry run shows them, bars follow config.logging.progress in every job, INFO lines go to <workdir>/log.txt, the
libraries' startup chatter is silenced, the report CLI prints the verdict and the table, summary.md starts
with the verdict."""
import io
import json
import logging as pylogging
import os
import pathlib
import re
import subprocess
import sys
import threading
import types

import pandas as pd
import pytest
from absl import logging

from configs import base
from configs import opd_train
from configs import teacher_sweep
from opd_jax.study import checklist
from opd_jax import overrides
from opd_jax import terminal
from opd_jax.report import console
from opd_jax.training import loop
from tests import cli_batch
from tests.report import test_report

REPO = pathlib.Path(__file__).resolve().parents[1]
ABSL_PREFIX = re.compile(r"^[IWE]\d{4} ", re.M)


@pytest.fixture(autouse=True)
def _restore_console():
  yield
  terminal.detach_log()
  terminal.ENABLED = True


def test_switch_task_resets_what_the_config_chose_for_its_own_task():
  config, defaults = teacher_sweep.get_config(), base.get_config()
  own = config.task.name
  assert config.task.template and config.sampling.max_new_tokens == 16      # what would carry over
  config.task.name = "gsm8k"
  note = overrides.switch_task(config, own, overrides={"task.name": "gsm8k"})
  assert config.task.template == defaults.task.template == ""
  assert config.sampling.max_new_tokens == defaults.sampling.max_new_tokens == 256
  assert note.startswith("note: ") and "\n" not in note and "(was 16)" in note and "--config.task.template" in note
  # Fields set on the command line are the user's: kept, and the note names only the other one.
  config = teacher_sweep.get_config()
  config.task.name, config.task.template = "gsm8k", "{question} Answer:"
  note = overrides.switch_task(config, own, overrides={"task.name", "task.template"})
  assert config.task.template == "{question} Answer:" and config.sampling.max_new_tokens == 256
  assert "config.task.template=" not in note and "config.sampling.max_new_tokens=256" in note
  # The config's own task (or a variant that sets both itself): nothing changes.
  config = teacher_sweep.get_config("gsm")
  assert overrides.switch_task(config, config.task.name, overrides={}) is None and config.sampling.max_new_tokens == 256


def test_dry_run_of_a_task_switch_prints_the_template_and_the_cap():
  # The arithmetic config switched to the parity task: its 16-token cap and <answer> template must not show.
  argv = ["--config=configs/teacher_sweep.py", "--config.task.name=synthetic:parity", "--config.task.num_problems=5",
          "--config.student.name=random:0", "--config.configurations={'s': 'self:solution:reverse_kl'}",
          "--dry_run"]
  got = cli_batch.run_case({"argv": argv})
  assert got["code"] == 0, got["stderr"]
  out, err = got["stdout"], got["stderr"]
  assert [l for l in err.splitlines() if l.startswith("note: ")] == [l for l in err.splitlines() if l.strip()]
  assert "config.sampling.max_new_tokens=256 (was 16)" in err and "<answer>" not in out
  task = __import__("opd_jax.tasks", fromlist=["x"]).load_task("synthetic:parity", num_problems=5, seed=0)
  assert f"prompt:   '{checklist.clip(task.prompt(task.problems[0]))}'" in out     # the rendered first question
  assert ("task:     synthetic:parity: 5 questions in the pool, fewer than config.budget.questions=10: at most 5 "
          "studied" in out and "planned: 5 questions" in out)      # the pool bounds the plan (issue 50, item 5)
  assert "max_new_tokens=256; contexts: student 4096 tokens" in out and "memory:   ~ " in out
  assert "R = 4 continuations/candidate" in out and "estimated wall time" in out
  # With the template and cap set too, nothing is reset and no note prints.
  got = cli_batch.run_case({"argv": [*argv, "--config.task.template={question}\nAnswer!",
                                     "--config.sampling.max_new_tokens=9"]})
  assert got["code"] == 0 and "note:" not in got["stderr"] and "max_new_tokens=9;" in got["stdout"]
  assert "odd.\\nAnswer!' (question 1" in got["stdout"]          # a newline reads \n (issue 35, item 7), not \\n


def test_clip_keeps_both_ends_on_one_line():
  text = "Q" * 300 + "\nPut the answer in tags."
  got = checklist.clip(text, 60)
  assert len(got) == 60 and got.startswith("Q" * 27) and got.endswith("answer in tags.") and "\n" not in got


def test_console_sends_info_to_the_log_file_and_warnings_between_bars(tmp_path, capsys):
  terminal.console(progress=False)
  logging.info("before the log file")
  path = terminal.attach_log(tmp_path)
  logging.info("stage x: 1.0 s")
  logging.warning("few questions were informative")
  pylogging.getLogger("jax._src.xla_bridge").info("Unable to initialize backend 'tpu': INTERNAL: no libtpu.so")
  pylogging.getLogger("jax._src.xla_bridge").warning("a real JAX warning")
  with terminal.bar("report"), terminal.bar("scoring", total=3) as b:
    b.update(1)
  terminal.detach_log()
  err = capsys.readouterr().err
  assert err.splitlines() == ["warning: few questions were informative", "warning: a real JAX warning"]
  assert not ABSL_PREFIX.search(err)
  log = path.read_text()
  for line in ("before the log file", "stage x: 1.0 s", "report: ", "scoring: ", "a real JAX warning"):
    assert line in log
  assert "Unable to initialize backend" not in log and len(ABSL_PREFIX.findall(log)) == log.count("\n")


def test_bars_follow_the_progress_flag(capsys):
  terminal.console(progress=True)
  with terminal.bar("report"):
    pass
  err = capsys.readouterr().err
  assert re.fullmatch(r"report: \d+\.\d s\n", err)                # a bar without a total shows the time only
  terminal.console(progress=False)
  with terminal.bar("report"), terminal.bar("scoring", total=3) as b:
    b.update(3)
  assert capsys.readouterr().err == ""


class _Terminal(io.StringIO):
  def isatty(self):
    return True


def test_stderr_in_a_file_gets_one_line_per_stage_and_a_terminal_gets_bars(monkeypatch, capsys):
  """Issue 35, item 7: not a terminal, each stage prints one line when it ends, with its count and its measured
  time (no cursor codes, no bar drawn twice), a question block's stages indented under it; on a terminal tqdm draws, and a last line starts below a bar."""
  terminal.console(progress=True)
  clock = [1000.0]                                          # the stages' clock, advanced by hand: no host timing
  monkeypatch.setattr(terminal, "time", types.SimpleNamespace(time=lambda: clock[0]))
  with terminal.bar("questions", total=3, unit="q", initial=1, fill=False, leave=True) as q:
    clock[0] += 0.5
    with terminal.bar("loading models"):
      clock[0] += 2.0
    with terminal.bar("assembling x", total=2_000_000, unit="B", unit_scale=True) as b:
      b.update(1_000_000)                                   # filled to the total on a normal exit
      clock[0] += 1.5
    q.update(1)
  lines = capsys.readouterr().err.splitlines()
  assert lines == ["  loading models: 2.0 s", "  assembling x: 2.00MB in 1.5 s",    # inner ones indented
                   "questions: 2 questions in 4.0 s"]       # each stage's own time, not 00:00 nor its parent's
  with pytest.raises(KeyboardInterrupt), terminal.bar("scoring", total=3):
    raise KeyboardInterrupt                                 # an interrupted stage prints no line of its own
  assert capsys.readouterr().err == ""
  with terminal.bar("report"):
    pass
  assert capsys.readouterr().err.startswith("report: ")     # back at the top level after the interrupted stage
  tty = _Terminal()
  monkeypatch.setattr(sys, "stderr", tty)
  with terminal.bar("scoring", total=3) as b:
    b.update(1)
    terminal.last_line("interrupted: x")                      # as the interrupt thread prints it over a bar
  drawn = tty.getvalue()
  assert "scoring:" in drawn and "\ninterrupted: x\n" in drawn and not drawn.startswith("interrupted")


def test_a_bar_without_a_total_is_redrawn_while_its_stage_runs():
  """tqdm redraws on update only: the ticker redraws an elapsed-time bar until its stage ends (issue 35, item 7)."""
  redrawn = threading.Semaphore(0)
  fake = type("Bar", (), {"desc": "loading models", "refresh": lambda self: redrawn.release()})()
  stop = terminal._ticker(fake, every_s=0.01)  # pylint: disable=protected-access
  assert redrawn.acquire(timeout=60) and redrawn.acquire(timeout=60)       # redrawn, and again
  stop.set()


def test_the_trainer_honours_progress_false(monkeypatch, tmp_path):
  config = opd_train.get_config("smoke")
  with config.unlocked():
    config.logging.progress = False
  terminal.ENABLED = True

  def stop(*args, **kwargs):
    raise RuntimeError("stop before the models load")
  monkeypatch.setattr(loop.environment, "setup", stop)
  with pytest.raises(RuntimeError, match="stop before"):
    loop.run(config, str(tmp_path))
  assert terminal.ENABLED is False


def test_startup_chatter_is_silenced_and_real_warnings_are_not():
  code = ("import opd_jax.terminal as s; s.console(progress=False); import transformers, jax; jax.devices(); "
          "from absl import logging; logging.warning('kept')")
  for argv in (["-c", code],):
    run = subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True, timeout=60,
                         check=False, env={**os.environ, "JAX_PLATFORMS": ""})
    assert run.returncode == 0, run.stderr
    assert "PyTorch was not found" not in run.stderr and "Unable to initialize backend" not in run.stderr
    assert run.stderr.splitlines() == ["warning: kept"]


def test_report_cli_prints_the_verdict_and_the_table_and_names_the_files(tmp_path):
  workdir = tmp_path / "run"
  test_report.write_parts(test_report.synthetic_nodes(), workdir)
  (workdir / "config.json").write_text(json.dumps({"name": "smoke", "logging": {"progress": False}}))
  run = subprocess.run([sys.executable, "-m", "opd_jax.report", f"--workdir={workdir}", "--n_boot=50", "--nohtml",
                        "--noplot"], cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
  assert run.returncode == 0, run.stderr
  lines = run.stdout.splitlines()
  assert len(lines) < 60 and run.stdout.strip() == console.results_text(workdir)
  verdict = json.loads((workdir / "verdict.json").read_text())["line"]
  assert lines[0] == verdict and f"summary: {workdir / 'summary.md'}" in lines[-1]
  assert not ABSL_PREFIX.search(run.stderr) and "it/s" not in run.stderr
  markdown = (workdir / "summary.md").read_text()
  headings = [l for l in markdown.splitlines() if l.startswith("#")]
  assert headings[0] == "# opd_jax summary: smoke" and headings[1] == "## Verdict" and headings[-1] == "## Run"
  assert markdown.index("`name`: smoke") > markdown.index("## Run")              # the config last


def test_stage_lines_read_as_words():
  """Units in a stage's line (issue 50, item 8: "10 view", "491M B"): plural words, SI prefixes on bytes."""
  from opd_jax import terminal  # pylint: disable=g-import-not-at-top
  assert terminal.stage_line("assembling m", 1.84, 491e6, "B", True) == "assembling m: 491MB in 1.8 s"
  assert terminal.stage_line("scoring", 3.0, 10, "view") == "scoring: 10 views in 3.0 s"
  assert terminal.stage_line("scoring", 3.0, 1, "view") == "scoring: 1 view in 3.0 s"
  assert terminal.stage_line("base rollouts", 3.0, 3744, "tok") == "base rollouts: 3,744 tokens in 3.0 s"
  assert terminal.stage_line("questions", 69.5, 3, "q") == "questions: 3 questions in 69.5 s"     # not "3 q"
  assert terminal.stage_line("questions", 9.5, 1, "q") == "questions: 1 question in 9.5 s"


def test_help_exits_zero_and_every_other_exit_passes_through():
  """absl's --help prints the flags and exits 1; asked for, it is a success (exit 0) in both CLIs. A help flag
  asked for is recognised in its spellings; another exit keeps its code."""
  for argv, code, want in ((["p", "--help"], 1, 0), (["p", "-?"], 1, 0), (["p", "--helpfull"], 1, 0),
                           (["p", "--help=true"], 1, 0), (["p", "--config=x"], 1, 1), (["p", "--help"], 2, 2),
                           (["p", "--helper"], 1, 1), (["--help"], 1, 1)):   # argv[0] is the program, not a flag
    with pytest.raises(SystemExit) as e:
      with terminal.help_exits_zero(argv):
        sys.exit(code)
    assert e.value.code == want, (argv, code)
  for module, first in (("opd_jax.main", "Run a study:"), ("opd_jax.report", "python -m opd_jax.report")):
    run = subprocess.run([sys.executable, "-m", module, "--help"], cwd=REPO, capture_output=True, text=True,
                         timeout=60, check=False)
    assert run.returncode == 0 and run.stdout.startswith(first), (module, run.returncode, run.stderr[-300:])
    assert "--workdir" in run.stdout


def test_the_verdicts_means_are_printed_where_its_group_is_not_a_table_row(tmp_path):
  """The default study's committed verdict (target "trained": each question's groups weighed by its success rate)
  ranks on means that no row of summary.csv holds: the console prints them, from verdict.json's ranking, before the
  table; for a verdict on a group the table has (incorrect), no such line."""
  data = REPO / "docs" / "data" / "default_study"
  for name in ("verdict.json", "summary.csv"):
    (tmp_path / name).write_text((data / name).read_text())
  verdict = json.loads((data / "verdict.json").read_text())
  assert verdict["target"] == "trained" and "trained" not in set(pd.read_csv(data / "summary.csv").group)
  lines = console.results_text(tmp_path).splitlines()
  means = [l for l in lines if l.startswith("the verdict's means ")]
  assert len(means) == 1 and lines.index(means[0]) < lines.index(next(l for l in lines if l.startswith("config_id")))
  got = re.findall(r"(\w+) (-?\d\.\d{3}) \[(-?\d\.\d{3}), (-?\d\.\d{3})\]", means[0])
  assert [g[0] for g in got] == [r["config_id"] for r in verdict["ranking"]]
  for g, r in zip(got, verdict["ranking"]):
    assert [float(x) for x in g[1:]] == [round(r[k], 3) for k in ("mean_alignment", "ci_lo", "ci_hi")]
  assert "on all nodes as training weighs them (95% cluster bootstrap over questions)" in means[0]
  # A configuration with no defined alignment (JSON null, as verdict.json writes NaN) reads n/a, not a crash.
  empty = {**verdict["ranking"][-1], "mean_alignment": None, "ci_lo": None, "ci_hi": None}
  (tmp_path / "verdict.json").write_text(json.dumps({**verdict, "ranking": verdict["ranking"][:-1] + [empty]}))
  assert console.verdict_means(json.loads((tmp_path / "verdict.json").read_text()), pd.read_csv(
      tmp_path / "summary.csv")).endswith(f", {empty['config_id']} n/a; the table below: unweighted means by node group")
  (tmp_path / "verdict.json").write_text(json.dumps({**verdict, "target": "incorrect"}))
  assert not any(l.startswith("the verdict's means") for l in console.results_text(tmp_path).splitlines())
