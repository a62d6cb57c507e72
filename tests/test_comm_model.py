"""The communication model (analytic/comm.py) equals the meter, byte for byte and collective for collective, for
every rule under ddp, fp32 and bf16, N = 2 and 3, on the three architectures (docs/distributed.md)."""

import pytest

from trainingcost.analytic.catalogue import rule_names
from trainingcost.analytic.comm import step_collectives
from trainingcost.config.model import canonical_model
from trainingcost.config.training import TrainSpec
from trainingcost.measure.distributed import launch_each

STEPS = 3
ARCHS = {
    "decoder": dict(arch="decoder", layers=1, d_model=8, heads=2, d_ff=16, vocab=256, seq_len=4),
    "encoder": dict(arch="encoder", layers=1, d_model=8, heads=2, d_ff=16, vocab=256, seq_len=4, classes=3),
    "encoder-decoder": dict(arch="encoder-decoder", enc_layers=1, dec_layers=1, d_model=8, heads=2, d_ff=16,
                            vocab=256, seq_len=4, tgt_len=4),
}
CASES = [(arch, dtype, rule) for arch in ARCHS for dtype in ("fp32", "bf16") for rule in rule_names()]


def spec(arch, dtype, rule):
    # The encoder classifies: its masked-token task may leave a rank's shard without a masked token.
    task = "classify" if arch == "encoder" else "lm"
    return TrainSpec(cfg=canonical_model(dict(ARCHS[arch], batch=1), ""), task=task, rule=rule, steps=STEPS,
                     dtype=dtype, eval_batches=1)


@pytest.fixture(scope="module", params=[2, 3])
def measured(request):
    world = request.param
    runs = launch_each([spec(*case) for case in CASES], world, "ddp")
    return world, dict(zip(CASES, runs))


def test_model_equals_meter(measured):
    world, runs = measured
    for case, run in runs.items():
        assert run.status == "ok", (case, run.message)
        comm = run.comm()
        s = spec(*case)
        for step in range(1, STEPS + 1):
            seen = [(r.op, r.bytes, r.group, r.dtype, r.phase) for r in comm[comm.step == step].itertuples()]
            model = [(c.op, c.bytes, c.group, c.dtype, c.phase)
                     for c in step_collectives(s.cfg, s.rule, "ddp", world, s.dtype, step)]
            assert seen == model, (case, world, step)
