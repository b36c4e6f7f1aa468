"""Grading off the main thread (issue 34, item 1): a deadline per grade from its start in a worker, a timeout
that fails that grade alone, workers that never import the caller's `__main__`, and every grade that timed out
or failed counted (opd_jax/tasks/grading.py). Outcomes are asserted, never durations: a slow answer is one that
never finishes (a power tower, or `grading_helpers.block`), so its timeout is the only path it can take."""
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import grading_helpers
import math_verify
from math_verify import errors
import pytest

from opd_jax.report import console
from opd_jax.tasks import answers
from opd_jax.tasks import grading

REPO = pathlib.Path(__file__).resolve().parents[2]
TOWER = "9^{9^{9^{9}}}"     # math-verify never finishes it: sympy computes 9^(9^(9^9)) in C, the GIL held


@pytest.fixture
def fresh_workers():
  """No worker left by another test (each test sets its own pool size, deadline and preloads)."""
  grading._stop_workers()  # pylint: disable=protected-access
  yield
  grading._stop_workers()  # pylint: disable=protected-access


def test_a_script_without_a_main_guard_grades_slow_and_easy_answers_from_threads(tmp_path):
  """The issue's two cases in one script without `if __name__ == "__main__"`: 2 answers that never finish, then 6
  that finish at once, from 8 threads on 2 workers. The 2 time out and are counted; the 6 are graded as the main
  thread grades them; the script's top level runs once. Before: multiprocessing's spawn re-ran the top level in
  its worker (pyBKT-examples#2), and the pool's deadline counted from submission, one timeout ending the whole
  queue, so the 6 easy answers came back False (verl PR#5839)."""
  easy = [("2", "2"), ("\\frac{1}{2}", "0.5"), ("3", "\\frac{6}{2}"), ("2", "3"), ("0.5", "\\frac{2}{4}"),
          ("10", "10\\%")]
  on_main = [answers.math_equal(gold, pred) for gold, pred in easy]        # the reference: no worker, no deadline
  runs = tmp_path / "runs.txt"
  script = tmp_path / "grade_in_threads.py"
  script.write_text(textwrap.dedent(f"""\
      import json, threading
      with open({str(runs)!r}, "a") as f:           # the script's top level: runs once
        f.write("run\\n")
      from opd_jax.tasks import answers, grading
      grading.MAX_WORKERS, grading.DEADLINE_S = 2, 1.5      # a deadline < the wait behind a slow answer
      calls = [("1", {TOWER!r})] * 2 + {easy!r}
      got = [None] * len(calls)
      def grade(i):
        got[i] = answers.math_equal(*calls[i])
      threads = [threading.Thread(target=grade, args=(i,)) for i in range(len(calls))]
      for t in threads:
        t.start()
      for t in threads:
        t.join()
      print(json.dumps({{"got": got, "failures": grading.failures()}}))
      """))
  env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
  out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, env=env,
                       check=False)
  assert out.returncode == 0, out.stderr[-2000:]
  result = json.loads(out.stdout.splitlines()[-1])
  assert result["got"] == [False, False] + on_main and on_main == [True, True, True, False, True, True], result
  assert result["failures"] == {"timed_out": 2, "errored": 0}
  assert runs.read_text() == "run\n"


def test_errors_lost_workers_and_timeouts_are_counted_and_the_next_grade_works(monkeypatch, fresh_workers):
  """A grader's error keeps its worker; a worker that dies or runs past the deadline is replaced; each such grade
  returns its failure value and is counted once."""
  monkeypatch.setattr(grading, "PRELOAD", ())       # helpers only: no math-verify to import
  monkeypatch.setattr(grading, "MAX_WORKERS", 1)
  before = grading.failures()
  run = lambda fn, *args, **kw: grading.in_worker(fn, *args, failed="failed", what=fn.__name__, **kw)
  got = [run(grading_helpers.echo, 5), run(grading_helpers.fail, "bad"), run(grading_helpers.echo, 6),
         run(grading_helpers.die), run(grading_helpers.block, deadline=0.5), run(grading_helpers.echo, 7)]
  assert got == [5, "failed", 6, "failed", "failed", 7]
  assert grading.since(before) == {"grades_timed_out": 1, "grades_errored": 2}
  with pytest.raises(Exception):                    # a lambda cannot reach a worker: the caller's error
    grading.in_worker(lambda: 1, failed=None, what="lambda")


def test_main_thread_failures_are_counted_and_warned_about(monkeypatch):
  """On the main thread math-verify's own timeout and errors were a silent False; now each is counted, and a
  run's counts (manifest.json work) give the console and summary.md warning."""
  def raises(*a, **k):
    raise RuntimeError("boom")

  def times_out(*a, **k):
    raise errors.TimeoutException("slow")

  before = grading.failures()
  assert answers.math_equal("2", "2") and grading.since(before) == {"grades_timed_out": 0, "grades_errored": 0}
  monkeypatch.setattr(math_verify, "verify", raises)
  assert answers.math_equal("2", "2") is False
  monkeypatch.setattr(math_verify, "parse", times_out)
  assert answers.parse_math("3") == [] and answers.math_equal("2", "2") is False
  work = grading.since(before)
  assert work == {"grades_timed_out": 2, "grades_errored": 1}
  assert console.grading_warning(work).startswith("WARNING: 2 grade(s) timed out and 1 failed")
  assert console.grading_warning({"grades_timed_out": 0, "grades_errored": 0}) is None
  assert console.grading_warning({}) is None                  # a run from before the counts
