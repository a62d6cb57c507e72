# Whole-run plans of the sweep's configurations (the config's plan section; docs/planning.md).

PLAN_FIGURES = {"plan_cost": "10_plan_cost_per_rule", "plan_memory": "11_plan_memory_vs_micro_batch"}


rule plan:
    output:
        table="results/tables/plan.parquet",
        curves="results/tables/plan_memory.parquet",
        figures=[
            report(
                f"results/figures/{PLAN_FIGURES[name]}.png",
                caption=f"../report/{name}.rst",
                category="Figures",
            )
            for name in PLAN_FIGURES
        ],
        pdfs=[f"results/figures/{PLAN_FIGURES[name]}.pdf" for name in PLAN_FIGURES],
    log:
        "results/logs/plan.log",
    localrule: True
    params:
        plan=FILLED["plan"],
        hardware=FILLED["hardware"],
    run:
        step_plan(FILLED, output, log, list(PLAN_FIGURES))


# How many GPUs: the figure's configuration at each of plan.strong_scaling.gpus, every rule at its own best layout.
rule plan_scaling:
    output:
        table="results/tables/plan_scaling.parquet",
        layouts="results/tables/plan_layouts.parquet",
        figure=report(
            "results/figures/16_plan_strong_scaling.png",
            caption="../report/plan_scaling.rst",
            category="Figures",
        ),
        pdf="results/figures/16_plan_strong_scaling.pdf",
    log:
        "results/logs/plan_scaling.log",
    localrule: True
    params:
        plan=FILLED["plan"],
        hardware=FILLED["hardware"],
    run:
        step_strong_scaling(FILLED, output, log)
