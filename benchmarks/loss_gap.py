"""Trainer losses at a large logit gap: fp32 `training.losses.token_losses` against float64 numpy (issue 26, item 6).

  PYTHONPATH=$PWD python benchmarks/loss_gap.py            # this tree
  PYTHONPATH=/path/to/other/tree python benchmarks/loss_gap.py   # another commit's worktree, side by side

One position, vocabulary 11: the student puts its mass on token 0 (logit 5), the teacher `gap` nats below it
there. Prints reverse and forward KL per gap with the relative error. Measured 2026-12-01: at a 120-nat gap the
reverse KL is 114.346596 against 114.346620 (2.1e-7); the probability-space losses before gave 81.587830
(2.9e-1: logs of fp32 probabilities stop at log tiny).
"""
import jax.numpy as jnp
import numpy as np

from opd_jax.training import losses

V = 11


def main():
  for gap in (30.0, 90.0, 120.0):
    z, zq = np.zeros((1, 1, V)), np.zeros((1, 1, V))
    z[..., 0], zq[..., 0] = 5.0, -gap
    lp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    lq = zq - np.log(np.exp(zq).sum(-1, keepdims=True))
    for name, want in (("reverse_kl", (np.exp(lp) * (lp - lq)).sum()), ("forward_kl", (np.exp(lq) * (lq - lp)).sum())):
      got = float(losses.token_losses(jnp.asarray(z, jnp.float32), lambda h: h, jnp.asarray(zq, jnp.float32),
                                       lambda h: h, jnp.zeros((1, 1), jnp.int32), divergence=name)[0, 0])
      print(f"gap {gap:5.0f} {name:10s} fp32 {got:.6f}  float64 {want:.6f}  rel err {abs(got - want) / want:.2e}")


if __name__ == "__main__":
  main()
