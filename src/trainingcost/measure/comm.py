"""The communication meter: every collective a rank issues, seen where torch dispatches it (docs/distributed.md).

DDP's reducer (C++), FSDP2's all-gathers and reduce-scatters and the explicit all-reduces of
:mod:`trainingcost.train.distributed` all reach the process group through the dispatcher's ``c10d`` ops
(``c10d.allreduce_``, ``c10d._allgather_base_``, ``c10d._reduce_scatter_base_``, ``c10d.broadcast_``, ...), so
one ``TorchDispatchMode`` sees them all, as torch's own ``CommDebugMode`` counts them. For each it records the op,
the bytes of the buffer (all-reduce, broadcast: the tensors; all-gather: the gathered output; reduce-scatter:
the unscattered input), the group size, the dtype, the step and phase, and two times: ``wait_s``, spent at a barrier
just before the collective (the ranks' imbalance: a collective cannot start before its slowest rank arrives), and
``seconds``, from the collective's start to its completion on this rank (the meter waits for its ``Work`` where
it is issued, so no collective overlaps compute under the meter, and the time is the whole collective's: what the
calibration of the collectives and the communication model predict).
"""

from __future__ import annotations

import time
from contextlib import contextmanager

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

# op -> (name in the tables, which argument holds the buffer whose bytes are counted)
OPS = {
    "allreduce_": ("all_reduce", 0),
    "allreduce_coalesced_": ("all_reduce", 0),
    "broadcast_": ("broadcast", 0),
    "_allgather_base_": ("all_gather", 0),
    "allgather_into_tensor_coalesced_": ("all_gather", 0),
    "_reduce_scatter_base_": ("reduce_scatter", 1),
    "reduce_scatter_tensor_coalesced_": ("reduce_scatter", 1),
    "allgather_": ("all_gather", 0),
    "reduce_scatter_": ("reduce_scatter", 1),
}
# FSDP2's copies through its collectives' flat buffers (torch.ops.fsdp, _fsdp_collectives.py): the all-gather
# output copied out into the parameters, the gradients copied into the reduce-scatter input (docs/planning.md,
# "Copies of FSDP2's collectives"; the step-time model's shard_copy_bytes)
COPY_OPS = {"split_with_sizes_copy": "copy_out", "chunk_cat": "copy_in"}
DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float64: "fp64", torch.float16: "fp16",
               torch.int32: "int32", torch.int64: "int64"}


def _tensors(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


class CommMeter(TorchDispatchMode):
    """Records every collective issued inside it; ``phase(name)`` and ``step`` say where it was issued. Beside
    them, in ``copies``, FSDP2's copies into and out of its collectives' buffers (COPY_OPS): the bytes each reads
    and writes."""

    def __init__(self):
        super().__init__()
        self.rows: list[dict] = []
        self.copies: list[dict] = []
        self.step = 0
        self.current = ""

    @contextmanager
    def phase(self, name: str):
        previous, self.current = self.current, name
        try:
            yield
        finally:
            self.current = previous

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        namespace, _, rest = str(func).partition(".")
        op = rest.split(".")[0]
        if namespace == "fsdp" and op in COPY_OPS:
            self.copies.append({"step": self.step, "phase": self.current, "op": COPY_OPS[op],
                                "read": int(sum(t.numel() * t.element_size() for t in _tensors(args[0]))),
                                "written": int(sum(t.numel() * t.element_size() for t in _tensors(kwargs.get("out", ()))))})
            return func(*args, **kwargs)
        if namespace != "c10d" or op not in OPS:
            return func(*args, **kwargs)
        name, where = OPS[op]
        tensors = _tensors(args[where])
        group = next((a for a in args if isinstance(a, torch.ScriptObject)), None)
        start = time.perf_counter()
        dist.barrier()
        arrived = time.perf_counter()
        out = func(*args, **kwargs)
        work = out[1] if isinstance(out, tuple) else out
        if isinstance(work, torch.ScriptObject):
            dist.distributed_c10d.Work.unbox(work).wait()
        seconds = time.perf_counter() - arrived
        self.rows.append({
            "step": self.step, "phase": self.current, "op": name,
            "bytes": int(sum(t.numel() * t.element_size() for t in tensors)),
            "group": dist.ProcessGroup.unbox(group).size() if group is not None else dist.get_world_size(),
            "dtype": DTYPE_NAMES.get(tensors[0].dtype, str(tensors[0].dtype)) if tensors else "",
            "seconds": seconds,
            "wait_s": arrived - start,
        })
        return out
