"""PEPITA (Dellaferrera & Kreiman 2022; Algorithm 1 of Pau & Aymone 2024).

One step:

1. standard pass, without an autograd graph; the output of every weight layer is kept;
2. e = softmax(logits) - onehot(target) on the rows with a target;
3. error projection: the input of each stack is modulated by e F, with F fixed,
   random, of shape [out, d_model] and std 0.05 * sqrt(2 / d_model) (fan-in of
   the network's input, as in the reference code); the sign is Algorithm 1's
   (x + F e). Where the error's positions are the stack's own, each position
   gets its own e_t F; otherwise (a classifier; the encoder of an
   encoder-decoder, modulated by the mean error over target positions) one
   row per sequence is added to every position;
4. modulated pass, stage by stage (embedding, each sublayer with its add & norm, head), and after each
   stage the updates of its layers (Algorithm 1 updates inside the loop; a stage per sublayer rather than per
   block keeps one sublayer's activations alive at a time: docs/cost_models.md, memory model):

   - weight matrices: ΔW = (h - h_mod)ᵀ x_mod / rows, Δb = Σ (h - h_mod) / rows,
     where h is the layer's output (after GELU for the FFN's first matrix: the
     a_l = σ(W a_{l-1}) of Algorithm 1) and x_mod its modulated input;
   - LayerNorm, a diagonal layer y = γ ⊙ x̂ + β: Δγ = Σ (y - y_mod) ⊙ x̂_mod / rows,
     Δβ = Σ (y - y_mod) / rows;
   - the token embedding, the first layer, whose modulated output is the
     clean one plus the modulation: ΔE = onehot(tokens)ᵀ (h - h_mod) / rows
     = -onehot(tokens)ᵀ (modulation) / rows, as an index-add (the paper counts
     it as the dense product);
   - the head (last layer): ΔW = eᵀ x_mod / n, Δb = Σ e / n, with the standard
     pass's e (not e_mod) and n the rows with a target: the cross-entropy
     gradient taken at the modulated input;

5. the updates are written into ``.grad`` and the optimizer applies them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...train import attribution, objective
from ...train.model import NORMS, Linear, Stream
from ...train.rule import Rule, no_phases


def _layer_of(model, name: str) -> str:
    try:
        return model.layer_of(name)
    except (AttributeError, KeyError):  # a model without analytic layers (tests' MLP)
        return name


class Pepita(Rule):
    recompute = False  # MEMPEPITA recomputes the standard pass block by block instead of keeping it

    def setup(self) -> None:
        model = self.model
        d = model.cfg.d_model
        std = self.hp('pepita_f_scale') * (2.0 / d) ** 0.5
        self.projection = {stack: self.randn(model.out_features, d, std=std) for stack in model.stack_names}
        self.units = {
            name: module
            for name, module in model.named_modules()
            if isinstance(module, (Linear, *NORMS)) and module is not model.head
        }
        self.layer_of = {name: _layer_of(model, name) for name in self.units}
        self.recording: str | None = None  # 'clean' or 'modulated' while a pass is recorded
        self.clean: dict[str, torch.Tensor] = {}
        self.modulated: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        for name, module in self.units.items():
            module.register_forward_hook(self._record(name))

    def _record(self, name: str):
        def hook(module, args, output):
            if self.recording == "clean":
                self.clean[name] = output
            elif self.recording == "modulated":
                self.modulated[name] = (args[0], output)

        return hook

    # -- one step ---------------------------------------------------------------------
    def step(self, batch, phase=no_phases) -> torch.Tensor:
        model = self.model
        self.optimizer.zero_grad(set_to_none=True)
        with torch.no_grad():
            with phase("forward"):
                self.recording = None if self.recompute else "clean"
                logits = model(batch.tokens)
                self.recording = None
                loss = objective.loss(logits, batch.targets)
                error, rows_with_target = objective.output_error(logits, batch.targets)
                del logits
            with phase("error_projection"), attribution.layer("error_projection"):
                modulation = self.modulation(error)
            modulated = Stream(batch.tokens, modulation)
            reference = Stream(batch.tokens)
            for stage in model.stages(by="sublayer"):  # update after each (branch, add & norm): one sublayer's tensors at a time
                if stage.kind == "head":
                    # The head learns from e at its modulated input; its modulated output is never used.
                    with phase("modulated_pass"):
                        head_input = model.pool(modulated.x)
                    with phase("weight_update"), attribution.layer("head"):
                        self._update_head(model.head, head_input, error, rows_with_target)
                    continue
                if self.recompute:
                    with phase("forward"):
                        self.recording = "clean"
                        stage.run(reference)
                with phase("modulated_pass"):
                    self.recording = "modulated"
                    stage.run(modulated)
                    self.recording = None
                with phase("weight_update"):
                    self.update(stage, modulated)
        with phase("optimizer_step"):
            self.optimizer.step()
        return loss.detach()

    def modulation(self, error: torch.Tensor) -> dict[str, torch.Tensor]:
        out = {}
        for stack, projection in self.projection.items():
            if self.model.error_aligned(stack):
                out[stack] = error @ projection
            else:
                per_sequence = error if error.dim() == 2 else error.mean(dim=1)
                out[stack] = per_sequence @ projection
        return out

    # -- updates ----------------------------------------------------------------------
    def update(self, stage, modulated: Stream) -> None:
        """The updates of one stage's layers, from its recorded clean and modulated activations."""
        if stage.kind == "embedding":
            with attribution.layer(f"{stage.stack}.embedding"):
                self._update_embedding(stage.stack, modulated)
        for name, (x_mod, h_mod) in self.modulated.items():
            module = self.units[name]
            with attribution.layer(self.layer_of[name]):
                if isinstance(module, NORMS):
                    self._update_norm(module, self.clean.pop(name), x_mod, h_mod)
                else:
                    self._update_linear(module, self.clean.pop(name), x_mod, h_mod)
        self.modulated.clear()

    def _update_embedding(self, stack: str, modulated: Stream) -> None:
        """The embedding's tables (token, token types, learned positions), whose summed output the modulation moves:
        each learns ΔT = -onehot(ids)ᵀ modulation / rows, an index-add (a norm after them learns as a norm)."""
        try:
            embedding = self.model.get_submodule(f"{stack}.embedding")
        except AttributeError:  # a model whose input is not embedded (tests' MLP)
            return
        tokens = modulated.tokens[stack]
        shift = modulated.modulation[stack]  # h_mod - h
        if shift.dim() == 2:
            shift = shift.unsqueeze(1).expand(*tokens.shape, shift.shape[-1])
        rows = tokens.numel()
        flat = shift.reshape(rows, -1)
        grad = torch.zeros_like(embedding.weight)
        grad.index_add_(0, tokens.reshape(-1), flat, alpha=-1.0 / rows)
        _accumulate(embedding.weight, grad)  # a tied table collects every stack's update (and the head's)
        owner = self.model.get_submodule(stack)
        types = getattr(owner, "token_type_embedding", None)
        if types is not None:  # every token is of type 0
            grad = torch.zeros_like(types.table.weight)
            grad[0] = flat.sum(0) * (-1.0 / rows)
            types.table.weight.grad = grad
        positions = getattr(owner, "positional_encoding", None)
        if positions is not None and positions.learned:
            grad = torch.zeros_like(positions.table.weight)
            grad[: tokens.shape[1]] = shift.sum(0) * (-1.0 / rows)
            positions.table.weight.grad = grad

    @staticmethod
    def _update_linear(linear: Linear, h: torch.Tensor, x_mod: torch.Tensor, h_mod: torch.Tensor) -> None:
        diff = (h - h_mod).reshape(-1, linear.out_features)
        inputs = x_mod.reshape(-1, linear.in_features)
        rows = diff.shape[0]
        linear.weight.grad = diff.t() @ inputs / rows
        if linear.bias is not None:
            linear.bias.grad = diff.sum(0) / rows

    @staticmethod
    def _update_norm(norm: nn.Module, y: torch.Tensor, z_mod: torch.Tensor, y_mod: torch.Tensor) -> None:
        """A diagonal layer y = γ ⊙ x̂ (+ β): Δγ = Σ (y - y_mod) ⊙ x̂_mod / rows, Δβ = Σ (y - y_mod) / rows,
        x̂ LayerNorm's or RMSNorm's normalisation of the modulated input."""
        width = norm.normalized_shape[-1]
        diff = (y - y_mod).reshape(-1, width)
        rows = diff.shape[0]
        if norm.weight is not None:
            if isinstance(norm, nn.RMSNorm):
                normalised = F.rms_norm(z_mod, norm.normalized_shape, eps=norm.eps).reshape(-1, width)
            else:
                normalised = F.layer_norm(z_mod, norm.normalized_shape, eps=norm.eps).reshape(-1, width)
            norm.weight.grad = (diff * normalised).sum(0) / rows
        if getattr(norm, "bias", None) is not None:
            norm.bias.grad = diff.sum(0) / rows

    @staticmethod
    def _update_head(head: Linear, x_mod: torch.Tensor, error: torch.Tensor, rows_with_target: int) -> None:
        e = error.reshape(-1, head.out_features)
        n = max(rows_with_target, 1)
        _accumulate(head.weight, e.t() @ x_mod.reshape(-1, head.in_features) / n)  # tied: added to the embedding's
        if head.bias is not None:
            head.bias.grad = e.sum(0) / n


def _accumulate(weight: torch.Tensor, grad: torch.Tensor) -> None:
    """Set ``weight.grad``, or add to it where a tied weight already has another layer's update (as autograd sums
    the gradients of a shared parameter)."""
    if weight.grad is None:
        weight.grad = grad
    else:
        weight.grad.add_(grad)
