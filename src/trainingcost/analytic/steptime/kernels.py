"""BP's kernels per micro-batch and block on the device model: the block's matrix products forward and backward,
the attention core, the memory-bound kernels, the launch floor and the host's issue time; the ends (the head, the
embedding) and what DualPipe overlaps. :mod:`.step` composes the step from them (docs/planning.md)."""

from __future__ import annotations


from .device import DeviceModel
from . import schedules

# (``lay``: a step.Layout, read by attribute: not imported, step imports this module)


def _floor(times, launch):
    return sum(times), sum(max(0.0, launch - t) for t in times if t > 0)


EAGER_OPS = ("norm", "rotary", "gated")  # what may run op by op: the RMSNorms, the rotary embedding, the gated activation


def eager_ops(elementwise: str) -> frozenset:
    """The kinds of a block's elementwise work that run op by op: none (fused), all of EAGER_OPS (eager), or those
    named, joined by '+' (e.g. rotary+gated: a fused RMSNorm in an otherwise eager model)."""
    if elementwise == "fused":
        return frozenset()
    if elementwise == "eager":
        return frozenset(EAGER_OPS)
    named = frozenset(elementwise.split("+"))
    if not named <= set(EAGER_OPS):
        raise ValueError(f"elementwise: {elementwise!r} (allowed: fused, eager, or {'+'.join(EAGER_OPS)} and their parts)")
    return named


def eager_kernels(e: int) -> dict:
    """Bytes moved per element by each kernel that eager PyTorch runs for a block's RMSNorm (per element of the d-wide
    rows), rotary embedding (per element of q and k) and gated activation (per element of the d_ff-wide product), with
    activations of ``e`` bytes; fp32 is 4 bytes and a cast to fp32 of fp32 activations runs no kernel. Counted op by op
    from the models' code (config/frameworks.yaml, torchtitan-eager and hf-eager; docs/planning.md, "Eager and fused
    elementwise kernels"); fused kernels move 2 e (norm, rotary) and 3 e (gated) forward, twice that backward.

    RMSNorm forward: x.float(), pow(2), mean(-1), x * rsqrt(...), .type_as(x), * weight. Backward, the kernels
    torch's autograd runs for those ops (derivatives.yaml; traced op by op in tests/test_elementwise.py): grad * y and
    its sum (the weight's gradient), grad * w, the cast to fp32, grad * x and its sum (rsqrt's gradient), grad *
    rsqrt, mean's backward (the expanded gradient / d, written), pow's backward (x^1, x 2, x grad), the two paths'
    sum, the cast to the activation dtype. Rotary (torchtitan's complex product, or Hugging Face's q cos +
    rotate_half(q) sin alike): cast to fp32, the product, cast back; its backward the same three. Gated activation:
    act(h1), then act * h3; backward grad * h3, grad * act(h1), act's backward."""
    up = (e + 4,) if e != 4 else ()  # a cast to fp32 (none when the activations are fp32 already)
    down = (4 + e,) if e != 4 else ()
    return {("rmsnorm", "fwd"): (*up, 8, 4, 8, *down, 2 * e),
            ("rmsnorm", "bwd"): (3 * e, e, 2 * e, *up, 12, 4, 8, 4, 8, 8, 12, 12, *down),
            ("rotary", "fwd"): (*up, 8, *down),
            ("rotary", "bwd"): (*up, 8, *down),
            ("gated", "fwd"): (2 * e, 3 * e),
            ("gated", "bwd"): (3 * e, 3 * e, 3 * e)}


