"""Print pip constraints that pin every dependency of pyproject.toml (and the extras named on the
command line) to its floor: "name>=X" becomes "name==X". `.ci/run` installs the package under them in a
second environment, so the floors the package declares are floors that a test run has used.
"""

import re
import sys
import tomllib
from pathlib import Path

# jaxlib is not declared (jax depends on it) but must match jax's floor exactly.
COMPANIONS = {"jax": ["jaxlib"]}


def floors(extras: list[str]) -> list[str]:
    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())[
        "project"
    ]
    requirements = list(project["dependencies"])
    for extra in extras:
        requirements += project["optional-dependencies"][extra]
    pins = []
    for requirement in requirements:
        match = re.fullmatch(
            r"([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*>=\s*([^,;\s]+)", requirement.strip()
        )
        if not match:
            raise SystemExit(f"{requirement!r}: every dependency needs a floor 'name>=version'")
        name, version = match.group(1), match.group(3)
        pins += [f"{n}=={version}" for n in [name, *COMPANIONS.get(name, [])]]
    return pins


if __name__ == "__main__":
    print("\n".join(floors(sys.argv[1:])))
