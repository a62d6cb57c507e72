"""`calibrate --device-model` (measure/device_model.py) and `plan --device-model` (analytic/steptime/device.py):
the device's own numbers replace the catalogue's in the predicted step, checked by hand; a measurement of another
device, dtype or no device at all is refused in one line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from trainingcost.analytic.steptime import Layout, predict_step
from trainingcost.analytic.steptime.device import DeviceModel, with_measurement
from trainingcost.analytic.steptime.step import rule_work
from trainingcost.config import ConfigError
from trainingcost.config.hardware import device
from trainingcost.config.model import canonical_model, preset_entry

A100 = device("a100-80gb")


def measurement(**change) -> dict:
    data = {"kind": "device_model", "device_name": "NVIDIA A100-SXM4-80GB", "dtype": "bf16",
            "gemm_flops": 0.5 * 312e12, "bandwidth": [[2 * 10**6, 0.5e12], [2 * 10**9, 1.8e12]],
            "flash_forward_flops": 0.6 * 312e12, "flash_backward_flops": 0.45 * 312e12, "launch_s": 5e-6,
            "trusted": True, "measured_at": "2026-11-25T00:00:00+00:00"}
    data.update(change)
    return data


def test_measured_numbers_replace_the_catalogues():
    dev = with_measurement(A100, measurement(), "bf16", "dm.json")
    params = dev.steptime
    assert params["gemm_ceiling"] == pytest.approx(0.5)
    assert params["flash_forward"] == pytest.approx(0.6) and params["flash_backward"] == pytest.approx(0.45)
    assert params["launch_us"] == pytest.approx(5.0)
    # bandwidth: measured over the datasheet's 2039 GB/s, largest kernels first, the smallest measured below it
    assert params["hbm_efficiency"] == [[2 * 10**9, pytest.approx(1.8e12 / 2039e9)], [0, pytest.approx(0.5e12 / 2039e9)]]
    assert "measured: trainingcost calibrate --device-model" in dev.steptime_sources["gemm_ceiling"]
    assert dev.steptime_sources["sms"] == A100.steptime_sources["sms"]  # what it did not measure stays cited
    # the predicted step's products slow down by exactly the ceilings' ratio (everything else in the GEMM term stays)
    gpt2 = canonical_model(preset_entry("gpt2-small"))
    lay = Layout(gpus=1, global_batch=8, micro_batch=8)
    work = rule_work(gpt2, ["bp"])
    before, after = predict_step(gpt2, lay, A100, "bp", work), predict_step(gpt2, lay, dev, "bp", work)
    ceiling = DeviceModel.of(A100, "bf16").params["gemm_ceiling"]
    assert after.parts["matmul"] == pytest.approx(before.parts["matmul"] * ceiling / 0.5, rel=1e-12)


@pytest.mark.parametrize("change, message", [
    (dict(device_name="NVIDIA H100 80GB HBM3"), "was measured on 'NVIDIA H100 80GB HBM3' (catalogue device h100-sxm), "
                                                 "not on --gpu a100-80gb"),
    (dict(device_name="Intel(R) Xeon(R)"), "(no catalogue device), not on --gpu a100-80gb"),
    (dict(dtype="fp32"), "was measured in fp32, the plan computes in bf16"),
    (dict(kind="kernels"), "is not a device measurement"),
])
def test_another_device_or_dtype_is_refused(change, message):
    with pytest.raises(ConfigError, match=r"^--device-model: dm.json ") as err:
        with_measurement(A100, measurement(**change), "bf16", "dm.json")
    assert message in str(err.value)


@pytest.mark.parametrize("change, message", [
    (dict(gemm_flops=0), "gemm_flops must be a positive number (got 0)"),
    (dict(gemm_flops="fast"), "gemm_flops must be a positive number (got 'fast')"),
    (dict(gemm_flops=[]), "gemm_flops must be a positive number (got [])"),
    (dict(launch_s=-1), "launch_s must be a positive number (got -1)"),
    (dict(flash_forward_flops=float("nan")), "flash_forward_flops must be a positive number (got nan)"),
    (dict(bandwidth=[]), "bandwidth must be a list of [bytes moved, bytes/s] pairs"),
    (dict(bandwidth=[[1e6, -1.0]]), "bandwidth bytes/s must be a positive number (got -1.0)"),
])
def test_a_device_measurement_with_wrong_numbers_is_refused(change, message):
    """Issue 40, defect 5: 0, a string or a list gave tracebacks, -1 steps of 1.6e9 days, NaN a perfect ceiling."""
    with pytest.raises(ConfigError, match=r"^--device-model: dm.json: ") as err:
        with_measurement(A100, measurement(**change), "bf16", "dm.json")
    assert message in str(err.value)


def run(*args):
    return subprocess.run([sys.executable, "-m", "trainingcost", *args], capture_output=True, text=True)


def test_calibrate_measures_this_device_and_plan_refuses_it_for_a_gpu(tmp_path):
    out = tmp_path / "dm.json"
    done = run("calibrate", "--device-model", "--device", "cpu", "--threads", "1", "--keep-untrusted", "--out", str(out))
    assert done.returncode == 0, done.stderr
    data = json.loads(out.read_text())
    assert data["kind"] == "device_model" and data["device_type"] == "cpu" and data["dtype"] == "fp32"
    for key in ("gemm_flops", "flash_forward_flops", "flash_backward_flops", "launch_s"):
        assert data[key] > 0
    assert [b for b, _ in data["bandwidth"]] == [2 * 10**6, 2 * 10**7, 2 * 10**8]
    assert all(bw > 0 for _, bw in data["bandwidth"])
    assert isinstance(data["trusted"], bool)  # a busy machine marks it, and under --keep-untrusted still writes it
    refused = run("plan", "--preset", "gpt2-small", "--tokens", "1e9", "--gpu", "a100-80gb", "--device-model", str(out))
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1].endswith("(no catalogue device), not on --gpu a100-80gb")


def test_plan_reads_a_measurement_of_its_gpu(tmp_path):
    path = tmp_path / "dm.json"
    path.write_text(json.dumps(measurement()))
    done = run("plan", "--preset", "gpt2-small", "--tokens", "1e9", "--gpu", "a100-80gb", "--device-model", str(path),
               "--cost-model", "all")
    assert done.returncode == 0, done.stderr
    assert "measured: trainingcost calibrate --device-model on NVIDIA A100-SXM4-80GB" in done.stdout
    both = run("plan", "--preset", "gpt2-small", "--tokens", "1e9", "--gpu", "a100-80gb", "--device-model", str(path),
               "--mfu", "0.4")
    assert both.returncode == 2 and "--device-model: feeds the predicted step time" in both.stderr


def test_a_measured_h100_prices_cudnn_attention_at_its_measured_fused_attention():
    """The catalogue's cuDNN shares are published numbers; a device measurement times the device's own fused attention,
    which then prices a framework's cuDNN attention too (the published shares and their sources go)."""
    h100 = device("h100-sxm")
    measured = with_measurement(h100, measurement(device_name="NVIDIA H100 80GB HBM3", flash_forward_flops=0.5 * 989e12,
                                                  flash_backward_flops=0.4 * 989e12), "bf16", "dm.json")
    assert "cudnn_forward" in h100.steptime and "cudnn_forward" not in measured.steptime
    assert "cudnn_backward" not in measured.steptime_sources
    model = DeviceModel.of(measured, "bf16")
    assert model.flash(1e15, True, "cudnn") == model.flash(1e15, True, "flash")
    assert DeviceModel.of(h100, "bf16").flash(1e15, True, "cudnn") < DeviceModel.of(h100, "bf16").flash(1e15, True)


