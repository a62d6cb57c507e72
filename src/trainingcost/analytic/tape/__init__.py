"""The executed memory model: tensor bytes alive through one training step, op by op, from shapes alone.

The hand model (:mod:`..memory`) adds up components. Peaks are set by what is alive *together*, so this
package replays one step of our PyTorch code (``train/model.py`` and each rule's ``step.py``) as a tape of
allocations and frees, on CPU and without torch: every op output the tensor meter
(:class:`trainingcost.measure.memory.TensorMeter`) would count, freed when the last reference to it goes
(a Python variable reassigned, a saved tensor released by its autograd node, a gradient consumed). The tape
is vectorised: each event's size is an array over a group of configurations of the same structure.

The package:

- :mod:`.buffers`: a storage with its references (:class:`Buf`) and the tape of live bytes (:class:`Tape`);
- :mod:`.group`: the structure a group shares (:class:`GroupKey`, a frozen dataclass of the option columns) and
  its sizes (:class:`Group`);
- :mod:`.ops`: the model's ops (:class:`Ops`), driven by the block description of :mod:`..layers`;
- :mod:`.moe`: a mixture of experts' ops, for the rows each expert gets (:class:`~.moe.Routing`: token-balanced,
  or a measured step's recorded routing);
- :mod:`.programs`: autograd's step (the default program), the optimizer, the output error;
- :mod:`.table`: every rule's step per group, the peaks table;
- :mod:`.split`: a pipeline stage's backward split into input and weight gradients (the zero-bubble schedules').

A rule's own program lives in its folder (``rules/<name>/tape.py``), as its spec declares (``RuleSpec.tape``).

What the tape follows, and where it comes from:

- the forward pass of the model's stages, with what autograd saves (the inputs of each linear layer, the
  fused attention's q, k, v, output and float32 log-sum-exp, LayerNorm's input, mean and rstd, GELU's
  input, ReLU's output, a gated FFN's two factors, the ids of learned positions and token types) and what
  Python variables keep alive (a branch's output until its sublayer returns, a pre-LN branch's normalised
  input while the branch runs);
- autograd's backward in reverse order of creation (the engine's order when every node leads to the loss):
  a node allocates its outputs, then releases its input gradient and its saved tensors, then hands its
  outputs on; a tensor that receives a second gradient allocates their sum (``add``). Weight gradients
  become ``.grad`` without a copy;
- the loss in at least float32 (a bf16 model's logits are widened: one more float32 copy);
- PEPITA's and MEMPEPITA's passes without a graph, the outputs their forward hooks keep, their per-layer
  updates (``sub``, ``mm``, the division by the row count, LayerNorm's recomputed normalisation);
- DFA's detached segments and projections, WM's mirror steps, KP's copied feedback gradients;
- TP's, DTP's and LRA's units, targets, feedback training and local backward (``rules/_targets/tape.py``);
- the optimizer on CPU: torch's single-tensor loops (``foreach`` is off on CPU). Adam keeps one
  ``denom`` from the previous parameter while it builds the next (``sqrt``, then ``div``); SGD with weight
  decay builds ``grad + wd * param`` per parameter.

Not modelled: the batch (token ids and targets: the input pipeline's, not the step's; the meter counts it
separately) and CUDA's ``foreach`` optimizers (a GPU run's optimizer transients differ).

The tests compare this tape with the meter's reading to the byte (``tests/test_peaks.py``);
``benchmarks/tape_diff.py`` sets the two side by side, allocation by allocation.
"""

from .buffers import BOOL, FLOAT32, INT64, STEP_PHASES, Buf, Tape, bytes_
from .group import Group, GroupKey, group_keys, groups
from .ops import Ops, Stream, Value
from .programs import Run, autograd_step, optimizer_step, output_error
from .table import MAX_TAPE_BLOCKS, PEAK_PHASE_COLUMNS, program, replays, run_settings, step_peaks

__all__ = [
    "BOOL", "FLOAT32", "INT64", "STEP_PHASES", "Buf", "Tape", "bytes_", "Group", "GroupKey", "group_keys", "groups",
    "Ops", "Stream", "Value", "Run", "autograd_step", "optimizer_step", "output_error", "MAX_TAPE_BLOCKS",
    "PEAK_PHASE_COLUMNS", "program", "replays", "run_settings", "step_peaks",
]
