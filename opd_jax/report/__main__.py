"""python -m opd_jax.report --workdir=... [--target=incorrect] [--tokenizer=<HF folder>]: rebuilds the report
and prints the verdict, the alignment table and where summary.md, report.html and the records are. A --target or
--estimand other than the study's planned config.report needs --out=<dir> (that report goes there: the study's
own verdict files are never replaced by an unplanned one). Rebuilding a study's own report holds its workdir lock
(`claim.workdir_lock`, process index 0, as the study does while it writes them): beside a running study it is
refused in one line; `--out=<dir>` writes a report beside it instead.

With several studies (--workdir repeated, or a glob such as --workdir='runs/*'), builds one comparison instead:
`<out>/comparison.html` and `<out>/comparison.csv` (compare.write; --out is required). Studies whose candidate sets
are formed differently (manifest.json "candidate_set": other views or top-k) are refused unless
--allow_unlike_candidates, and then flagged (a `warning:` line; report/compare.py). Errors print one line
`error: ...` (opd_jax.terminal.field_error's format, as `python -m opd_jax.main`) and exit 2."""
import contextlib
import pathlib

from absl import app
from absl import flags

from opd_jax import records
from opd_jax import terminal
from opd_jax.report import build
from opd_jax.report import cli
from opd_jax.report import compare
from opd_jax.report import console
from opd_jax.report import token_pages

flags.DEFINE_multi_string("workdir", None, "Study working directory holding records/nodes; repeat it (or pass a "
                          "glob) to compare several studies into --out.")
flags.DEFINE_string("out", None, "Output directory: of the comparison of several studies, or of one study's report "
                    "(e.g. at another --target), leaving the study's own report files as they are.")
flags.DEFINE_integer("n_boot", 2000, "Bootstrap replicates per interval.")
flags.DEFINE_integer("seed", 0, "Bootstrap seed.")
flags.DEFINE_string("target", None, "Node group the verdict decides on: incorrect, correct, all or trained (all "
                    "nodes as training weighs them) (default: the study's report.target).")
flags.DEFINE_bool("plot", True, "Also write alignment.png.")
flags.DEFINE_bool("html", True, "Also write report.html and the per-token pages html/.")
flags.DEFINE_integer("pages", token_pages.DEFAULT_PAGES, "Cap on per-token pages in html/ (0: none).")
flags.DEFINE_string("colour_by", token_pages.DEFAULT_COLOUR_BY, "Predictor the per-token pages colour by.")
flags.DEFINE_float("min_effect", None, "Smallest difference in mean alignment worth detecting: the verdict adds the "
                   "questions needed for 80% power (0: not asked; default: the study's report.min_effect).")
flags.DEFINE_string("estimand", None, "What the verdict compares per node: alignment (cos(g*, g_D), the paper's) "
                    "or projection (<g*, g_D> / |g_D|: unbiased at any number of continuations; --min_effect in its "
                    "units; docs/results.md). Default: the study's config.report.estimand.")
flags.DEFINE_bool("allow_unlike_candidates", False, "Compare studies whose candidate sets are formed differently "
                  "(manifest.json 'candidate_set': other views or top-k): a configuration's alignment is defined on "
                  "its study's candidate sets, so the comparison is flagged.")
flags.DEFINE_string("tokenizer", None, "HF tokenizer folder or name for the token-kind split (optional).")
flags.mark_flag_as_required("workdir")

def main(argv) -> None:
  if len(argv) > 1:
    terminal.fail(f"unexpected arguments {argv[1:]}; flags are --name=value, e.g. --workdir=runs/x (see --help)")
  f = flags.FLAGS
  terminal.console(progress=cli.progress(f.workdir))
  try:
    cli.check_flags(f)
    workdirs = compare.expand(f.workdir)
    if f.target is None:                 # the study's own verdict settings unless asked otherwise (globs expanded)
      f.target = cli.study_report(workdirs[0], "target", "incorrect")
    if f.min_effect is None:
      f.min_effect = cli.study_report(workdirs[0], "min_effect", 0.0)
    for w in workdirs:
      records.check_json_files(w)
    if len(workdirs) > 1:
      if not f.out:
        raise ValueError(terminal.field_error("--out", f"is required to compare {len(workdirs)} studies",
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
    out = f.out                            # one study with --out: its report there, the study's own left as it is
    if out:
      if pathlib.Path(out).resolve() == pathlib.Path(workdirs[0]).resolve():
        raise ValueError(terminal.field_error("--out", "is the study's own workdir", out,
                                              fix="drop --out to rebuild the study's report, or pass another folder"))
      pathlib.Path(out).mkdir(parents=True, exist_ok=True)
    estimand = f.estimand or cli.study_estimand(workdirs[0])
    other = None if out else cli.other_than_planned(workdirs[0], f.target, estimand)
    if other:                              # the study's own files hold its planned verdict: never replaced
      flag, value, planned = other
      raise ValueError(terminal.field_error(
          flag, f"differs from the study's planned config.report.{flag[2:]}={planned!r} and would replace its own "
          "verdict files", value, fix="pass --out=<folder> for this report (the study's own files stay as they are)"))
    decode = cli.token_decoder(f.tokenizer) if f.tokenizer else None
    with contextlib.nullcontext() if out else cli.own_report_lock(workdirs[0]):
      build.write_summary(workdirs[0], n_boot=f.n_boot, seed=f.seed, target=f.target, plot=f.plot,
                          html=f.html, decode=decode, pages=f.pages, colour_by=f.colour_by,
                          min_effect=f.min_effect, estimand=estimand,
                          **cli.sequential_look(workdirs[0], f.min_effect, estimand),
                          unplanned=cli.unplanned_reason(workdirs[0], f.target, estimand), out_dir=out)
  except (OSError, ValueError) as e:
    terminal.fail(e)
  print(console.results_text(out or workdirs[0],    # the verdict, the table and where the files are (not summary.md)
                             records_dir=pathlib.Path(workdirs[0]) / "records" if out else None))


if __name__ == "__main__":
  app.run(main, flags_parser=terminal.parse_flags)
