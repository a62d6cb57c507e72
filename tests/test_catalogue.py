"""The catalogue's promises: one declaration per rule, layer kind and cost model, read by everyone else.

- a rule copied to a new folder (only its name and class names changed) is accepted everywhere, with the
  original's results; a cost model copied like ``kaplan`` appears in the tables, the summary and figure 1;
- ``config`` and ``analytic`` (and the ``estimate``, ``configs`` and ``--help`` commands) never import torch;
- registration refuses duplicates; the schema's enums equal the catalogue;
- no module imports a stage above its own, and there is no import cycle, counting every import (those inside
  functions too) between modules, each its own node.
"""

from __future__ import annotations

import ast
import io
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from trainingcost import cli
from trainingcost.analytic import catalogue, registry
from trainingcost.analytic.catalogue import rule, rule_names, vocabulary
from trainingcost.analytic.layers import KINDS, _kinds
from trainingcost.analytic.memory import DTYPE_BYTES, OPTIMIZER_SLOTS
from trainingcost.analytic.registry import cost_model_names
from trainingcost.config.presets import PRESETS
from trainingcost.config import ConfigError, validate_config
from trainingcost.config.choices import ARCHES
from trainingcost.config.model import OPTION_CHOICES
from trainingcost.config.schema import CATALOGUE_ENUMS, CONFIG_ENUMS, schema, schema_enum
from trainingcost.config.training import DEVICES, OPTIMIZERS, TASKS, TRAIN_DTYPES

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "src" / "trainingcost"
SNAKEMAKE = Path(sys.executable).with_name("snakemake")


# -- torch stays out of the torch-free stages and commands ---------------------------------------------------

TORCH_FREE = """
import sys, io, contextlib
import trainingcost.config, trainingcost.analytic, trainingcost.analytic.memory, trainingcost.config.sweep
from trainingcost import cli
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = cli.main(["estimate", "--preset", "gpt2-small", "--rule", "all", "--cost-model", "all"])
    try:
        cli.main(["--help"])
    except SystemExit:
        pass
assert code == 0 and "BP" in out.getvalue() and "usage" in out.getvalue(), out.getvalue()[-500:]
loaded = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))
print("torch modules:", len(loaded))
"""


