"""The hardware catalogue: cited dense peaks, torch names matched, user devices checked field by field."""

import json
import subprocess
import sys

import pytest

from trainingcost.config import ConfigError
from trainingcost.config.hardware import DTYPES, QUANTITIES, device, devices, match_device, with_user_devices

REQUIRED = ["h100-sxm", "h100-pcie", "h200", "a100-40gb", "a100-80gb", "v100", "l4", "a10g", "rtx-4090", "mi300x"]


def test_the_catalogue_has_every_required_device_each_number_cited():
    table = devices()
    assert set(REQUIRED) <= set(table)
    for d in table.values():
        assert set(d.sources) == set(QUANTITIES) and all(len(s) > 20 for s in d.sources.values()), d.name
        peaks = [d.peak(t) for t in DTYPES]
        assert d.peak("fp32") and d.memory_bytes > 0 and d.bandwidth_bytes_per_s > 0 and d.power_w > 0
        present = [p for p in peaks if p is not None]
        assert present == sorted(present), f"{d.name}: a lower precision is never slower"


def test_dense_peaks_not_sparsity_figures():
    """The datasheets print 1,979 (H100 bf16) and 624 (A100 bf16) TFLOP/s with sparsity."""
    assert device("h100-sxm").peak("bf16") == 1979e12 / 2
    assert device("h200").peak("fp8") == 3958e12 / 2
    assert device("a100-80gb").peak("bf16") == 312e12 and device("a100-40gb").peak("fp8") is None
    assert device("l4").peak("bf16") == 242e12 / 2
    assert device("h100-sxm").memory_bytes == 80e9 and device("h200").bandwidth_bytes_per_s == 4.8e12


@pytest.mark.parametrize("name,expected", [
    ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA H100 PCIe", "h100-pcie"), ("NVIDIA H200", "h200"),
    ("NVIDIA A100-SXM4-80GB", "a100-80gb"), ("NVIDIA A100-SXM4-40GB", "a100-40gb"), ("Tesla V100-SXM2-32GB", "v100"),
    ("NVIDIA L4", "l4"), ("NVIDIA A10G", "a10g"), ("NVIDIA GeForce RTX 4090", "rtx-4090"),
    ("AMD Instinct MI300X", "mi300x"), ("AMD Instinct MI250X", "mi250x"), ("AMD Instinct MI250", "mi250"),
    ("AMD Instinct MI325X", "mi325x"), ("NVIDIA L40S", "l40s"),
    ("Intel(R) Xeon(R) Processor @ 2.10GHz", None),
])
def test_torch_device_names_match_their_entry(name, expected):
    found = match_device(name)
    assert (found.name if found else None) == expected


@pytest.mark.parametrize("cus,expected", [(110, "mi250x"), (104, "mi250"), (None, "mi250x"), (96, "mi250x")])
def test_rocms_one_name_for_two_parts_is_told_apart_by_its_compute_units(cus, expected):
    """ROCm reports both parts of PCI id 0x740C as "AMD Instinct MI250X / MI250" (libdrm's amdgpu.ids): the GCD's
    compute units (110 or 104) decide; without them, or with a count no entry has, the longest name wins."""
    from trainingcost.measure.recorder import dense_bf16_peak

    assert match_device("AMD Instinct MI250X / MI250", cus).name == expected
    assert dense_bf16_peak("AMD Instinct MI250X / MI250", cus) == {"mi250x": 191.5e12, "mi250": 181e12}[expected]
    assert match_device("NVIDIA H100 80GB HBM3", 104).name == "h100-sxm"  # a count never overrides the name


def test_a_user_device_joins_the_catalogue():
    spec = {"label": "my accelerator", "peak_tflops": {"fp32": 10, "bf16": 100}, "memory_gb": 16, "bandwidth_gbs": 500,
            "power_w": 200, "source": "our lab's measurement, 2026-11"}
    table = with_user_devices({"lab-x": spec})
    assert table["lab-x"].peak("bf16") == 100e12 and table["lab-x"].peak("fp8") is None
    assert table["lab-x"].sources["power_w"] == spec["source"] and "h100-sxm" in table


