"""Issue 63: the documentation site builds strictly (MkDocs, mkdocs.yml): a broken link, a missing anchor or a page
left out of the navigation fails the build, and the API reference is generated from the docstrings."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_documentation_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    text = " ".join(re.sub(r"<[^>]+>", " ", api).split())
    for name in ("trainingcost . api . plan", "trainingcost . api . estimate", "global_batch", "hf_config"):
        assert name in text, name  # the reference generated from the docstrings
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    nav = (ROOT / "mkdocs.yml").read_text()
    assert all(page in nav for page in pages), sorted(p for p in pages if p not in nav)


def test_a_broken_link_fails_the_build(tmp_path):
    """The check itself: the same site with one link to a page that does not exist does not build."""
    pytest.importorskip("mkdocs")
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(ROOT / "docs", copy / "docs")
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    shutil.copytree(ROOT / "src", copy / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    index = copy / "docs" / "index.md"
    index.write_text(index.read_text() + "\nSee [the missing page](missing.md).\n")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=copy, capture_output=True, text=True, timeout=600)
    assert done.returncode != 0 and "missing.md" in done.stdout + done.stderr