def test_config_analytic_and_estimate_never_import_torch():
    result = subprocess.run([sys.executable, "-c", TORCH_FREE], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "torch modules: 0" in result.stdout


def test_configs_command_never_imports_torch(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"sweep": {"presets": ["paper-example"]}}))
    code = f"""
import sys
from trainingcost import cli
assert cli.main(["configs", "--config", {str(config)!r}, "--out", {str(tmp_path / 'c.parquet')!r}]) == 0
print("torch" in sys.modules)
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().endswith("False")


# -- duplicates are refused ------------------------------------------------------------------------------------


def test_a_rule_declared_twice_is_refused():
    found = {}
    catalogue._register(found, rule("fa"), "trainingcost.rules.fa")
    with pytest.raises(ValueError, match="rule 'fa' is declared twice"):
        catalogue._register(found, rule("fa"), "trainingcost.rules.fa_copy")


def test_a_cost_model_or_formula_declared_twice_is_refused(monkeypatch):
    cost_model_names()  # load the shipped models first
    monkeypatch.setattr(registry, "REGISTRY", dict(registry.REGISTRY))
    with pytest.raises(ValueError, match="cost model 'kaplan' is declared twice"):
        registry.declare("kaplan", order=99)
    registry.declare("twice", order=99)
    registry.register("twice", "ffn")(lambda s: None)
    with pytest.raises(ValueError, match="two formulas for layer kind 'ffn'"):
        registry.register("twice", "ffn")(lambda s: None)
    with pytest.raises(KeyError, match="not declared"):
        registry.register("undeclared", "ffn")(lambda s: None)


def test_a_cost_model_that_leaves_a_kind_out_prices_it_at_nothing(monkeypatch):
    from trainingcost.analytic.engine import evaluate
    from trainingcost.config import canonical_model, configs_frame

    cost_model_names()
    monkeypatch.setattr(registry, "REGISTRY", dict(registry.REGISTRY))
    executed = registry.REGISTRY["executed"]
    without = registry.declare("no_ffn", order=99)
    without.formulas.update({kind: f for kind, f in executed.formulas.items() if kind != "ffn"})
    cfg = canonical_model(dict(arch="decoder", layers=2, d_model=16, heads=2, d_ff=32, vocab=64, seq_len=8, batch=2), "")
    frame = configs_frame([("", cfg)])
    full, partial = evaluate("executed", frame), evaluate("no_ffn", frame)
    kinds = full.templates.kind
    for name, values in partial.flops.items():
        assert (values[kinds == "ffn"] == 0).all()
        assert (values[kinds != "ffn"] == full.flops[name][kinds != "ffn"]).all()
    assert full.flops["forward"][kinds == "ffn"].sum() > 0


def test_a_layer_kind_declared_twice_is_refused():
    with pytest.raises(ValueError, match="layer kind 'ffn' is declared twice"):
        _kinds(KINDS["ffn"], KINDS["ffn"])


# -- the schema's enums are the catalogue's ------------------------------------------------------------------


def test_the_schema_file_copies_no_enum_of_the_code():
    """The shipped file names no rule, cost model, preset, arch, option, task, device or optimizer: the loader fills
    them in, so adding a rule or a cost model never touches the schema."""
    text = (PACKAGE / "config" / "schemas" / "config.schema.yaml").read_text()
    body = "\n".join(line.split("#")[0] for line in text.splitlines())  # the comments may name the modules
    file = yaml.safe_load(text)
    for name in (*CONFIG_ENUMS, *CATALOGUE_ENUMS):
        assert "enum" not in file["$defs"][name], name
    lists = {word.strip() for found in re.findall(r"\[([^\]]*)\]", body) for word in found.split(",")}
    for words in (rule_names(), cost_model_names(), PRESETS, TASKS, DEVICES, *OPTION_CHOICES.values()):
        listed = sorted(lists & set(words) - {"none"})  # none: also a sharding and a checkpointing (analytic/plan.py)
        assert not listed, f"the schema file lists {listed}"


def test_the_loaded_schemas_enums_are_the_catalogues_and_the_configs():
    """What the workflow and the command line validate against: every enum and every-value default from the code,
    in the code's order."""
    filled = schema(vocabulary())
    assert schema_enum("rule", vocabulary()) == rule_names()
    assert schema_enum("cost_model", vocabulary()) == cost_model_names()
    assert schema_enum("preset") == tuple(PRESETS)
    assert schema_enum("arch") == ARCHES
    for option, values in OPTION_CHOICES.items():
        assert schema_enum(option) == values
    assert schema_enum("device") == DEVICES
    assert schema_enum("train_dtype") == tuple(TRAIN_DTYPES)
    assert schema_enum("optimizer") == OPTIMIZERS == tuple(OPTIMIZER_SLOTS)
    assert schema_enum("dtype") == tuple(DTYPE_BYTES)  # the memory model's, still written in the file
    assert schema_enum("task") == ("auto", *TASKS)
    properties = filled["properties"]
    for section in ("analytic", "plan"):
        assert properties[section]["properties"]["rules"]["default"] == list(rule_names())
        assert properties[section]["properties"]["cost_models"]["default"] == list(cost_model_names())
    assert properties["train"]["properties"]["rules"]["default"] == list(rule_names())
    assert properties["memory"]["properties"]["optimizers"]["default"] == list(OPTIMIZERS)
    with pytest.raises(ValueError, match="the catalogue's"):
        schema_enum("rule")  # without the catalogue's vocabulary the rule is an open string


def test_schema_takes_its_enums_from_a_vocabulary():
    vocabulary = {"rule": ("bp", "new"), "cost_model": ("paper",)}
    filled = schema(vocabulary)
    assert filled["$defs"]["rule"]["enum"] == ["bp", "new"]
    assert filled["properties"]["train"]["properties"]["rules"]["default"] == ["bp", "new"]
    assert "enum" not in schema()["$defs"]["rule"]  # the file's definition is untouched
    with pytest.raises(ConfigError, match=r"train\.rules\[0\]: 'fa' is not allowed \(allowed: bp, new\)"):
        validate_config({"sweep": {"presets": ["gpt2-small"]}, "train": {"rules": ["fa"]}}, vocabulary)


