"""Fault drills: what the binaries survive (kills, signals, damaged checkpoints, full disks, bad input),
measured by running them as a user would and written to docs/reliability.md. Run from the repository
root (`python -m drills.faults`, `python -m drills.bad_inputs`); not installed with the package, and no
test imports them: the faults they inject are the tests' helpers (`tests.vision.fault_injection`,
`tests.theory.fault_injection`), which the fast tests use directly and the library does not hold.
"""
