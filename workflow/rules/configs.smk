rule configs:
    output:
        "results/configs.parquet",
    log:
        "results/logs/configs.log",
    localrule: True
    params:
        sweep=FILLED["sweep"],
    run:
        from trainingcost.pipeline import logged, write_configs

        with logged(log[0]):
            write_configs(FILLED, output[0])
