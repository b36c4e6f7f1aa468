"""The workdir's lock (claim.workdir_lock): one live run per process index on a workdir; a stale lock of a dead
run is taken over; main's forced exit releases only the locks this process holds."""
import json
import os
import socket
import subprocess
import sys

import pytest

from opd_jax import claim


def test_workdir_lock_refuses_a_live_holder_and_takes_over_a_stale_one(tmp_path, caplog):
  with claim.workdir_lock(tmp_path, 0) as path:
    held = json.loads(path.read_text())
    assert held["pid"] == os.getpid() and held["host"] == socket.gethostname()
    with pytest.raises(ValueError, match=rf"in use by another run with process index 0 \(pid {os.getpid()} on "
                                         rf"host {socket.gethostname()}"):
      with claim.workdir_lock(tmp_path, 0):
        pass
    with claim.workdir_lock(tmp_path, 1):               # another process index of the same run: allowed
      pass
  assert not path.exists()                                  # released
  dead = subprocess.Popen([sys.executable, "-c", "pass"])
  dead.wait()
  path.write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname()}))
  with caplog.at_level("WARNING"):
    with claim.workdir_lock(tmp_path, 0):
      assert json.loads(path.read_text())["pid"] == os.getpid()
  assert "stale lock" in caplog.text
  path.write_text(json.dumps({"pid": dead.pid, "host": "another-host"}))   # cannot check a pid elsewhere
  with pytest.raises(ValueError, match="another-host"):
    with claim.workdir_lock(tmp_path, 0):
      pass


def test_release_locks_removes_only_the_locks_this_process_holds(tmp_path):
  (tmp_path / "a").mkdir()
  with claim.workdir_lock(tmp_path / "a", 0) as mine:
    other = claim.lock_path(tmp_path, 0)
    other.write_text(json.dumps({"pid": os.getpid() + 1, "host": socket.gethostname()}))   # not held here
    claim.release_locks()                                     # what main's forced exit on Ctrl-C calls
    assert not mine.exists() and other.exists()
