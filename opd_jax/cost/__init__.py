"""What a plan costs: the cost model (estimate), the real programs compiled for abstract shapes (programs),
FLOPs (flops) and HLO bytes (hlo_bytes)."""
