"""Ctrl-C at several moments of the smoke study and the trainer smoke (issue 50, item 1; the full sweep of 20+
moments is benchmarks/interrupts.py): wherever the press lands (start-up, compile, a stage, garbage collection),
the run ends with exit 130 and one `interrupted:` line, never "Exception ignored". The bound on the exit time is
GRACE_S plus start-up slack on a loaded host, not the benchmark's 5 s."""
import pytest

from benchmarks import interrupts


@pytest.mark.parametrize("job, moments", [("study", (0.3, 3.0, 6.0, 9.0)), ("train", (2.0, 6.0))])
def test_a_ctrl_c_is_always_heard(tmp_path, job, moments):
  for i, t in enumerate(moments):
    row = interrupts.press(job, tmp_path / f"w{i}", t, tmp_path / "jax_cache")
    assert interrupts.ok(row, limit_s=30.0), row
