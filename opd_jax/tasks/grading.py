"""Grades that can neither hang nor vanish: a deadline per grade off the main thread, every failure counted.

math-verify times out by SIGALRM, which only the main thread may set, and a thread cannot be stopped (a power
tower `9^{9^{9^{9}}}` computes in C with the GIL held, math-verify#65). So `answers.math_equal` and
`answers.parse_math` called from another thread run here (`in_worker`), on the main thread of a worker process
that can be killed:

- Workers are `python -c` subprocesses (POSIX: inherited pipe descriptors, `resource`) that import this module
  and the graded function's module, talking over two pipes. They never import the caller's `__main__`:
  multiprocessing's spawn re-runs a script that lacks an `if __name__ == "__main__"` guard in every worker
  (pyBKT-examples#2, conductor python-sdk#489).
- Up to MAX_WORKERS workers, each grading one answer at a time; a grade waits for a free worker, and its deadline
  (DEADLINE_S) counts from when its worker starts it, never from when it was requested, so grades queued behind a
  slow one keep their whole deadline (a deadline from submission failed them: verl PR#5839, AReaL PR#1426).
- A grade past its deadline fails alone: its worker is killed, the grade returns its failure value (not
  credited), and the grades waiting go to the other workers or to a fresh one (a worker starts in ~1 s, outside
  any deadline). A worker also holds a CPU-time limit a little above its grade's deadline, so that one left
  computing by a killed parent ends by itself.

Counted (`failures`, a process-wide tally; logged as an absl warning naming the answer each time): a grade that
timed out (its deadline here, or math-verify's own 5 s alarm on a main thread, inside a worker or not), and one
that raised (math-verify's error, a worker that died or did not start). Such a grade is 0 in the records, as it
always was, but never silently: the study adds the counts to manifest.json ("work": grades_timed_out,
grades_errored) and warns on the console and in summary.md (`report.console.grading_warning`).
"""
import atexit
import os
import pickle
import subprocess
import sys
import threading

from absl import logging

DEADLINE_S = 10.0      # seconds one grade may take in a worker, counted from its start there
MAX_WORKERS = 2        # worker processes at once (each ~100 MB with sympy and math-verify)
START_S = 300.0        # the most a worker may take to start (imports; a loaded machine), not part of a deadline
PRELOAD = ("math_verify",)   # imported (math-verify: and its parser set up) before a worker is ready
KINDS = ("timed_out", "errored")

_COUNTS = dict.fromkeys(KINDS, 0)
_COUNTS_LOCK = threading.Lock()


def failures() -> dict[str, int]:
  """The grades of this process that timed out or errored so far: {"timed_out": n, "errored": m}."""
  with _COUNTS_LOCK:
    return dict(_COUNTS)


def since(before: dict[str, int]) -> dict[str, int]:
  """The failures counted after the snapshot `before` (`failures()`), named as manifest.json's "work" counts:
  {"grades_timed_out": n, "grades_errored": m}."""
  now = failures()
  return {f"grades_{k}": now[k] - before.get(k, 0) for k in KINDS}


def count(kind: str, what: str) -> None:
  """Counts one grade that failed (`kind`: "timed_out" or "errored") and logs a warning naming `what`."""
  _add({kind: 1})
  logging.warning("grading: %s %s; graded 0 (counted: grading.failures())", what,
                  "timed out" if kind == "timed_out" else "failed")


def _add(amounts: dict[str, int]) -> None:
  with _COUNTS_LOCK:
    for k in KINDS:
      _COUNTS[k] += int(amounts.get(k, 0))


def describe(answer) -> str:
  """A short printable form of an answer for a warning (at most 80 characters)."""
  text = repr(answer)
  return text if len(text) <= 80 else text[:77] + "..."


# ----- the workers -----

class _Lost(Exception):
  """A worker that died, closed its pipe, or sent nothing in time."""


class _Late(_Lost):
  """A worker alive that sent nothing in time."""


class _Worker:
  """One worker process and its two pipes (requests in, replies out)."""

  def __init__(self):
    from multiprocessing import connection  # pylint: disable=g-import-not-at-top
    request_r, request_w = os.pipe()
    reply_r, reply_w = os.pipe()
    paths = [p or os.getcwd() for p in sys.path]              # the caller's imports resolve alike in the worker
    code = (f"import sys; sys.path[:0] = {paths!r}; from opd_jax.tasks import grading; "
            f"grading._serve({request_r}, {reply_w}, {tuple(PRELOAD)!r})")
    try:
      self.process = subprocess.Popen([sys.executable, "-c", code], pass_fds=(request_r, reply_w),
                                      stdin=subprocess.DEVNULL)
    finally:
      os.close(request_r)
      os.close(reply_w)
    self.requests = connection.Connection(request_w, readable=False)
    self.replies = connection.Connection(reply_r, writable=False)

  def receive(self, timeout: float):
    """The worker's next message; _Late when it sent nothing within `timeout` seconds, _Lost when it died."""
    try:
      if not self.replies.poll(timeout):
        raise _Late(f"no reply within {timeout:g} s")
      return self.replies.recv()
    except (EOFError, OSError) as e:
      raise _Lost(f"worker exited ({type(e).__name__})") from None

  def kill(self) -> None:
    for pipe in (self.requests, self.replies):
      pipe.close()
    if self.process.poll() is None:
      self.process.kill()
    self.process.wait()


