"""The synthetic datasets of the theory regime, by name: `TheoryConfig.dataset` picks one of `REGISTRY`.

A dataset is a module that provides
  make_labeller(key, cfg) -> pytree | None    what its labelling function fixes once per task
                                              (stored in `Task.labeller`; None when nothing)
  sample(key, cfg, task, n) -> (X_NxDxd, y_N) data points, jittable with cfg and n static
  labelling_function(X_NxDxd, cfg, task) -> f*(X) (N,)
  check(cfg) -> None                          raise ConfigError for settings it cannot use
  integer_labelling(cfg) -> bool              f* takes integer values, so ties f* = 0 are exact
                                              and its value yC can be reported (Assumption 1 with
                                              the paper's noise)
`posattn.theory.data` holds what every dataset shares (the partition, w*, `Task`) and dispatches to the
module. Adding a dataset is its module here and one line in `REGISTRY`.
"""
from posattn.theory.datasets import gaussian_cnn, structured

REGISTRY = {
    "structured": structured,      # Assumption 1 of JSL22
    "gaussian_cnn": gaussian_cnn,  # the counter-example of JSL22's Figure 2
}
