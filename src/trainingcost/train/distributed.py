"""One rank of a data-parallel run (docs/distributed.md): its shard of every global batch, and the reduction of
its rule's gradients, by torch's DDP / FSDP2 where the rule's step goes through them and by one explicit
all-reduce where it does not (:func:`trainingcost.analytic.comm.mechanism`).

Every rank builds the same model and the same rule from the same seeds (so their parameters and fixed feedback
start equal and never need a broadcast), draws the same *global* batch of ``world x batch`` sequences from the
same generator, and keeps rows ``rank*batch .. (rank+1)*batch``. Gradients are means over a rank's rows;
their mean over the ranks is the mean over the global batch wherever every rank has as many loss terms (every
task but the encoder's masked-token modelling, whose masked count varies by row: there the mean of means is
DDP's usual approximation, as with any DDP run).

Randomness a rule draws per step is made to equal one process's on the global batch:

- WM's mirror steps draw noise of as many rows as the step saw: every rank draws the global step's rows from the
  same generator and repeats the same mirror step (replicated, nothing sent);
- TP's and DTP's reconstruction noise has the batch's shape: every rank draws the global batch's noise and keeps
  its own rows.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ..analytic.comm import mechanism
from .objective import Batch
from .rule import Rule, make_optimizer


@dataclass
class Parallel:
    kind: str  # ddp, zero2, fsdp
    rank: int
    world: int
    bucket_cap_mb: float | None = None  # DDP's default: 25 MiB buckets after a first of 1 MiB (analytic/comm.py)
    replicate: int = 1  # HSDP under zero2 / fsdp: the ranks in this many replica groups, FSDP2 sharding inside each

    # -- data ----------------------------------------------------------------------
    def global_cfg(self, cfg):
        """The configuration whose batches are the global ones (the task draws ``world x batch`` sequences)."""
        return cfg.replace(batch=cfg.batch * self.world)

    def shard(self, batch: Batch) -> Batch:
        rows = batch.targets.shape[0] // self.world
        part = slice(self.rank * rows, (self.rank + 1) * rows)
        return Batch({k: v[part] for k, v in batch.tokens.items()}, batch.targets[part])

    # -- the rule ------------------------------------------------------------------
    def wrap(self, rule: Rule) -> Rule:
        if mechanism(rule.name) == "explicit":
            self._explicit(rule)
        elif self.kind == "ddp":
            from torch.nn.parallel import DistributedDataParallel

            # Fixed feedback buffers (FA, WM) are equal on every rank: no per-forward broadcast (and none at init:
            # the warning's advice to keep broadcast_buffers=False for that).
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*broadcast_buffers.*", category=FutureWarning)
                rule.model = DistributedDataParallel(rule.model, broadcast_buffers=False,
                                                     bucket_cap_mb=self.bucket_cap_mb)
        else:
            self._fsdp(rule)
        self._replicate_randomness(rule)
        return rule

    def _explicit(self, rule: Rule) -> None:
        """Average every gradient the optimizer holds, in one flat all-reduce, before the optimizer's step."""
        optimizer = rule.optimizer
        step = optimizer.step
        world = self.world

        def reduced_step(*args, **kwargs):
            grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
            if grads:
                flat = torch.cat([g.reshape(-1) for g in grads])
                dist.all_reduce(flat)
                flat.div_(world)
                offset = 0
                for g in grads:
                    g.copy_(flat[offset:offset + g.numel()].view_as(g))
                    offset += g.numel()
            return step(*args, **kwargs)

        optimizer.step = reduced_step

    def _fsdp(self, rule: Rule) -> None:
        """FSDP2: every block its own group, the root (embeddings, norms, head) another; zero2 keeps a block's
        parameters gathered from its forward to its backward (``reshard_after_forward=False``), fsdp gathers them
        again for the backward. With ``replicate`` R > 1, HSDP: FSDP2 on a 2-D device mesh (R replica groups of
        world / R ranks, replicate outermost, as torchtitan builds it), each group sharding the parameters and
        every reduce-scatter followed by an all-reduce of its shard across the groups."""
        from torch.distributed.fsdp import fully_shard

        model = rule.model
        reshard = self.kind == "fsdp"
        mesh = {}
        if self.replicate > 1:
            from torch.distributed.device_mesh import init_device_mesh

            device = next(model.parameters()).device.type
            mesh = {"mesh": init_device_mesh(device, (self.replicate, self.world // self.replicate),
                                             mesh_dim_names=("replicate", "shard"))}
        # FSDP2 warns when a wrapped module returns a view (an in-place op on it would skip the pre-backward
        # hook): the runner never writes into the model's output, so the warning is noise in every run's log
        warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view tensor")
        for stack in model.stack_names:
            for block in getattr(model, stack).blocks():
                fully_shard(block, reshard_after_forward=reshard, **mesh)
        fully_shard(model, reshard_after_forward=reshard, **mesh)
        rule.optimizer = make_optimizer(rule.parameters(), rule.options, rule.weight_decay)  # the sharded params

    def _replicate_randomness(self, rule: Rule) -> None:
        world, rank = self.world, self.rank
        if isinstance(getattr(rule, "rows", None), dict) and hasattr(rule, "mirror"):
            rule.rows = _GlobalRows(world)
        if hasattr(rule, "inverse"):  # TP, DTP: the reconstruction noise of the global batch, this rank's rows
            draw = rule.randn

            def randn(*shape: int, std: float = 1.0) -> torch.Tensor:
                full = draw(shape[0] * world, *shape[1:], std=std)
                return full[rank * shape[0]:(rank + 1) * shape[0]]

            rule.randn = randn


class _GlobalRows(dict):
    """WM's rows per weight matrix, recorded by its forward hooks on this rank's shard: the global step's."""

    def __init__(self, world: int):
        super().__init__()
        self.world = world

    def __setitem__(self, key, value):
        super().__setitem__(key, value * self.world)
