"""Package layout that pyproject.toml cannot express: the repository's top-level `experiments/` and
`tpu_configs/` folders are installed under the `posattn` namespace (`posattn.experiments`,
`posattn.tpu_configs`), so an installed package neither adds a top-level `experiments` package to
site-packages nor loses the configs. From the repository root, `python -m experiments.theory` keeps
working as before (the current directory is on the path). Everything else is in pyproject.toml.
"""

from setuptools import find_packages, setup

MAPPED = {"posattn.experiments": "experiments", "posattn.tpu_configs": "tpu_configs"}

setup(
    packages=find_packages(include=["posattn", "posattn.*"]) + list(MAPPED),
    package_dir=MAPPED,
)
