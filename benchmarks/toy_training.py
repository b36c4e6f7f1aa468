"""Issue 13, experiment 1 (exact toy): does training-free alignment predict the gain of OPD training?

  PYTHONPATH=$PWD python benchmarks/toy_training.py --out=/tmp/toy_training
  # 17 s on a 2-core CPU (10 s experiment; bootstraps vectorised, stats.weighted_spearman)

For every (student seed, teacher, divergence) configuration (default 5 x 10 x 4 = 200), measures at the start
(a) the reach-weighted mean alignment cos(g*, g_D) over nodes (the paper's quantity) and (b) the exact
first-order gain sum_u reach(u)^2 <g*(u), g_D(u)>, then trains the per-prefix softmax table on the exact
expected OPD loss (`opd_jax.validation.toy_training`) and measures the exact dJ after 1, 10 and 50 optax steps (sgd, adam).
Prints a table per (teacher, divergence) (means over seeds), the Spearman rho of each predictor with each dJ
with bootstrap intervals over configurations, how the finite-R estimates of (a) and (b) degrade with R, and the
runtime. Writes configs.csv, spearman.csv and toy_training.png to --out.

Beyond the sign (issue 25, item 6; `toy_analysis.beyond_sign`, one JSON line per dJ setting, beyond_sign.{jsonl,md}):
every interval resamples the 10 teachers (the 200 configurations are 10 teachers' worth of clusters; "naive"
resamples configurations, "teacher x seed" both factors); beside each predictor, the sign-only predictor
sign(dJ) (the Spearman of a predictor that knows only whether a configuration helps), the Spearman within the
helpful configurations (dJ > 0), and "gain over sign" (sign first, the predictor within it, minus sign-only).
Predictors: (a), align_filled, (b), the teacher advantage, the start loss and KL(p||q), KL(q||p), and a study's
estimate align_S<R> (R continuations at the nodes of --sample_rollouts sampled rollouts).

What alignment adds beyond the sign, as measured (default run; SGD 1 step / SGD 50 / Adam 50): its Spearman
0.685 / 0.754 / 0.768 has teacher-resampled intervals [0.25, 0.82] / [0.31, 0.88] / [0.39, 0.90] (naive: [0.58,
0.76] / ...) and sits below or at the sign-only 0.791 / 0.802 / 0.770. Within the helpful configurations (141 /
138 / 146 of 200) it is 0.17 [-0.21, 0.40] / 0.30 [-0.17, 0.53] / 0.44 [-0.04, 0.65]: no interval excludes 0;
among the success-conditioned teachers alone -0.35 / -0.35 / -0.22. Ordering within the signs by alignment
changes the sign-only Spearman by -0.10 [-0.30, -0.02] / -0.04 [-0.26, +0.04] / +0.01 [-0.20, +0.17]. So on this
toy alignment's ranking of configurations is explained by the sign it gets right; what it says about how much a
helpful configuration helps is not distinguishable from nothing. The first-order gain (b) does carry the size
(within helpful 0.997 / 0.871 / 0.668). A study's estimate (16 rollouts x 5 nodes, R = 4-64) ranks as the exact
(a) does: 0.66-0.78 / 0.73-0.85 / 0.74-0.88 over 5 draws per R.
"""
import argparse
import json
import pathlib
import time

import numpy as np
import pandas as pd

from opd_jax.estimators import stats
from opd_jax.validation import toy_training as ttoy
from opd_jax.validation import toy_analysis


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
  parser.add_argument("--sample_rollouts", type=int, default=16,
                      help="rollouts whose H nodes a study's estimate scores (align_S<R>)")
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
                                 r_draws=args.r_draws, sample_rollouts=args.sample_rollouts)
  df = ttoy.run_experiment(config)
  t_run = time.perf_counter() - start
  targets = [f"dJ_{opt}_{s}" for opt, _ in config.learning_rates for s in config.steps]
  exact = ["align", "align_filled", "align_uniform", "first_order"]
  estimated = [f"{name}_R{r}_d0" for r in rs for name in ("align", "first_order")]    # bootstrap: draw 0
  spear = toy_analysis.spearman_table(df, exact + estimated, targets, n_boot=args.n_boot)
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
  _beyond_sign(df, config, args, out)
  _figure(df, spear, rs, out / "toy_training.png")
  print(f"\nwrote {out}/configs.csv, spearman.csv, toy_training.png; runtime {time.perf_counter() - start:.1f} s "
        f"(experiment {t_run:.1f} s)")


