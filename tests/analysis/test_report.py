"""The summary rows, the settings' validation and the binary's handling of bad input."""
import subprocess
import sys

import numpy as np
import pytest
from ml_collections import ConfigDict

from posattn.analysis import claims, suite
from posattn.errors import ConfigError


def test_layer_changes_split_attention_from_other_layers_and_skip_subsampling():
    names = ["stem", "block_00/conv", "block_01/attention", "block_02/conv", "block_03/attention"]
    sizes = [8, 8, 8, 4, 4]
    values = [-3.0, -1.0, -2.5, -4.0, -4.5]
    out = claims.layer_changes(names, sizes, values)
    assert out["attention"] == pytest.approx((-1.5 - 0.5) / 2) and out["attention_layers"] == 2
    assert out["other"] == pytest.approx(2.0) and out["other_layers"] == 1  # 8 -> 4 is subsampling: left out
    assert out["attention_lowers"] == 1.0 and out["other_lowers"] == 0.0
    assert np.isnan(claims.layer_changes(["stem", "block_00/conv"], [4, 4], [np.nan, 1.0])["other"])


def test_model_keys_and_table_columns():
    key = lambda **m: claims.model_key(ConfigDict({"model": m}))  # noqa: E731
    assert key(name="vit", attention="positional", variant="XS/2") == "vit_positional"
    assert key(name="alternet", attention="vanilla", variant="XS/0000") == "resnet"
    assert key(name="alternet", attention="positional", variant="XS") == "alternet_positional"
    assert key(name="resnet18", attention="positional", variant="Ti/4") == "resnet18"
    rows = [{"claim": "c", "paper": "p", "ours": {"resnet": "1", "vit_positional": "2"}}]
    table = claims.markdown(rows, ["resnet", "vit_positional"])
    assert table.splitlines()[0] == "| PK22's claim | PK22's number | ResNet | ViT (positional) * |"
    assert table.splitlines()[2] == "| c | p | 1 | 2 |"


def test_settings_are_validated():
    with pytest.raises(ConfigError, match="landscape_grid"):
        suite.Settings(landscape_grid=20)
    with pytest.raises(ConfigError, match="hessian_batches"):
        suite.Settings(hessian_batches=0)
    assert suite.QUICK.landscape_grid % 2 == 1


def test_binary_without_workdir_exits_2_with_one_line():
    proc = subprocess.run([sys.executable, "-m", "experiments.how_vits_work"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["error: --workdir=DIR is required"]
