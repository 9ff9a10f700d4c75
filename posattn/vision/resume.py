"""Which run a workdir holds, and which changes of its config a resumed run may make.

A workdir records the config of its run in config.json (`posattn.run_record`); a run started on it
again must be the same run (`check_resume`), apart from the fields in `RESUMABLE`. A launch that
stopped before its first checkpoint (out of memory, a diverged first step) trained nothing that a
resume could continue: another config may then start afresh in the same workdir, once what the failed
launch wrote is set aside in WORKDIR/failed-<its start time>/ (`set_aside_failed_launch`), kept, not
deleted.
"""

import datetime

from etils import epath

from posattn import io, metric_log, run_record
from posattn.errors import ConfigError
from posattn.vision import checkpoint
from posattn.vision import config as vision_config

# What a run writes in its workdir (experiments/train_images.py adds curves.png).
RUN_OUTPUTS = (
    run_record.CONFIG_FILE,
    run_record.RUN_FILE,
    metric_log.METRICS_FILE,
    metric_log.METRICS_CHUNKS,
    "summary.json",
    "curves.png",
    "tensorboard",
    "checkpoints",
    "checkpoints_unreadable",
)
FAILED_PREFIX = "failed-"


def _clipping_stays_on_or_off(old, new) -> bool:
    # clip_by_global_norm is a stage of the optimizer only when grad_clip > 0: switching it on or off
    # changes the structure of the optimizer state that the checkpoint holds
    on = lambda v: isinstance(v, (int, float)) and v > 0
    return on(old) == on(new)


# The fields that may change when a run resumes from a workdir, with the condition on (old, new) where
# there is one. They steer the loop and its outputs, or say where the same data lies; none changes what
# a step computes from the state and the batch, except the learning-rate knobs, which a NonFiniteLoss
# stop tells the user to change to get past a divergence. A changed total_steps stretches the cosine
# schedule from the resumed step on; it must still reach the checkpoint's step (`check_resume`).
# eval_batch_size may change since every test example counts once whatever the batch, and evaluate_test
# since it only says which splits the evaluations read. A field a workdir's record lacks (recorded
# before the field existed, e.g. init_from, validation_examples) is compared at the value the run was
# trained with (`vision.config.SCHEMA.complete`), so an older workdir resumes with the schema's values.
RESUMABLE = {
    "total_steps",
    "log_every",
    "eval_every",
    "checkpoint_every",
    "keep_checkpoints",
    "eval_batch_size",
    "evaluate_test",
    "data_dir",
    "idx_dir",
    "optimizer.lr",
    "optimizer.grad_clip",
    "profile_steps",
    "input.workers",  # where the batches are read, not which
    "input.prefetch",
    "model.remat",  # what the backward pass keeps, not what it computes
    # the layout over the devices (a checkpoint restores onto any mesh); the step computes the same
    # up to the order of its float reductions
    "mesh.data",
    "mesh.fsdp",
    "mesh.model",
}
RESUME_CONDITIONS = {"optimizer.grad_clip": _clipping_stays_on_or_off}


def read_record(workdir) -> dict | None:
    """The config a workdir's config.json records (`run_record.read_config`), completed
    (`vision.config.SCHEMA.complete`: a field added since at the value the run was trained with), None
    if it has none; ConfigError (one line) if it is damaged."""
    stored = run_record.read_config(workdir)
    return None if stored is None else vision_config.SCHEMA.complete(stored)


def _changes(stored: dict, config) -> dict:
    """`run_record.differing_fields` of a workdir's record, completed
    (`vision.config.SCHEMA.complete`), and `config`."""
    return run_record.differing_fields(
        vision_config.SCHEMA.complete(stored), run_record.as_json(config)
    )


def failed_launch(stored: dict | None, config, checkpoint_step: int | None) -> bool:
    """Whether the workdir holds a launch of another config (`stored`, its config.json; any field
    differs) that stopped before its first checkpoint: nothing trained is at stake, so `config` may
    start afresh there once `set_aside_failed_launch` has moved what it left (its metrics record of
    what went wrong included)."""
    return stored is not None and checkpoint_step is None and bool(_changes(stored, config))


def set_aside_failed_launch(workdir) -> epath.Path:
    """Move the `RUN_OUTPUTS` of a failed launch into WORKDIR/failed-<UTC time its config.json was
    written>/ (the same name on every process of a multi-process run); where they went."""
    workdir = epath.Path(workdir)
    launched = datetime.datetime.fromtimestamp(
        (workdir / run_record.CONFIG_FILE).stat().mtime, datetime.timezone.utc
    )
    dest = io.unused_path(workdir / f"{FAILED_PREFIX}{launched:%Y%m%d-%H%M%S}")
    for name in RUN_OUTPUTS:
        if (workdir / name).exists():
            io.move_aside(workdir / name, dest)
    return dest


def check_resume(stored: dict | None, config, checkpoint_step: int | None, workdir) -> list[str]:
    """Raise ConfigError unless `config` may continue the run recorded in `workdir`; list the changes.

    `stored` is the workdir's config.json (None if it has none; a field it lacks counts at the value the
    run was trained with: `vision.config.SCHEMA.complete`), `checkpoint_step` the step of its latest
    checkpoint (None if it has none). total_steps must not lie below the checkpoint's step, and every
    field must be as stored except those `RESUMABLE` allows to change: total_steps, log_every,
    eval_every, checkpoint_every, keep_checkpoints, eval_batch_size, evaluate_test, data_dir, idx_dir,
    optimizer.lr and optimizer.grad_clip (not switched on or off). Returns the allowed changes made, as
    "field old -> new", for the resume message.
    """
    if checkpoint_step is not None and checkpoint_step > config.total_steps:
        raise ConfigError(
            f"{workdir} holds a checkpoint at step {checkpoint_step}, beyond "
            f"total_steps={config.total_steps}: resume with --config.total_steps="
            f"{checkpoint_step} or more, or use a new --workdir"
        )
    diffs = {} if stored is None else _changes(stored, config)
    refused = [
        f"{k} {old!r} -> {new!r}"
        for k, (old, new) in diffs.items()
        if k not in RESUMABLE or (k in RESUME_CONDITIONS and not RESUME_CONDITIONS[k](old, new))
    ]
    if refused:
        raise ConfigError(
            f"{workdir} holds a run with another config ({'; '.join(refused)}): rerun with "
            "the values of its config.json to resume it, or use a new --workdir"
        )
    return [f"{k} {old!r} -> {new!r}" for k, (old, new) in diffs.items()]


def preflight(config, workdir, abstract_state) -> dict:
    """Everything a run on `workdir` needs to know before it changes any file there, checked: which run
    the workdir holds (a refused config raises ConfigError), whether its metrics record reads
    (ConfigError naming a damaged line), the newest checkpoint that restores (CheckpointError if none
    of several does) and the step folders to skip. Reads only."""
    found = checkpoint.survey(checkpoint.checkpoints_dir(workdir))
    stored = read_record(workdir)
    failed = failed_launch(stored, config, found.latest)
    plan = {
        "failed_launch": failed,
        "temporary": () if failed else found.temporary,
        "changes": check_resume(None if failed else stored, config, found.latest, workdir),
        "state": None,
        "skipped": [],
    }
    if failed:  # what it left is set aside whole
        return plan
    metric_log.read(workdir)
    with checkpoint.manager(str(workdir), read_only=True) as reader:
        plan["state"], plan["skipped"] = checkpoint.latest_good(reader, abstract_state)
    return plan
