"""The synthetic datasets of the theory regime, by name: `TheoryConfig.dataset` picks one of `REGISTRY`.

A dataset is a module (or any object) that provides (`Dataset`)
  make_labeller(key, cfg) -> pytree | None    what its labelling function fixes once per task
                                              (stored in `Task.labeller`; None when nothing)
  sample(key, cfg, task, n) -> (X_NxDxd, y_N) data points, jittable with cfg and n static
  labelling_function(X_NxDxd, cfg, task) -> f*(X) (N,)
  check(cfg) -> None                          raise ConfigError for settings it cannot use
  integer_labelling(cfg) -> bool              f* takes integer values, so ties f* = 0 are exact
                                              and its value yC can be reported (Assumption 1 with
                                              the paper's noise)
A dataset module builds on `posattn.theory.task` (the partition, w*, `Task`), never on
`posattn.theory.data`, which dispatches to the module. Adding a dataset to the library is its module here and one line in `REGISTRY`; a dataset of
one's own enters through `register_dataset(name, module)`, after which `TheoryConfig(dataset=name)`
draws from it everywhere (`fit`, the sweeps, the final test).
"""

from typing import Any, Protocol

from posattn.errors import ConfigError
from posattn.theory.datasets import gaussian_cnn, structured


class Dataset(Protocol):
    """The functions a dataset provides (module docstring)."""

    def make_labeller(self, key, cfg) -> Any: ...
    def sample(self, key, cfg, task, n: int) -> tuple: ...
    def labelling_function(self, X, cfg, task): ...
    def check(self, cfg) -> None: ...
    def integer_labelling(self, cfg) -> bool: ...


REGISTRY: dict[str, Dataset] = {
    "structured": structured,  # Assumption 1 of JSL22
    "gaussian_cnn": gaussian_cnn,  # the counter-example of JSL22's Figure 2
}


def register_dataset(name: str, module: Dataset) -> None:
    """Make `module` (with the functions of `Dataset`) the dataset `TheoryConfig(dataset=name)` draws.

    A name is registered once: compiled programs are kept per config, and so per name, so another
    module under a taken name would be run by programs compiled for the first (registering the same
    module again does nothing).
    """
    missing = [
        f
        for f in ("make_labeller", "sample", "labelling_function", "check", "integer_labelling")
        if not callable(getattr(module, f, None))
    ]
    if missing:
        raise ConfigError(
            f"dataset {name!r} lacks {missing}: a dataset provides the functions of "
            "posattn.theory.datasets.Dataset"
        )
    if REGISTRY.get(name, module) is not module:
        raise ConfigError(
            f"dataset {name!r} is registered already (to {REGISTRY[name]!r}): choose another name"
        )
    REGISTRY[name] = module
