"""One way to print progress and one format of the time left, for every loop; one first line of an error."""

import math

from posattn import progress
from posattn.errors import first_line


def test_the_time_left_is_hours_minutes_seconds_or_unknown():
    assert progress.eta(0) == "0:00:00"
    assert progress.eta(59.9) == "0:00:59"
    assert progress.eta(3 * 3600 + 4 * 60 + 5) == "3:04:05"
    assert progress.eta(-2.0) == "0:00:00"  # a rate estimate can overshoot the end
    assert progress.eta(None) == progress.eta(math.nan) == progress.eta(math.inf) == "?"


def test_say_prints_one_flushed_line(capsys):
    progress.say("step 3/10")
    assert capsys.readouterr().out == "step 3/10\n"


def test_first_line_of_an_error_skips_leading_blank_lines():
    assert (
        first_line(RuntimeError("\n  RESOURCE_EXHAUSTED: 2 GiB\nmore\n"))
        == "RESOURCE_EXHAUSTED: 2 GiB"
    )
    assert first_line(RuntimeError(""), "RuntimeError") == "RuntimeError"
