"""python -m opd_jax.report --workdir=... [--target=incorrect] [--tokenizer=<HF folder>]: rebuilds the report
and prints the verdict, the alignment table and where summary.md, report.html and the records are.

With several studies (--workdir repeated, or a glob such as --workdir='runs/*'), builds one comparison instead:
`<out>/comparison.html` and `<out>/comparison.csv` (compare.write; --out is required). Studies whose candidate sets
are formed differently (manifest.json "candidate_set": other views or top-k) are refused unless
--allow_unlike_candidates, and then flagged (a `warning:` line; report/compare.py). Errors print one line
`error: ...` (opd_jax.stages.field_error's format, as `python -m opd_jax.main`) and exit 2."""
import dataclasses
import json
import math
import os
import pathlib

from absl import app
from absl import flags
import ml_collections

from opd_jax import looks
from opd_jax import records
from opd_jax import runs
from opd_jax import stages
from opd_jax.report import build
from opd_jax.report import compare
from opd_jax.report import console
from opd_jax.report import decision
from opd_jax.report import sequential
from opd_jax.report import token_pages

flags.DEFINE_multi_string("workdir", None, "Study working directory holding records/nodes; repeat it (or pass a "
                          "glob) to compare several studies into --out.")
flags.DEFINE_string("out", None, "Output directory of the comparison of several studies.")
flags.DEFINE_integer("n_boot", 2000, "Bootstrap replicates per interval.")
flags.DEFINE_integer("seed", 0, "Bootstrap seed.")
flags.DEFINE_string("target", "incorrect", "Node group the verdict decides on: incorrect, correct or all.")
flags.DEFINE_bool("plot", True, "Also write alignment.png.")
flags.DEFINE_bool("html", True, "Also write report.html and the per-token pages html/.")
flags.DEFINE_integer("pages", token_pages.DEFAULT_PAGES, "Cap on per-token pages in html/ (0: none).")
flags.DEFINE_string("colour_by", token_pages.DEFAULT_COLOUR_BY, "Predictor the per-token pages colour by.")
flags.DEFINE_float("min_effect", 0.0, "Smallest difference in mean alignment worth detecting: the verdict adds the "
                   "questions needed for 80% power (0: not asked).")
flags.DEFINE_string("estimand", None, "What the verdict compares per node: alignment (cos(g*, g_D), the paper's) "
                    "or projection (<g*, g_D> / |g_D|: unbiased at any number of continuations; --min_effect in its "
                    "units; docs/results.md). Default: the study's config.report.estimand.")
flags.DEFINE_bool("allow_unlike_candidates", False, "Compare studies whose candidate sets are formed differently "
                  "(manifest.json 'candidate_set': other views or top-k): a configuration's alignment is defined on "
                  "its study's candidate sets, so the comparison is flagged.")
flags.DEFINE_string("tokenizer", None, "HF tokenizer folder or name for the token-kind split (optional).")
flags.mark_flag_as_required("workdir")

TARGETS = ("incorrect", "correct", "all")


def check_flags(f) -> None:
  """Flag values that need no records, checked before any is read.

  Raises:
    ValueError: `stages.field_error`'s line naming the flag.
  """
  if f.target not in TARGETS:
    raise ValueError(stages.field_error("--target", "must be 'incorrect', 'correct' or 'all'", f.target,
                                        choices=TARGETS))
  if f.n_boot < 1:
    raise ValueError(stages.field_error("--n_boot", "must be an integer >= 1", f.n_boot))
  if f.seed < 0:
    raise ValueError(stages.field_error("--seed", "must be an integer >= 0", f.seed))
  if f.pages < 0:
    raise ValueError(stages.field_error("--pages", "must be an integer >= 0 (0: no per-token pages)", f.pages))
  if f.colour_by not in records.PREDICTORS:
    raise ValueError(stages.field_error("--colour_by", f"must be one of {records.PREDICTORS}", f.colour_by,
                                        choices=records.PREDICTORS))
  if not (math.isfinite(f.min_effect) and f.min_effect >= 0):
    raise ValueError(stages.field_error("--min_effect", "must be a finite number >= 0 (0: not asked)", f.min_effect))
  if f.estimand is not None and f.estimand not in decision.ESTIMANDS:
    raise ValueError(stages.field_error("--estimand", f"must be one of {tuple(decision.ESTIMANDS)}", f.estimand,
                                        choices=tuple(decision.ESTIMANDS)))


