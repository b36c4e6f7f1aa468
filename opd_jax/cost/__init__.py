"""What a plan costs: the cost model (estimate), compiled FLOPs (flops) and HLO bytes (hlo_bytes)."""
