"""The report command's checks and helpers, apart from its absl flags (`opd_jax.report.__main__` defines those,
and `opd_jax.main` defines a `--workdir` of its own), so that tests and other entry points can import them."""
import contextlib
import dataclasses
import json
import math
import os
import pathlib

import ml_collections

from opd_jax import atomic
from opd_jax import claim
from opd_jax import records
from opd_jax import terminal
from opd_jax.report import common
from opd_jax.report import looks
from opd_jax.report import sequential


TARGETS = common.TARGETS


def check_flags(f) -> None:
  """Flag values that need no records, checked before any is read.

  --target and --min_effect None: the study's own (`study_report`), read once the workdirs are known.

  Raises:
    ValueError: `terminal.field_error`'s line naming the flag.
  """
  if f.target is not None and f.target not in TARGETS:
    raise ValueError(terminal.field_error("--target", "must be 'incorrect', 'correct', 'all' or 'trained'", f.target,
                                        choices=TARGETS))
  if f.n_boot < 1:
    raise ValueError(terminal.field_error("--n_boot", "must be an integer >= 1", f.n_boot))
  if f.seed < 0:
    raise ValueError(terminal.field_error("--seed", "must be an integer >= 0", f.seed))
  if f.pages < 0:
    raise ValueError(terminal.field_error("--pages", "must be an integer >= 0 (0: no per-token pages)", f.pages))
  if f.colour_by not in records.PREDICTORS:
    raise ValueError(terminal.field_error("--colour_by", f"must be one of {records.PREDICTORS}", f.colour_by,
                                        choices=records.PREDICTORS))
  if f.min_effect is not None and not (math.isfinite(f.min_effect) and f.min_effect >= 0):
    raise ValueError(terminal.field_error("--min_effect", "must be a finite number >= 0 (0: not asked)", f.min_effect))
  if f.estimand is not None and f.estimand not in common.ESTIMANDS:
    raise ValueError(terminal.field_error("--estimand", f"must be one of {tuple(common.ESTIMANDS)}", f.estimand,
                                        choices=tuple(common.ESTIMANDS)))


def token_decoder(name: str):
  """token id -> its text, with the tokenizer of --tokenizer (an HF folder, or a name in the local HF cache).

  Raises:
    ValueError: a path that does not exist, or a tokenizer that does not load (the flag, the value, the cause).
  """
  path = pathlib.Path(name).expanduser()
  fix = "pass an HF folder holding the student's tokenizer files (tokenizer.json, tokenizer_config.json)"
  if not path.exists() and (os.sep in name or name.startswith((".", "~"))):
    raise ValueError(terminal.field_error("--tokenizer", "folder does not exist", name, fix=fix))
  from transformers import AutoTokenizer  # pylint: disable=g-import-not-at-top
  try:
    tok = AutoTokenizer.from_pretrained(name)
  except Exception as e:  # pylint: disable=broad-except  (OSError, ValueError, hub errors, ...)
    cause = (str(e).strip().splitlines() or [type(e).__name__])[0]
    raise ValueError(terminal.field_error("--tokenizer", f"does not load a tokenizer ({cause})", name,
                                        fix=fix)) from None
  return lambda t: tok.decode([t])


def progress(workdirs) -> bool:
  """config.logging.progress of the (first) study's config.json: the report honours its run's flag."""
  try:
    return bool(json.loads((pathlib.Path(workdirs[0]) / "config.json").read_text())["logging"]["progress"])
  except (OSError, ValueError, KeyError, TypeError, IndexError):
    return True


def study_report(workdir, field: str, default):
  """The study's config.report.<field> (`default` where config.json lacks it or is unreadable): the report's
  defaults are the study's own verdict settings (report.target, report.min_effect, report.estimand)."""
  try:
    config = json.loads((pathlib.Path(workdir) / "config.json").read_text())
    return type(default)(config.get("report", {}).get(field, default))
  except (OSError, ValueError, TypeError, AttributeError):
    return default


