# From the gathered tables to findings: comparison tables, the summary, the figures (and the report).


rule comparison:
    input:
        configs="results/configs.parquet",
        analytic="results/tables/analytic.parquet",
        memory="results/tables/memory.parquet",
        measured="results/tables/measured.parquet",
        calibration=f"results/device/{TRAIN['device']}-{TRAIN['dtype']}.json",
    output:
        comparison="results/tables/comparison.parquet",
        ratios="results/tables/rule_ratios.parquet",
        comparison_csv=report(
            "results/tables/comparison_steps.csv",
            caption="../report/comparison.rst",
            category="Tables",
        ),
        ratios_csv=report(
            "results/tables/rule_ratios.csv",
            caption="../report/rule_ratios.rst",
            category="Tables",
        ),
    localrule: True
    run:
        from trainingcost.findings import write_comparison

        write_comparison(
            input.analytic,
            input.memory,
            input.measured,
            output.comparison,
            output.ratios,
            output.comparison_csv,
            output.ratios_csv,
            input.configs,
            input.calibration,
        )


rule summary:
    input:
        comparison="results/tables/comparison.parquet",
        ratios="results/tables/rule_ratios.parquet",
        measured="results/tables/measured.parquet",
    output:
        report("results/summary.md", caption="../report/summary.rst", category="Summary"),
    localrule: True
    run:
        import pandas as pd
        from trainingcost.summary import write_summary

        write_summary(
            pd.read_parquet(input.comparison),
            pd.read_parquet(input.ratios),
            pd.read_parquet(input.measured),
            output[0],
        )


rule figures:
    input:
        analytic="results/tables/analytic.parquet",
        comparison="results/tables/comparison.parquet",
        measured="results/tables/measured.parquet",
    output:
        [
            report(
                f"results/figures/{FIGURE_FILES[name]}.png",
                caption=f"../report/{name}.rst",
                category="Figures",
            )
            for name in FIGURE_NAMES
        ],
        [f"results/figures/{FIGURE_FILES[name]}.pdf" for name in FIGURE_NAMES],
    localrule: True
    params:
        figures=config.get("figures"),
    run:
        from trainingcost.findings import write_figures

        write_figures(
            FILLED, input.analytic, input.comparison, input.measured, "results/figures"
        )
