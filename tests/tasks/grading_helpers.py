"""Functions a grading worker runs in tests (importable by module name, as `grading.in_worker` requires)."""
import os
import threading


def echo(value):
  """Returns its argument."""
  return value


def block():
  """Never returns: a grade that cannot finish (a power tower, without the CPU)."""
  threading.Event().wait()


def fail(message: str):
  """Raises ValueError(message): a grader's own error."""
  raise ValueError(message)


def die():
  """Ends the worker process at once, as a crash would."""
  os._exit(3)  # pylint: disable=protected-access