# -- the command line names no rule: its help reads the specs ---------------------------------------------------


def _strings_and_names(path: Path) -> list[str]:
    """The string constants (docstrings left out) and identifiers of a module."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and node.body
                  and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            found.append(node.value)
        elif isinstance(node, ast.Name):
            found.append(node.id)
    return found


def test_the_command_line_spells_no_rule_name():
    names = set(rule_names()) - {catalogue.REFERENCE_RULE}  # the reference is the catalogue's declaration
    for module in ("cli.py", "args.py", "text.py"):
        spelled = {word for text in _strings_and_names(PACKAGE / module)
                   for word in re.findall(r"[a-z]+", text.lower()) if word in names | {catalogue.REFERENCE_RULE}}
        assert not spelled, f"{module} spells {sorted(spelled)}"


def test_the_train_help_reads_the_rules_defaults():
    parser = cli.build_parser()
    train = next(a for a in parser._actions if isinstance(a, type(parser._subparsers._group_actions[0])))
    helps = {action.dest: action.help for action in train.choices["train"]._actions}
    for option, (_, key, form) in cli.OPTION_HELP.items():
        declaring = [spec for spec in catalogue.rules() if key in spec.defaults]
        text = helps[option]
        for spec in declaring:
            assert form.format(spec.defaults[key]) in text, (option, text)
        if len(declaring) < len(rule_names()):
            assert text.startswith(", ".join(spec.name for spec in declaring) + ": "), (option, text)
    assert helps["mirror_steps"].endswith("(wm)")  # the rule whose recipe repeats per mirror step


# -- the stages: no upward import, no cycle -------------------------------------------------------------------

# A stage may import its own modules and those of the stages listed.
ALLOWED = {
    "config": {"config"},
    "analytic": {"config", "analytic"},
    "rules.spec": {"config", "analytic", "rules.spec"},  # rules/<name>/__init__.py, tape.py: torch-free
    "rules.step": {"config", "analytic", "train", "rules.spec"},  # rules/<name>/step.py, rules/_<shared>/: training
    "train": {"config", "analytic", "train"},
    "measure": {"config", "analytic", "train", "measure", "io"},
    "findings": {"config", "analytic", "train", "measure", "findings", "io"},
    "io": {"config"},  # io.check_output refuses with the config layer's ConfigError
    "top": {"config", "analytic", "train", "measure", "findings", "io", "top", "rules.spec",
            "web"},  # the command line registers `serve` (web/command.py), as it registers `plan`
    # The planner page sits on the Python API (top's api.py, plan_text.py) as the command line does.
    "web": {"config", "analytic", "io", "top", "rules.spec", "web"},
}


def _module_name(path: Path, root: Path = PACKAGE.parent) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _stage(module: str) -> str:
    parts = module.split(".")[1:]
    if not parts or (len(parts) == 1 and parts[0] != "io" and not (PACKAGE / parts[0]).is_dir()):
        return "top"  # the package's __init__ and the modules beside the stage folders: cli, plan, pipeline, args ...
    if parts[0] == "rules":
        # rules/<name>/step.py is a rule's training step; rules/_<shared>/ (skipped by the catalogue's discovery)
        # is training code several rules' steps share, but for its torch-free package file and tape programs;
        # rules/<name>/__init__.py is a torch-free declaration, rules/<name>/tape.py a torch-free tape program.
        shared = len(parts) > 2 and parts[1].startswith("_") and parts[-1] != "tape"
        return "rules.step" if parts[-1] == "step" or shared else "rules.spec"
    return parts[0]


def _imports(path: Path, module: str) -> list[str]:
    """Every trainingcost name ``path`` imports: at top level, inside a function or a class, or under a condition."""
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [f"{target}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found += [name for name in names if name.split(".")[0] == "trainingcost"]
    return found


def _package_modules() -> dict[str, Path]:
    return {_module_name(path): path for path in PACKAGE.rglob("*.py")}


def _resolve(name: str, modules: dict[str, Path]) -> str:
    """``a.b.c`` names a module, or a name inside module ``a.b``."""
    while name not in modules and "." in name:
        name = name.rpartition(".")[0]
    return name


def test_no_module_imports_a_stage_above_its_own():
    modules = _package_modules()
    wrong = []
    for module, path in modules.items():
        stage = _stage(module)
        for name in _imports(path, module):
            target = _resolve(name, modules)
            if target == "trainingcost":
                continue  # the package's own __init__ (its version)
            if _stage(target) not in ALLOWED[stage] | {stage}:
                wrong.append(f"{module} ({stage}) imports {target} ({_stage(target)})")
    assert not wrong, "\n".join(wrong)


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, each module its own node (a package's ``__init__`` too), every
    import counted: one inside a function runs as surely as one at the top, only later."""
    graph: dict[str, set[str]] = {module: set() for module in modules}
    for module, path in modules.items():
        for name in _imports(path, module):
            target = _resolve(name, modules)
            if target != module and target != "trainingcost":  # the package's __init__: its version only
                graph[module].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (its nodes, the first repeated at the end), or None: a depth-first search."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_cycle_finder_finds_a_planted_cycle(tmp_path):
    """The checker itself: a cycle hidden in function-level imports, among top-level modules, is found."""
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"x": {"x"}}) == ["x", "x"]
    package = tmp_path / "trainingcost"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "one.py").write_text("from .two import f\n")
    (package / "two.py").write_text("def f():\n    from .three import g\n    return g()\n")
    (package / "three.py").write_text("def g():\n    if True:\n        from trainingcost import one\n    return one\n")
    modules = {_module_name(path, tmp_path): path for path in package.rglob("*.py")}
    graph = import_graph(modules)
    assert graph["trainingcost.two"] == {"trainingcost.three"}
    assert find_cycle(graph) == ["trainingcost.one", "trainingcost.two", "trainingcost.three", "trainingcost.one"]


