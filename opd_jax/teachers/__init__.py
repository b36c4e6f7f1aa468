"""Teachers: configurations and self-distillation contexts (contexts: the registry) and teachers with another
tokenizer (cross, cross_tree, cross_view)."""
