"""The binaries (absl apps; installed as `posattn.experiments`)."""

import os
import sys

# Run as a binary (`python -m ...experiments.NAME`, where argv[0] is "-m" while the package is imported,
# or a `posattn-*` console script), not imported by a user's code or the tests: a stop signal before the
# run claims its workdir ends the process in one line (posattn/signals.py says why).
if sys.argv[:1] == ["-m"] or os.path.basename(sys.argv[0]).startswith("posattn-"):
    from posattn import signals

    signals.install()
