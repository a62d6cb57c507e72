# The scaling study (config `scaling`; docs/learning_rules.md, "Cost to a quality"): each rule's learning-rate
# search, one training job per (rule, seed) over the grid, then the tables, frontiers, figures and summary section.

SCALING_RUNS = [
    f"results/scaling/runs/{rule}/seed{seed}.parquet" for rule in SCALING.rules for seed in SCALING.seeds
] if SCALING else []


rule scaling_study:
    output:
        "results/scaling/study.json",
    log:
        "results/scaling/study.log",
    params:
        study=SCALING.to_json() if SCALING else "",  # a changed study re-runs the jobs that read it
    localrule: True
    run:
        from trainingcost.pipeline import logged, write_study

        with logged(log[0]):
            write_study(FILLED, output[0])


rule scaling_search:
    input:
        rules.scaling_study.output,
    output:
        "results/scaling/search/{rule}.parquet",
    log:
        "results/scaling/search/{rule}.log",
    benchmark:
        "results/scaling/search/{rule}.benchmark.tsv"  # wall and CPU seconds of the job
    threads: SCALING.threads if SCALING else 1
    resources:
        mem_mb=TRAIN["resources"]["mem_mb"],
        runtime=TRAIN["resources"]["runtime"],
        gpu=TRAIN["resources"]["gpu"],
    params:
        command=TRAININGCOST,
    conda:
        "../../environment.yml"
    shell:
        "{params.command} curves search --study {input:q} --rule {wildcards.rule:q} --out {output:q} > {log:q} 2>&1"


rule scaling_run:
    input:
        study=rules.scaling_study.output,
        # one learning rate: nothing to search, the run takes it from the study
        search=rules.scaling_search.output if SCALING and SCALING.searched else [],
    output:
        "results/scaling/runs/{rule}/seed{seed}.parquet",
    log:
        "results/scaling/runs/{rule}/seed{seed}.log",
    benchmark:
        "results/scaling/runs/{rule}/seed{seed}.benchmark.tsv"
    wildcard_constraints:
        seed="[0-9]+",
    threads: SCALING.threads if SCALING else 1
    resources:
        mem_mb=TRAIN["resources"]["mem_mb"],
        runtime=TRAIN["resources"]["runtime"],
        gpu=TRAIN["resources"]["gpu"],
    params:
        command=TRAININGCOST,
        search=lambda w, input: f"--search {shlex.quote(str(input.search))}" if input.search else "",
    conda:
        "../../environment.yml"
    shell:
        "{params.command} curves run --study {input.study:q} --rule {wildcards.rule:q} --seed {wildcards.seed} "
        "{params.search} --out {output:q} > {log:q} 2>&1"


rule scaling_table:
    input:
        runs=SCALING_RUNS,
        searches=[f"results/scaling/search/{rule}.parquet" for rule in SCALING.rules] if SCALING and SCALING.searched else [],
        study=rules.scaling_study.output,
    output:
        scaling="results/tables/scaling.parquet",
        lr="results/tables/scaling_lr.parquet",
    log:
        "results/logs/scaling_table.log",
    localrule: True
    run:
        step_scaling_table(input, output, log)


rule frontiers:
    input:
        scaling=rules.scaling_table.output.scaling,
        study=rules.scaling_study.output,
    output:
        "results/tables/frontiers.parquet",
    log:
        "results/logs/frontiers.log",
    localrule: True
    run:
        from trainingcost.pipeline import logged, write_frontiers

        with logged(log[0]):
            write_frontiers(input.scaling, input.study[0], output[0])


rule scaling_findings:
    input:
        scaling=rules.scaling_table.output.scaling,
        lr=rules.scaling_table.output.lr,
        frontiers=rules.frontiers.output,
    output:
        summary=report("results/scaling.md", caption="../report/cost_to_quality.rst", category="Summary"),
        figures=[
            report(f"results/figures/{name}.png", caption=f"../report/{key}.rst", category="Cost to a quality")
            for key, name in SCALING_FIGURE_FILES.items()
        ],
        pdfs=[f"results/figures/{name}.pdf" for name in SCALING_FIGURE_FILES.values()],
    log:
        "results/logs/scaling_findings.log",
    localrule: True
    run:
        from trainingcost.pipeline import logged, write_scaling_findings

        with logged(log[0]):
            write_scaling_findings(input.scaling, input.frontiers[0], input.lr, output.summary, "results/figures")