GOOD = {"peak_tflops": {"fp32": 10}, "memory_gb": 16, "bandwidth_gbs": 500, "power_w": 200, "source": "a datasheet"}


@pytest.mark.parametrize("entries,message", [
    ({"h100-sxm": GOOD}, "hardware.h100-sxm: already in the catalogue"),
    ({"x": {**GOOD, "memory_gb": -1}}, "hardware.x.memory_gb: -1 is not a positive number"),
    ({"x": {**GOOD, "peak_tflops": {"fp4": 1}}}, "hardware.x.peak_tflops: 'fp4' is not a dtype (allowed: fp32, tf32, bf16, fp16, fp8)"),
    ({"x": {k: v for k, v in GOOD.items() if k != "power_w"}}, "hardware.x.power_w: missing"),
    ({"x": {k: v for k, v in GOOD.items() if k != "source"}}, "hardware.x: every quantity needs a source"),
    ({"x": {**GOOD, "tdp": 3}}, "hardware.x: unknown key 'tdp'"),
    ({"x": {**GOOD, "peak_tflops": {"fp32": "fast"}}}, "hardware.x.peak_tflops.fp32: 'fast' is not a positive number"),
    ({"x": {**GOOD, "steptime": {"flash_forward": [[4096, 0.4], [2048, 0.3]]}}},
     "hardware.x.steptime.flash_forward: a share of the peak, or a list of [sequence length, share] pairs with the "
     "lengths ascending and each share in (0, 1]"),
    ({"x": {**GOOD, "steptime": {"cudnn_backward": [[2048, 1.5]]}}}, "hardware.x.steptime.cudnn_backward: a share"),
    ({"x": {**GOOD, "steptime": {"flash3_attention": "yes"}}},
     "hardware.x.steptime.flash3_attention: true or false (whether FlashAttention-3 runs on it; got 'yes')"),
])
def test_bad_user_devices_give_one_line(entries, message):
    with pytest.raises(ConfigError) as error:
        with_user_devices(entries)
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_an_unknown_device_names_the_allowed_ones():
    with pytest.raises(ConfigError, match=r"gpu: 'h300' is not in the hardware catalogue \(closest: h200, "):
        device("h300")


