"""The figures show what is there: integer patch ticks, a colour scale that outliers do not set, each
seed drawn once, similarity maps over their whole range."""

import numpy as np
import pytest

from posattn.plots import theory, vision


def test_attention_figure_ticks_patches_and_clips_outliers():
    A = np.tile(np.linspace(0.0, 1.0, 16), (16, 1))
    A[0, 5] = 25.0  # one large entry must not set the colour scale
    fig = theory.attention_figure(A, np.eye(16))
    ax = fig.axes[0]
    ticks = [t for t in ax.get_xticks() if 0 <= t <= 15]
    assert ticks and all(float(t).is_integer() for t in ticks)
    lo, hi = ax.get_images()[0].get_clim()
    assert hi < 2.0 and lo >= 0.0


def test_compare_figure_draws_each_seed_once():
    values = [90.0, 91.0, 91.5, 92.0, 70.0]  # 70 is an outlier of the box plot
    summary = {
        "dataset": "digits",
        "variant": "XS/2",
        "seeds": 5,
        "accuracy": {"vanilla": {"values": values}, "positional": {"values": values}},
    }
    ax = vision.compare_figure(summary).axes[0]
    fliers = [
        line
        for line in ax.get_lines()
        if len(line.get_xdata()) and line.get_marker() not in ("", "None")
    ]
    assert not fliers  # only the scatter shows the seeds
    assert sum(len(c.get_offsets()) for c in ax.collections) == 2 * len(values)


def test_similarity_maps_show_the_whole_range_and_the_threshold():
    maps = np.linspace(-1, 1, 16 * 16).reshape(16, 4, 4)
    fig = vision.similarity_maps_figure({"as trained": maps}, list(range(16)), (4, 4), 0.55)
    images = [im for ax in fig.axes for im in ax.get_images()]
    # The scale is that of the other patches (|similarity| up to 1 here), the patch itself blank.
    assert len(images) == 16 and images[0].get_clim() == (-1.0, 1.0)
    assert np.ma.is_masked(images[5].get_array()[1, 1])  # NaN, drawn grey
    small = vision.similarity_maps_figure({"p": 0.2 * maps}, [0, 1], (4, 4), 0.55)
    assert small.axes[0].get_images()[0].get_clim() == (-0.2, 0.2)
    assert fig.get_size_inches()[0] > 10  # 8 maps a row, each large enough to read


def test_every_figure_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    from posattn.plots import save_png

    path = tmp_path / "fig.png"
    save_png(
        vision.compare_figure(
            {
                "dataset": "digits",
                "variant": "XS/2",
                "seeds": 1,
                "accuracy": {"vanilla": {"values": [90.0]}},
            }
        ),
        path,
    )
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and not (tmp_path / "fig.png.tmp").exists()

    class Broken:  # a figure whose rendering fails half way leaves the previous file
        def savefig(self, buffer, **kwargs):
            buffer.write(b"\x89PNG half")
            raise RuntimeError("renderer died")

    before = path.read_bytes()
    with pytest.raises(RuntimeError):
        save_png(Broken(), path)
    assert path.read_bytes() == before
