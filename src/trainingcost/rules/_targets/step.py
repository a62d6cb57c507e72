"""What target propagation (TP), difference target propagation (DTP) and local representation alignment (LRA)
share: a chain of *units*, a target per unit, and a local loss per unit.

A unit is a piece of the network that maps one d-wide representation to the next, position by position
of its rows: in a transformer a stack's embedding (the bottom unit of its stack) and each block, a pre-LN
stack's final norm belonging to its last block (as in DFA); in the tests' MLP, one tanh layer. Every unit
``l`` has an output ``h_l`` (its graph kept inside the unit only: its input is a constant), a target
``t_l`` and so an *error* ``e_l = h_l - t_l``; the unit's parameters learn from the local loss
``1/(2R) sum_rows ||h_l - t_l||^2`` (R: the loss's terms; a mean, as the loss is), whose gradient at ``h_l`` is
``e_l / R``. Targets are per example, as the sources write them: the top error is the step times each row's
own loss gradient, ``R`` times the mean loss's. The rules differ only in how the
errors are propagated down the chain and in what their feedback parameters learn (Franceschi, Backpropagation Free Transformers,
sections 5-6;
docs/learning_rules.md has the equations and their sources):

- TP: ``t_{l-1} = g_l(t_l)``, DTP: ``t_{l-1} = h_{l-1} + g_l(t_l) - g_l(h_l)``, with a learned affine
  inverse ``g_l(h) = h V_l^T + c_l`` per unit above the bottom one, trained on the noise-preserving
  reconstruction loss ``1/2 ||g_l(f_l(h_{l-1} + eps)) - (h_{l-1} + eps)||^2`` (Lee et al. 2015);
- LRA: ``t_{l-1} = h_{l-1} - beta e_l E_l``, with error weights ``E_l`` of ``W_l``'s orientation that
  follow ``gamma e_l^T h_{l-1}`` (Ororbia & Mali 2019).

The functions below take plain tensors, so a reference test can drive them on a two-layer MLP; the
transformer rules (``rules/{tp,dtp,lra}/step.py``) call them on the model's units. This package is the three
rules' shared training code (torch); their step on the memory tape is :mod:`.tape` (no torch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

from ...train import attribution, objective
from ...train.model import Stream
from ...train.rule import Rule, no_phases


def rows(x: torch.Tensor) -> torch.Tensor:
    """A (..., d) tensor as (rows, d)."""
    return x.reshape(-1, x.shape[-1])


def difference_step(error: torch.Tensor, inverse: torch.Tensor) -> torch.Tensor:
    """DTP: with ``g_l(h) = h V_l^T + c_l``, ``t_{l-1} = h_{l-1} + g_l(t_l) - g_l(h_l)`` gives
    ``e_{l-1} = e_l V_l^T`` (``c_l`` cancels)."""
    return error @ inverse.t()


def target_step(error: torch.Tensor, output: torch.Tensor, below: torch.Tensor, inverse: torch.Tensor,
                bias: torch.Tensor) -> torch.Tensor:
    """TP: ``t_{l-1} = g_l(t_l) = t_l V_l^T + c_l`` with ``t_l = h_l - e_l``; returns ``e_{l-1} = h_{l-1} - t_{l-1}``."""
    return below - ((output - error) @ inverse.t() + bias)


def alignment_step(error: torch.Tensor, error_weights: torch.Tensor, beta: float) -> torch.Tensor:
    """LRA: ``t_{l-1} = h_{l-1} - beta e_l E_l``, so ``e_{l-1} = beta e_l E_l`` (``E_l``: ``W_l``'s shape,
    d_l x d_{l-1})."""
    return beta * (error @ error_weights)


def inverse_gradients(inverse: torch.Tensor, bias: torch.Tensor, noisy_input: torch.Tensor,
                      noisy_output: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradients of ``1/(2R) sum_rows ||g(f(h + eps)) - (h + eps)||^2`` with respect to ``V`` and ``c``
    (``g(y) = y V^T + c``; R rows; ``noisy_output = f(h + eps)``, a constant): ``r^T y / R`` and ``sum r / R``,
    ``r = g(y) - (h + eps)``: the mean over rows of the noise-preserving loss of Lee et al. 2015."""
    y, x = rows(noisy_output), rows(noisy_input)
    residual = y @ inverse.t() + bias - x
    count = y.shape[0]
    return residual.t() @ y / count, residual.sum(dim=0) / count


