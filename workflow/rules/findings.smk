# From the gathered tables to findings: comparison tables, the summary, the figures (and the report).


rule comparison:
    input:
        analytic=rules.analytic.output.costs,
        memory=rules.analytic.output.memory,
        measured=rules.measured.output.measured,
        trace=rules.measured.output.trace,
        calibration=rules.calibrate.output[0],
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
    log:
        "results/logs/comparison.log",
    localrule: True
    run:
        from trainingcost.pipeline import logged, write_comparison

        with logged(log[0]):
            write_comparison(
                input.analytic,
                input.memory,
                input.measured,
                output.comparison,
                output.ratios,
                output.comparison_csv,
                output.ratios_csv,
                input.trace,
                input.calibration,
            )


rule summary:
    input:
        comparison=rules.comparison.output.comparison,
        ratios=rules.comparison.output.ratios,
        measured=rules.measured.output.measured,
        calibration=rules.calibrate.output[0],  # one that did not converge: "No trusted calibration"
        scaling="results/scaling.md" if SCALING else [],  # the scaling study's section (scaling.smk)
    output:
        report("results/summary.md", caption="../report/summary.rst", category="Summary"),
    log:
        "results/logs/summary.log",
    localrule: True
    run:
        from trainingcost.pipeline import logged, write_summary

        with logged(log[0]):
            write_summary(input.comparison, input.ratios, input.measured, output[0], input.scaling or None,
                          input.calibration, TIMED_AT_ONCE)


rule figures:
    input:
        analytic=rules.analytic.output.costs,
        comparison=rules.comparison.output.comparison,
        measured=rules.measured.output.measured,
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
    log:
        "results/logs/figures.log",
    localrule: True
    params:
        figures=FILLED["figures"],
    run:
        from trainingcost.pipeline import logged, write_figures

        with logged(log[0]):
            write_figures(
                FILLED, input.analytic, input.comparison, input.measured, "results/figures"
            )