def test_there_is_no_import_cycle():
    cycle = find_cycle(import_graph(_package_modules()))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


# -- the acceptance test: copy a rule and a cost model, change only their names ----------------------------

MODEL = {"name": "tiny", "arch": "decoder", "layers": 1, "d_model": 16, "heads": 2, "d_ff": 32, "vocab": 256,
         "seq_len": 8, "batch": 2}
MODEL_FLAGS = ["--arch", "decoder", "--layers", "1", "--d-model", "16", "--heads", "2", "--d-ff", "32", "--vocab", "256",
               "--seq-len", "8", "--batch", "2"]


@pytest.fixture(scope="module")
def copied_tree(tmp_path_factory) -> Path:
    """A copy of the package with rule ``fa`` copied to ``fa2`` and cost model ``kaplan`` to ``kaplan2``."""
    root = tmp_path_factory.mktemp("copied")
    src = root / "src"
    shutil.copytree(PACKAGE, src / "trainingcost", ignore=shutil.ignore_patterns("__pycache__"))
    rules = src / "trainingcost" / "rules"
    shutil.copytree(rules / "fa", rules / "fa2")
    init = (rules / "fa2" / "__init__.py").read_text()
    assert init.count('name="fa"') == 1
    (rules / "fa2" / "__init__.py").write_text(init.replace('name="fa"', 'name="fa2"'))
    step = (rules / "fa2" / "step.py").read_text()
    classes = re.findall(r"^class (\w+)", step, flags=re.M)
    assert classes
    for name in classes:
        step = re.sub(rf"\b{name}\b", f"{name}Copy", step)
    (rules / "fa2" / "step.py").write_text(step)
    models = src / "trainingcost" / "analytic" / "models"
    kaplan = (models / "kaplan.py").read_text()
    assert kaplan.count('"kaplan"') == 2  # declared once, registered once
    (models / "kaplan2.py").write_text(kaplan.replace('"kaplan"', '"kaplan2"').replace("order=30", "order=31"))
    # A rule with a tape program of its own (RuleSpec.tape == "own") is its folder too: step.py and tape.py.
    shutil.copytree(rules / "dfa", rules / "dfa2")
    init = (rules / "dfa2" / "__init__.py").read_text()
    assert init.count('name="dfa"') == 1 and 'tape="own"' in init and (rules / "dfa2" / "tape.py").exists()
    (rules / "dfa2" / "__init__.py").write_text(init.replace('name="dfa"', 'name="dfa2"'))
    step = (rules / "dfa2" / "step.py").read_text()
    for name in re.findall(r"^class (\w+)", step, flags=re.M):
        step = re.sub(rf"\b{name}\b", f"{name}Copy", step)
    (rules / "dfa2" / "step.py").write_text(step)
    return root


