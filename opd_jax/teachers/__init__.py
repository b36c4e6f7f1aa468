"""Teachers: self-distillation contexts (contexts) and teachers with another tokenizer (cross, cross_tree,
cross_view)."""
