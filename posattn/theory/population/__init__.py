"""The exact population risk (P) of Eq. (T): the entry point (`risk`), its two enumerations
(`general`, `multiset`), the Gaussian heat expansion (`heat`) and the reduced scalar dynamics
(`reduced`)."""

from posattn.theory.population.risk import (
    check_config,
    check_start,
    choose_method,
    exact_risk,
    population_grad,
    population_risk,
)
