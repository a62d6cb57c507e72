"""Each rule at its own best layout: the layout search beneath ``trainingcost plan --layout search`` (no torch).

For a model, a plan's fixed fields (GPUs, global batch, precision, framework, network) and the layout fields left
free (``FIELDS``), the search enumerates every layout a real framework can run (:func:`space`):

- tp x pp x dp = GPUs; tp divides the heads, the key/value heads and d_ff, and stays inside a node unless
  ``tp_across_nodes``; pp at most the blocks (an uneven split where it does not divide them, if the framework
  splits unevenly: ``can.uneven``);
- the global batch divides over dp x micro-batch (the global batch fixed once for every layout: the plan's default
  at dp = GPUs, about 4M tokens, a multiple of every dp, unless given);
- interleave v > 1 only with pp > 1 under the framework's even-style split (not nanotron's balanced one), v dividing
  the blocks of a full stage (two or more each where the split is uneven, its short stages one block fewer), and
  micro-batches per step a multiple of pp;
- sequence parallelism only with tp > 1; ep dividing the experts and dp (a mixture of experts);
- the shardings none, ZeRO-1, 2, 3 (``fsdp`` is ZeRO-3's sharding: one of them is enough); checkpointing none,
  selective, full;
- HSDP replica groups R (``replicate``, only when asked for: ``SEARCH_ALL``, what ``--layout search`` frees, leaves
  it as given): every R dividing dp that leaves groups of two ranks or more, under the shardings groups can split
  (not none, not a ZeRO-1 synced after the backward), and only under a framework with hybrid sharding
  (``can.replicate``);
- the micro-batches that fit the GPU's memory (the plan's memory model, analytic/plan.py).

Each layout is priced by the plan's own step-time model (:func:`..steptime.predict_step`, with a memo that keeps
the pieces shared between layouts, the same number with or without it), per rule. The objective at a given GPU
count is the step time (time, GPU-hours, cost and energy rank layouts alike there: each is the step time times a
constant); ties go to the smaller memory, then to the layout enumerated first. Only layouts that fit win.

**Exact.** The search prices every layout of the space that fits, except where a lower bound proves it cannot win:
for a (tp, pp, dp, micro-batch, sequence parallelism, checkpointing, ep), the step is at least M micro-batches on
the critical stage (compute and exposed tensor-parallel communication, :func:`..steptime.step.micro_batch`) plus
the pipeline's fewest sends and smallest bubble over the group's interleavings, every other term (data-parallel
communication, optimizer) being non-negative and added to it (:func:`_lower_bound`). The groups are priced best first, in the order of their
bounds; once a group's bound exceeds the top-th best step found, so do all the rest's, and none of their shardings
and interleavings is priced. Ties between equal steps and memories go to the layout enumerated first, whatever the
order of pricing.
tests/test_layout.py checks the result against brute force (every layout priced, no memo, no bound) on random cases.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field

from ..config import ConfigError
from .steptime import offload as host_offload

FIELDS = ("tp", "pp", "interleave", "micro_batch", "checkpointing", "sharding", "sequence_parallel", "ep", "replicate",
          "schedule")
# What ``--layout search`` leaves to the search: every field but the HSDP replica groups and the pipeline schedule,
# searched only when asked for (``--replicate auto``: hybrid sharding multiplies the sharded layouts by the divisors
# of dp; ``--schedule auto``: each schedule is a search of its own)
SEARCH_ALL = FIELDS[:-2]
SHARDINGS = ("none", "zero1", "zero2", "zero3")
CHECKPOINTING = ("none", "selective", "full")
SHORT = {"none": "", "selective": "sel", "full": "full", "zero1": "z1", "zero2": "z2", "zero3": "z3", "fsdp": "fsdp"}


@dataclass(frozen=True)
class Candidate:
    """One layout and what the model says of it."""

    tp: int
    pp: int
    interleave: int
    micro_batch: int
    checkpointing: str
    sharding: str
    sequence_parallel: bool
    ep: int
    dp: int
    step_s: float
    memory_bytes: float
    cp: int = 1  # context parallelism, as given (not searched)
    etp: int | None = None  # the experts' tensor parallelism where it is not tp (MoE folding; as given)
    replicate: int = 1  # HSDP replica groups (as given, or searched with --replicate auto)
    schedule: str = ""  # the pipeline schedule (steptime/schedules.py; as given, or searched with --schedule auto)

    def compact(self) -> str:
        """e.g. ``tp8 pp4 v2 dp32 mb1 sel sp z1``."""
        parts = [f"tp{self.tp}", f"pp{self.pp}"]
        if self.interleave > 1:
            parts.append(f"v{self.interleave}")
        if self.cp > 1:
            parts.append(f"cp{self.cp}")
        parts += [f"dp{self.dp}", f"mb{self.micro_batch}"]
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        if self.etp is not None and self.etp != self.tp:
            parts.append(f"etp{self.etp}")
        parts += [SHORT[self.checkpointing], "sp" if self.sequence_parallel else "", SHORT[self.sharding]]
        if self.replicate > 1:
            parts.append(f"r{self.replicate}")
        if self.pp > 1 and self.schedule not in ("", "1f1b", "interleaved"):
            parts.append(self.schedule)
        return " ".join(p for p in parts if p)

    def spec_fields(self) -> dict:
        return {"tp": self.tp, "pp": self.pp, "interleave": self.interleave, "micro_batch": self.micro_batch,
                "checkpointing": self.checkpointing, "sharding": self.sharding,
                "sequence_parallel": self.sequence_parallel, "ep": self.ep, "replicate": self.replicate,
                "schedule": self.schedule}


@dataclass
class RuleSearch:
    rule: str
    best: Candidate | None
    top: list  # the best few Candidates, best first
    space: int  # layouts in the space (every micro-batch that divides the batch, fitting or not)
    fitting: int  # of them, those that fit the GPU's memory
    priced: int  # of them, those priced (the rest proved unable to win by the lower bound)


@dataclass
class Search:
    gpus: int
    global_batch: int
    rules: dict  # rule -> RuleSearch
    rejected: list = field(default_factory=list)  # one line per reason a part of the space was left out
    seconds: float = 0.0


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})


def replica_groups(spec, free: frozenset, dp: int) -> list[int]:
    """The HSDP replica-group counts R of a layout with ``dp`` replicas: as given, or (``replicate`` free) every R
    dividing dp that leaves each group two ranks or more (dp / R x cp >= 2), 1 (no hybrid sharding) first."""
    if "replicate" not in free:
        return [spec.replicate]
    return [r for r in divisors(dp) if r == 1 or dp // r * spec.cp >= 2]


def _structures(cfg, spec, free: frozenset, per_node: int, tp_across_nodes: bool, rejected: list):
    """(tp, pp, dp, ep, replicate) of the space, with the reasons others were left out."""
    blocks = sum(cfg.depth(s) for s in cfg.stacks)
    gpus = spec.gpus
    if "tp" in free:
        tps, refused, crossing = [], [], []
        for t in divisors(gpus):
            if cfg.heads % t or cfg.kv_heads % t or cfg.d_ff % t or (cfg.dense_blocks and cfg.dense_width % t):
                refused.append(t)
            elif t > per_node and not tp_across_nodes:
                crossing.append(t)
            else:
                tps.append(t)
        if refused:
            rejected.append(f"tp {', '.join(map(str, refused))}: does not divide the heads {cfg.heads}, the key/value "
                            f"heads {cfg.kv_heads} or d_ff {cfg.d_ff}")
        if crossing:
            rejected.append(f"tp {', '.join(map(str, crossing))}: crosses nodes of {per_node} GPUs "
                            "(--tp-across-nodes allows it)")
    else:
        tps = [spec.tp]
    can = dict(spec.can) if spec.can else {}
    out, uneven, unsplit = [], set(), set()
    cp = spec.cp  # context parallelism as given (not searched)
    for t in tps:
        if gpus % (t * cp):
            rejected.append(f"tp {t}: tp x cp = {t * cp} does not divide the {gpus} GPUs")
            continue
        pps = [p for p in divisors(gpus // (t * cp)) if p <= blocks] if "pp" in free else [spec.pp]
        if "pp" in free and can and not can.get("uneven", True):
            uneven |= {p for p in pps if blocks % p}
            pps = [p for p in pps if blocks % p == 0]
        for p in pps:
            if gpus % (t * p * cp):
                continue
            dp = gpus // (t * p * cp)
            if spec.replicate > 1 and "replicate" not in free and (dp % spec.replicate or dp // spec.replicate * cp < 2):
                unsplit.add(dp)
                continue
            for R in replica_groups(spec, free, dp):
                if cfg.moe:
                    et = t if spec.etp is None else spec.etp  # the experts' tensor parallelism: folded where below t
                    if t % et:
                        rejected.append(f"tp {t}: the experts' tensor-parallel degree {et} (--etp) does not divide it")
                        break
                    group = dp // R  # HSDP: each replica group holds every expert
                    fits = (lambda e: group % e == 0) if et == t else (lambda e: (t * cp * group) % (e * et) == 0)
                    eps = [e for e in (divisors(cfg.experts) if "ep" in free else [spec.ep]) if fits(e)]
                    if not eps and "ep" not in free and R == replica_groups(spec, free, dp)[0]:
                        rejected.append(f"tp {t} pp {p}: ep {spec.ep} does not fit dp {dp}" + (
                            f" (ep x etp {spec.ep * et} must divide tp x cp x dp {t * cp * dp})" if et != t else ""))
                else:
                    eps = [1]
                out.extend((t, p, dp, e, R) for e in eps)
    if unsplit:
        rejected.append(f"dp {', '.join(map(str, sorted(unsplit)))}: does not split into {spec.replicate} replica "
                        "groups of two ranks or more (--replicate)")
    if uneven:
        rejected.append(f"pp {', '.join(map(str, sorted(uneven)))}: does not divide the {blocks} blocks, and framework "
                        f"{spec.framework} splits them only evenly")
    return out


def search(cfg, spec, device, rules, free, tp_across_nodes: bool = False, top: int = 5, prune: bool = True,
           memo: dict | None = None) -> Search:
    """Every rule's best layout over the fields ``free`` (the rest as ``spec`` gives them); see the module's doc.
    With ``schedule`` among them, a search per pipeline schedule (1F1B or interleaved as the interleave field says,
    then each zero-bubble schedule and DualPipe for the rules whose backward runs stage by stage), each rule's best
    layouts then merged across them."""
    if "schedule" not in free:
        return _search(cfg, spec, device, rules, frozenset(free), tp_across_nodes, top, prune, memo)
    from .steptime.schedules import SPLIT
    from .steptime.step import rule_work

    start, rest = time.perf_counter(), frozenset(free) - {"schedule"}
    through = {r for r, w in rule_work(cfg, list(rules)).items() if w["through"] and w["backward"]}
    found = [(s, _search(cfg, dataclasses.replace(spec, schedule=s), device, rules if s == "" else
                         [r for r in rules if r in through], rest if s == "" else rest - {"interleave"},
                         tp_across_nodes, top, prune, memo))
             for s in ("", *SPLIT) if s == "" or through & set(rules)]
    out = {}
    for r in rules:
        parts = [(s, f.rules[r]) for s, f in found if r in f.rules]
        ranked = sorted(((c.step_s, c.memory_bytes, k, dataclasses.replace(c, schedule=s))
                         for s, rs in parts for k, c in enumerate(rs.top) if s == "" or c.pp > 1),
                        key=lambda x: x[:3])
        top_ = [c for *_, c in ranked[:top]]
        out[r] = RuleSearch(r, top_[0] if top_ else None, top_, sum(rs.space for _, rs in parts),
                            sum(rs.fitting for _, rs in parts), sum(rs.priced for _, rs in parts))
    rejected = list(dict.fromkeys(line for _, f in found for line in f.rejected))
    return Search(found[0][1].gpus, found[0][1].global_batch, out, rejected, time.perf_counter() - start)


def _search(cfg, spec, device, rules, free, tp_across_nodes: bool = False, top: int = 5, prune: bool = True,
            memo: dict | None = None) -> Search:
    """:func:`search` at the schedule ``spec`` gives.

    ``prune`` False and a fresh ``memo`` per call: brute force, every layout priced from scratch (the test's
    reference)."""
    from .plan import (OPTIMIZER_SLOTS, activations_per_sequence, global_batch, largest_divisor_at_most,
                       largest_micro_batch, memory_per_gpu, model_facts, step_layout)
    from .steptime import predict_step
    from .steptime.device import GENERIC
    from .steptime.schedules import effective, in_flight, kept_share
    from .steptime.step import interleave_blocks, interleave_problem, rule_work

    def kept(p: int, v: int) -> float:  # activations kept with v chunks per GPU, over 1F1B's
        return in_flight("interleaved", p, v) if v > 1 else 1.0

    start = time.perf_counter()
    free = frozenset(free)
    unknown = free - set(FIELDS)
    if unknown:
        raise ConfigError(f"layout: {sorted(unknown)[0]!r} cannot be searched (allowed: {', '.join(FIELDS)})")
    rules = list(dict.fromkeys(rules))
    if spec.etp is not None:  # the value itself (its fit with each tp is the space's)
        from .plan import check_etp_value
        check_etp_value(spec.etp, cfg)
    per_node = spec.gpus_per_node or int(device.steptime.get("gpus_per_node", GENERIC["gpus_per_node"]))
    rejected: list[str] = []
    if spec.global_batch is not None:
        G = spec.global_batch
    else:  # the plan's default at dp = GPUs: a multiple of the GPUs, so of every dp
        G = global_batch(dataclasses.replace(spec, tp=1, pp=1), cfg)[0]
    can = dict(spec.can) if spec.can else {}
    if can:  # what the framework cannot run is not in the space (fields given stay as given)
        for field_name, ability in (("tp", "tensor"), ("pp", "pipeline"), ("interleave", "interleave"),
                                    ("sequence_parallel", "sequence_parallel"), ("replicate", "replicate")):
            if field_name in free and not can.get(ability, True):
                free = free - {field_name}
                rejected.append(f"{field_name}: framework {spec.framework} does not run {ability.replace('_', ' ')} "
                                "parallelism" if ability not in ("interleave", "replicate") else
                                f"interleave: framework {spec.framework} has no interleaved pipeline schedule"
                                if ability == "interleave" else
                                f"replicate: framework {spec.framework} has no hybrid sharding (replica groups)")
    structures = _structures(cfg, spec, free, per_node, tp_across_nodes, rejected)
    blocks = sum(cfg.depth(s) for s in cfg.stacks)
    facts = model_facts(cfg, list(dict.fromkeys(["bp", *rules])), spec.optimizer, spec.finetune)
    work = rule_work(cfg, list(dict.fromkeys(["bp", *rules])), spec.finetune)
    memo = {} if memo is None else memo
    capacity = float(device.memory_bytes)
    shardings = (tuple(s for s in SHARDINGS if s in can["shardings"] or (s == "zero3" and "fsdp" in can["shardings"]))
                 if can else SHARDINGS) if "sharding" in free else (spec.sharding,)
    if can and "sharding" in free and set(SHARDINGS) - set(shardings):
        rejected.append(f"sharding {', '.join(s for s in SHARDINGS if s not in shardings)}: not run by framework "
                        f"{spec.framework}")
    if spec.offload != "none" and "sharding" in free:  # an offload runs under the ZeRO stages that shard its state
        allowed = tuple(sh for sh in shardings if host_offload.allows(spec.offload, sh))
        if set(shardings) - set(allowed):
            rejected.append(f"sharding {', '.join(sh for sh in shardings if sh not in allowed)}: --offload "
                            f"{spec.offload} needs the state sharded ({', '.join(allowed)})")
        shardings = allowed
    searched = "replicate" in free  # R per layout below; else the given R filters the shardings here
    if not searched and spec.replicate > 1 and "none" in shardings and "sharding" in free:
        shardings = tuple(s for s in shardings if s != "none")
        rejected.append(f"sharding none: --replicate {spec.replicate} groups shard the state; without sharding "
                        "there is nothing to shard")
    if not searched and spec.replicate > 1 and "zero1" in shardings and "sharding" in free and \
            spec.zero1_sync == "after_backward":
        shardings = tuple(s for s in shardings if s != "zero1")
        rejected.append(f"sharding zero1: framework {spec.framework} syncs ZeRO-1 after the backward over every "
                        "data-parallel rank, without replica groups (--replicate)")
    if not searched and spec.replicate > 1 and not shardings:
        raise ConfigError(f"replicate: framework {spec.framework} runs no sharding that {spec.replicate} replica groups "
                          "can split (hybrid sharding needs zero1, zero2 or zero3 inside each group; allowed: "
                          "--replicate 1, or another --framework)")
    checkpoints = CHECKPOINTING if "checkpointing" in free else (spec.checkpointing,)
    if searched and not any(_hybrid(sh, spec) for sh in shardings):
        runs = dict(spec.can or ()).get("replicate")
        rejected.append(f"replicate: no sharding of the space ({', '.join(shardings)}) splits into replica groups "
                        + (f"(framework {spec.framework} runs them under {', '.join(runs)} only)" if runs else
                           "(hybrid sharding needs zero1, zero2 or zero3 inside each group)"))
    elif searched and spec.can and set(shardings) - {"none"} - {s for s in shardings if _hybrid(s, spec)}:
        rejected.append(f"replicate: framework {spec.framework} runs replica groups under "
                        f"{', '.join(dict(spec.can)['replicate'])} only; its other shardings keep one group")
    indivisible = [(t, p, dp) for t, p, dp, _, _ in structures if G % dp]
    if indivisible:
        rejected.append(f"dp {', '.join(sorted({str(dp) for _, _, dp in indivisible}, key=int))}: the global batch of "
                        f"{G} sequences does not divide over it")
    slots = OPTIMIZER_SLOTS[spec.optimizer]
    for r in rules:  # the rule's facts from the one table of every rule (predict_step would build one per rule)
        memo.setdefault(("facts", r), (facts, float(facts.per_rule.loc[r, "trained"])))
    out, specs = {}, {}
    for r in rules:
        ranked, space, fitting, priced = [], 0, 0, 0
        groups = []  # (tp, pp, dp, ep, R, checkpointing, micro-batch, sp, M, the shardings' fits, [(sharding, v)])
        backward = bool(work[r]["backward"])
        for t, p, dp, ep, R in structures:
            if G % dp:
                continue
            r_shardings = shardings if R == 1 else tuple(sh for sh in shardings if _hybrid(sh, spec))
            if not r_shardings:
                continue
            per_replica = G // dp
            sps = (False, True) if ("sequence_parallel" in free and t > 1) else (spec.sequence_parallel and t > 1,)
            if cfg.moe and spec.etp is not None and spec.etp != t:  # MoE folding runs with sequence parallelism
                sps = tuple(sp for sp in sps if sp)
            if "interleave" in free:
                vs = [v for v in divisors(interleave_blocks(blocks, p)) if not interleave_problem(blocks, p, v)] \
                    if (p > 1 and spec.pipeline_split == "even" and spec.schedule in ("", "interleaved")) else [1]
            else:
                vs = [spec.interleave]
            mbs = divisors(per_replica) if "micro_batch" in free else [spec.micro_batch]
            for ckpt in checkpoints:
                if not backward and ckpt != "none" and "checkpointing" in free:
                    continue  # a rule without a backward keeps no graph: checkpointing changes nothing
                acts = activations_per_sequence(facts, r, ckpt, spec.checkpoint_every)
                for sp in sps:  # sequence parallelism changes the activations each rank keeps (plan_memory)
                    fits = {}  # sharding -> (its spec, fixed bytes, bytes per sequence, the most sequences that fit)
                    for sh in r_shardings:
                        s_key = (t, p, ep, sh, ckpt, R, sp)
                        if s_key not in specs:  # the same for every rule
                            specs[s_key] = dataclasses.replace(spec, tp=t, pp=p, ep=ep, sharding=sh,
                                                               checkpointing=ckpt, global_batch=G, replicate=R,
                                                               interleave=1, sequence_parallel=sp)
                        s_spec = specs[s_key]
                        parts = memory_per_gpu(facts, s_spec, r, acts)
                        fixed = sum(v for k, v in parts.items() if k != "activations")
                        fits[sh] = (s_spec, fixed, parts["activations"],
                                    largest_micro_batch(fixed, parts["activations"], capacity))
                    # interleaved 1F1B keeps 1 + (p - 1)/(p v) of 1F1B's activations (steptime/schedules.py in_flight)
                    most = {(sh, v): largest_micro_batch(fits[sh][1], fits[sh][2] * kept(p, v), capacity)
                            for sh in r_shardings for v in vs}
                    if "micro_batch" not in free and not spec.micro_batch:  # max: the plan's own choice per layout
                        choice = {(sh, v): max(1, largest_divisor_at_most(per_replica, most[(sh, v)],
                                                                          p if v > 1 else 1)
                                               or largest_divisor_at_most(per_replica, most[(sh, v)]))
                                  for sh in r_shardings for v in vs}
                        sizes = sorted(set(choice.values()))
                    else:
                        choice, sizes = None, mbs
                    for mb in sizes:
                        M = per_replica // mb
                        ok_vs = [v for v in vs if v == 1 or M % p == 0]
                        # each sharding and interleave at this micro-batch (at its own largest only, where the plan
                        # picks)
                        pairs = [(sh, v) for sh in r_shardings for v in ok_vs
                                 if choice is None or choice[(sh, v)] == mb]
                        fit = [(sh, v) for sh, v in pairs if mb <= most[(sh, v)]]
                        space += len(pairs)
                        fitting += len(fit)
                        if fit:
                            groups.append((t, p, dp, ep, R, ckpt, mb, sp, M, fits, fit))
        # Best first: the groups in the order of their lower bound (the enumeration's among equals); once a bound
        # exceeds the top-th best step found, so do every later group's, and none is priced
        if prune:
            bounded, bounds = [], {}  # the bound reads neither the sharding nor the replica groups
            for i, (t, p, dp, ep, R, ckpt, mb, sp, M, fits, items) in enumerate(groups):
                key = (t, p, dp, ep, ckpt, mb, sp, max(v for _, v in items))
                if key not in bounds:
                    lay = step_layout(fits[items[0][0]][0], G, mb, interleave=1, sequence_parallel=sp, slots=slots)
                    try:
                        bounds[key] = _lower_bound(cfg, lay, device, r, work, memo, key[-1])
                    except ConfigError:  # priced below, where the layout's own line is kept
                        bounds[key] = 0.0
                bounded.append((bounds[key], i))
            bounded.sort()
            order = [i for _, i in bounded]
        else:
            bounded, order = [], range(len(groups))
        for k, i in enumerate(order):
            if prune and len(ranked) >= top and bounded[k][0] > ranked[-1][0]:
                break
            t, p, dp, ep, R, ckpt, mb, sp, M, fits, items = groups[i]
            for j, (sh, v) in enumerate(items):
                s_spec, fixed, per_seq, _ = fits[sh]
                memory = fixed + per_seq * mb * kept(p, v) * kept_share(
                    effective(spec.schedule, v), p, v, M)
                lay = step_layout(s_spec, G, mb, interleave=v, sequence_parallel=sp, slots=slots)
                priced += 1
                try:
                    pred = predict_step(cfg, lay, device, r, work, memo if prune else {})
                except ConfigError as err:  # a schedule this layout cannot run (DualPipe's micro-batches)
                    rejected.append(str(err))
                    continue
                ranked = _insert(ranked, (pred.step_time_s, memory, (i, j),
                                          Candidate(t, p, v, mb, ckpt, sh, sp, ep, dp, pred.step_time_s, memory,
                                                    spec.cp, spec.etp, R, spec.schedule)), top)
        ranked = [c for *_, c in ranked]
        out[r] = RuleSearch(r, ranked[0] if ranked else None, ranked, space, fitting, priced)
    return Search(spec.gpus, G, out, list(dict.fromkeys(rejected)), time.perf_counter() - start)


def _hybrid(sharding: str, spec) -> bool:
    """Whether replica groups can split a sharding (analytic/steptime/step.py, hsdp_problem): ZeRO-1, 2 or 3, but not
    a ZeRO-1 synced after the backward over every data-parallel rank (nanotron's); and under a framework of the
    catalogue, one it runs in replica groups (``can.replicate``: DeepSpeed's MiCS ZeRO-3 only, Megatron-Core's
    optimizer instances ZeRO-1 only, ...)."""
    if sharding == "none" or (sharding == "zero1" and spec.zero1_sync == "after_backward"):
        return False
    allowed = dict(spec.can or ()).get("replicate")
    if allowed is None:  # no framework's capabilities given: every sharding the model can split
        return True
    return sharding in allowed or (sharding == "zero3" and "fsdp" in allowed)


def _insert(ranked: list, entry: tuple, top: int) -> list:
    """The ``top`` best (step, memory, enumeration order, Candidate) entries: by step time, then memory, then the
    layout enumerated first (so the order layouts are priced in changes nothing)."""
    ranked = [*ranked, entry]
    ranked.sort(key=lambda e: e[:3])
    return ranked[:top]


def _lower_bound(cfg, lay, device, rule, work, memo, interleave: int) -> float:
    """A lower bound of the step of every layout of ``lay``'s group (its shardings and interleavings up to
    ``interleave``): M micro-batches on the critical stage (:func:`..steptime.step.micro_batch`: compute and
    exposed tensor-, expert- and context-parallel communication, which read neither the sharding nor the
    interleave), the pipeline's sends at one virtual stage and its bubble at ``interleave`` (the fewest sends, the
    smallest bubble); the step adds the data-parallel collectives, the optimizer and the copies, none negative, to
    the same terms (each no smaller), so no rounding makes the bound exceed it."""
    from .steptime.step import micro_batch, pipeline_seconds

    one = micro_batch(cfg, lay, device, rule, work, memo)
    sends, _ = pipeline_seconds(cfg, lay, one, work[rule], interleave=1)
    _, bubble = pipeline_seconds(cfg, lay, one, work[rule], interleave=interleave)
    return lay.accumulation * one.seconds + bubble + sends