def test_the_hardware_command_lists_the_catalogue_without_torch():
    code = ("import sys; from trainingcost.cli import main; code = main(['hardware', '--format', 'json', '--sources']); "
            "assert 'torch' not in sys.modules; sys.exit(code)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [r["device"] for r in rows][: len(REQUIRED)] == REQUIRED
    assert rows[0]["bf16 TFLOP/s"] == 989.5 and "sparsity" in rows[0]["source of peak_tflops"]


def test_a_device_answers_to_other_spellings_of_its_names():
    """llm-foundry writes h100_80gb, torch A100-SXM4-40GB; letter case, spaces and underscores aside, a device's
    name or one of its aliases finds it; an ambiguous H100 (SXM or PCIe) or A100 (40 or 80 GB) does not."""
    from trainingcost.config.errors import ConfigError
    from trainingcost.config.hardware import device

    spelled = {"h100_80gb": "h100-sxm", "H100 SXM": "h100-sxm", "A100_80GB": "a100-80gb", "a100_40gb": "a100-40gb",
               "A100-SXM4-40GB": "a100-40gb", "H100 PCIe": "h100-pcie", "MI300X": "mi300x", "h200": "h200",
               "a100-sxm4-80gb": "a100-80gb",
               # the names torch and nvidia-smi print, the vendor's name aside
               "NVIDIA H100 80GB HBM3": "h100-sxm", "NVIDIA A100-SXM4-40GB": "a100-40gb",
               "AMD Instinct MI300X": "mi300x", "NVIDIA H100 PCIe": "h100-pcie", "NVIDIA GB200": "gb200"}
    assert {name: device(name).name for name in spelled} == spelled
    for ambiguous, could in (("h100", "h100-sxm, h100-pcie, h100-hbm2e"), ("A100", "a100-40gb, a100-80gb"),
                             ("NVIDIA A100", "a100-40gb, a100-80gb")):
        with pytest.raises(ConfigError, match=rf"^gpu: '{ambiguous}' names more than one catalogue entry \({could}\): "
                                              "give one$"):
            device(ambiguous)
    with pytest.raises(ConfigError, match=r"^gpu: 'nvidia' is not in the hardware catalogue \("):
        device("nvidia")
    # a PCIe A100 is not the catalogue's SXM part (torch's name for it is a match string, not an alias)
    with pytest.raises(ConfigError, match=r"^gpu: 'NVIDIA A100-PCIE-40GB' is not in the hardware catalogue"):
        device("NVIDIA A100-PCIE-40GB")
    assert device("NVIDIA GH200 144G HBM3e").name == "gh200-144gb" and device("NVIDIA GH200 480GB").name == "gh200"


def test_a_user_device_named_with_a_vendor_word_keeps_its_name():
    """The vendor's name is dropped only where the whole name finds nothing: a user's tesla-t4 answers to
    "Tesla T4" and tesla_t4."""
    from trainingcost.config.hardware import device, with_user_devices

    table = with_user_devices({"tesla-t4": {"peak_tflops": {"fp16": 65}, "memory_gb": 16, "bandwidth_gbs": 320,
                                            "power_w": 70, "source": "NVIDIA T4 datasheet"}})
    assert device("Tesla T4", table).name == device("tesla_t4", table).name == "tesla-t4"


def test_a_user_device_may_give_its_attention_share_per_sequence_length():
    """A measured curve [[tokens, share], ...] prices each sequence length at its own share (linear in log2 between
    the points), as the catalogue's Hopper entries do with the FlashAttention-3 paper's bars."""
    from trainingcost.analytic.steptime.device import DeviceModel

    curve = [[1024, 0.2], [4096, 0.4]]
    table = with_user_devices({"x": {**GOOD, "peak_tflops": {"bf16": 100}, "steptime": {"flash_forward": curve}}})
    model = DeviceModel.of(table["x"], "bf16")
    kappa = model.params["kernel_efficiency"]
    assert [model.flash(1e12, False, tokens=t) for t in (512, 2048, 8192)] == pytest.approx(
        [1e12 / (100e12 * share * kappa) for share in (0.2, 0.3, 0.4)])


def test_amd_parts_carry_their_own_cited_step_time_numbers_not_an_a100s():
    """The MI300X runs its large GEMMs at 668.4 of its 1307.4 TFLOP/s (Bekman's table with the cache reset; the
    withdrawn 781.9 stays out), its GPUs a mesh of links (one link's 47.7 GB/s between two, 315 GB/s over eight);
    an MI250X or MI250 is one GCD, half the module's datasheet figures."""
    from trainingcost.analytic.steptime.device import DeviceModel
    from trainingcost.config.hardware import device

    mi300x = DeviceModel.of(device("mi300x"), "bf16")
    assert mi300x.params["gemm_ceiling"] == pytest.approx(668.4 / 1307.4, abs=1e-3)
    assert mi300x.params["sms"] == 304 and "cache" in mi300x.sources["gemm_ceiling"]
    assert "781.9" not in mi300x.sources["gemm_ceiling"].split("withdrawn")[0]
    assert mi300x.params["intra_link_gbs"] == 47.7 and mi300x.params["intra_gbs"] == 315
    assert device("mi250x").peak("bf16") == 383e12 / 2 and device("mi250x").memory_bytes == 128e9 / 2
    assert device("mi250").peak("bf16") == 362e12 / 2 and device("mi250").peak("fp8") is None
    generic = DeviceModel.of(device("mi250x"), "bf16")
    assert generic.params["sms"] == 110 and "generic default" in generic.sources["gemm_ceiling"]