def error_weight_gradient(error: torch.Tensor, below: torch.Tensor, gamma: float) -> torch.Tensor:
    """LRA's error-weight update: ``gamma e_l^T h_{l-1}`` (the rule passes gamma / R: a mean over the loss's
    terms, as W's local gradient is), the update a single linear map from ``h_{l-1}`` to ``h_l`` would receive;
    E follows W's change."""
    return gamma * (rows(error).t() @ rows(below))


# ---------------------------------------------------------------------------
# The transformer's units


@dataclass
class Unit:
    """One unit of the model: a stack's embedding (``block`` None) or a block (with its stack's final norm,
    pre-LN, when it is the last). ``output`` keeps its graph inside the unit; ``below`` is its input
    (detached; None for an embedding); ``run`` recomputes the unit on another input (same memory and
    position bias)."""

    name: str  # the stage's name: 'encoder.embedding', 'decoder.3'
    stack: str
    output: torch.Tensor
    below: Optional[torch.Tensor] = None
    run: Optional[Callable[[torch.Tensor], torch.Tensor]] = None

    @property
    def projection(self) -> str:
        """The analytic layer of its inverse (TP, DTP) or error weights (LRA): '<stack>.<i>.target_projection'."""
        return f"{self.name}.target_projection"


def _runner(stages, memory, position_bias) -> Callable[[torch.Tensor], torch.Tensor]:
    def run(x: torch.Tensor) -> torch.Tensor:
        stream = Stream({}, x=x, memory=memory, position_bias=position_bias)
        for stage in stages:
            stage.run(stream)
        return stream.x

    return run


def forward_units(model, batch, head_input_grad: bool):
    """The forward pass, unit by unit, each unit's input a constant (no gradient leaves a unit).

    Returns the units per stack (input side first, each stack's embedding first), the head's input (the
    top unit's output, detached; ``requires_grad`` when ``head_input_grad``) and the logits (the
    classifier pools inside, so the head input's gradient is per position)."""
    stream = Stream(batch.tokens)
    units: dict[str, list[Unit]] = {}
    stages: list = []  # the running unit's stages
    head_input = logits = None
    for stage in model.stages():
        if stage.kind == "head":
            head_input = stream.x.detach().requires_grad_(head_input_grad)
            logits = model.output(model.pool(head_input))
            continue
        if stage.kind == "norm":  # a stack's final norm ends its last block's unit
            last = units[stage.stack][-1]
            stream.x = last.output
            stage.run(stream)
            stages.append(stage)
            last.output = stream.x
            last.run = _runner(tuple(stages), stream.memory, stream.position_bias)
        else:
            below = stream.x
            stage.run(stream)
            stages = [stage]
            unit = Unit(stage.name, stage.stack, stream.x)
            if stage.kind == "block":
                unit.below = below
                unit.run = _runner((stage,), stream.memory, stream.position_bias)
            units.setdefault(stage.stack, []).append(unit)
        stream.x = stream.x.detach()  # the next unit starts from a constant
    return units, head_input, logits


def spread_to_memory(decoder_bottom_error: torch.Tensor, source_rows: int) -> torch.Tensor:
    """The encoder output's error (displacement) in an encoder-decoder: the decoder embedding's (the error at the
    decoder's first block's other input), averaged over the target positions, at every source position (a
    per-sequence displacement, as the project's DFA and PEPITA spread a per-sequence error)."""
    return decoder_bottom_error.mean(dim=1, keepdim=True).expand(-1, source_rows, -1)


HEAD_FEEDBACK = "head_feedback"  # the analytic layer of LRA's error weights at the head


