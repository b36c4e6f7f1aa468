"""Tolerances from the arithmetic, not from one host (issue 49, item 8).

Two fp32 programs that compute the same sums in another order (another fusion, layout, BLAS kernel or vector
width) agree within the rounding of those sums: for a sum of n products of fp32 numbers, |error| <= gamma_n
sum |a_i b_i| with gamma_n ~ n eps worst case and ~ sqrt(n) eps for independent roundings (Higham, "Accuracy and
Stability of Numerical Algorithms", 2nd ed., ch. 3 and the probabilistic bound of Higham & Mary 2019). A test
comparing such programs uses `fp32_atol` with the length of the longest chain of sums behind a value, scaled by
the values' size; an atol below it passes on one host and fails on another.
"""
import numpy as np

EPS32 = float(np.finfo(np.float32).eps)


def fp32_atol(reference, terms: int, safety: float = 8.0) -> float:
  """An absolute tolerance for fp32 values computed two ways: safety * sqrt(terms) * eps32 * max(1, max|reference|).

  terms: the number of rounded operations accumulated into one value (e.g. d_model + d_ff per layer, times the
  layers, plus the vocabulary for a log-softmax). safety: the constant of the probabilistic bound (8 covers the
  bound at a probability far beyond the tests' size).
  """
  scale = max(1.0, float(np.max(np.abs(np.asarray(reference, np.float64)), initial=0.0)))
  return float(safety * np.sqrt(terms) * EPS32 * scale)
