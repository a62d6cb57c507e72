"""Diagnostic: the executed memory tape (analytic/tape) against the tensor meter, allocation by allocation.

For each arch and head kind (decoder LM, encoder classifier, encoder-decoder, encoder LM) and each rule the tape
replays, one measured step is metered (``TensorMeter.events``) and replayed (``Tape.events``); the script prints
whether the step start, step peak and every phase peak agree, and, where they do not, the first allocation at which
the two disagree (its size, phase, or the live bytes after it), with the allocations around it. This is how the
tape was made to follow each architecture option (issue 14) and the steps of TP, DTP and LRA (issue 28); use it
when extending the tape (a new option or rule).

    python benchmarks/tape_diff.py --options "positions='relative', norm='rmsnorm'" [--rules bp,dfa] [--context 8]

Settings alternate between SGD fp32 and Adam bf16, and shapes between two tiny ones (``--shapes``). A configuration
the options make invalid (a tied classifier head) is skipped.
"""

from __future__ import annotations

import argparse
import itertools

import numpy as np

from trainingcost.analytic import tape as P
from trainingcost.analytic.catalogue import rule_names
from trainingcost.analytic.memory import memory_table
from trainingcost.config import ConfigError, RuleOptions, TrainSpec, canonical_model, configs_frame
from trainingcost.measure import memory as M
from trainingcost.measure.recorder import StepRecorder
from trainingcost.train.run import run_steps

KINDS = {"decoder": (dict(arch="decoder"), "lm"), "encoder": (dict(arch="encoder", classes=3), "classify"),
         "encoder-decoder": (dict(arch="encoder-decoder"), "copy"), "encoder-lm": (dict(arch="encoder"), "lm")}
SHAPES = [(1, 16, 2, 32, 8, 2, 40), (2, 24, 4, 48, 6, 3, 300)]  # layers, d_model, heads, d_ff, seq, batch, vocab

meters: list = []
tapes: list = []


def _record_events() -> None:
    """Every meter and tape from here on logs its events."""
    begin = M.TensorMeter.begin

    def logged_begin(self, *args, **kwargs):
        begin(self, *args, **kwargs)
        self.events = []  # from the step's start: the bytes alive before it are its starting bytes
        meters.append(self)

    class LoggedTape(P.Tape):
        def __init__(self, start):
            super().__init__(start)
            self.events = []
            tapes.append(self)

    M.TensorMeter.begin = logged_begin
    P.Tape = P.table.Tape = LoggedTape  # (the table module replays the steps on its own name)


def allocations(events) -> list[tuple[int, str, str, int]]:
    """(bytes, phase, label, live bytes after it) of every allocation in the step's phases: the frees between two
    allocations may come in any order without changing what the tape must match."""
    live, out = 0, []
    for sign, size, label, phase in (event[:4] for event in events):
        if phase is None:
            continue
        size = int(np.asarray(size).ravel()[0])
        live += size if sign == "+" else -size
        if sign == "+":
            out.append((size, phase, label, live))
    return out


def compare(entry: dict, task: str, rule: str, optimizer: str, dtype: str, context: int) -> tuple[bool, str]:
    cfg = canonical_model(entry, "")
    spec = TrainSpec(cfg=cfg, task=task, rule=rule, steps=3, seed=0, measure=True, dtype=dtype, warmup=1,
                     options=RuleOptions(optimizer=optimizer))
    recorders = []
    done = run_steps(spec, lambda r, device: recorders.append(StepRecorder(r, device, 1)) or recorders[-1])
    if done.status != "ok":
        return False, f"the run ended {done.status}: {done.message}"
    reading = recorders[0].memory
    tapes.clear()
    # (a mixture of experts: replayed with the routing the step recorded)
    row = memory_table(configs_frame([("", cfg)]), [rule], [dtype], [optimizer], routing=reading.routing_record()).iloc[0]
    got = {"start": int(row["step_start"]), "peak": int(row["peak"]),
           **{p: int(row[f"peak_{p}"]) for p in P.STEP_PHASES if row[f"peak_{p}"] >= 0}}
    want = {"start": reading.start, "peak": reading.peak, **reading.phase_peaks}
    if got == want:
        return True, ""
    lines = [f"  tape  {got}", f"  meter {want}"]
    if tapes:
        metered, taped = allocations(meters[-1].events), allocations(tapes[-1].events)
        for i, (m, t) in enumerate(itertools.zip_longest(metered, taped)):
            if m is None or t is None or m[0] != t[0] or m[1] != t[1] or m[3] != t[3]:
                lines.append(f"  first divergence at allocation {i} (bytes, phase, op or label, live after):")
                for j in range(max(0, i - context), min(i + context, max(len(metered), len(taped)))):
                    mark = "*" if j == i else " "
                    lines.append(f"  {j:4d}{mark} meter {str(metered[j]) if j < len(metered) else '-':58s} "
                                 f"tape {taped[j] if j < len(taped) else '-'}")
                break
    return False, "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--options", default="", help="architecture options as Python keywords, e.g. \"ffn='relu'\"")
    parser.add_argument("--rules", default=",".join(r for r in rule_names() if P.replays(r)))
    parser.add_argument("--shapes", default=repr(SHAPES))
    parser.add_argument("--context", type=int, default=8)
    args = parser.parse_args()
    options = eval(f"dict({args.options})")  # a developer's own command line
    shapes = eval(args.shapes)
    _record_events()
    mismatches = 0
    for i, (kind, (fields, task)) in enumerate(KINDS.items()):
        for j, rule in enumerate(args.rules.split(",")):
            layers, d, heads, d_ff, seq, batch, vocab = shapes[(i + j) % len(shapes)]
            vocab = vocab + 256 if task == "lm" and vocab < 256 else vocab  # the byte-level LM needs 256 ids
            optimizer, dtype = [("sgd", "fp32"), ("adam", "bf16")][(i + j) % 2]
            entry = dict(layers=layers, d_model=d, heads=heads, d_ff=d_ff, seq_len=seq, batch=batch, vocab=vocab,
                         **fields, **options)
            try:
                ok, detail = compare(entry, task, rule, optimizer, dtype, args.context)
            except ConfigError as error:
                print(f"{kind:16s} {rule:10s} skipped: {error}")
                continue
            mismatches += not ok
            print(f"{kind:16s} {rule:10s} {optimizer} {dtype}: {'equal' if ok else 'DIFFERENT'}")
            if detail:
                print(detail)
    print(f"{mismatches} mismatches")


if __name__ == "__main__":
    main()
