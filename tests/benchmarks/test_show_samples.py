"""benchmarks/show_samples.py's command line: --help exits 0 and a bad flag is one `error:` line (exit 2), before
any model loads."""
import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "show_samples.py"


def _run(*args):
  return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120, check=False)


def test_help_exits_zero_and_a_bad_flag_is_one_error_line():
  got = _run("--help")
  assert got.returncode == 0 and "--workdir" in got.stdout, got.stderr
  got = _run("--n=x")
  assert got.returncode == 2 and got.stderr == "error: --n must be an integer, got 'x'\n"
  got = _run("--bogus")
  assert got.returncode == 2 and got.stderr.startswith("error: --bogus: unknown flag") and got.stderr.count("\n") == 1
