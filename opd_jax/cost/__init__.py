"""What a plan costs: the cost model (estimate), the real programs compiled for abstract shapes (programs) and
HLO bytes (hlo_bytes); the FLOPs formulas are opd_jax/flops.py, the shapes of named checkpoints
opd_jax/study/model_specs.py (`ARCHITECTURES`)."""
