"""Issue 63: the README's first screen works as written. Its shell block runs in a fresh shell, in a copy of the
repository, with the light install only (a new virtual environment, no extras), and prints exactly the output the
README shows; its Python block runs on the package as installed here."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def blocks(kind: str) -> list[str]:
    return re.findall(rf"^```{kind}\n(.*?)^```", README, flags=re.S | re.M)


def test_the_first_screen_prints_what_the_readme_shows(tmp_path):
    first = README.index("```bash")
    assert README[:first].count("\n") < 15, "the first command is not on the first screen"
    script, shown = re.search(r"^```bash\n(.*?)^```\n\s*^```\n(.*?)^```", README, flags=re.S | re.M).groups()
    assert "pip install" in script and ".venv/bin/trainingcost" in script
    clone = tmp_path / "trainingcost"
    tracked = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, text=True)
    if tracked.returncode == 0 and tracked.stdout.strip():
        for name in tracked.stdout.splitlines():
            if (ROOT / name).is_file():
                (clone / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / name, clone / name, follow_symlinks=False)
    else:  # not a git checkout: the tree without the local environment and outputs
        shutil.copytree(ROOT, clone, symlinks=True, ignore=shutil.ignore_patterns(".venv", ".git", "results", "*.egg-info"))
    # A fresh shell: no virtual environment active, the system's PATH; pip's own settings (index, cache) kept.
    env = {k: v for k, v in os.environ.items() if k.startswith(("PIP_", "HOME", "LANG", "LC_", "TMPDIR", "XDG_"))}
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
    python = shutil.which("python3", path=env["PATH"])
    if python is None:
        pytest.skip("no python3 on the system PATH")
    done = subprocess.run(["bash", "-e", "-c", script], cwd=clone, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == shown, done.stdout
    installed = subprocess.run([str(clone / ".venv" / "bin" / "python"), "-c",
                                "import importlib.util as u; print([m for m in ('torch', 'snakemake', 'pyarrow', "
                                "'matplotlib') if u.find_spec(m)])"], capture_output=True, text=True)
    assert installed.stdout.strip() == "[]", installed.stdout  # the light install, nothing heavy


def test_the_python_block_runs():
    code = blocks("python")[0]
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 - the README's own example
    import trainingcost

    table = namespace["result"].table
    assert list(table["rule"]) == ["bp", "dfa"] and table["gpu_hours"].gt(0).all()
    assert isinstance(namespace["trainingcost"], type(trainingcost))


def test_the_readme_counts_the_presets_and_model_types_there_are():
    from trainingcost.config.hf import SUPPORTED
    from trainingcost.config.model import PRESETS

    assert f"(`--preset`, {len(PRESETS)} of them:" in README
    assert f"{len(SUPPORTED)} Hugging Face model types" in README
