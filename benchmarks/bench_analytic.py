"""Benchmark: analytic costs of 100,000 configurations x every rule (10) x every cost model (6).

Times the vectorised engine (every layer kind, rule and phase evaluated, per-
configuration phase totals, overflow check included) on one thread, and prints
configurations per second; the median of --repeats runs. The long per-layer
table is timed separately on a smaller sweep, since it names every layer instance.

    python benchmarks/bench_analytic.py [--configs 100000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core, as the goal says

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from trainingcost.analytic import cost_model_names, layer_table, phase_totals, rule_names  # noqa: E402
from trainingcost.config import ModelConfig, configs_frame  # noqa: E402
from trainingcost.measure.provenance import cpu_name  # noqa: E402


def random_configs(n: int, seed: int = 0) -> pd.DataFrame:
    """n valid configurations across the three arches (canonical form)."""
    rng = np.random.default_rng(seed)
    arch = rng.choice(["encoder", "decoder", "encoder-decoder"], n)
    heads = rng.choice([1, 2, 4, 8, 12, 16], n)
    d_model = heads * rng.choice([32, 64, 128], n)
    layers = rng.integers(1, 25, n)
    seq = rng.choice([64, 128, 256, 512, 1024, 2048], n)
    rows = []
    for i in range(n):
        encdec = arch[i] == "encoder-decoder"
        rows.append(
            ("", ModelConfig(
                arch=str(arch[i]), d_model=int(d_model[i]), heads=int(heads[i]), d_ff=int(4 * d_model[i]),
                enc_layers=int(layers[i]) if arch[i] != "decoder" else 0,
                dec_layers=int(layers[i]) if arch[i] != "encoder" else 0,
                seq_len=int(seq[i]), tgt_len=int(seq[i] // 2) if encdec else int(seq[i]),
                vocab=int(rng.choice([256, 32000, 50257])), batch=int(rng.choice([1, 8, 32])), classes=0,
            ))
        )
    return configs_frame(rows)


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=int, default=100_000)
    parser.add_argument("--table-configs", type=int, default=1_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    configs = random_configs(args.configs)
    seconds = median_time(lambda: phase_totals(configs, rule_names(), cost_model_names()), args.repeats)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, {cpu_name()}, Python {platform.python_version()}")
    print(f"engine: {args.configs} configurations x {len(rule_names())} rules x {len(cost_model_names())} cost models "
          f"(per-phase totals): median {seconds:.2f} s over {args.repeats} runs = {args.configs / seconds:,.0f} configurations/s")

    small = configs.iloc[: args.table_configs].reset_index(drop=True)
    table_seconds = median_time(lambda: layer_table(small, rule_names(), cost_model_names()), max(1, args.repeats // 2))
    rows = len(layer_table(small, rule_names(), cost_model_names()))
    print(f"long table: {args.table_configs} configurations -> {rows:,} rows: median {table_seconds:.2f} s "
          f"= {args.table_configs / table_seconds:,.0f} configurations/s")


if __name__ == "__main__":
    main()
