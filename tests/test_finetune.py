"""Fine-tuning with a frozen base (analytic/finetune.py) against PEFT's LoRA and bitsandbytes' 4-bit storage.

- FLOPs: one training step of PEFT's LoRA on small transformers models (Llama, GPT-2 with its fused c_attn Conv1D,
  GPT-NeoX with parallel and sequential blocks), under torch's FlopCounterMode, equal to the plan's FLOPs to the
  integer, for several target sets, with and without ``enable_input_require_grads``.
- Parameters and bytes: the adapters PEFT trains; the weights, gradients and Adam moments after one optimizer step
  (bf16 base, fp32 adapters) equal to the plan's memory parts; QLoRA's stored base (transformers' bitsandbytes
  quantizer on the CPU, ``prepare_model_for_kbit_training``) equal to the plan's.
- By hand: NF4 bytes per tensor (Dettmers et al. 2023's bits per parameter), adapters' FLOPs, the step's
  data-parallel bytes.
- Refusals: one line naming the field and the allowed values.
"""

from __future__ import annotations

import re
import warnings

import pytest

import trainingcost as tc
from trainingcost import cli
from trainingcost.analytic.finetune import FineTune, adapter_parameters, base_bytes, nf4_bytes
from trainingcost.analytic.plan import flops_per_sequence
from trainingcost.config import canonical_model, preset_entry

B, S = 2, 12


def _peft():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    return torch, transformers, peft


def _llama(transformers, **extra):
    config = transformers.LlamaConfig(hidden_size=32, intermediate_size=48, num_attention_heads=4,
                                      num_key_value_heads=2, num_hidden_layers=2, vocab_size=61,
                                      max_position_embeddings=64, attn_implementation="sdpa", **extra)
    names = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "gate": "gate_proj", "up": "up_proj",
             "down": "down_proj"}
    return config, transformers.LlamaForCausalLM(config), names


