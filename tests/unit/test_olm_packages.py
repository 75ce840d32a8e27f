"""`kopf olm generate`'s parts that need no cluster: the package's metadata from `pyproject.toml`,
and what is named as missing."""

from pathlib import Path

import pytest
from kopf._operating import olm as _olm


def test_the_package_comes_from_pyproject(tmp_path: Path) -> None:
    project = tmp_path / "pyproject.toml"
    project.write_text('''
[project]
name = "My_Operator"
description = "Does things."
authors = [{name = "Ada", email = "ada@example.com"}]
[project.urls]
Source = "https://example.com/src"
''')
    package, missing = _olm.package_of(name=None, project=project, icon=None)
    assert package.name == "my-operator" and package.display_name == "My_Operator"
    assert package.maintainers == [{"name": "Ada", "email": "ada@example.com"}] and package.provider == "Ada"
    assert package.links == [{"name": "Source", "url": "https://example.com/src"}]
    assert missing == ["keywords", "an icon"]


def test_a_package_needs_a_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="give --package NAME"):
        _olm.package_of(name=None, project=tmp_path / "absent.toml", icon=None)
    package, missing = _olm.package_of(name="given", project=tmp_path / "absent.toml", icon=None)
    assert package.name == "given" and "a description" in missing
