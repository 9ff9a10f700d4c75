"""Environments for the binaries the tests start as subprocesses."""

import os
import re


def devices(n: int, **extra: str) -> dict:
    """This process's environment (the test run's compilation cache and XLA settings, tests/conftest.py)
    with `n` simulated CPU devices instead of 8, plus `extra`.

    A binary whose test is not about sharding runs on one device: on the 2 CPU cores of CI, 8 simulated
    devices only add the compile time of the partitioned programs and the cost of running 8 shards.
    """
    flags = re.sub(
        r"--xla_force_host_platform_device_count=\d+", "", os.environ.get("XLA_FLAGS", "")
    )
    return {
        **os.environ,
        "XLA_FLAGS": f"{flags} --xla_force_host_platform_device_count={n}".strip(),
        **extra,
    }