def _gpt2(transformers):
    config = transformers.GPT2Config(n_embd=32, n_head=4, n_layer=2, n_positions=64, vocab_size=61,
                                     attn_implementation="sdpa", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    names = {"qkv": "attn.c_attn", "o": "attn.c_proj", "up": "mlp.c_fc", "down": "mlp.c_proj"}
    return config, transformers.GPT2LMHeadModel(config), names


def _neox(transformers, parallel):
    config = transformers.GPTNeoXConfig(hidden_size=32, num_attention_heads=4, num_hidden_layers=2,
                                        intermediate_size=48, vocab_size=61, max_position_embeddings=64,
                                        use_parallel_residual=parallel, rotary_pct=0.25, hidden_dropout=0.0,
                                        attention_dropout=0.0, attn_implementation="sdpa")
    names = {"qkv": "query_key_value", "o": "attention.dense", "up": "dense_h_to_4h", "down": "dense_4h_to_h"}
    return config, transformers.GPTNeoXForCausalLM(config), names


def _cfg(config):
    from trainingcost.config.hf import check_window, hf_entry, with_overrides

    return canonical_model(check_window(with_overrides(hf_entry(config.to_dict()), {"seq_len": S, "batch": B}), "t"))


def _adapted(peft, model, names, targets, rank):
    pattern = r".*\.(" + "|".join(re.escape(names[t]) for t in targets) + r")$"
    return peft.get_peft_model(model, peft.LoraConfig(r=rank, lora_alpha=8, target_modules=pattern, lora_dropout=0.0))


CASES = [("llama", ("q", "v")), ("llama", ("q", "k", "v", "o", "gate", "up", "down")), ("llama", ("o",)),
         ("llama", ("gate", "up", "down")), ("llama", ("down",)), ("llama", ("k",)),
         ("gpt2", ("qkv",)), ("gpt2", ("o", "up")), ("neox-parallel", ("qkv",)), ("neox-parallel", ("up", "down")),
         ("neox-parallel", ("down",)), ("neox", ("o",))]


@pytest.mark.parametrize("input_grad", [False, True])
@pytest.mark.parametrize("family,targets", CASES)
def test_a_lora_step_equals_peft_under_flopcountermode(family, targets, input_grad):
    torch, transformers, peft = _peft()
    from torch.utils.flop_counter import FlopCounterMode
    from test_hf_models import CPU_ATTENTION

    torch.manual_seed(0)
    config, model, names = {"llama": lambda: _llama(transformers), "gpt2": lambda: _gpt2(transformers),
                            "neox-parallel": lambda: _neox(transformers, True),
                            "neox": lambda: _neox(transformers, False)}[family]()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adapted = _adapted(peft, model, names, targets, rank=4)
    if input_grad:
        adapted.enable_input_require_grads()
    ids = torch.randint(0, 61, (B, S))
    adapted.train()
    with FlopCounterMode(display=False, custom_mapping=CPU_ATTENTION) as counter:
        adapted(input_ids=ids, labels=ids).loss.backward()
    cfg = _cfg(config)
    ft = FineTune("lora", 4, targets, input_grad)
    ours = int(flops_per_sequence(cfg, ["bp"], ["executed"], finetune=ft).model_flops_per_sequence.iloc[0])
    assert B * ours == counter.get_total_flops()
    trainable = sum(p.numel() for p in adapted.parameters() if p.requires_grad)
    assert adapter_parameters(cfg, ft) == trainable


def _saved_bytes(torch, model, ids) -> int:
    """Bytes of the distinct storages autograd saves in ``model``'s forward, its parameters left out."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=ids)
    return sum(seen.values())


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_what_loras_step_saves_beside_full_trainings_equals_pefts(dtype):
    """The bytes PEFT's LoRA saves for the backward minus full training's, on transformers' Llama (grouped queries,
    fp32 and bf16, every target set of CASES, with and without ``enable_input_require_grads``), equal the plan's
    finetune.activation_delta to the byte: the adapters' fp32 inputs and rank-r outputs, less what only a frozen
    weight's gradient needed (its input, an RMSNorm's normalised input, the embedding's ids, the head's input), and
    without an input gradient, what the first block no longer differentiates."""
    torch, transformers, peft = _peft()
    from trainingcost.analytic.finetune import activation_delta

    torch_dtype, z = {"fp32": (torch.float32, 4), "bf16": (torch.bfloat16, 2)}[dtype]
    torch.manual_seed(0)
    ids = torch.randint(0, 61, (B, S))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config, model, names = _llama(transformers)
        full = _saved_bytes(torch, model.to(torch_dtype), ids)
        cfg = _cfg(config)
        for targets in [t for family, t in CASES if family == "llama"]:
            for input_grad in (False, True):
                torch.manual_seed(0)
                _, model, _ = _llama(transformers)
                adapted = _adapted(peft, model.to(torch_dtype), names, targets, rank=4)
                if input_grad:
                    adapted.enable_input_require_grads()
                delta = activation_delta(cfg, FineTune("lora", 4, targets, input_grad), z)
                assert _saved_bytes(torch, adapted, ids) - full == B * sum(delta.values()), (targets, input_grad)


def test_what_loras_step_saves_on_gpt2_is_pefts_but_for_the_position_ids():
    """GPT-2 (LayerNorm, a fused c_attn Conv1D, learned positions, a tied head), with an input gradient: the same
    change to the byte, less the position table's int64 ids (one row of T per micro-batch, which the learned positions'
    frozen table no longer saves). Without an input gradient, a LayerNorm model's first block saves less still (its
    norm's input, mean and reciprocal deviation: not counted)."""
    torch, transformers, peft = _peft()
    from trainingcost.analytic.finetune import activation_delta

    torch.manual_seed(0)
    ids = torch.randint(0, 61, (B, S))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config, model, names = _gpt2(transformers)
        full = _saved_bytes(torch, model, ids)
        cfg = _cfg(config)
        for targets in [t for family, t in CASES if family == "gpt2"]:
            torch.manual_seed(0)
            _, model, _ = _gpt2(transformers)
            adapted = _adapted(peft, model, names, targets, rank=4)
            adapted.enable_input_require_grads()
            delta = activation_delta(cfg, FineTune("lora", 4, targets, True), 4)
            assert _saved_bytes(torch, adapted, ids) - full == B * sum(delta.values()) - S * 8, targets


def test_the_plan_keeps_the_adapters_activations():
    """The plan's activations under LoRA: full training's, plus finetune.activation_delta per sequence (every block's
    without checkpointing; with it, the one block recomputed at a time's): LoRA on all seven Linears of a bf16 Llama 2
    7B keeps more than full training, on q and v less."""
    from trainingcost.analytic.finetune import activation_delta

    common = dict(preset="llama-2-7b", gpu="h100-sxm", gpus=1, tokens=1e7, global_batch=8, micro_batch=2)
    full = tc.plan(**common).table.iloc[0]["mem_activations"]
    cfg = canonical_model(preset_entry("llama-2-7b", "p"), "")
    for targets, more in (("all", True), ("q,v", False)):
        lora = tc.plan(**common, finetune="lora", lora_targets=targets).table.iloc[0]["mem_activations"]
        ft = FineTune("lora", 8, ("q", "k", "v", "o", "gate", "up", "down") if targets == "all" else ("q", "v"), False)
        assert lora - full == pytest.approx(2 * sum(activation_delta(cfg, ft, 2).values()), rel=1e-9)
        assert (lora > full) == more
    ckpt = dict(common, checkpointing="full")
    d = activation_delta(cfg, FineTune("lora", 8, ("q", "v"), True), 2)
    lora = tc.plan(**ckpt, finetune="lora").table.iloc[0]["mem_activations"]
    assert lora - tc.plan(**ckpt).table.iloc[0]["mem_activations"] == pytest.approx(
        2 * (d["block"] / 32 + d["tail"]), rel=1e-9)


