"""Checks of the estimators against known truth: an exactly solvable policy (exact_toys), the exact toy training
experiment (toy_training, toy_analysis), and the one-step lookahead at study nodes (lookahead,
lookahead_summary)."""
