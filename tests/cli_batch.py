"""Runs many `python -m opd_jax.main` command lines from ONE interpreter start (the bad-input table of
test_study.py).

  python tests/cli_batch.py cases.json results.json

cases.json: a list of {"argv": [...], "interrupt": bool, "no_presets": bool, "env": {name: value}}; results.json:
per case {"code", "stdout", "stderr"}.
The modules are imported once; each case runs `opd_jax.main` as the command line would, in a forked child (absl
and ml_collections flags cannot be parsed twice in one process). "interrupt" makes the study raise
KeyboardInterrupt (what SIGINT raises) as soon as it starts; "no_presets" runs it as on a machine where no preset's
weight packages are installed (whatever this one has); "env" sets environment variables in the child.
"""
import contextlib
import importlib
import importlib.util
import io
import json
import os
import pathlib
import subprocess
import sys
import tempfile

from opd_jax import main as cli
from opd_jax import terminal
from opd_jax.study import pipeline


def _interrupted(*args, **kwargs):
  raise KeyboardInterrupt


def run_cli(argv: list[str], module: str = "main") -> dict:
  """One command line of `opd_jax.main` (or of `opd_jax.report` with module "report") in this process, as the
  shell would run it: {"code", "stdout", "stderr"}; an uncaught exception is code -1 with a "Traceback" line."""
  out, err, code = io.StringIO(), io.StringIO(), 0
  sys.argv = [f"opd_jax.{module}", *argv]            # ml_collections reads the overrides from sys.argv
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    try:
      if module == "report":
        from absl import flags  # pylint: disable=g-import-not-at-top
        delattr(flags.FLAGS, "workdir")                # main's flag; the report CLI defines its own
        report_cli = importlib.import_module("opd_jax.report.__main__")
        report_cli.main(terminal.parse_flags(sys.argv))
      else:
        cli.main(cli.parse_flags(sys.argv))
    except SystemExit as e:
      code = e.code if isinstance(e.code, int) else 1
    except BaseException as e:  # pylint: disable=broad-except  (a traceback: the test reports it)
      code = -1
      err.write(f"Traceback (uncaught): {type(e).__name__}: {e}\n")
  return {"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}


def _child(case: dict) -> dict:
  os.environ.update(case.get("env", {}))
  if case.get("interrupt"):
    pipeline.run = _interrupted
  if case.get("no_presets"):
    from opd_jax import models  # pylint: disable=g-import-not-at-top
    hidden = {m for preset in models.PRESETS.values() for m in preset.modules}
    find_spec = importlib.util.find_spec
    importlib.util.find_spec = lambda name, *a, **k: None if name in hidden else find_spec(name, *a, **k)
  return run_cli(case["argv"])


def run_case(case: dict) -> dict:
  with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
    path = f.name
  pid = os.fork()
  if pid == 0:
    try:
      result = _child(case)
      with open(path, "w") as f:
        json.dump(result, f)
    finally:
      os._exit(0)
  os.waitpid(pid, 0)
  try:
    with open(path) as f:
      return json.loads(f.read() or '{"code": -2, "stdout": "", "stderr": "child died"}')
  finally:
    os.unlink(path)



def run_test_script(script: str, root: pathlib.Path, timeout: int = 300) -> dict:
  """The results of a test module run as a script (`python <script> <root> <root>/results.json`: its `__main__` runs
  its command-line cases from one interpreter start and writes the JSON), as its module fixture reads them."""
  repo = pathlib.Path(__file__).resolve().parents[1]
  env = dict(os.environ, PYTHONPATH=str(repo), JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, str(script), str(root), str(root / "results.json")], env=env,
                        capture_output=True, text=True, timeout=timeout, cwd=repo)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads((root / "results.json").read_text())

if __name__ == "__main__":
  cases = json.loads(open(sys.argv[1]).read())
  with open(sys.argv[2], "w") as f:
    json.dump([run_case(c) for c in cases], f)
