"""One handler for SIGINT and SIGTERM (`posattn.signals`), answering by the scope the process is in:
a polling loop records the signal, a claimed workdir marks the run interrupted, and without a binary's
`install` the previous handlers come back when the last scope ends."""

import json
import os
import pathlib
import signal
import subprocess
import sys

from posattn import ownership, signals

ROOT = pathlib.Path(__file__).resolve().parents[1]

# a binary's order: install, claim, write, then a loop that a SIGTERM reaches after its last poll
LOOP_IN_A_CLAIM = """
import pathlib, signal, sys
from posattn import ownership, signals
signals.install()
ownership.claim(sys.argv[1], "theory", {"seed": 0})
(pathlib.Path(sys.argv[1]) / "result.txt").write_text("half")
with signals.Watch() as watch:
    signal.raise_signal(signal.SIGTERM)
    print("recorded", watch.signum == signal.SIGTERM, flush=True)
print("not reached", flush=True)
"""


def test_a_signal_a_loop_did_not_act_on_reaches_the_claim_which_marks_the_run_interrupted(
    tmp_path,
):
    done = subprocess.run(
        [sys.executable, "-c", LOOP_IN_A_CLAIM, str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu"),
        timeout=120,
    )
    assert done.returncode == 143 and done.stdout == "recorded True\n"
    assert done.stderr == (
        f"stopped: SIGTERM: the run in {tmp_path} did not finish (workdir.json says interrupted); "
        "rerun the same command to run it again from the start\n"
    )
    assert json.loads((tmp_path / "workdir.json").read_text())["status"] == "interrupted"


def test_without_install_a_claim_and_a_loop_inside_it_give_the_previous_handlers_back(tmp_path):
    before = {s: signal.getsignal(s) for s in signals.SIGNALS}
    ownership.claim(tmp_path, "theory", {"seed": 0})
    try:
        with signals.Watch():
            assert all(signal.getsignal(s) is signals._handle for s in signals.SIGNALS)
        assert all(signal.getsignal(s) is signals._handle for s in signals.SIGNALS)  # still claimed
    finally:
        ownership.release(ownership.COMPLETE)
    assert {s: signal.getsignal(s) for s in signals.SIGNALS} == before