def test_the_weights_gradients_and_moments_after_an_adam_step_equal_the_plans():
    """A bf16 Llama with fp32 LoRA adapters (PEFT's autocast_adapter_dtype) after one torch.optim.Adam step: the
    bytes of the parameters, their gradients and Adam's two moments are the plan's memory parts on one GPU."""
    torch, transformers, peft = _peft()
    torch.manual_seed(0)
    config, model, names = _llama(transformers)
    model = model.to(torch.bfloat16)
    targets = ("q", "v", "down")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adapted = _adapted(peft, model, names, targets, rank=4)
    trained = [p for p in adapted.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(trained)
    ids = torch.randint(0, 61, (B, S))
    adapted(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    size = lambda ts: sum(t.numel() * t.element_size() for t in ts)  # noqa: E731
    weights = size(adapted.parameters())
    grads = size(p.grad for p in adapted.parameters() if p.grad is not None)
    moments = size(t for s in optimizer.state.values() for k, t in s.items() if k != "step")

    row = tc.plan(hf_config=config.to_dict(), seq_len=S, gpu="h100-sxm", gpus=1, tokens=1e6, sharding="none",
                  precision="bf16-mixed", mfu=0.4, finetune="lora", lora_rank=4,
                  lora_targets=",".join(targets)).table.iloc[0]
    assert row["mem_parameters"] == weights
    assert row["mem_gradients"] == grads
    assert row["mem_optimizer_state"] == moments
    assert row["mem_master_weights"] == 0
    assert row["trained_parameters"] == sum(p.numel() for p in trained)


def test_qlora_stores_what_transformers_bitsandbytes_and_peft_store():
    """transformers' bitsandbytes quantizer (NF4, double quantization, bf16 compute) on the CPU, then PEFT's
    prepare_model_for_kbit_training and LoRA: the packed weights, their quantization states, the fp32 rest and the
    adapters take the plan's bytes."""
    torch, transformers, peft = _peft()
    pytest.importorskip("bitsandbytes")
    import tempfile

    config = transformers.LlamaConfig(hidden_size=128, intermediate_size=256, num_attention_heads=4,
                                      num_key_value_heads=2, num_hidden_layers=2, vocab_size=61,
                                      max_position_embeddings=64)
    with tempfile.TemporaryDirectory() as d, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        transformers.LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(d)
        quantization = transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                                       bnb_4bit_use_double_quant=True,
                                                       bnb_4bit_compute_dtype=torch.bfloat16)
        model = transformers.LlamaForCausalLM.from_pretrained(d, quantization_config=quantization,
                                                              dtype=torch.bfloat16, device_map="cpu")
        model = peft.prepare_model_for_kbit_training(model)
        adapted = peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    stored = sum(p.numel() * p.element_size() for p in adapted.parameters())
    seen = set()  # PEFT's LoRA layer shows its base layer's weight as its own: each weight once
    for module in adapted.modules():
        weight = getattr(module, "weight", None)
        state = getattr(weight, "quant_state", None)
        if state is not None and id(weight) not in seen:
            seen.add(id(weight))
            stored += sum(t.numel() * t.element_size() for t in (state.absmax, state.state2.absmax, state.state2.code,
                                                                  state.code, state.offset))
    row = tc.plan(hf_config=config.to_dict(), seq_len=S, gpu="h100-sxm", gpus=1, tokens=1e6, sharding="none",
                  mfu=0.4, finetune="qlora", lora_rank=4).table.iloc[0]
    assert row["mem_parameters"] == stored


@pytest.mark.parametrize("n", [4096 * 4096, 1000, 64 * 256 * 3 + 5])
def test_nf4_bytes_by_hand(n):
    """Packed values two per byte, one byte of absmax per 64, fp32 absmax per 256 of those, the 256-entry fp32 map,
    the 16-entry code and an fp32 offset; without double quantization fp32 absmax per 64."""
    blocks = -(-n // 64)
    assert nf4_bytes(n) == -(-n // 2) + blocks + 4 * -(-blocks // 256) + 256 * 4 + 16 * 4 + 4
    assert nf4_bytes(n, double_quant=False) == -(-n // 2) + 4 * blocks


def test_nf4_bytes_equal_bitsandbytes_quantize_4bit():
    torch = pytest.importorskip("torch")
    functional = pytest.importorskip("bitsandbytes.functional")
    for n in (4096 * 1024, 1000, 64 * 256 * 3 + 5):
        w = torch.randn(n, dtype=torch.bfloat16)
        packed, state = functional.quantize_4bit(w, blocksize=64, compress_statistics=True, quant_type="nf4")
        tensors = (packed, state.absmax, state.state2.absmax, state.state2.code, state.code, state.offset)
        assert sum(t.numel() * t.element_size() for t in tensors) == nf4_bytes(n)


def test_the_papers_bits_per_parameter():
    """Dettmers et al. 2023, section 3: 4 bits, plus 32/64 = 0.5 bits of constants, 0.127 with double quantization."""
    n = 2**30
    assert 8 * nf4_bytes(n, double_quant=False) / n == pytest.approx(4.5)
    assert 8 * nf4_bytes(n) / n == pytest.approx(4 + 8 / 64 + 32 / (64 * 256), abs=1e-5)


def test_a_lora_step_by_hand():
    """llama-2-7b, q and v at rank 8, 4096 tokens: BP's forward and input gradients plus 6 T r (k + n) per adapter
    per block, less the first block's q, k, v input gradients and the q and v adapters' A input gradients."""
    cfg = canonical_model(preset_entry("llama-2-7b", "p"), "")
    T, d, r, L = 4096, 4096, 8, 32
    full = flops_per_sequence(cfg, ["bp"], ["executed"]).model_flops_per_sequence.iloc[0]
    lora = flops_per_sequence(cfg, ["bp"], ["executed"],
                              finetune=FineTune("lora", r, ("q", "v"))).model_flops_per_sequence.iloc[0]
    weight_grads = L * 2 * T * (4 * d * d + 3 * d * 11008) + 2 * T * d * 32000  # the blocks' and the head's
    adapters = L * 2 * 6 * T * r * (d + d)
    first = 3 * 2 * T * d * d + 2 * 2 * T * d * r
    assert lora == full - weight_grads + adapters - first
    assert adapter_parameters(cfg, FineTune("lora", r, ("q", "v"))) == L * 2 * r * 2 * d


def test_qlora_base_bytes_by_hand():
    cfg = canonical_model(preset_entry("llama-2-7b", "p"), "")
    d, ff, L, V = 4096, 11008, 32, 32000
    params = L * (4 * d * d + 3 * d * ff + 2 * d) + 2 * V * d + d
    ours = base_bytes(cfg, FineTune("qlora"), params, 2)
    quantized = L * (4 * nf4_bytes(d * d) + 3 * nf4_bytes(d * ff))
    assert ours == quantized + 4 * (params - L * (4 * d * d + 3 * d * ff))
    assert base_bytes(cfg, FineTune("lora"), params, 2) == 2 * params


def test_the_plan_trains_less_and_reduces_only_the_adapters_gradients():
    common = dict(preset="llama-2-7b", gpu="h100-sxm", gpus=8, tokens=1e9, sharding="none", micro_batch=1)
    full = tc.plan(**common).table.iloc[0]
    lora = tc.plan(**common, finetune="lora").table.iloc[0]
    assert lora["model_flops"] < 0.75 * full["model_flops"]
    assert lora["step_time_s"] < full["step_time_s"]
    assert lora["mem_gradients"] == lora["trained_parameters"] * 4
    # DDP all-reduces each bucket of gradients: the adapters' in fp32, about 4 bytes each (the buckets rounded)
    assert lora["step_dp_bytes"] == pytest.approx(4 * lora["trained_parameters"], abs=100)
    assert lora["finetune"] == "lora" and full["finetune"] == "full"
    assert full["trained_parameters"] > 1000 * lora["trained_parameters"]


def test_qlora_fits_a_70b_model_on_one_80gb_gpu():
    """Dettmers et al. 2023, abstract: a 65B model fine-tuned on a single 48GB GPU; the 70B base's 4-bit weights
    alone are about 35 GiB, where bf16 needs 128 GiB."""
    common = dict(preset="llama-2-70b", gpu="h100-sxm", gpus=1, tokens=1e6, global_batch=16, micro_batch=1,
                  checkpointing="full", mfu=0.4)
    qlora = tc.plan(**common, finetune="qlora").table.iloc[0]
    lora = tc.plan(**common, finetune="lora").table.iloc[0]
    assert 33 * 2**30 < qlora["mem_parameters"] < 37 * 2**30 and qlora["fits"]
    assert lora["mem_parameters"] > 128 * 2**30 and not lora["fits"]


@pytest.mark.parametrize("argv,message", [
    (["--finetune", "lora", "--rule", "pepita"], "--rule: pepita cannot train adapters (--finetune lora); allowed: bp"),
    (["--finetune", "lora", "--cost-model", "paper"], "--cost-model: paper count full training"),
    (["--lora-rank", "4"], "--lora-rank: adapters' setting; it needs --finetune lora or qlora"),
    (["--finetune", "lora", "--lora-targets", "q,x"], "--lora-targets: x is not a target (allowed: all, or names"),
    (["--finetune", "lora", "--lora-targets", "qkv,q"], "--lora-targets: qkv is the fused q/k/v projection"),
    (["--finetune", "lora", "--lora-rank", "0"], "--lora-rank: must be a positive integer"),
    (["--finetune", "lora", "--precision", "fp8-mixed"], "precision: fp8-mixed is not priced with --finetune lora"),
    (["--finetune", "qlora", "--sharding", "zero3", "--offload", "optimizer"], "--offload optimizer with --finetune"),
])
def test_bad_fine_tuning_input_is_one_line(argv, message, capsys):
    code = cli.main(["plan", "--preset", "llama-2-7b", "--gpu", "h100-sxm", "--gpus", "8", "--tokens", "1e9", *argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and message in err, err


def test_gate_needs_a_gated_ffn_and_experts_take_attention_targets(capsys):
    for argv, message in ((["--preset", "gpt2-small", "--lora-targets", "gate"], "gate needs a gated FFN"),
                          (["--preset", "mixtral-8x7b", "--lora-targets", "all"], "mixture of experts only attention"),
                          (["--preset", "t5-small"], "encoder-decoder is not priced")):
        code = cli.main(["plan", *argv, "--gpu", "h100-sxm", "--gpus", "8", "--tokens", "1e9", "--finetune", "lora"])
        err = capsys.readouterr().err.strip()
        assert code == 2 and len(err.splitlines()) == 1 and message in err, err


def test_lora_on_gpt3_is_about_a_quarter_faster_as_hu_et_al_report():
    """Hu et al. 2021: rank 4 on W_q and W_v of GPT-3 175B is 18M parameters (section 7.1) and trains 25% faster
    than full fine-tuning (section 4.2), on V100s. The plan at a Megatron layout of 96 V100s, the same micro-batch."""
    common = dict(preset="gpt3-175b", gpu="v100-sxm2-32gb", gpus=96, tp=8, pp=12, tokens=1e9, global_batch=96,
                  micro_batch=1, rule="bp", checkpointing="full")
    full = tc.plan(**common).table.iloc[0]
    lora = tc.plan(**common, finetune="lora", lora_rank=4).table.iloc[0]
    assert lora["trained_parameters"] == 96 * 2 * 4 * (12288 + 12288)  # 18.9M
    assert 1.15 < full["step_time_s"] / lora["step_time_s"] < 1.35


def test_estimate_gives_the_plans_flops_per_phase_and_the_adapters_memory():
    lora = tc.estimate(preset="llama-2-7b", rule="bp", finetune="lora", lora_targets="all", lora_rank=16,
                       optimizer="adam", dtype="bf16")
    full = tc.estimate(preset="llama-2-7b", rule="bp", optimizer="adam", dtype="bf16")
    phases = lora.table.set_index("phase")["flops"]
    cfg = canonical_model(preset_entry("llama-2-7b", "p"), "")
    ft = FineTune("lora", 16, ("all",))
    assert phases.sum() == flops_per_sequence(cfg, ["bp"], ["executed"], finetune=ft).model_flops_per_sequence.iloc[0]
    assert phases["forward"] > full.table.set_index("phase")["flops"]["forward"]
    memory, base = lora.memory.iloc[0], full.memory.iloc[0]
    adapters = adapter_parameters(cfg, ft)
    assert memory["parameters"] == 2 * base["parameter_count"] + 4 * adapters
    assert memory["gradients"] == 4 * adapters and memory["optimizer_state"] == 8 * adapters
    assert memory["activations"] == base["activations"] and memory["peak"] == -1
    assert any("tape replays full training" in note for note in lora.notes)


def test_estimate_refuses_a_per_layer_table_of_adapters(capsys):
    code = cli.main(["estimate", "--preset", "llama-2-7b", "--finetune", "lora", "--per-layer"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "--per-layer: the per-layer table has no adapter rows" in err