def block_times(cfg, lay: Layout, dev: DeviceModel, act_bytes: int) -> dict:
    """Seconds of one block's kernels per micro-batch on one GPU: {fwd|bwd: {matmul, attention, memory, launch}},
    plus the attention core's forward alone (what Korthikanti et al.'s selective recompute repeats)."""
    t, b, s, d = lay.tp, lay.micro_batch, cfg.seq_len, cfg.d_model
    local = s // lay.cp  # the tokens of each sequence on this GPU (context parallelism)
    m = b * local
    a, kv = cfg.attn_width // t, cfg.kv_width // t
    gated = 1 if cfg.gated else 0
    ff = cfg.d_ff // t
    attention_gemms = latent_gemms(cfg, m, t) if cfg.latent else [(m, a + 2 * kv, d), (m, d, a)]
    na = len(attention_gemms)  # the attention's products come first, then the FFN's (a mixture's router first)
    gemms = attention_gemms + [(m, (1 + gated) * ff, d), (m, d, ff)]
    if cfg.moe:  # the router; each expert on its m k / E rows (token-balanced), experts / ep of them on this GPU ...
        # (under MoE parallel folding, experts' tensor parallelism etp < t: this GPU's m / t tokens (sequence
        # parallel) join its expert group's, gathered over etp, each expert d_ff / etp wide: rows x etp / t)
        et = lay.expert_tp
        rows, held = max(1, m * cfg.experts_per_token * et // (t * cfg.experts)), cfg.experts // lay.ep
        expert_rows = rows * lay.ep  # each local expert's rows (rows is reused below for activation bytes)
        fe = cfg.d_ff // et
        gemms = gemms[:na] + [(m, cfg.experts, d)] + [(rows * lay.ep, (1 + gated) * fe, d), (rows * lay.ep, d, fe)] * held
        if cfg.shared_expert_ff:  # ... and the shared expert on every row, with its gate (Qwen-MoE's)
            shared = cfg.shared_expert_ff // t
            gemms += [(m, (1 + gated) * shared + int(cfg.shared_expert_gate), d), (m, d, shared)]
    # the blocks' linear products on dev.products (fp8 under fp8-mixed); a mixture's router stays in the compute dtype
    # (Transformer Engine's and torchao's fp8 replace the blocks' linear layers, not the router's)
    on = [dev if (cfg.moe and i == na) else dev.products for i in range(len(gemms))]
    fwd_mm = [g.gemm(M, N, K) for g, (M, N, K) in zip(on, gemms)]
    bwd_mm = [x for g, (M, N, K) in zip(on, gemms) for x in (g.gemm(M, K, N), g.gemm(N, K, M))]
    heads = max(1, cfg.heads // t)
    dh = cfg.d_head
    causal = cfg.arch == "decoder"
    # QK^T and PV, the masked half skipped by fused kernels; under context parallelism this GPU's s / cp queries
    # against all s keys (load-balanced chunks: 1 / cp of the work), the kernel running on chunks of s / cp. Of a
    # causal sequence cut into 2 cp chunks, the diagonal chunk pairs (cp of the 2 cp^2 chunk pairs' worth of work,
    # 1 / (2 cp)) run with the mask, the rest are whole blocks run without it
    # (latent attention: queries and keys dq wide per head, values dv: 2 b s s h (dq + dv) / t)
    core = (2.0 * b * local * s * heads * (cfg.q_head + cfg.v_head) if cfg.latent else 4.0 * b * local * s * a) \
        * (0.5 if causal else 1.0)
    # the fused backward over the forward: 2.5 where queries and values are alike wide, (3 dq + 2 dv) / (dq + dv)
    back = (3 * cfg.q_head + 2 * cfg.v_head) / (cfg.q_head + cfg.v_head) if cfg.latent else 2.5
    masked = 1.0 / (2 * lay.cp) if (causal and lay.cp > 1) else (1.0 if causal else 0.0)
    if lay.attention in ("flash", "flash3", "cudnn"):
        fwd_att = [dev.flash(masked * core, False, lay.attention, True, local) +
                   dev.flash((1 - masked) * core, False, lay.attention, False, local)]
        bwd_att = [dev.flash(back * masked * core, True, lay.attention, True, local) +
                   dev.flash(back * (1 - masked) * core, True, lay.attention, False, local)]
        fwd_att_mem, bwd_att_mem = [], []
    else:  # Megatron: batched QK^T and PV over all the positions, softmax and dropout in memory
        dqk, dvv = (cfg.q_head, cfg.v_head) if cfg.latent else (dh, dh)
        fwd_att = [dev.gemm(s, s, dqk, b * heads), dev.gemm(s, dvv, s, b * heads)]
        bwd_att = [dev.gemm(s, dqk, s, b * heads), dev.gemm(s, dqk, s, b * heads),
                   dev.gemm(s, s, dvv, b * heads), dev.gemm(s, dvv, s, b * heads)]
        scores = b * heads * s * s
        fwd_att_mem = [dev.memory(4 * scores), dev.memory(5 * scores)]  # scale-mask-softmax r/w; dropout r/w + mask
        bwd_att_mem = [dev.memory(6 * scores), dev.memory(5 * scores)]
    sp = t if lay.sequence_parallel else 1
    e = act_bytes
    # the features rotary positions turn (latent attention: each query head's rotary part and the one key part)
    turned = m * (heads * cfg.qk_rope_head_dim + cfg.qk_rope_head_dim) if cfg.latent else m * (a + kv)
    rows = m * d * e
    routed = m * (cfg.experts_per_token if cfg.moe else 1) * ff  # the activation's elements
    ops = eager_ops(lay.elementwise)
    if ops:  # the model's PyTorch ops one kernel each (eager_kernels), the others fused
        eager = eager_kernels(e)

        def kernels(kind, op_by_op, n, fused_bytes):
            """{fwd, bwd: seconds of each kernel}: op by op, or one fused kernel (its backward twice its time)."""
            if op_by_op:
                return {p: [dev.memory(x * n) for x in eager[(kind, p)]] for p in ("fwd", "bwd")}
            one = dev.memory(fused_bytes * n)
            return {"fwd": [one], "bwd": [2 * one]}

        norms = kernels("rmsnorm", cfg.norm == "rmsnorm" and "norm" in ops, m * d / sp, 2 * e)
        adds = [dev.memory(3 * rows / sp)] * 2
        acts = kernels("gated", gated and "gated" in ops, routed, (2 + gated) * e)
        rot = kernels("rotary", "rotary" in ops, turned, 2 * e) if cfg.positions == "rotary" else \
            {"fwd": [], "bwd": []}
        # qk_norm (Qwen3, Gemma 3, OLMo 2): an RMSNorm over q and over k, op by op where the block's norms are
        qk = kernels("rmsnorm", "norm" in ops, m * (a + kv), 2 * e) if cfg.qk_norm != "none" else {"fwd": [], "bwd": []}
        fwd_mem = 2 * norms["fwd"] + adds + acts["fwd"] + rot["fwd"] + qk["fwd"] + fwd_att_mem
        bwd_mem = 2 * norms["bwd"] + [2 * x for x in adds] + acts["bwd"] + rot["bwd"] + qk["bwd"] + bwd_att_mem
    else:
        norm_res = [dev.memory(2 * rows / sp)] * 2 + [dev.memory(3 * rows / sp)] * 2  # two norms, two residual adds
        act = [dev.memory((2 + gated) * routed * e)]
        rotary = [dev.memory(2 * turned * e)] if cfg.positions == "rotary" else []
        rotary += [dev.memory(2 * m * (a + kv) * e)] if cfg.qk_norm != "none" else []  # qk_norm: q's and k's heads normalised
        fwd_mem = norm_res + act + rotary + fwd_att_mem
        bwd_mem = [2 * x for x in norm_res + act + rotary] + bwd_att_mem
    weight_cast = 0.0
    if dev.linear is not None:  # fp8 products: their operands cast to fp8 (docs/planning.md, "FP8")
        # each product's input in the forward and its output gradient in the backward: read in bf16, written in fp8
        # twice (the operand and its transpose, for the other pass's product: Transformer Engine's cast_transpose)
        fp8 = [(M, N, K) for g, (M, N, K) in zip(on, gemms) if g is not dev]
        fwd_mem = fwd_mem + [dev.memory((e + 2) * M * K) for M, N, K in fp8]
        bwd_mem = bwd_mem + [dev.memory((e + 2) * M * N) for M, N, K in fp8]
        # each weight (n x k on this GPU): read in bf16, written in fp8 with its transpose; per micro-batch, or per
        # step where the framework caches the fp8 weights over the micro-batches (fp8_weight_cache)
        # (every listed product has its own weight: a mixture's experts are listed once per expert on this GPU)
        weight_cast = sum(dev.memory(4 * N * K) for M, N, K in fp8)
    out = {"classes": {  # per layer family and class of work: {matmul, attention} seconds (no launch floor)
        ("attention", "fwd"): {"matmul": sum(fwd_mm[:na]), "attention": sum(fwd_att)},
        ("attention", "bin"): {"matmul": sum(bwd_mm[0:2 * na:2]), "attention": sum(bwd_att)},
        ("attention", "wgrad"): {"matmul": sum(bwd_mm[1:2 * na:2]), "attention": 0.0},
        ("attention", "linear"): {"matmul": sum(fwd_mm[:na]), "attention": 0.0},
        ("ffn", "fwd"): {"matmul": sum(fwd_mm[na:]), "attention": 0.0},
        ("ffn", "bin"): {"matmul": sum(bwd_mm[2 * na::2]), "attention": 0.0},  # the FFN's (a mixture's router and
        ("ffn", "wgrad"): {"matmul": sum(bwd_mm[2 * na + 1::2]), "attention": 0.0},  # experts too): input, weight
        ("ffn", "linear"): {"matmul": sum(fwd_mm[na:]), "attention": 0.0},  # gradients
    }, "linear_flops": {  # the products with the weights alone, full width (all t GPUs), per micro-batch
        "attention": sum(2.0 * M * N * K for M, N, K in latent_gemms(cfg, m, 1)) if cfg.latent else
        2.0 * m * d * (cfg.attn_width + 2 * cfg.kv_width) + 2.0 * m * cfg.attn_width * d,
        # (each GPU's experts run all its group's rows routed to them: per GPU as many rows x experts as its own
        # tokens x k; the router is not split over the t GPUs)
        "ffn": sum(2.0 * M * N * K * (1 if cfg.moe and i == 0 else t) for i, (M, N, K) in enumerate(gemms[na:]))}}
    for name, mm, att, mem in (("fwd", fwd_mm, fwd_att, fwd_mem), ("bwd", bwd_mm, bwd_att, bwd_mem)):
        mm_t, mm_l = _floor(mm, dev.launch)
        at_t, at_l = _floor(att, dev.launch)
        me_t, me_l = _floor(mem, dev.launch)
        out[name] = {"matmul": mm_t, "attention": at_t, "memory": me_t, "launch": mm_l + at_l + me_l}
        host = lay.host_block_s[0 if name == "fwd" else 1]  # a block the host issues more slowly than it runs
        out[name]["launch"] += max(0.0, host - sum(out[name].values()))
    core_t, core_l = _floor(fwd_att + fwd_att_mem, dev.launch)
    out["core_fwd"] = core_t + core_l
    # Per product, for a per-operation recompute (recompute_ops): its forward seconds and FLOPs on this GPU (the fused
    # q/k/v and gate/up products priced apart, each at its own width); a mixture's experts under gate, up and down
    if cfg.moe:
        experts = [(expert_rows, fe, d, held), (expert_rows, fe, d, held), (expert_rows, d, fe, held)]
    else:
        experts = [(m, ff, d, 1), (m, ff, d, 1), (m, d, ff, 1)]
    products = {"q": [(m, a, d, 1)], "k": [(m, kv, d, 1)], "v": [(m, kv, d, 1)], "o": [(m, d, a, 1)],
                "gate": [experts[0]] if gated else None, "up": [experts[1]], "down": [experts[2]]}
    if cfg.latent:  # latent attention: q (q_a and q_b), k the keys' and values' latent (kv_a), v their kv_b, o
        q_part = 2 if cfg.q_lora_rank else 1
        products.update(q=[(*g, 1) for g in attention_gemms[:q_part]], k=[(*attention_gemms[q_part], 1)],
                        v=[(*attention_gemms[q_part + 1], 1)], o=[(*attention_gemms[q_part + 2], 1)],
                        q_up=[(*attention_gemms[q_part - 1], 1)] if cfg.q_lora_rank else None,  # q_b
                        kv_up=[(*attention_gemms[q_part + 1], 1)])  # kv_b
    out["ops_fwd"] = {x: (sum(n * dev.products.gemm(M, N, K) for M, N, K, n in listed),
                          sum(2.0 * M * N * K * n for M, N, K, n in listed))
                      for x, listed in products.items() if listed is not None}
    out["ops_fwd"]["core"] = (out["core_fwd"], core)  # QK^T and PV on this GPU's heads
    # A dense block's tail, which a recompute may leave out (tail_skipped): the down projection's seconds, the
    # memory-bound seconds after it (the residual add; under fp8 the cast of its input), its FLOPs on this GPU
    out["tail_fwd"] = (0.0, 0.0, 0.0) if cfg.moe else \
        (fwd_mm[na + 1], dev.memory(3 * rows / sp) + (dev.memory((e + 2) * m * ff) if dev.linear is not None else 0.0),
         2.0 * m * d * ff)
    out["weight_cast"] = weight_cast  # seconds to cast one block's weights to fp8 (0 unless fp8 products)
    return out


def dualpipe_overlap(cfg, lay: Layout) -> bool:
    """Whether the layout runs DualPipe over a mixture of experts: each forward chunk runs beside another
    micro-batch's backward chunk, the expert-parallel all-to-alls of the one hidden behind the other's compute
    (DeepSeek-AI 2024, DeepSeek-V3 Technical Report, arXiv 2412.19437, section 3.2.1, Figure 4); the compute that hides
    them slows by OVERLAP_SLOWDOWN of the hidden seconds (its SMs shared with the all-to-all kernels: 20 of 132 on the
    report's H800s, section 3.2.2)."""
    return bool(cfg.moe and lay.pp > 1 and schedules.effective(lay.schedule, lay.interleave) == "dualpipe")


def mixture_share(cfg) -> float:
    """The share of a stack's blocks that hold a mixture of experts: all, but a mixture's dense first blocks."""
    blocks = sum(cfg.depth(s) for s in cfg.stacks)
    return (blocks - cfg.dense_blocks) / blocks if cfg.moe and blocks else 1.0


def stack_block_times(cfg, lay: Layout, dev: DeviceModel, act_bytes: int) -> dict:
    """:func:`block_times` of the stack's average block: a mixture of experts whose first ``dense_blocks`` keep a
    dense FFN (DeepSeek) has its mixture block's and its dense block's times weighted by their counts, as the
    engine's FLOPs per block are (every stage priced at the average block)."""
    moe = block_times(cfg, lay, dev, act_bytes)
    if not (cfg.moe and cfg.dense_blocks):
        return moe
    dense = block_times(cfg.replace(experts=0, experts_per_token=0, shared_expert_ff=0, shared_expert_gate=True,
                                    router_norm=True, d_ff=cfg.dense_width, dense_blocks=0, dense_ff=0),
                        lay, dev, act_bytes)
    share = mixture_share(cfg)

    def mix(a, b):
        if isinstance(a, dict):
            return {k: mix(a.get(k, 0.0), b.get(k, 0.0)) for k in dict.fromkeys([*a, *b])}
        if isinstance(a, tuple):
            return tuple(mix(x, y) for x, y in zip(a, b))
        return share * a + (1 - share) * b

    return mix(moe, dense)


def latent_gemms(cfg, m: int, t: int) -> list:
    """Latent attention's products (m, n, k) per micro-batch on one of t tensor-parallel GPUs, as DeepSeek-V3 and
    Megatron-Core split them: the latents' down projections (q_a, kv_a) whole on every GPU, the up projections (q_b or
    q, kv_b) column-parallel by heads, o row-parallel."""
    d, h = cfg.d_model, cfg.heads
    heads = max(1, h // t)
    if cfg.q_lora_rank:
        q = [(m, cfg.q_lora_rank, d), (m, heads * cfg.q_head, cfg.q_lora_rank)]
    else:
        q = [(m, heads * cfg.q_head, d)]
    return q + [(m, cfg.kv_lora_rank + cfg.qk_rope_head_dim, d),
                (m, heads * (cfg.head_dim + cfg.v_head), cfg.kv_lora_rank), (m, d, heads * cfg.v_head)]


def end_times(cfg, bt: dict, ht: dict) -> dict:
    """The head's stage's kernels outside its blocks per micro-batch: the head's (:func:`head_times`), and with
    multi-token prediction (DeepSeek-V3, section 2.2; mtp_depth D) D more heads and D blocks of the stack's
    (average) kind; their products are priced from the rule's FLOPs (:func:`price`), this sum sets the stage's
    memory-bound kernels and launches, and its weight in :func:`critical_stage`. ``classes`` stay the head's own
    (the rates per FLOP, :func:`kernel_rates`)."""
    depth = cfg.mtp_depth
    if not depth:
        return ht
    return {**ht, **{side: {c: (1 + depth) * v + depth * bt[side][c] for c, v in ht[side].items()}
                     for side in ("fwd", "bwd")}}


def head_times(cfg, lay: Layout, dev: DeviceModel, act_bytes: int) -> dict:
    """The LM head (d -> V / t) and its loss, per micro-batch: forward and backward."""
    m, d, t = lay.micro_batch * cfg.seq_len // lay.cp, cfg.d_model, lay.tp
    v = (cfg.classes or cfg.vocab) // t
    if cfg.classes:
        m = lay.micro_batch
    fwd = {"matmul": dev.gemm(m, v, d), "attention": 0.0, "memory": dev.memory(m * v * (act_bytes + 8)), "launch": 0.0}
    bwd = {"matmul": dev.gemm(m, d, v) + dev.gemm(v, d, m), "attention": 0.0,
           "memory": dev.memory(m * v * (4 + act_bytes)), "launch": 0.0}
    classes = {("head", "fwd"): {"matmul": fwd["matmul"], "attention": 0.0},
               ("head", "bin"): {"matmul": dev.gemm(m, d, v), "attention": 0.0},
               ("head", "wgrad"): {"matmul": dev.gemm(v, d, m), "attention": 0.0},
               ("head", "linear"): {"matmul": fwd["matmul"], "attention": 0.0}}
    return {"fwd": fwd, "bwd": bwd, "classes": classes, "linear_flops": {"head": 2.0 * m * d * (cfg.classes or cfg.vocab)}}
