"""What the extras promise, checked in an environment that has them (`.ci/extras_floors`).

[bench]: `benchmarks/theory_step.py`'s PyTorch peer computes the step it is compared with: one GD step of
Eq. (T) on (E) equal to the library's (`jax.grad` of the plain model, the default optimiser's step) to
float32 round-off;
`benchmarks/vit_throughput.py`'s timm peer is a ViT of our vanilla ViT's shape (the same parameters, count
for count, at every shape it times).
[data]: `tfds build` (TensorFlow's builders) prepares a dataset in array_record format, and
`tfds.data_source`, the image regime's reader, opens it.
[gcs]: fsspec serves gs:// with gcsfs, the route etils.epath takes where TensorFlow is absent (with
[data] installed here, epath itself takes TensorFlow's; a run's records never append on either).
"""

import pathlib
import subprocess
import sys
import tempfile

import jax
import numpy as np
import timm
import torch

from benchmarks import vit_throughput
from benchmarks.theory_step import torch_step
from posattn.theory import GDConfig, TheoryConfig, make_task, sample
from posattn.theory.model import empirical_risk, init_params
from posattn.theory.optim import gd_hyperparameters, gradient_descent
from posattn.theory.step import descend, init_state

BUILDER = """
import numpy as np
import tensorflow_datasets as tfds


class ExtrasCheck(tfds.core.GeneratorBasedBuilder):
    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
            "image": tfds.features.Image(shape=(8, 8, 1)), "label": tfds.features.ClassLabel(num_classes=2)}))

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(6)}

    def _generate_examples(self, n):
        for i in range(n):
            yield i, {"image": np.full((8, 8, 1), 30 * i, np.uint8), "label": i % 2}
"""


def check_bench() -> None:
    cfg, gd = (
        TheoryConfig(D=6, C=2, d=8, q=0.5, partition="random"),
        GDConfig(N=64, lr=0.1, lr_A=1.0),
    )
    task = make_task(jax.random.key(0), cfg)
    X, y = sample(jax.random.key(1), cfg, task, gd.N)
    params = init_params(jax.random.key(2), cfg, gd, task.w_star)
    loss, grads = jax.value_and_grad(empirical_risk)(params, X, y, cfg)
    optimizer = gradient_descent()
    ours = descend(init_state(params, optimizer, gd_hyperparameters(gd)), grads, optimizer)[
        "params"
    ]
    A_t = torch.tensor(np.asarray(params["A"]), requires_grad=True)
    v_t = torch.tensor(np.asarray(params["v"]), requires_grad=True)
    loss_t = torch_step(
        torch.from_numpy(np.array(X)),
        torch.from_numpy(np.array(y)),
        A_t,
        v_t,
        lr=gd.lr,
        lr_A=gd.lr_A,
        D=cfg.D,
        d=cfg.d,
    )
    np.testing.assert_allclose(loss_t.item(), float(loss), rtol=1e-5)
    np.testing.assert_allclose(A_t.detach().numpy(), np.asarray(ours["A"]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(v_t.detach().numpy(), np.asarray(ours["v"]), rtol=1e-5, atol=1e-6)
    print(
        f"[bench] torch {torch.__version__}: the PyTorch peer's step equals ours (loss {float(loss):.6f})"
    )
    for name, (variant, side, classes, _) in vit_throughput.SHAPES.items():
        model = vit_throughput.make_model(variant, "vanilla", side, classes)
        shapes = jax.eval_shape(
            lambda: model.init(jax.random.key(0), jax.numpy.zeros((1, side, side, 3)))
        )
        ours = sum(leaf.size for leaf in jax.tree.leaves(shapes))
        peer = sum(
            p.numel() for p in vit_throughput.timm_model(variant, side, classes).parameters()
        )
        assert peer == ours, (name, peer, ours)
    print(f"[bench] timm {timm.__version__}: the peer's ViTs have our parameter counts")


def check_data() -> None:
    import tensorflow as tf
    import tensorflow_datasets as tfds

    with tempfile.TemporaryDirectory() as tmp:
        module = pathlib.Path(tmp, "extras_check", "extras_check_dataset_builder.py")
        module.parent.mkdir()
        module.write_text(BUILDER)
        data_dir = pathlib.Path(tmp, "data")
        build = subprocess.run(
            [
                "tfds",
                "build",
                str(module.parent),
                "--file_format=array_record",
                f"--data_dir={data_dir}",
            ],
            capture_output=True,
            text=True,
        )
        if build.returncode:
            raise SystemExit(f"tfds build failed:\n{build.stderr[-3000:]}")
        source = tfds.data_source(
            "extras_check", split="train", data_dir=str(data_dir), download=False
        )
        # tfds shuffles the records (by key hash): every example is read back once, with its label.
        read = {
            int(source[i]["image"][0, 0, 0]) // 30: int(source[i]["label"])
            for i in range(len(source))
        }
        assert len(source) == 6 and read == {i: i % 2 for i in range(6)}, read
    print(
        f"[data] tensorflow {tf.__version__}, tensorflow-datasets {tfds.__version__}: tfds build wrote "
        "array_record, and tfds.data_source read it back"
    )


def check_gcs() -> None:
    import gcsfs
    from etils.epath import backend

    fs = backend.fsspec_backend.fs("gs://bucket/run")  # builds the file system; no request is made
    assert isinstance(fs, gcsfs.GCSFileSystem), type(fs)
    print("gcs: fsspec's gs:// is gcsfs", gcsfs.__version__)


if __name__ == "__main__":
    check_bench()
    check_data()
    check_gcs()
    sys.exit(0)
