"""The binaries (absl apps; installed as `posattn.experiments`)."""

import os
import sys

# Every binary of this folder (experiments/NAME.py) and its default config file (the file of its
# `--config` default, which may add an ARG): the one list of them.
# The tests and the drills read it; tests/test_binaries.py holds the console scripts (pyproject.toml),
# each binary's own default (its `cli.define_config`), the files here and the README's count to it.
DEFAULT_CONFIG = {
    "train_images": "tpu_configs/digits.py",
    "theory": "tpu_configs/theory.py",
    "reproduce": "tpu_configs/reproduce.py",
    "phase_three": "tpu_configs/phase_three.py",
    "shallow_vit": "tpu_configs/shallow_vit.py",
    "token_grid": "tpu_configs/token_grid.py",
    "compare_attention": "tpu_configs/digits.py",
    "permuted": "tpu_configs/permuted.py",
    "posemb_similarity": "tpu_configs/posemb_similarity.py",
    "how_vits_work": "tpu_configs/pk22.py",
    "shallow_settle": "tpu_configs/shallow_settle.py",
}
BINARIES = tuple(DEFAULT_CONFIG)  # (the drills number their cases in this order)
# The tools: binaries that write no run, with flags of their own (no --config, no --workdir) run by
# `posattn.cli.run_tool` (bad input one line and exit 2, as the binaries); console scripts too.
TOOLS = ("prepare_images",)


# Run as a binary (`python -m ...experiments.NAME`, where argv[0] is "-m" while the package is imported,
# or a `posattn-*` console script), not imported by a user's code or the tests: a stop signal before the
# run claims its workdir ends the process in one line (posattn/signals.py says why).
if sys.argv[:1] == ["-m"] or os.path.basename(sys.argv[0]).startswith("posattn-"):
    from posattn import signals

    signals.install()
