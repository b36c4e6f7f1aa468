"""python -m opd_jax.report --workdir=... [--target=incorrect] [--tokenizer=<HF folder>]: rebuilds the report."""
from absl import app
from absl import flags

from opd_jax.report import build

flags.DEFINE_string("workdir", None, "Study working directory holding records/nodes.")
flags.DEFINE_integer("n_boot", 2000, "Bootstrap replicates per interval.")
flags.DEFINE_integer("seed", 0, "Bootstrap seed.")
flags.DEFINE_string("target", "incorrect", "Node group the verdict decides on: incorrect, correct or all.")
flags.DEFINE_bool("plot", True, "Also write alignment.png.")
flags.DEFINE_bool("html", True, "Also write report.html.")
flags.DEFINE_string("tokenizer", None, "HF tokenizer folder or name for the token-kind split (optional).")
flags.mark_flag_as_required("workdir")


def _main(argv) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments {argv[1:]}; use --workdir=...")
  f = flags.FLAGS
  decode = None
  if f.tokenizer:
    from transformers import AutoTokenizer  # pylint: disable=g-import-not-at-top
    tok = AutoTokenizer.from_pretrained(f.tokenizer)
    decode = lambda t: tok.decode([t])
  try:
    markdown = build.write_summary(f.workdir, n_boot=f.n_boot, seed=f.seed, target=f.target, plot=f.plot,
                                   html=f.html, decode=decode)
  except FileNotFoundError as e:
    raise SystemExit(f"error: {e}") from None
  print(markdown, end="")


if __name__ == "__main__":
  app.run(_main)
