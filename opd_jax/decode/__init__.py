"""Decoding and scoring kernels: sampling (prefill, on-device decode), branching (continuations from one prefill
of their prefix), truncation (top-k / top-p), scoring (chunked log-probs and predictors), heads (log-probs at
nodes) and stops (where a continuation's reward is known); the mesh and logical axes are models/sharding.py."""