_IDLE: list[_Worker] = []
_ALL: set[_Worker] = set()
_POOL = threading.Condition()


def _acquire() -> _Worker | None:
  """An idle worker, else a new one while fewer than MAX_WORKERS exist, else the next one freed; None (counted)
  when a new worker does not start."""
  with _POOL:
    while not _IDLE and len(_ALL) >= MAX_WORKERS:
      _POOL.wait()
    if _IDLE:
      return _IDLE.pop()
    worker = None
    try:
      worker = _Worker()
      _ALL.add(worker)
    except OSError as e:
      count("errored", f"a grading worker could not be started ({e})")
      return None
  try:
    if worker.receive(START_S) != ("ready", None):
      raise _Lost("unexpected first message")
    return worker
  except _Lost as e:
    _release(worker, keep=False)
    count("errored", f"a grading worker did not start ({e})")
    return None


def _release(worker: _Worker, *, keep: bool) -> None:
  """Back to the idle workers (keep), or killed and dropped, freeing its place for a fresh one."""
  with _POOL:
    keep = keep and worker in _ALL                        # not one stopped meanwhile (`_stop_workers`)
    if keep:
      _IDLE.append(worker)
    else:
      _ALL.discard(worker)
    _POOL.notify()
  if not keep:
    worker.kill()


@atexit.register
def _stop_workers() -> None:
  """Kills every worker (at exit: one stuck in a grade would outlive this process, until its CPU-time limit)."""
  with _POOL:
    workers = list(_ALL)
    _ALL.clear()
    _IDLE.clear()
  for worker in workers:
    worker.kill()


def in_worker(fn, *args, failed, what: str, deadline: float | None = None):
  """fn(*args) on the main thread of a worker process, in at most `deadline` seconds from its start there.

  Args:
    fn: a module-level function (pickled by reference: the worker imports its module, never `__main__`'s).
    args: picklable arguments; the result must be picklable too.
    failed: what a grade that times out or raises returns (not credited: False, or an empty parse).
    what: the answer graded, as the warning names it.
    deadline: seconds; None: DEADLINE_S (read at the call).
  Returns:
    fn(*args), or `failed` when it ran past its deadline (its worker killed; queued grades go on in the other
    workers or a fresh one), raised, or its worker died; each such grade counted (`failures`) and logged.
  Raises:
    pickle.PicklingError (and the like): `fn` or `args` cannot be sent (a lambda, a local function).
  """
  deadline = DEADLINE_S if deadline is None else deadline
  payload = pickle.dumps((fn, args, deadline))
  worker = _acquire()
  if worker is None:
    return failed
  keep = False
  try:
    worker.requests.send_bytes(payload)
    if worker.receive(START_S) != ("started", None):
      raise _Lost("unexpected message")
    try:
      tag, value, counted = worker.receive(deadline)
    except _Late:
      count("timed_out", f"{what} (deadline {deadline:g} s)")
      return failed
    keep = True
    _add(counted)                                         # math-verify's own timeouts inside the worker
    if tag == "raised":
      count("errored", f"{what} ({value})")
      return failed
    return value
  except (_Lost, OSError) as e:
    count("errored", f"{what} (grading worker lost: {e})")
    return failed
  finally:
    _release(worker, keep=keep)


def _serve(request_fd: int, reply_fd: int, preload: tuple[str, ...]) -> None:
  """A worker's loop: the imports a grade needs, "ready", then per request "started" and (tag, value, counted)."""
  import importlib  # pylint: disable=g-import-not-at-top
  import resource  # pylint: disable=g-import-not-at-top
  from multiprocessing import connection  # pylint: disable=g-import-not-at-top
  requests = connection.Connection(request_fd, writable=False)
  replies = connection.Connection(reply_fd, readable=False)
  for name in preload:                                    # before "ready": no deadline pays for imports
    try:
      module = importlib.import_module(name)
      if name == "math_verify":
        module.parse("$1$")                               # its parser's lazy set-up
    except ImportError:
      pass
  replies.send(("ready", None))
  while True:
    try:
      message = requests.recv_bytes()
    except (EOFError, OSError):                           # the parent closed its end, or died
      return
    try:
      fn, args, deadline = pickle.loads(message)          # imports fn's module: before "started", off the clock
      unpickled = None
    except Exception as e:  # pylint: disable=broad-except
      unpickled = f"request not readable: {type(e).__name__}: {e}"
    replies.send(("started", None))
    before = failures()
    try:
      if unpickled:
        raise RuntimeError(unpickled)
      used = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
      _, hard = resource.getrlimit(resource.RLIMIT_CPU)
      soft = int(used + 2 * deadline + 30)
      if hard == resource.RLIM_INFINITY or soft < hard:   # an orphan left computing ends by itself (SIGXCPU)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
      reply = ("done", fn(*args))
    except Exception as e:  # pylint: disable=broad-except  (reported to the caller, which counts it)
      reply = ("raised", f"{type(e).__name__}: {e}")
    counted = {k: v - before[k] for k, v in failures().items()}
    try:
      replies.send((*reply, counted))
    except Exception as e:  # pylint: disable=broad-except  (an unpicklable result)
      replies.send(("raised", f"result not sendable: {type(e).__name__}: {e}", counted))
