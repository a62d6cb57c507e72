"""Issue 65, a hostile review of 2026-12-07 (evening): each defect as the review ran it, now a correct result or one
line naming the field (exit status 2, no traceback) before any work."""

import numpy as np
import pytest

import trainingcost
from trainingcost import cli

PLAN = ["plan", "--preset", "llama-3-8b", "--tokens", "1e12", "--gpu", "h100-sxm", "--rule", "bp"]


def refused(capsys, argv, field: str, words: str) -> str:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"trainingcost plan: error: {field}") and words in lines[0], lines[0]
    return lines[0]


# -- 1: a searched sharding under --offload (the search's helper was shadowed by a tuple) --------------------------
def test_the_search_with_an_offload_keeps_the_shardings_that_offload():
    result = trainingcost.plan(preset="llama-3-8b", tokens=1e12, gpu="h100-sxm", gpus=64, rule="bp",
                               layout="search", offload="optimizer")
    row = result.table.iloc[0]
    assert row["sharding"] in ("zero1", "zero2", "zero3", "fsdp")  # ZeRO-Offload offloads a sharded state
    assert row["step_time_s"] > 0


# -- 2: fewer GPUs than the context-parallel degree, searched ------------------------------------------------------
@pytest.mark.parametrize("extra, field", [
    (["--gpus", "8", "--cp", "16", "--layout", "search"], "context-parallel 16"),
    (["--gpus", "1", "--cp", "2", "--tp", "auto"], "context-parallel 2"),
    (["--gpus", "24", "--tp", "16", "--layout", "search"], "tensor-parallel 16"),
])
def test_a_searched_layout_whose_given_degrees_do_not_divide_the_gpus_is_one_line(capsys, extra, field):
    refused(capsys, PLAN + extra, "--gpus", field)


# -- 3: the default micro-batch under a pipeline is the fitting one with the shortest step -------------------------
def test_the_default_micro_batch_under_a_pipeline_is_the_fastest_that_fits():
    common = dict(preset="llama-2-70b", tokens=2e12, gpu="h100-sxm", gpus=512, framework="megatron-core", tp=8, pp=8,
                  sequence_parallel=True, rule=["bp", "mempepita"])
    default = trainingcost.plan(**common).table.set_index("rule")
    for rule in ("bp", "mempepita"):
        steps = {}
        for mb in (1, 2, 4, 8, 16):
            table = trainingcost.plan(**common, micro_batch=mb).table.set_index("rule")
            if table.loc[rule, "fits"]:
                steps[mb] = table.loc[rule, "step_time_s"]
        best = min(steps, key=lambda m: (steps[m], m))
        assert default.loc[rule, "micro_batch"] == best
        assert default.loc[rule, "step_time_s"] == pytest.approx(steps[best], rel=1e-12)
    # the largest that fits, the replica's 128 sequences in one micro-batch (1F1B: 7/8 of the step a bubble), is
    # several times slower
    largest = trainingcost.plan(**common, micro_batch=128).table.set_index("rule")
    assert largest.loc["mempepita", "fits"]
    assert default.loc["mempepita", "step_time_s"] < 0.25 * largest.loc["mempepita", "step_time_s"]


def test_without_a_pipeline_the_default_is_still_the_largest_that_fits():
    table = trainingcost.plan(preset="llama-3-8b", tokens=1e12, gpu="h100-sxm", gpus=64, rule="bp",
                              checkpointing="full").table
    row = table.iloc[0]
    per_replica = row["global_batch"] // row["dp"]
    largest = max(d for d in range(1, per_replica + 1) if per_replica % d == 0 and d <= row["max_micro_batch"])
    assert row["micro_batch"] == largest > 1


# -- 4: an MFU above 1 is explained ----------------------------------------------------------------------------------
def test_an_mfu_above_one_is_said_to_be_the_cost_models_count():
    result = trainingcost.plan(preset="llama-3-8b", tokens=1e12, gpu="a100-80gb", gpus=1024, rule=["bp", "pepita"],
                               seq_len=524288, cp=32, checkpointing="full", cost_model="all")
    table = result.table
    over = table[table["mfu"] > 1]
    assert not over.empty and set(over["cost_model"]) <= {"executed", "textbook", "survey"}
    assert (table.loc[table["cost_model"] == "causal", "mfu"] < 1).all()
    note = [n for n in result.notes if n.startswith("MFU or HFU above 1")]
    assert len(note) == 1 and "masked half" in note[0] and "causal cost model" in note[0]
    quiet = trainingcost.plan(preset="llama-3-8b", tokens=1e12, gpu="h100-sxm", gpus=64, rule="bp")
    assert not [n for n in quiet.notes if n.startswith("MFU")]


