rule analytic:
    input:
        rules.configs.output,
    output:
        costs="results/tables/analytic.parquet",
        memory="results/tables/memory.parquet",
    log:
        "results/logs/analytic.log",
    localrule: True
    params:
        analytic=FILLED["analytic"],
        memory=FILLED["memory"],
    run:
        from trainingcost.pipeline import logged, write_analytic

        with logged(log[0]):
            write_analytic(FILLED, input[0], output.costs, output.memory)