def test_a_measured_h100_keeps_the_causal_penalty_of_cudnn_attention():
    """The measurement times attention without a mask; a decoder's causal cuDNN attention is then the measured share
    times the catalogue's causal / unmasked ratio (its published curves read at 4,096 tokens: 0.524 / 0.616 forward),
    cited as such, so a measured device does not drop the mask's cost."""
    from trainingcost.analytic.steptime.device import share_at

    h100 = device("h100-sxm")
    measured = with_measurement(h100, measurement(device_name="NVIDIA H100 80GB HBM3", flash_forward_flops=0.5 * 989e12,
                                                  flash_backward_flops=0.4 * 989e12), "bf16", "dm.json")
    model = DeviceModel.of(measured, "bf16")
    for backward, key, share in ((False, "forward", 0.5), (True, "backward", 0.4)):
        ratio = share_at(h100.steptime[f"cudnn_causal_{key}"], 4096) / share_at(h100.steptime[f"cudnn_{key}"], 4096)
        assert model.params[f"flash_{key}"] == pytest.approx(share, rel=1e-3)  # the measured share
        assert model.params[f"cudnn_causal_{key}"] == pytest.approx(model.params[f"flash_{key}"] * ratio)
        assert model.flash(1e15, backward, "cudnn", causal=True) == pytest.approx(
            model.flash(1e15, backward, "cudnn") / ratio)
        assert "causal / unmasked" in measured.steptime_sources[f"cudnn_causal_{key}"]