# -- 6: numpy numbers, as a result's own table holds them ----------------------------------------------------------
def test_the_api_takes_numpy_numbers_as_the_literals():
    first = trainingcost.plan(preset="llama-3-8b", tokens=1e12, gpu="h100-sxm", gpus=64, rule="bp", tp=2)
    again = trainingcost.plan(preset="llama-3-8b", tokens=1e12, gpu="h100-sxm", gpus=first.table["gpus"].iloc[0],
                              rule="bp", tp=first.table["tp"].iloc[0], global_batch=np.int32(first.table["global_batch"].iloc[0]))
    assert again.table["step_time_s"].iloc[0] == first.table["step_time_s"].iloc[0]
    assert trainingcost.plan(preset="llama-3-8b", tokens=1e12, gpu="h100-sxm", gpus=64.0, rule="bp").table[
        "gpus"].iloc[0] == 64
    with pytest.raises(trainingcost.Error, match=r"--tp: expected an integer, got '2.5'"):
        trainingcost.plan(preset="llama-3-8b", tokens=1e12, gpu="h100-sxm", gpus=64, rule="bp", tp=np.float64(2.5))
    with pytest.raises(trainingcost.Error, match="--checkpointing: expected one of none, selective, full, auto"):
        trainingcost.plan(preset="llama-3-8b", tokens=1e12, gpu="h100-sxm", gpus=64, rule="bp", checkpointing=True)