def _run(tree: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "PYTHONWARNINGS": "ignore"}
    return subprocess.run(list(args), capture_output=True, text=True, env=env, cwd=cwd)


def _estimate(tree: Path, rule_name: str) -> pd.DataFrame:
    result = _run(tree, sys.executable, "-m", "trainingcost", "estimate", *MODEL_FLAGS, "--rule", rule_name,
                  "--cost-model", "all", "--format", "csv", "--per-layer")
    assert result.returncode == 0, result.stderr[-2000:]
    return pd.read_csv(io.StringIO(result.stdout)).drop(columns="rule")


def test_a_copied_rule_estimates_like_the_original_under_every_cost_model(copied_tree):
    fa, fa2 = _estimate(copied_tree, "fa"), _estimate(copied_tree, "fa2")
    assert set(fa.cost_model) == {*cost_model_names(), "kaplan2"}
    pd.testing.assert_frame_equal(fa, fa2)
    memory = [_run(copied_tree, sys.executable, "-m", "trainingcost", "estimate", *MODEL_FLAGS, "--rule", name,
                   "--memory", "--format", "csv") for name in ("fa", "fa2")]
    assert all(m.returncode == 0 for m in memory)
    frames = [pd.read_csv(io.StringIO(m.stdout)).drop(columns="rule") for m in memory]
    pd.testing.assert_frame_equal(*frames)


def test_a_copied_rule_with_its_own_tape_is_replayed_like_the_original(copied_tree):
    memory = [_run(copied_tree, sys.executable, "-m", "trainingcost", "estimate", *MODEL_FLAGS, "--rule", name,
                   "--memory", "--format", "csv") for name in ("dfa", "dfa2")]
    assert all(m.returncode == 0 for m in memory), memory[1].stderr[-2000:]
    frames = [pd.read_csv(io.StringIO(m.stdout)).drop(columns="rule") for m in memory]
    pd.testing.assert_frame_equal(*frames)
    peaks = frames[0].filter(like="peak")
    assert len(peaks.columns) and (peaks.max(axis=1) > 0).all()


def test_a_copied_rule_trains_like_the_original(copied_tree, tmp_path):
    losses = []
    for name in ("fa", "fa2"):
        out = tmp_path / f"{name}.parquet"
        result = _run(copied_tree, sys.executable, "-m", "trainingcost", "train", *MODEL_FLAGS, "--rule", name,
                      "--steps", "3", "--eval-batches", "1", "--threads", "1", "--out", str(out))
        assert result.returncode == 0, result.stderr[-2000:]
        losses.append(pd.read_parquet(out)["loss"].to_numpy())
    assert len(losses[0]) == 3 and (losses[0] == losses[1]).all()


def test_a_copied_rule_and_cost_model_run_through_the_workflow(copied_tree):
    work = copied_tree / "work"
    work.mkdir()
    config = {
        "sweep": {"models": [MODEL]},
        "memory": {"dtypes": ["fp32"], "optimizers": ["sgd"]},
        "train": {"select": ["tiny"], "rules": ["bp", "fa", "fa2"], "steps": 4, "warmup": 1, "eval_batches": 1},
        "figures": {"breakdown": "tiny", "scaling": {"base": "tiny", "seq_len": [8, 16], "d_model": [16, 32]},
                    "depth": ["tiny"]},
    }
    (work / "config.yaml").write_text(yaml.safe_dump(config))
    result = _run(copied_tree, str(SNAKEMAKE), "-s", str(REPO / "Snakefile"), "--directory", str(work),
                  "--configfile", str(work / "config.yaml"), "--cores", "2", cwd=work)
    assert result.returncode == 0, result.stderr[-3000:]
    analytic = pd.read_parquet(work / "results/tables/analytic.parquet")
    assert {"fa2"} <= set(analytic.rule) and {"kaplan2"} <= set(analytic.cost_model)
    key = ["layer", "phase", "cost_model"]
    fa = analytic[analytic.rule == "fa"].drop(columns="rule").sort_values(key).reset_index(drop=True)
    fa2 = analytic[analytic.rule == "fa2"].drop(columns="rule").sort_values(key).reset_index(drop=True)
    pd.testing.assert_frame_equal(fa, fa2)
    kaplan = analytic[analytic.cost_model == "kaplan"].drop(columns="cost_model").reset_index(drop=True)
    kaplan2 = analytic[analytic.cost_model == "kaplan2"].drop(columns="cost_model").reset_index(drop=True)
    pd.testing.assert_frame_equal(kaplan, kaplan2)
    measured = pd.read_parquet(work / "results/tables/measured.parquet")
    assert set(measured.rule) == {"bp", "fa", "fa2"} and set(measured.status) == {"ok"}
    flops = measured.groupby("rule")["flops"].sum()
    assert flops["fa"] == flops["fa2"] > 0
    summary = (work / "results/summary.md").read_text()
    assert "| fa2 |" in summary and "| kaplan2 |" in summary
    figures = sorted(p.name for p in (work / "results/figures").glob("*.png"))
    assert figures
    # Figure 1 draws one panel per cost model; its legend and style give fa2 a look of its own.
    check = _run(copied_tree, sys.executable, "-c", FIGURE_ONE.format(work=str(work)))
    assert check.returncode == 0, check.stderr[-2000:]
    assert "kaplan2" in check.stdout and "FA (fa2)" in check.stdout and "distinct" in check.stdout


