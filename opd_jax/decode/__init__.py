"""Decoding and scoring kernels: sampling, truncation, scoring, sharding, and the stop rules of continuations."""
