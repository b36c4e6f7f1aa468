"""Estimators: P_succ and every estimate at a node (success), the ideal gradient g* and alignment (gradients),
the divergences D (divergences: the registry), per-token predictors (predictors: the registry), and the
statistics behind every interval (stats) and every power statement (sample_size)."""
