"""docs/api.md's "What is checked" table (issue 45) names every public entry point of the tool packages:
what each validates and what it assumes. A new public function without a row fails here."""

import importlib
import inspect
import pathlib
import pkgutil
import re

import pytest

import posattn.analysis
import posattn.shallow
import posattn.theory
import posattn.vision

API = pathlib.Path(__file__).resolve().parents[1] / "docs" / "api.md"


def _section() -> str:
    text = API.read_text()
    assert "\n## What is checked\n" in text, "docs/api.md has no 'What is checked' section"
    return text.split("\n## What is checked\n", 1)[1]


def _public(module) -> list[str]:
    return sorted(
        n
        for n, obj in vars(module).items()
        if not n.startswith("_")
        and (inspect.isfunction(obj) or inspect.isclass(obj))
        and getattr(obj, "__module__", None) == module.__name__
    )


@pytest.mark.parametrize("package", [posattn.theory, posattn.shallow], ids=lambda p: p.__name__)
def test_every_export_of_the_theory_and_shallow_packages_has_a_row(package):
    section, short = _section(), package.__name__.removeprefix("posattn.")
    exported = [n for n in dir(package) if not n.startswith("_") and callable(getattr(package, n))]
    missing = [n for n in exported if f"`{short}.{n}" not in section]
    assert not missing, f"no 'What is checked' row for {short}.{missing}"


@pytest.mark.parametrize(
    "module", sorted(m.name for m in pkgutil.iter_modules(posattn.analysis.__path__))
)
def test_every_public_function_of_the_analysis_tools_has_a_row(module):
    mod = importlib.import_module(f"posattn.analysis.{module}")
    section = _section()
    missing = [n for n in _public(mod) if not re.search(rf"`[^`\n]*\b{n}\b[^`\n]*`", section)]
    assert not missing, f"no 'What is checked' row names posattn.analysis.{module}.{missing}"


@pytest.mark.parametrize(
    "module",
    sorted(m.name for m in pkgutil.walk_packages(posattn.vision.__path__, "posattn.vision.")),
)
def test_every_public_function_of_the_image_regime_has_a_row(module):
    mod = importlib.import_module(module)
    section = _section()
    missing = [n for n in _public(mod) if not re.search(rf"`[^`\n]*\b{n}\b[^`\n]*`", section)]
    assert not missing, f"no 'What is checked' row names {module}.{missing}"
