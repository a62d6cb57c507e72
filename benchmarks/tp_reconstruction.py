"""Why TP does not learn here (docs/learning_rules.md, TP): at the first step, for each block of the classify
model of tests/test_target_rules.py, the part of TP's lower target that is the inverse's reconstruction error,
h_{l-1} - g_l(h_l), against the part that carries the loss, e_l V_l^T (the rms of each over rows and features).

    python benchmarks/tp_reconstruction.py [--seeds 3]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from trainingcost.config import RuleOptions, canonical_model  # noqa: E402
from trainingcost.train import objective  # noqa: E402
from trainingcost.train.data import make_task  # noqa: E402
from trainingcost.train.model import Transformer  # noqa: E402
from trainingcost.train.registry import make_rule  # noqa: E402
from trainingcost.rules._targets.step import forward_units  # noqa: E402

CFG = dict(arch="encoder", layers=2, d_model=32, heads=4, d_ff=64, vocab=16, seq_len=16, batch=32, classes=3)


def rms(x: torch.Tensor) -> float:
    return float(x.pow(2).mean().sqrt())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    cfg = canonical_model(CFG, "tp-reconstruction")
    print("| seed | block | reconstruction error rms | target signal rms | ratio |\n|---|---|---|---|---|")
    for seed in range(args.seeds):
        torch.manual_seed(seed)
        model = Transformer(cfg)
        rule = make_rule("tp", model, RuleOptions(), seed=seed)
        batch = make_task("classify", cfg).batch(torch.Generator().manual_seed(seed))
        units, head_input, logits = forward_units(model, batch, True)
        objective.loss(logits, batch.targets).backward()
        # each row's displacement: the step times its own example's loss gradient (rules/_targets/, scale)
        scale = int((batch.targets != objective.IGNORE).sum()) * head_input[..., 0].numel() / logits.shape[0]
        error = rule.hp("target_step") * scale * head_input.grad
        chain = units["encoder"]
        with torch.no_grad():
            for upper, lower in zip(chain[::-1], chain[-2::-1]):
                V, c = rule.inverse[upper.name], rule.inverse_bias[upper.name]
                reconstruction = lower.output - (upper.output @ V.t() + c)
                signal = error @ V.t()
                print(f"| {seed} | {upper.name} | {rms(reconstruction):.3g} | {rms(signal):.3g} | "
                      f"{rms(reconstruction) / rms(signal):.3g} |")
                error = lower.output - ((upper.output - error) @ V.t() + c)
    return 0


if __name__ == "__main__":
    sys.exit(main())
