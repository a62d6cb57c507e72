"""Training: the model, the tasks, the objective, the rule interface and one run (torch)."""
