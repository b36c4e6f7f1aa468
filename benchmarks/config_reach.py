"""Which opd_jax modules read the study config (issue 37: "each stage receives what it uses").

  python benchmarks/config_reach.py            # ~25 s: the smoke study, in-process

Records every attribute and item read of an `ml_collections.ConfigDict` during `pipeline.run` of configs/smoke.py
(reads by ml_collections itself are attributed to the frame that called it) and prints the modules that read
it, with their read counts. A module that receives resolved values (`contexts.Chat`, `sampling.SamplingParams`,
a mesh) instead of the config does not appear.
"""
import collections
import pathlib
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from ml_collections import config_dict  # pylint: disable=g-import-not-at-top,wrong-import-position

READS = collections.Counter()
_GETATTR, _GETITEM = config_dict.ConfigDict.__getattr__, config_dict.ConfigDict.__getitem__


def _reader() -> str:
  frame = sys._getframe(2)  # pylint: disable=protected-access
  while frame is not None and frame.f_globals.get("__name__", "").startswith("ml_collections"):
    frame = frame.f_back
  return frame.f_globals.get("__name__", "?") if frame is not None else "?"


def _getattr(self, attr):
  READS[_reader()] += 1
  return _GETATTR(self, attr)


def _getitem(self, key):
  READS[_reader()] += 1
  return _GETITEM(self, key)


def main():
  config_dict.ConfigDict.__getattr__, config_dict.ConfigDict.__getitem__ = _getattr, _getitem
  from configs import smoke  # pylint: disable=g-import-not-at-top
  from opd_jax.study import pipeline  # pylint: disable=g-import-not-at-top
  config = smoke.get_config()
  config.logging.progress = False
  READS.clear()
  with tempfile.TemporaryDirectory() as workdir:
    pipeline.run(config, workdir)
  modules = sorted(k for k in READS if k.startswith("opd_jax"))
  print(f"{len(modules)} modules read the config:", ", ".join(f"{m} ({READS[m]})" for m in modules))


if __name__ == "__main__":
  main()