# -- 7: FSDP gathers only the experts its GPU holds ----------------------------------------------------------------
@pytest.mark.parametrize("ep", [1, 2, 4, 8])
def test_fsdp_gathers_a_blocks_own_experts_under_expert_parallelism(ep):
    # Mixtral 8x7B by hand: attention 2 x 4096^2 + 2 x 4096 x 1024, router 4096 x 8, two norms of 4096, eight
    # experts of 3 x 4096 x 14336; the root unit: embedding and head, 32000 x 4096 each, and the final norm
    attention, router, norms = 2 * 4096 ** 2 + 2 * 4096 * 1024, 4096 * 8, 2 * 4096
    experts = 8 * 3 * 4096 * 14336
    root = 2 * 32000 * 4096 + 4096
    unit = max(root, attention + router + norms + experts // ep)
    table = trainingcost.plan(preset="mixtral-8x7b", tokens=1e12, gpu="h100-sxm", gpus=64, sharding="fsdp",
                              checkpointing="full", micro_batch=1, ep=ep, rule="bp").table
    assert table["mem_gathered"].iloc[0] == pytest.approx(unit * (2 + 2), rel=1e-9)  # bf16 weights and gradients


# -- 8, 9: flags that were ignored, and layouts a named framework cannot run ----------------------------------------
@pytest.mark.parametrize("extra, field, words", [
    (["--gpus", "64", "--checkpointing", "full", "--checkpoint-every", "100"], "--checkpoint-every", "selective"),
    (["--gpus", "64", "--checkpoint-every", "3"], "--checkpoint-every", "got --checkpointing none"),
    (["--gpus", "64", "--objective", "cost"], "--objective", "several --gpus"),
    (["--gpus", "64", "--figure", ""], "--figure", "empty"),
])
def test_a_flag_that_would_be_ignored_is_one_line(capsys, extra, field, words):
    refused(capsys, PLAN + extra, field, words)


@pytest.mark.parametrize("given, words", [
    (dict(framework="ddp", sharding="zero3"), "--sharding zero3: framework ddp does not run it (it runs none)"),
    (dict(framework="ddp", tp=2), "--tp 2: framework ddp has no tensor parallelism"),
    (dict(framework="composer", pp=2), "--pp 2: framework composer has no pipeline parallelism"),
    (dict(framework="fsdp2", sharding="zero1"), "--sharding zero1: framework fsdp2 does not run it (it runs none, "
                                                "zero2, zero3)"),
    (dict(framework="megatron-lm@2021", tp=2, sequence_parallel=True),
     "--sequence-parallel: framework megatron-lm@2021 has no sequence parallelism"),
])
def test_a_layout_the_named_framework_does_not_run_is_priced_as_given_and_said(given, words):
    result = trainingcost.plan(preset="llama-3-8b", tokens=1e12, gpu="h100-sxm", gpus=64, rule="bp", **given)
    assert [n for n in result.notes if n.startswith(words) and n.endswith("priced as given")]
    assert result.table["step_time_s"].iloc[0] > 0
    plain = trainingcost.plan(preset="llama-3-8b", tokens=1e12, gpu="h100-sxm", gpus=64, rule="bp",
                              **{k: v for k, v in given.items() if k != "framework"})
    assert not [n for n in plain.notes if "priced as given" in n]  # the default framework takes any layout


def test_a_selective_checkpoint_every_and_a_framework_that_runs_the_layout_plan_without_a_note():
    result = trainingcost.plan(preset="llama-3-8b", tokens=1e12, gpu="h100-sxm", gpus=64, rule="bp",
                               checkpointing="selective", checkpoint_every=4, framework="megatron-core", tp=2,
                               sequence_parallel=True)
    assert result.table["tp"].iloc[0] == 2 and result.table["step_time_s"].iloc[0] > 0
    assert not [n for n in result.notes if "priced as given" in n]


def test_a_gpu_unlike_the_clusters_own_is_said():
    notes = trainingcost.plan(preset="llama-3-8b", tokens=1e12, gpu="h100-sxm", cluster="dgx-a100", gpus=64,
                              rule="bp").notes
    assert any("whose nodes hold a100-80gb" in n for n in notes)


# -- 11: the API's docstrings list every preset ----------------------------------------------------------------------
@pytest.mark.parametrize("function", [trainingcost.plan, trainingcost.estimate])
def test_the_api_docstrings_name_every_preset(function):
    import re

    from trainingcost.config.model import PRESETS

    listed = re.search(r"preset \(--preset\): a named shape: (.*?)\n        arch \(", function.__doc__, re.S).group(1)
    assert [name.strip() for name in " ".join(listed.split()).split(",")] == list(PRESETS)


def test_a_global_batch_of_fewer_tokens_than_a_sequence_is_one_line(capsys):
    refused(capsys, PLAN + ["--gpus", "64", "--global-batch-tokens", "1000"], "--global-batch-tokens",
            "less than one sequence of 8192 tokens")


# -- 12: a GPU list's common batch says where it comes from --------------------------------------------------------
def test_a_searched_gpu_lists_common_batch_says_where_it_comes_from():
    result = trainingcost.plan(preset="llama-3-8b", tokens=1e12, gpu="h100-sxm", gpus=[1024, 16384], layout="search",
                               rule="bp")
    assert set(result.table["global_batch"]) == {16384}
    assert result.table["source_batch"].str.startswith("default: one sequence per data-parallel rank").all()
    batch = [line for line in result.text.splitlines() if line.startswith("Batch: ")]
    assert batch and "the largest count's default (16,384 GPUs" in batch[0]


# -- the second review's finds: estimate's flags that would do nothing, the API's whole floats ----------------------
@pytest.mark.parametrize("extra, field", [
    (["--memory", "--per-layer"], "--memory: prints the memory table"),
    (["--metric", "maccs", "--memory"], "--metric: maccs chooses the cost table's unit"),
    (["--metric", "maccs", "--format", "csv"], "--metric: maccs chooses the printed table's unit"),
    (["--mirror-steps", "5", "--rule", "bp"], "--mirror-steps: weight mirror's (wm) steps"),
])
def test_an_estimate_flag_that_would_do_nothing_is_one_line(capsys, extra, field):
    assert cli.main(["estimate", "--preset", "gpt2-small", *extra]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith(f"trainingcost estimate: error: {field}"), err


def test_plans_mirror_steps_need_wm(capsys):
    refused(capsys, PLAN + ["--gpus", "8", "--mirror-steps", "3"], "--mirror-steps", "has no wm")


def test_lora_under_every_rule_says_the_others_are_left_out():
    notes = trainingcost.estimate(preset="llama-2-7b", finetune="lora").notes
    assert any("the other rules of --rule all are left out" in n for n in notes)


def test_the_api_takes_a_whole_float_for_any_integer_flag_and_names_the_form_otherwise():
    assert trainingcost.estimate(preset="gpt2-small", seq_len=16.0, rule="bp").table.equals(
        trainingcost.estimate(preset="gpt2-small", seq_len=16, rule="bp").table)
    with pytest.raises(trainingcost.Error, match=r"--layers: expected an integer, got bool True"):
        trainingcost.estimate(preset="gpt2-small", rule="bp", layers=True)
    with pytest.raises(trainingcost.Error, match=r"--seq-len: expected an integer, got '16.5'"):
        trainingcost.estimate(preset="gpt2-small", rule="bp", seq_len=16.5)


def test_gpus_that_do_not_fill_whole_nodes_are_said():
    notes = trainingcost.plan(preset="llama-3-8b", tokens=1e12, gpu="h100-sxm", gpus=64, gpus_per_node=3,
                              rule="bp").notes
    assert any(n.startswith("--gpus 64: not whole nodes of 3 GPUs (21.3 nodes)") for n in notes)
    whole = trainingcost.plan(preset="llama-3-8b", tokens=1e12, gpu="h100-sxm", gpus=[4, 8, 16], rule="bp").notes
    assert not [n for n in whole if "not whole nodes" in n]  # fewer than a node, or whole nodes


# -- the fourth review: the summary's loss-by-depth table compares one task and arch, as figure 7 does ----------------
def test_the_summarys_depth_table_takes_the_runs_that_differ_only_in_depth():
    import pandas as pd

    from trainingcost.findings.summary import depth_series

    def run(arch, task, layers, loss, seq=64):
        return {"arch": arch, "task": task, "d_model": 64, "heads": 4, "d_ff": 256, "seq_len": seq, "vocab": 256,
                "batch": 8, "classes": 0, "enc_layers": 0, "dec_layers": layers, "rule": "bp", "val_loss": loss}
    runs = pd.DataFrame([run("decoder", "lm", 1, 4.1), run("decoder", "lm", 2, 3.9), run("decoder", "lm", 4, 3.8),
                         run("decoder", "lm", 2, 3.6, seq=128), run("encoder", "classify", 2, 1.2)])
    chosen, which = depth_series(runs)
    assert sorted(chosen["blocks"]) == [1, 2, 4] and set(chosen["val_loss"]) == {4.1, 3.9, 3.8}
    assert which == "the decoder runs that differ only in depth (lm task, d_model 64, 64 tokens)"
