"""Write one benchmark's results into its own section of docs/benchmarks.md (other sections kept)."""

import os
import platform
import re

import jax

DOCS = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "benchmarks.md"
)
HEADER = "# Benchmarks\n\nEach section is written by the script it names; rerun it to refresh.\n"


def machine() -> str:
    devices = jax.devices()
    # The load average says whether other jobs shared the CPU: CPU timings are only comparable when low.
    return (
        f"{len(devices)} x {devices[0].device_kind} ({jax.default_backend()}), "
        f"{os.cpu_count()} CPU cores, {platform.processor() or platform.machine()}, jax {jax.__version__}, "
        f"load average {os.getloadavg()[0]:.1f} at the end of the run"
    )


def update_section(name: str, body: str, path: str = DOCS) -> None:
    """Replace (or append) the section `## name` of the benchmarks page with `body`. Off the CPU the
    title also names the device, so GPU/TPU figures sit beside the CPU ones instead of replacing them."""
    if jax.default_backend() != "cpu":
        name = f"{name}, on {jax.devices()[0].device_kind}"
    text = open(path).read() if os.path.exists(path) else HEADER
    section = f"## {name}\n\n{body.strip()}\n"
    pattern = re.compile(rf"^## {re.escape(name)}\n.*?(?=^## |\Z)", re.S | re.M)
    text = (
        pattern.sub(lambda _: section + "\n", text)
        if pattern.search(text)
        else (text.rstrip() + "\n\n" + section)
    )
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text.rstrip() + "\n")
