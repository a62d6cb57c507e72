"""The shipped YAML files parse to the same objects under libyaml's C loader and PyYAML's pure-Python one."""

from importlib import resources
from pathlib import Path

import pytest
import yaml

from trainingcost.config import shipped

SHIPPED = sorted(p for p in Path(str(resources.files("trainingcost.config"))).rglob("*.yaml"))


def test_every_catalogue_is_found():
    names = {p.name for p in SHIPPED}
    assert {"hardware.yaml", "frameworks.yaml", "clusters.yaml", "config.schema.yaml"} <= names


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_fast_loader_builds_what_the_safe_loader_builds(path):
    text = path.read_text()
    assert shipped.load_shipped(text) == yaml.load(text, Loader=yaml.SafeLoader)


def test_the_loader_is_safe():
    with pytest.raises(yaml.YAMLError):
        shipped.load_shipped("!!python/object/apply:os.system ['true']")