FIGURE_ONE = """
import pandas as pd
from trainingcost.findings import figures
from trainingcost.findings.style import rule_styles
comparison = pd.read_parquet("{work}/results/tables/comparison.parquet")
fig = figures.predicted_vs_measured_flops(comparison)
print([ax.get_title() for ax in fig.axes])
print([t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()])
styles = rule_styles()
looks = [(s.color, s.marker) for s in styles.values()]
assert len({{c for c, _ in looks}}) == len(looks) and len({{m for _, m in looks}}) == len(looks)
print("distinct")
"""


# -- the acceptance test of "How to add an architecture option": a toy option, four files -----------------------------

# The whole change, as a newcomer makes it following docs/extending.md: the option declared once (its schema keys,
# flag, defaults, frame column and shape column follow), its cost in the executed model, its module, its op on the
# tape. (file, text after which to insert, text inserted); nothing else in the package changes.
TOY_OPTION = [
    ("config/model.py", '''"query_pre_attn_scalar): a number, no cost; 0: head_dim", hf=("query_pre_attn_scalar",))\n''',
     '''    toy_logit_scale: bool = option(False, "the logits times d_model^-1/2 (a toy option)", hf=("toy_logit_scale",),
                                   tape=True)\n'''),
    ("analytic/models/executed.py", "    capped = s.logit_softcap * SOFTCAP * rows * out  # Gemma 2's c tanh(logits / c), each way\n",
     "    capped = capped + s.toy_logit_scale * SCALE * rows * out  # the toy option: one product per logit, each way\n"),
    ("train/model.py", "        logits = self.head(pooled)\n",
     "        if self.cfg.toy_logit_scale:\n            logits = logits * self.cfg.d_model ** -0.5\n"),
    ("analytic/tape/ops_model.py", "own output goes when the caller's variable is rebound.\"\"\"\n",
     "        if self.g.toy_logit_scale:  # logits * d^-1/2: a new tensor, its backward a new one\n"
     "            scaled = self.scalar(logits, \"* d^-1/2\")\n            self.t.drop(logits.buf)\n            logits = scaled\n"),
]
TOY_CHECK = """
import sys, json
sys.path.insert(0, sys.argv[1])
from test_peaks import meter_step, tape_and_meter
from test_executed import assert_cells_equal, measured, predicted
from trainingcost.config import RuleOptions, canonical_model, configs_frame
from trainingcost.config.hf import hf_entry
from trainingcost.config.model import LATE_OPTIONS, OPTION_DEFAULTS
from trainingcost.analytic.catalogue import rule_names
cfg = canonical_model(dict(arch="decoder", layers=2, d_model=16, heads=4, d_ff=32, vocab=300, seq_len=6, batch=2,
                           norm_position="pre", toy_logit_scale=True), "")
assert cfg.options() == {"norm_position": "pre", "toy_logit_scale": True}
assert OPTION_DEFAULTS["toy_logit_scale"] is False and "toy_logit_scale" in LATE_OPTIONS
assert "toy_logit_scale" in configs_frame([("", cfg)])
assert hf_entry(dict(model_type="llama", hidden_size=16, num_attention_heads=4, num_hidden_layers=1,
                     intermediate_size=32, vocab_size=300, max_position_embeddings=6, toy_logit_scale=True))["toy_logit_scale"]
for rule in rule_names():
    assert_cells_equal(predicted(cfg, rule), measured(cfg, rule, RuleOptions()), rule)
for rule in ("bp", "dfa", "pepita"):
    got, want = tape_and_meter(cfg, rule, "sgd", "fp32", meter_step(cfg, "lm", rule, "sgd", "fp32"))
    assert got == want and got["peak"] > 0, (rule, got, want)
print("toy ok")
"""


