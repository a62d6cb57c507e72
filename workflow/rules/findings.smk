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
        step_comparison(input, output, log)


rule summary:
    input:
        comparison=rules.comparison.output.comparison,
        ratios=rules.comparison.output.ratios,
        measured=rules.measured.output.measured,
        calibration=rules.calibrate.output[0],  # one that did not converge: "No trusted calibration"
        scaling="results/scaling.md" if SCALING else [],  # the scaling study's section (scaling.smk)
        comm="results/comm.md" if _NPROC > 1 else [],  # a data-parallel sweep's communication section (rule comm)
    output:
        report("results/summary.md", caption="../report/summary.rst", category="Summary"),
    log:
        "results/logs/summary.log",
    localrule: True
    run:
        step_summary(input, output, log, TIMED_AT_ONCE)


rule figures:
    input:
        analytic=rules.analytic.output.costs,
        comparison=rules.comparison.output.comparison,
        measured=rules.measured.output.measured,
        calibration=rules.calibrate.output[0],  # figure 5 claims no accuracy where it is not trusted
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
                FILLED, input.analytic, input.comparison, input.measured, "results/figures", input.calibration
            )


# A data-parallel sweep (train.parallel.nproc > 1; docs/distributed.md): communication bytes (model and meter) and
# seconds per rule and sharding, their share of the step, and what each rule sends that BP does not. Predicted
# seconds when a collectives calibration is at results/device/collectives.json (`trainingcost calibrate
# --collectives --nproc N --out results/device/collectives.json`, run on a quiet machine; not a job of the sweep,
# whose jobs would load the machine it times).
rule comm:
    input:
        configs=rules.configs.output,
        measured=rules.measured.output.measured,
        calibration=lambda w: (
            ["results/device/collectives.json"] if os.path.exists("results/device/collectives.json") else []
        ),
    output:
        table="results/tables/comm.parquet",
        figure=report("results/figures/comm.png", caption="../report/comm.rst", category="Figures"),
        pdf="results/figures/comm.pdf",
        section="results/comm.md",
    log:
        "results/logs/comm.log",
    localrule: True
    run:
        step_comm(input, output, log)
