"""On-policy distillation training (issue 13): losses over the divergence registry, the exact toy experiment,
and the trainer (optax, orbax-checkpoint, LoRA)."""