def study_estimand(workdir) -> str:
  """The study's config.report.estimand ("alignment" where config.json lacks it or is unreadable)."""
  return study_report(workdir, "estimand", "alignment")


def sequential_look(workdir, margin: float, estimand: str = "alignment") -> dict:
  """A study's {design, look, final} (`looks.report_look`, from its config.json and progress.json; {} without
  those files: the fixed design without an equivalence margin). --min_effect > 0 reads the same repeated
  intervals at another margin (they cover at every look whatever the margin, so the equivalence read from them
  keeps its level)."""
  workdir = pathlib.Path(workdir)
  try:
    config = ml_collections.ConfigDict(json.loads((workdir / "config.json").read_text()))
    progress = json.loads((workdir / "progress.json").read_text())
  except (OSError, ValueError):
    return {}
  seq = looks.report_look(looks.resolve(config), progress)
  if seq and estimand != "alignment" and not (margin > 0 or float(config.report.get("min_effect", 0.0)) > 0):
    raise ValueError(terminal.field_error(
        "--min_effect", f"must be > 0 with --estimand={estimand} on a sequential study: its equivalence margin is in "
        f"the {estimand}'s units, not the alignment's default {sequential.MARGIN:g}", margin,
        fix="e.g. --min_effect=0.005 (see docs/results.md)"))
  if seq and margin > 0:
    seq["design"] = dataclasses.replace(seq["design"], margin=margin)
  return seq


def unplanned_reason(workdir, target: str, estimand: str) -> str | None:
  """Why the report's verdict is not the study's planned test (issue 49, item 4), or None: it asks another node
  group or estimand than the study's config.report planned, or another study already looked at these questions
  under another design (`looks.unplanned`, from progress.json's selected questions)."""
  workdir = pathlib.Path(workdir)
  try:
    config = json.loads((workdir / "config.json").read_text())
    selected = json.loads((workdir / "progress.json").read_text()).get("selected") or []
  except (OSError, ValueError, AttributeError):
    return None
  other = other_than_planned(workdir, target, estimand)
  if other:
    flag, value, planned = other
    return f"{flag}={value} is not the study's planned config.report.{flag[2:]}={planned!r}"
  return looks.unplanned(workdir, selected, looks.design(ml_collections.ConfigDict(config)).looks)


def other_than_planned(workdir, target: str, estimand: str) -> tuple[str, str, str] | None:
  """(flag, its value, the planned value) of the first of --target / --estimand that differs from the study's
  config.report (target "incorrect" and estimand "alignment" where it names none); None where both are the
  planned ones or config.json is unreadable."""
  try:
    config = json.loads((pathlib.Path(workdir) / "config.json").read_text())
  except (OSError, ValueError):
    return None
  report = config.get("report", {}) if isinstance(config, dict) else {}
  report = report if isinstance(report, dict) else {}
  for flag, value, planned in (("--target", target, report.get("target", "incorrect")),
                               ("--estimand", estimand, report.get("estimand", "alignment"))):
    if value != planned:
      return flag, value, planned
  return None


@contextlib.contextmanager
def own_report_lock(workdir):
  """Hold the study's workdir lock (`claim.workdir_lock`, process index 0: the process that writes the study's
  report) while the study's own report files are rebuilt in `workdir`.

  Raises:
    ValueError: a live run holds it; the message says to wait for it or to pass --out.
    atomic.WriteError: the lock file cannot be created (a read-only workdir): stage "report", the fix named.
  """
  with contextlib.ExitStack() as held:
    try:
      held.enter_context(claim.workdir_lock(workdir, 0))
    except claim.WorkdirInUse as e:
      raise ValueError(f"{e}; or pass --out=<folder> for a report beside the running study") from None
    except OSError as e:
      raise atomic.WriteError(claim.lock_path(workdir, 0), e, "report") from e
    yield
