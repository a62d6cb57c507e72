rule analytic:
    input:
        "results/configs.parquet",
    output:
        costs="results/tables/analytic.parquet",
        memory="results/tables/memory.parquet",
    localrule: True
    params:
        analytic=config["analytic"],
        memory=config["memory"],
    run:
        from trainingcost.pipeline import write_analytic

        write_analytic(config, input[0], output.costs, output.memory)
