"""The learning rules: one folder each, discovered, never listed.

``<name>/__init__.py`` declares the rule (``SPEC``, a torch-free
:class:`~trainingcost.analytic.spec.RuleSpec`: name, label, colour, marker,
phases, analytic recipe, memory components, default hyperparameters);
``<name>/step.py`` holds its training step, a subclass of
:class:`trainingcost.train.rule.Rule`. The analytic catalogue reads the
declarations, the training registry the steps. docs/extending.md shows how
to add one.
"""
