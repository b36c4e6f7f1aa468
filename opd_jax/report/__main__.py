"""python -m opd_jax.report --workdir=... [--target=incorrect] [--tokenizer=<HF folder>]: rebuilds the report.

With several studies (--workdir repeated, or a glob such as --workdir='runs/*'), builds one comparison instead:
`<out>/comparison.html` and `<out>/comparison.csv` (compare.write; --out is required)."""
from absl import app
from absl import flags

from opd_jax.report import build
from opd_jax.report import compare
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
flags.DEFINE_string("tokenizer", None, "HF tokenizer folder or name for the token-kind split (optional).")
flags.mark_flag_as_required("workdir")


def _main(argv) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments {argv[1:]}; use --workdir=...")
  f = flags.FLAGS
  try:
    workdirs = compare.expand(f.workdir)
    if len(workdirs) > 1 or f.out:
      if not f.out:
        raise app.UsageError(f"{len(workdirs)} studies given: pass --out=<directory> for the comparison")
      table, verdicts = compare.write(workdirs, f.out, target=f.target, n_boot=f.n_boot, seed=f.seed)
      for i, v in enumerate(verdicts):
        print(f"#{i} {v['name']} ({v['workdir']}): {v['line']}")
      print(f"comparison of {len(verdicts)} studies ({len(table)} rows): {f.out}/comparison.html, "
            f"{f.out}/comparison.csv")
      return
    decode = None
    if f.tokenizer:
      from transformers import AutoTokenizer  # pylint: disable=g-import-not-at-top
      tok = AutoTokenizer.from_pretrained(f.tokenizer)
      decode = lambda t: tok.decode([t])
    markdown = build.write_summary(workdirs[0], n_boot=f.n_boot, seed=f.seed, target=f.target, plot=f.plot,
                                   html=f.html, decode=decode, pages=f.pages, colour_by=f.colour_by)
  except (FileNotFoundError, ValueError) as e:
    raise SystemExit(f"error: {e}") from None
  print(markdown, end="")


if __name__ == "__main__":
  app.run(_main)