BEYOND = ("align", "align_filled", "first_order", "teacher_advantage", "loss0", "kl_pq", "kl_qp")


def _beyond_sign(df, config, args, out):
  """Issue 25 item 6: teacher-resampled intervals, the sign-only ceiling, within-helpful, the study's estimate."""
  targets = ("dJ_sgd_1", "dJ_sgd_50", "dJ_adam_50")
  names = [*BEYOND, *(f"align_S{r}_d0" for r in config.rs), *(f"align_R{r}_d0" for r in config.rs)]
  iv = lambda t: f"{t[0]:+.3f} [{t[1]:+.3f}, {t[2]:+.3f}]"
  results, lines = [], []
  for target in targets:
    res = toy_analysis.beyond_sign(df, target, names, n_boot=args.n_boot)
    draws = {f"align_S{r}": [stats.spearman(df[f"align_S{r}_d{i}"], df[target]) for i in range(config.r_draws)]
             for r in config.rs}
    line = {"setting": target, "n": res["n"], "n_helpful": res["n_helpful"], "teachers": df.teacher.nunique(),
            "seeds": df.seed.nunique(), "sample_rollouts": config.sample_rollouts, "sign_only": res["sign_only"],
            **{k: {kk: v for kk, v in res[k].items()} for k in names},
            "sampled_estimate_over_draws": {k: [float(np.min(v)), float(np.max(v))] for k, v in draws.items()}}
    print(json.dumps(line, default=float))
    results.append((target, res, draws))
    (out / "beyond_sign.jsonl").open("a" if results[1:] else "w").write(json.dumps(line, default=float) + "\n")
  header = "| predictor | " + " | ".join(f"{t}: rho (teacher-resampled) | within helpful | gain over sign"
                                         for t in targets) + " |"
  lines += [header, "|---" * (1 + 3 * len(targets)) + "|"]
  lines.append("| sign only (knows whether dJ > 0) | " + " | ".join(f"{iv(r['sign_only'])} | | " for _, r, _ in results)
               + " |")
  for name in [n for n in names if not n.startswith("align_R")]:        # align_R*: in the JSON lines
    cells = [f"{iv(r[name]['rho'])} | {iv(r[name]['helpful'])} | {iv(r[name]['gain'])}" for _, r, _ in results]
    lines.append(f"| {name} | " + " | ".join(cells) + " |")
  lines += ["", "within helpful: Spearman over the configurations with dJ > 0 (teacher-resampled). gain over sign: "
            "Spearman of 'sign(dJ), then x within the sign' minus the sign-only one (paired replicates); > 0 when "
            "x's order within the signs beats leaving them tied, < 0 when it is worse than no order at all.",
            "", "rho of the same predictors with intervals that resample configurations (naive) or teachers and "
            "seeds:", "", "| predictor | " + " | ".join(f"{t} naive | {t} teacher x seed" for t in targets) + " |",
            "|---" * (1 + 2 * len(targets)) + "|"]
  for name in ("align", "first_order", f"align_S{config.rs[0]}_d0"):
    lines.append(f"| {name} | " + " | ".join(f"{iv(r[name]['rho_naive'])} | {iv(r[name]['rho_teacher_seed'])}"
                                            for _, r, _ in results) + " |")
  lines += ["", f"study's estimate (align_S<R>: R continuations at the nodes of {config.sample_rollouts} sampled "
            f"rollouts), rho range over {config.r_draws} draws:"]
  for target, _, draws in results:
    lines.append(f"- {target}: " + ", ".join(f"{k} [{min(v):+.3f}, {max(v):+.3f}]" for k, v in draws.items()))
  text = "\n".join(lines) + "\n"
  (out / "beyond_sign.md").write_text(text)
  print(f"\nbeyond sign ({args.n_boot} resamples of the {df.teacher.nunique()} teachers; intervals 95%):\n{text}")


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
