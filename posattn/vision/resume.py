"""Which run a workdir holds, and which changes of its config a resumed run may make.

A workdir records the config of its run in config.json (`record`); a run started on it again must be
the same run (`check_resume`), apart from the fields in `RESUMABLE`.
"""
import json
import math

from etils import epath

from posattn.errors import ConfigError


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
# eval_batch_size may change since every test example counts once whatever the batch.
RESUMABLE = {"total_steps", "log_every", "eval_every", "checkpoint_every", "keep_checkpoints",
             "eval_batch_size", "data_dir", "optimizer.lr", "optimizer.grad_clip"}
RESUME_CONDITIONS = {"optimizer.grad_clip": _clipping_stays_on_or_off}
_ABSENT = "(absent)"


def record(config) -> dict:
    """The config as the JSON object a workdir's config.json holds."""
    return json.loads(config.to_json_best_effort())


def read_record(workdir) -> dict | None:
    """The config a workdir's config.json records, None if it has none."""
    path = epath.Path(workdir) / "config.json"
    return json.loads(path.read_text()) if path.exists() else None


def _flatten(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _same(a, b) -> bool:
    # NaN is a value a config can hold (a diverging learning rate) and compares unequal to itself
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def differing_fields(old: dict, new: dict) -> dict:
    """{dotted field: (old value, new value)} of the fields where two config records differ.

    A field present in only one record differs, with "(absent)" for the missing value.
    """
    a, b = _flatten(old), _flatten(new)
    return {k: (a.get(k, _ABSENT), b.get(k, _ABSENT)) for k in sorted(a.keys() | b.keys())
            if not (k in a and k in b and _same(a[k], b[k]))}


def check_resume(stored: dict | None, config, checkpoint_step: int | None, workdir) -> list[str]:
    """Raise ConfigError unless `config` may continue the run recorded in `workdir`; list the changes.

    `stored` is the workdir's config.json (None if it has none), `checkpoint_step` the step of its latest
    checkpoint (None if it has none). total_steps must not lie below the checkpoint's step, and every field
    must be as stored except those `RESUMABLE` allows to change: total_steps, log_every, eval_every,
    checkpoint_every, keep_checkpoints, eval_batch_size, data_dir, optimizer.lr and optimizer.grad_clip
    (not switched on or off). Returns the allowed changes made, as "field old -> new", for the resume
    message.
    """
    if checkpoint_step is not None and checkpoint_step > config.total_steps:
        raise ConfigError(f"{workdir} holds a checkpoint at step {checkpoint_step}, beyond "
                          f"total_steps={config.total_steps}: resume with --config.total_steps="
                          f"{checkpoint_step} or more, or use a new --workdir")
    diffs = {} if stored is None else differing_fields(stored, record(config))
    changes = {k: f"{k} {old!r} -> {new!r}" for k, (old, new) in diffs.items()}
    refused = [changes[k] for k, (old, new) in diffs.items()
               if k not in RESUMABLE or (k in RESUME_CONDITIONS and not RESUME_CONDITIONS[k](old, new))]
    if refused:
        raise ConfigError(f"{workdir} holds a run with another config ({'; '.join(refused)}): rerun with "
                          "the values of its config.json to resume it, or use a new --workdir")
    return list(changes.values())