def test_a_part_below_its_full_power_runs_its_compute_along_the_cited_curve_and_its_memory_at_full_speed():
    """torchtitan's H100s (96 GB HBM2e at 500 W, config/hardware.yaml h100-hbm2e): every product and fused attention
    takes 1 / 0.915 of the time of the same part at 700 W (the catalogue's power_curve, Mayr et al. 2026, Table 4:
    27,705.3 / 30,271.0 tokens/s), a memory-bound kernel the time its bandwidth gives; the curve is read linearly
    between its points; a measurement on the device replaces it (it ran under the limit); a curve that does not end
    at full speed is refused in one line."""
    import dataclasses

    from trainingcost.analytic.steptime.device import power_speed
    from trainingcost.config.hardware import parse_steptime

    capped = device("h100-hbm2e")
    assert capped.power_w == 500
    curve = capped.steptime["power_curve"]
    assert power_speed(curve, 500) == 0.915 == round(27705.3 / 30271.0, 3)
    assert power_speed(curve, 550) == pytest.approx((0.915 + 0.966) / 2) and power_speed(curve, 700) == 1.0
    full = dataclasses.replace(capped, power_w=700.0)
    slow, fast = DeviceModel.of(capped, "bf16"), DeviceModel.of(full, "bf16")
    assert (slow.compute_speed, fast.compute_speed) == (0.915, 1.0)
    assert slow.gemm(8192, 8192, 8192) * 0.915 == pytest.approx(fast.gemm(8192, 8192, 8192), rel=1e-12)
    assert slow.flash(1e12, True, "flash", True, 8192) * 0.915 == pytest.approx(fast.flash(1e12, True, "flash", True, 8192),
                                                                                rel=1e-12)
    assert slow.memory(1e9) == fast.memory(1e9) == pytest.approx(1e9 / (2400e9 * 0.90 * 0.80))
    assert "Mayr" in slow.sources["power_limit_speed"] and "power_limit_speed" not in fast.sources
    # a measurement replaces it (the device's own name, as torch would report an H100 SXM)
    named = dataclasses.replace(capped, name="h100-sxm")
    measured = with_measurement(named, measurement(device_name="NVIDIA H100 80GB HBM3", gemm_flops=0.7 * 989.5e12),
                                "bf16", "dm.json")
    assert "power_curve" not in measured.steptime and DeviceModel.of(measured, "bf16").compute_speed == 1.0
    with pytest.raises(ConfigError, match=r"power_curve: a list of \[power limit in W, share .* the last 1"):
        parse_steptime({"power_curve": [[300, 0.5], [600, 0.9]]}, {}, "mine", "hardware.x.steptime")


@pytest.mark.parametrize("flags, message", [
    (["--gpu", "a100-80gb", "--power-limit", "300"],
     "--power-limit: no published power curve for gpu a100-80gb (allowed for: h100-sxm, h100-hbm2e, h800-sxm)"),
    (["--gpu", "h100-sxm", "--power-limit", "150"], "--power-limit: 150.0 W is outside h100-sxm's published power curve"),
    (["--gpu", "h100-pcie", "--power-limit", "300"], "--power-limit: no published power curve for gpu h100-pcie"),
    (["--gpu", "h100-sxm", "--power-limit", "500", "--mfu", "0.4"],
     "--power-limit: slows the predicted step (the step-time model); a given --mfu"),
])
def test_a_power_limit_without_a_curve_or_outside_it_is_one_line(flags, message, capsys):
    from trainingcost.cli import main

    assert main(["plan", "--preset", "llama-2-7b", "--tokens", "1e12", "--gpus", "64", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_an_h100_at_500_w_plans_slower_and_on_less_energy(capsys):
    """plan --power-limit 500 on the H100 SXM: the same FLOPs in a longer step (its compute-bound parts at 1 / 0.915,
    nothing else changed), energy at 500 W, and the plan names the power curve; the API takes it as a keyword."""
    import trainingcost

    common = dict(preset="llama-2-7b", tokens=1e12, gpu="h100-sxm", gpus=64, rule="bp", cost_model="executed")
    full = trainingcost.plan(**common).table.iloc[0]
    capped = trainingcost.plan(**common, power_limit=500).table.iloc[0]
    compute = ("matmul", "attention")
    for part in compute:
        assert capped[f"step_{part}_s"] == pytest.approx(full[f"step_{part}_s"] / 0.915, rel=1e-9)
    assert capped["step_memory_s"] == pytest.approx(full["step_memory_s"], rel=1e-12)
    assert capped["model_flops"] == full["model_flops"] and capped["step_time_s"] > full["step_time_s"]
    assert capped["energy_kwh"] / capped["wall_clock_s"] == pytest.approx(full["energy_kwh"] / full["wall_clock_s"] * 500 / 700)
    assert "power limit 500 W" in capped["source_power"]
    # the Grand Teton part at its own 500 W is named the same way, and so is a search's
    assert "power limit 500 W" in trainingcost.plan(**{**common, "gpu": "h100-hbm2e"}).table.iloc[0]["source_power"]
    from trainingcost.cli import main

    assert main(["plan", "--preset", "llama-2-7b", "--tokens", "1e12", "--gpu", "h100-sxm", "--gpus", "64",
                 "--rule", "bp", "--layout", "search", "--power-limit", "400"]) == 0
    out = capsys.readouterr().out
    assert "compute at 0.821 of full power at the 400 W power limit" in " ".join(out.split())