def token_decoder(name: str):
  """token id -> its text, with the tokenizer of --tokenizer (an HF folder, or a name in the local HF cache).

  Raises:
    ValueError: a path that does not exist, or a tokenizer that does not load (the flag, the value, the cause).
  """
  path = pathlib.Path(name).expanduser()
  fix = "pass an HF folder holding the student's tokenizer files (tokenizer.json, tokenizer_config.json)"
  if not path.exists() and (os.sep in name or name.startswith((".", "~"))):
    raise ValueError(stages.field_error("--tokenizer", "folder does not exist", name, fix=fix))
  from transformers import AutoTokenizer  # pylint: disable=g-import-not-at-top
  try:
    tok = AutoTokenizer.from_pretrained(name)
  except Exception as e:  # pylint: disable=broad-except  (OSError, ValueError, hub errors, ...)
    cause = (str(e).strip().splitlines() or [type(e).__name__])[0]
    raise ValueError(stages.field_error("--tokenizer", f"does not load a tokenizer ({cause})", name,
                                        fix=fix)) from None
  return lambda t: tok.decode([t])


def _progress(workdirs) -> bool:
  """config.logging.progress of the (first) study's config.json: the report honours its run's flag."""
  try:
    return bool(json.loads((pathlib.Path(workdirs[0]) / "config.json").read_text())["logging"]["progress"])
  except (OSError, ValueError, KeyError, TypeError, IndexError):
    return True


def _study_estimand(workdir) -> str:
  """The study's config.report.estimand ("alignment" where config.json lacks it or is unreadable)."""
  try:
    config = json.loads((pathlib.Path(workdir) / "config.json").read_text())
    return str(config.get("report", {}).get("estimand", "alignment"))
  except (OSError, ValueError, AttributeError):
    return "alignment"


def _sequential(workdir, margin: float, estimand: str = "alignment") -> dict:
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
  seq = looks.report_look(config, progress)
  if seq and estimand != "alignment" and not (margin > 0 or float(config.report.get("min_effect", 0.0)) > 0):
    raise ValueError(stages.field_error(
        "--min_effect", f"must be > 0 with --estimand={estimand} on a sequential study: its equivalence margin is in "
        f"the {estimand}'s units, not the alignment's default {sequential.MARGIN:g}", margin,
        fix="e.g. --min_effect=0.005 (see docs/results.md)"))
  if seq and margin > 0:
    seq["design"] = dataclasses.replace(seq["design"], margin=margin)
  return seq


def main(argv) -> None:
  if len(argv) > 1:
    stages.fail(f"unexpected arguments {argv[1:]}; flags are --name=value, e.g. --workdir=runs/x (see --help)")
  f = flags.FLAGS
  stages.console(progress=_progress(f.workdir))
  try:
    check_flags(f)
    workdirs = compare.expand(f.workdir)
    for w in workdirs:
      runs.check_json_files(w)
    if len(workdirs) > 1 or f.out:
      if not f.out:
        raise ValueError(stages.field_error("--out", f"is required to compare {len(workdirs)} studies",
                                            fix="pass --out=<directory>, or one --workdir for its own report"))
      table, verdicts = compare.write(workdirs, f.out, target=f.target, n_boot=f.n_boot, seed=f.seed,
                                      allow_unlike_candidates=f.allow_unlike_candidates)
      for w in verdicts[0]["warnings"] if verdicts else []:
        print(f"warning: {w}")
      for i, v in enumerate(verdicts):
        print(f"#{i} {v['name']} ({v['workdir']}): {v['line']}")
      print(f"comparison of {len(verdicts)} studies ({len(table)} rows): {f.out}/comparison.html, "
            f"{f.out}/comparison.csv")
      return
    decode = token_decoder(f.tokenizer) if f.tokenizer else None
    estimand = f.estimand or _study_estimand(workdirs[0])
    build.write_summary(workdirs[0], n_boot=f.n_boot, seed=f.seed, target=f.target, plot=f.plot,
                        html=f.html, decode=decode, pages=f.pages, colour_by=f.colour_by,
                        min_effect=f.min_effect, estimand=estimand,
                        **_sequential(workdirs[0], f.min_effect, estimand))
  except (OSError, ValueError) as e:
    stages.fail(e)
  print(console.results_text(workdirs[0]))        # the verdict, the table and where the files are (not summary.md)


def parse_flags(argv):
  """absl's parse with a flag error as one `error:` line (exit 2) instead of usage text."""
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:
    stages.fail(stages.flag_error(e, argv))


if __name__ == "__main__":
  app.run(main, flags_parser=parse_flags)
