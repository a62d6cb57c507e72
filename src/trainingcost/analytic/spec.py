"""The declaration types of the catalogue: what a learning rule and a layer kind are, as data.

These types import nothing from the package and never torch, so a rule's
declaration (``trainingcost/rules/<name>/__init__.py``) and the layer kinds
(:mod:`.layers`) can be read by the torch-free analytic engine, the memory
model, the predictor, the figures, the schema and the command line alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Union

# The execution phases a rule's training step may run, in order (train/rule.py describes each).
EXECUTION_PHASES = ("forward", "backward", "error_projection", "modulated_pass", "target_propagation", "weight_update",
                    "feedback_update", "optimizer_step", "mirror")

# A recipe part: (quantity, multiplicity). The multiplicity is a count, or the name
# of a run setting that gives it ("mirror_steps": WM's mirror steps per training step).
Times = Union[int, str]
Part = tuple[str, Times]
Recipe = Mapping[str, tuple[Part, ...]]  # analytic phase -> parts

# The memory model's named components (analytic/memory.py computes each):
# what a step keeps between its passes; "targets": autograd's, inside units, plus an error per unit (TP, DTP, LRA)
ACTIVATIONS = ("autograd", "pepita", "mempepita", "targets")
# B per weight matrix; d x d per block and embedding; F per stack; an affine d -> d inverse per block (TP, DTP);
# d x d error weights per block and the head's shape at the head (LRA)
FEEDBACK = ("none", "weights", "blocks", "output", "inverses", "error_weights")
# A rule's step on the executed memory tape (analytic/tape/): autograd's program (forward, loss, autograd's backward,
# optimizer), its own (``tape.py`` beside ``step.py``, defining ``program(t, g, run)``), or none (not replayed: -1)
TAPES = ("autograd", "own", "none")


@dataclass(frozen=True)
class RuleMemory:
    activations: str = "autograd"
    feedback: str = "none"
    trains_feedback: bool = False  # the feedback matrices are parameters with gradients and optimizer state
    matrix_buffer_bytes: int = 0  # bytes of buffer the rule keeps per weight matrix (WM: each B's float64 norm)

    def __post_init__(self):
        if self.activations not in ACTIVATIONS:
            raise ValueError(f"memory.activations: {self.activations!r} (allowed: {', '.join(ACTIVATIONS)})")
        if self.feedback not in FEEDBACK:
            raise ValueError(f"memory.feedback: {self.feedback!r} (allowed: {', '.join(FEEDBACK)})")


@dataclass(frozen=True)
class RuleSpec:
    """Everything the project knows about a learning rule, but its training step (``step.py`` beside it)."""

    name: str
    label: str  # as figures and tables print it
    color: str  # hex; figures give another to a rule whose colour is taken
    marker: str  # matplotlib marker
    order: int  # place in tables and figures (ties: by name)
    source: str  # the paper that defines it
    phases: tuple[str, ...]  # execution phases of its training step (train/rule.py lists them all)
    recipe: Recipe  # analytic phase -> the quantities that make it (analytic/engine.py)
    recipe_overrides: Mapping[str, Recipe] = field(default_factory=dict)  # cost model -> phases it replaces
    memory: RuleMemory = RuleMemory()
    defaults: Mapping[str, float] = field(default_factory=dict)  # hyperparameters (config.training.RuleOptions)
    tape: str = "autograd"  # its step on the executed memory tape (TAPES)
    trains_experts: bool = True  # trains a mixture of experts (docs/learning_rules.md); False: refused in one line
    trains_mtp: bool = False  # trains multi-token prediction's modules (DeepSeek-V3's, defined under BP only)

    def __post_init__(self):
        if self.tape not in TAPES:
            raise ValueError(f"rule {self.name!r}: tape {self.tape!r} (allowed: {', '.join(TAPES)})")

    def recipe_for(self, cost_model: str | None, settings: Mapping[str, int]) -> dict[str, list[tuple[str, int]]]:
        """The phases under ``cost_model``, with every multiplicity resolved from ``settings``."""
        chosen = dict(self.recipe)
        if cost_model is not None:
            chosen.update(self.recipe_overrides.get(cost_model, {}))
        return {phase: [(q, settings[t] if isinstance(t, str) else t) for q, t in parts] for phase, parts in chosen.items()}


Expr = Callable[["object"], "object"]  # vectorised: a Shapes-like namespace -> an int64 array


@dataclass(frozen=True)
class LayerKind:
    """Everything the project knows about one kind of layer, but its cost formulas (one per cost model,
    in ``analytic/models/``) and its torch module (``train/model.py``, by ``family``).

    Expressions take a namespace of int64 arrays, per layer instance and per sequence:
    ``d`` d_model, ``h`` heads, ``ff`` d_ff, ``V`` vocab, ``out`` the head's width, ``classes``,
    ``M`` the layer's rows (query rows of attention), ``N`` key/value rows.
    """

    name: str
    family: str  # embedding, positions, attention, ffn, norm, head, projection
    description: str
    model_layer: bool = True  # part of the model (not a rule's extra projection)
    # where a rule's layer sits (model_layer False), one instance per place: "model" (once, named by its kind),
    # "embedding" (after each stack's embedding: "<stack>.embedding.<kind>"), "block" (per block: "<stack>.<i>.<kind>")
    places: tuple[str, ...] = ()
    params: Expr | None = None  # trainable elements, biases included
    weights: Expr | None = None  # entries of its weight matrices (what FA/KP/WM give a B)
    saved: Expr | None = None  # elements autograd keeps for the backward
    working: Expr | None = None  # alive during one forward without autograd: input, intermediates, output
    kept: Expr | None = None  # PEPITA: the standard pass's outputs its updates subtract
    param_tensors: Expr | None = None  # parameter tensors (a count, not an estimate: the memory model's per-tensor optimizer
    # scalars; tests/test_peaks.py checks the bytes it implies against torch)
    module_params: Expr | None = None  # parameters of its largest torch module (a module's own, not its children's:
    # what DeepSpeed's ZeRO-3 gathers at a time); None: the layer is one module, ``params``