@pytest.fixture(scope="module")
def toy_tree(tmp_path_factory) -> Path:
    """A copy of the package with the toy option added in four files (TOY_OPTION)."""
    root = tmp_path_factory.mktemp("toy")
    shutil.copytree(PACKAGE, root / "src" / "trainingcost", ignore=shutil.ignore_patterns("__pycache__"))
    for name, after, inserted in TOY_OPTION:
        path = root / "src" / "trainingcost" / name
        text = path.read_text()
        assert text.count(after) == 1, (name, after)
        path.write_text(text.replace(after, after + inserted))
    return root


def test_a_toy_option_is_four_files(toy_tree):
    """An architecture option is one declaration and three places that do something with it: config/model.py, a
    cost model's formula, train/model.py and the tape's ops (docs/extending.md). The schema's keys (a model's, a
    grid's), the flag, the config.json key, the defaults, the frame's column and the shape column follow."""
    changed = {str(path.relative_to(toy_tree / "src" / "trainingcost")) for path in (toy_tree / "src").rglob("*.py")
               if path.read_bytes() != (PACKAGE / path.relative_to(toy_tree / "src" / "trainingcost")).read_bytes()}
    assert changed == {name for name, _, _ in TOY_OPTION} and len(changed) <= 4
    shown = _run(toy_tree, sys.executable, "-m", "trainingcost", "estimate", "--help")
    assert "--toy-logit-scale" in shown.stdout and "--no-toy-logit-scale" in shown.stdout
    given = _run(toy_tree, sys.executable, "-m", "trainingcost", "estimate", *MODEL_FLAGS, "--toy-logit-scale",
                 "--format", "csv")
    assert given.returncode == 0 and "toy_logit_scale" not in given.stderr, given.stderr[-2000:]
    bad = "from trainingcost.config import validate_config\nfrom trainingcost.analytic import vocabulary\n" \
          "validate_config({'sweep': {'grids': [dict(arch=['decoder'], d_model=[16], heads=[2], vocab=[9], " \
          "seq_len=[4], toy_logit_scale=['yes'])]}}, vocabulary())"
    refused = _run(toy_tree, sys.executable, "-c", bad)
    assert "sweep.grids[0].toy_logit_scale[0]: 'yes' is not of type 'boolean'" in refused.stderr, refused.stderr[-500:]
    checked = _run(toy_tree, sys.executable, "-c", TOY_CHECK, str(REPO / "tests"))
    assert checked.returncode == 0 and "toy ok" in checked.stdout, checked.stderr[-3000:]


def test_the_tapes_modules_are_split_by_op_family():
    """Issue 39: analytic/tape/ops.py was 954 lines; the ops are split by family (ops.py: the core and autograd;
    ops_attention, ops_norms, ops_model: mixins of one Ops class), none of the tape's modules over 400 lines."""
    from pathlib import Path

    from trainingcost.analytic.tape.ops import Ops
    from trainingcost.analytic.tape.ops_attention import AttentionOps
    from trainingcost.analytic.tape.ops_model import ModelOps
    from trainingcost.analytic.tape.ops_norms import NormOps

    assert {AttentionOps, ModelOps, NormOps} <= set(Ops.__mro__)
    folder = Path(__file__).resolve().parents[1] / "src" / "trainingcost" / "analytic" / "tape"
    sizes = {p.name: len(p.read_text().splitlines()) for p in folder.glob("*.py")}
    assert max(sizes.values()) <= 400, sizes
