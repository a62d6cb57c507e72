rule configs:
    output:
        "results/configs.parquet",
    localrule: True
    params:
        sweep=config["sweep"],
    run:
        from trainingcost.pipeline import write_configs

        write_configs(config, output[0])
