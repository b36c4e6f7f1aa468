"""Exact toys and lookahead checks that validate the estimators against known truth."""
