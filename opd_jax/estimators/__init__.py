"""Estimators: the ideal gradient g* and alignment (gradients), the divergences D (divergences), per-token
predictors (predictors), and the statistics behind every interval (stats)."""
