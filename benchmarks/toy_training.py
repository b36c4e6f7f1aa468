"""Issue 13, experiment 1 (exact toy): does training-free alignment predict the gain of OPD training?

  PYTHONPATH=$PWD python benchmarks/toy_training.py --out=/tmp/toy_training
  # ~1.5 min on a 2-core CPU, 1 min of it the bootstrap

For every (student seed, teacher, divergence) configuration (default 5 x 10 x 4 = 200), measures at the start
(a) the reach-weighted mean alignment cos(g*, g_D) over nodes (the paper's quantity) and (b) the exact
first-order gain sum_u reach(u)^2 <g*(u), g_D(u)>, then trains the per-prefix softmax table on the exact
expected OPD loss (`opd_jax.training.toy`) and measures the exact dJ after 1, 10 and 50 optax steps (sgd, adam).
Prints a table per (teacher, divergence) (means over seeds), the Spearman rho of each predictor with each dJ
with bootstrap intervals over configurations, how the finite-R estimates of (a) and (b) degrade with R, and the
runtime. Writes configs.csv, spearman.csv and toy_training.png to --out.
"""
import argparse
import pathlib
import time

import numpy as np
import pandas as pd

from opd_jax import stats
from opd_jax.training import toy as ttoy


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--out", required=True, help="output folder (created)")
  parser.add_argument("--seeds", type=int, default=5, help="student seeds (configurations = 40 x seeds)")
  parser.add_argument("--vocab", type=int, default=4)
  parser.add_argument("--horizon", type=int, default=5)
  parser.add_argument("--lr_sgd", type=float, default=1.0)
  parser.add_argument("--lr_adam", type=float, default=0.05)
  parser.add_argument("--rs", default="4,16,64", help="continuations per candidate for the finite-R estimates")
  parser.add_argument("--r_draws", type=int, default=5, help="independent finite-R estimates per (student, R)")
  parser.add_argument("--n_boot", type=int, default=1000)
  args = parser.parse_args()
  if args.seeds < 1:
    raise SystemExit(f"error: --seeds must be >= 1, got {args.seeds}")
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  start = time.perf_counter()
  rs = tuple(int(r) for r in args.rs.split(","))
  config = ttoy.ExperimentConfig(vocab=args.vocab, horizon=args.horizon, seeds=tuple(range(args.seeds)),
                                 learning_rates=(("sgd", args.lr_sgd), ("adam", args.lr_adam)), rs=rs,
                                 r_draws=args.r_draws)
  df = ttoy.run_experiment(config)
  t_run = time.perf_counter() - start
  targets = [f"dJ_{opt}_{s}" for opt, _ in config.learning_rates for s in config.steps]
  exact = ["align", "align_filled", "align_uniform", "first_order"]
  estimated = [f"{name}_R{r}_d0" for r in rs for name in ("align", "first_order")]    # bootstrap: draw 0
  spear = ttoy.spearman_table(df, exact + estimated, targets, n_boot=args.n_boot)
  df.to_csv(out / "configs.csv", index=False)
  spear.to_csv(out / "spearman.csv", index=False)

  pd.set_option("display.width", 200)
  print(f"exact toy: V={config.vocab} H={config.horizon} N={ttoy.num_nodes(config.vocab, config.horizon)} nodes, "
        f"{len(df)} configurations ({len(config.seeds)} seeds x {len(config.teachers)} teachers x "
        f"{len(config.divergences)} divergences), sgd lr={args.lr_sgd}, adam lr={args.lr_adam}, "
        f"J0 per seed: {', '.join(f'{j:.3f}' for j in df.groupby('seed').J0.first())}")
  cols = ["align", "align_filled", "first_order", "defined", "dJ_sgd_1", "dJ_sgd_50", "dJ_adam_1", "dJ_adam_50"]
  print("\nmeans over seeds per (teacher, divergence):")
  print(df.groupby(["teacher", "divergence"], sort=False)[cols].mean().to_string(float_format=lambda x: f"{x:.4f}"))
  fmt = lambda r: f"{r.rho:+.3f} [{r.lo:+.3f}, {r.hi:+.3f}]"
  wide = spear.assign(cell=spear.apply(fmt, axis=1)).pivot(index="predictor", columns="target", values="cell")
  print(f"\nSpearman rho with dJ over configurations (95% bootstrap over configurations, {args.n_boot} resamples; "
        f"n = {spear.n.min()}-{spear.n.max()}):")
  print(wide.loc[exact + estimated, targets].to_string())
  print("\nsign agreement, the fraction of configurations where sign(predictor) = sign(dJ) (both nonzero):")
  for name in exact:
    cells = []
    for target in targets:
      x, y = df[name].to_numpy(), df[target].to_numpy()
      keep = ~np.isnan(x) & (x != 0) & (y != 0)
      cells.append(f"{target} {np.mean(np.sign(x[keep]) == np.sign(y[keep])):.3f}")
    print(f"  {name:>13}: " + "  ".join(cells))
  print(f"\nfinite-R degradation: Spearman rho, mean [min, max] over {args.r_draws} independent draws of the "
        f"continuations (the exact value last):")
  for name in ("align", "first_order"):
    for target in (name, "dJ_sgd_1", "dJ_sgd_50", "dJ_adam_50"):
      cells = []
      for r in rs:
        rhos = [stats.spearman(df[f"{name}_R{r}_d{i}"], df[target]) for i in range(args.r_draws)]
        cells.append(f"R={r}: {np.mean(rhos):+.3f} [{min(rhos):+.3f}, {max(rhos):+.3f}]")
      exact_rho = stats.spearman(df[name], df[target])
      print(f"  {name + '_R':>13} vs {target:<11} " + "  ".join(cells) + f"  exact: {exact_rho:+.3f}")
  _figure(df, spear, rs, out / "toy_training.png")
  print(f"\nwrote {out}/configs.csv, spearman.csv, toy_training.png; runtime {time.perf_counter() - start:.1f} s "
        f"(experiment {t_run:.1f} s)")


def _figure(df, spear, rs, path):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
  for ax, (x, y) in zip(axes[:2], (("align", "dJ_adam_50"), ("first_order", "dJ_sgd_1"))):
    for d, part in df.groupby("divergence"):
      ax.scatter(part[x], part[y], s=10, label=d)
    rho = spear.set_index(["predictor", "target"]).loc[(x, y)].rho
    ax.set(xlabel=x, ylabel=y, title=f"Spearman {rho:+.2f}")
  axes[0].legend(fontsize=7)
  s = spear.set_index(["predictor", "target"])
  for name in ("align", "first_order"):
    for target in ("dJ_adam_50", "dJ_sgd_1"):
      rows = [s.loc[(f"{name}_R{r}_d0", target)] for r in rs] + [s.loc[(name, target)]]
      xs = list(range(len(rows)))
      axes[2].errorbar(xs, [r.rho for r in rows], yerr=[[r.rho - r.lo for r in rows], [r.hi - r.rho for r in rows]],
                       capsize=3, marker="o", label=f"{name} vs {target}")
  axes[2].set_xticks(range(len(rs) + 1), [f"R={r}" for r in rs] + ["exact"])
  axes[2].set(ylabel="Spearman rho", title="finite-R estimates (draw 0)")
  axes[2].legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=110)


if __name__ == "__main__":
  main()
