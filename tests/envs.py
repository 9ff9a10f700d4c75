"""Environments for the binaries the tests start as subprocesses."""
import os
import re


def one_device(**extra: str) -> dict:
    """This process's environment (the test run's compilation cache and XLA settings, tests/conftest.py)
    with one CPU device instead of the 8 simulated ones, plus `extra`."""
    flags = re.sub(r"--xla_force_host_platform_device_count=\d+", "", os.environ.get("XLA_FLAGS", ""))
    return {**os.environ, "XLA_FLAGS": flags.strip(), **extra}