class TargetRule(Rule):
    """The step TP, DTP and LRA share (their ``step.py`` subclasses it and names the differences).

    Phases: ``forward`` (unit by unit), ``backward`` (the loss's backward through the head: the head's
    weight gradient, and TP/DTP's ``dL/dh_L``), ``target_propagation`` (the errors down each chain),
    ``feedback_update`` (the inverses' or error weights' gradients), ``backward`` again (every unit's
    local loss at once: gradients stay inside units) and ``optimizer_step`` (weights and feedback alike).
    """

    head_input_grad = True  # TP and DTP take the top target from dL/dh_L; LRA does not

    def setup(self) -> None:
        for linear in self.model.linears().values():
            linear.explicit_backward = True  # gradients inside units, with weight gradients attributable
        self.blocks = [stage.name for stage in self.model.stages() if stage.kind == "block"]
        self.install()

    def install(self) -> None:
        """Create the feedback parameters (``self.feedback``: a list) per block."""
        raise NotImplementedError

    def feedback_lr(self) -> float:
        return self.options.lr

    def parameters(self):
        return [{"params": list(self.model.parameters())},
                {"params": self.feedback, "lr": self.feedback_lr(), "weight_decay": 0.0}]

    def step(self, batch, phase=no_phases) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        with phase("forward"):
            units, head_input, logits = self.units(batch)
            if not self.head_input_grad:
                logits.retain_grad()
            loss = objective.loss(logits, batch.targets)
        with phase("backward"):
            loss.backward()  # the head's gradients; TP and DTP: dL/dh_L too
        # Targets are per example (Lee et al.'s Algorithm 1 and Ororbia & Mali's equations are written for one
        # example): each row's displacement is the step times its own loss's gradient, i.e. the mean loss's times
        # ``self.scale`` (its terms; a classifier's pooled row counts once per position it averages), and every
        # local loss is the matching mean, 1/(2 scale) sum_rows ||h - t||^2: DTP at eta = 1 gives BP's top unit.
        terms = int((batch.targets != objective.IGNORE).sum())
        self.scale = terms * rows(head_input).shape[0] / rows(logits).shape[0]
        output_error = None if self.head_input_grad else logits.grad * terms
        del logits
        with phase("target_propagation"), torch.no_grad():
            errors = self.propagate(units, head_input, output_error)
        with phase("feedback_update"):
            self.train_feedback(units, errors)
        with phase("backward"):
            chain = [unit for stack in units.values() for unit in stack]
            torch.autograd.backward([unit.output for unit in chain],
                                    [errors[unit.name] / self.divisor(unit, head_input) for unit in chain])
        with phase("optimizer_step"):
            self.optimizer.step()
        return loss.detach()

    def divisor(self, unit: Unit, head_input: torch.Tensor) -> float:
        """The mean's divisor of ``unit``'s local loss: the output stack's scale, in proportion to the unit's rows
        (an encoder's source rows against the decoder's target rows)."""
        return self.scale * rows(unit.output).shape[0] / rows(head_input).shape[0]

    def units(self, batch):
        """The forward pass, unit by unit: (units per stack, head input, logits), :func:`forward_units`."""
        return forward_units(self.model, batch, self.head_input_grad)

    def propagate(self, units, head_input, output_error) -> dict[str, torch.Tensor]:
        """Every unit's error, stack by stack from the output side down; an encoder's top error comes
        from the decoder's bottom (:func:`spread_to_memory`)."""
        errors: dict[str, torch.Tensor] = {}
        top = self.top_error(head_input, output_error)
        previous = None  # the stack above (the decoder, when this is an encoder-decoder's encoder)
        for stack in reversed(list(units)):
            chain = units[stack]
            if previous is not None:
                top = spread_to_memory(errors[previous[0].name], self.model.cfg.seq_len)
            errors[chain[-1].name] = top
            for upper, lower in zip(chain[::-1], chain[-2::-1]):
                with attribution.layer(upper.projection):
                    errors[lower.name] = self.down(upper, lower, errors[upper.name])
            previous = chain
        return errors

    def top_error(self, head_input, output_error) -> torch.Tensor:
        raise NotImplementedError

    def down(self, upper: Unit, lower: Unit, error: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def train_feedback(self, units, errors) -> None:
        raise NotImplementedError


class InverseRule(TargetRule):
    """TP and DTP: an affine inverse ``g_l(h) = h V_l^T + c_l`` per block, initialised to the identity (a
    block is a residual map, near the identity), trained on Lee et al.'s noise-preserving reconstruction."""

    def install(self) -> None:
        d = self.model.cfg.d_model
        self.inverse = {name: torch.nn.Parameter(torch.eye(d, device=self.device, dtype=self.dtype)) for name in self.blocks}
        self.inverse_bias = {name: torch.nn.Parameter(torch.zeros(d, device=self.device, dtype=self.dtype))
                             for name in self.blocks}
        self.feedback = [p for name in self.blocks for p in (self.inverse[name], self.inverse_bias[name])]

    def feedback_lr(self) -> float:
        given = self.options.inverse_lr
        return given if given is not None else self.options.lr * self.hp("inverse_lr_ratio")

    def top_error(self, head_input, output_error) -> torch.Tensor:
        # t_L = h_L - eta dl/dh_L (Lee et al. 2015), l each example's own loss: the top unit's error is eta R dL/dh_L.
        return (self.hp("target_step") * self.scale) * head_input.grad

    def train_feedback(self, units, errors) -> None:
        sigma = self.hp("target_noise")
        with torch.no_grad():
            for chain in units.values():
                for unit in chain[1:]:
                    noisy = unit.below + self.randn(*unit.below.shape, std=sigma)
                    reconstructed = unit.run(noisy)  # f_l(h_{l-1} + eps): the block's forward, again
                    with attribution.layer(unit.projection):
                        grad_v, grad_c = inverse_gradients(self.inverse[unit.name], self.inverse_bias[unit.name],
                                                           noisy, reconstructed)
                    self.inverse[unit.name].grad = grad_v
                    self.inverse_bias[unit.name].grad = grad_c


class AlignmentRule(TargetRule):
    """LRA: error weights ``E_l`` (d x d, ``W_l``'s orientation) per block and ``E_head`` (the head's shape)
    in place of inverses; random at the start, as Ororbia & Mali's, scaled so that ``e E`` keeps ``e``'s
    size (as DFA's B)."""

    head_input_grad = False

    def install(self) -> None:
        d, out = self.model.cfg.d_model, self.model.out_features
        self.error_weights = {name: torch.nn.Parameter(self.randn(d, d, std=d**-0.5)) for name in self.blocks}
        self.head_error_weights = torch.nn.Parameter(self.randn(out, d, std=out**-0.5))
        self.feedback = [*self.error_weights.values(), self.head_error_weights]

    def top_error(self, head_input, output_error) -> torch.Tensor:
        # t_L = h_L - beta e_out E_head: the output error e_out = dL/dlogits through the head's error weights.
        with attribution.layer(HEAD_FEEDBACK):
            projected = self.hp("lra_beta") * (output_error @ self.head_error_weights)
        if projected.dim() == 2:  # a classifier's per-sequence displacement moves its mean: every position alike
            projected = projected.unsqueeze(1).expand(-1, head_input.shape[1], -1)
        return projected

    def down(self, upper: Unit, lower: Unit, error: torch.Tensor) -> torch.Tensor:
        return alignment_step(error, self.error_weights[upper.name], self.hp("lra_beta"))

    def train_feedback(self, units, errors) -> None:
        gamma = self.hp("lra_gamma")
        top = units[list(units)[-1]][-1].output
        with torch.no_grad():
            for chain in units.values():
                for unit in chain[1:]:
                    with attribution.layer(unit.projection):
                        self.error_weights[unit.name].grad = error_weight_gradient(errors[unit.name], unit.below,
                                                                                   gamma / self.divisor(unit, top))
            with attribution.layer(HEAD_FEEDBACK):  # E_head follows W_head: gamma times its gradient (a copy)
                self.head_error_weights.grad = gamma * self.model.head.weight.grad
