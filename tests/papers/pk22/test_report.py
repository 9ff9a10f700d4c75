"""The rows, figures and kept results of PK22's study (posattn.papers.pk22: per_model, claims, report,
over_seeds); its settings and trainings: test_settings.py."""

import json

import numpy as np
import pytest
from etils import epath
from ml_collections import ConfigDict

from posattn.errors import ConfigError
from posattn.papers.pk22 import claims, per_model, suite
from posattn.papers.pk22 import report as pk22_report


def test_layer_changes_split_attention_from_other_layers_and_skip_subsampling():
    names = ["stem", "block_00/conv", "block_01/attention", "block_02/conv", "block_03/attention"]
    sizes = [8, 8, 8, 4, 4]
    values = [-3.0, -1.0, -2.5, -4.0, -4.5]
    out = per_model.layer_changes(names, sizes, values)
    assert out["attention"] == pytest.approx((-1.5 - 0.5) / 2) and out["attention_layers"] == 2
    assert (
        out["other"] == pytest.approx(2.0) and out["other_layers"] == 1
    )  # 8 -> 4 is subsampling: left out
    assert out["attention_lowers"] == 1.0 and out["other_lowers"] == 0.0
    assert np.isnan(
        per_model.layer_changes(["stem", "block_00/conv"], [4, 4], [np.nan, 1.0])["other"]
    )


def test_model_keys_and_table_columns():
    key = lambda **m: claims.model_key(ConfigDict({"model": m}))  # noqa: E731
    assert key(name="vit", attention="positional", variant="XS/2") == "vit_positional"
    assert key(name="alternet", attention="vanilla", variant="XS/0000") == "resnet"
    assert key(name="alternet", attention="positional", variant="XS") == "alternet_positional"
    assert key(name="resnet18", attention="positional", variant="Ti/4") == "resnet18"
    rows = [
        {
            "claim": "c",
            "paper": "p",
            "ours": {"resnet": "1", "vit_positional": "2"},
            "verdict": "holds",
            "positional": "-",
        }
    ]
    table = claims.markdown(rows, ["resnet", "vit_positional"])
    assert table.splitlines()[0] == (
        "| PK22's claim | PK22's number | ResNet | ViT (positional) * | "
        "verdict (intervals) | positional ViT |"
    )
    assert table.splitlines()[2] == "| c | p | 1 | 2 | holds | - |"


def _fake_results(attention: bool, shift: float = 0.0):
    """Results of a 3-layer model on 4 test images (2 noise bands), 2 Hessian mini-batches, 2 landscape
    batches; `shift` moves every per-unit value of the Fourier tool."""
    names = ["stem", "block_00/attention" if attention else "block_00/conv", "block_01/conv"]
    hf = (
        np.array(
            [[-2.5, -3.0, np.nan], [-2.4, -3.1, np.nan], [-2.6, -2.9, np.nan], [-2.5, -3.0, np.nan]]
        )
        + shift
    )
    var = np.array([[1.0, 0.5, 2.0], [1.1, 0.4, 2.1], [0.9, 0.6, 1.9], [1.0, 0.5, 2.0]])
    surfaces = np.array(
        [[[3, 2, 3], [2, 1, 2], [3, 2, 3]], [[3.2, 2.2, 3.2], [2.2, 1.2, 2.2], [3.2, 2.2, 3.2]]]
    )
    return {
        "layers": names,
        "layer_sizes": [8, 8, 4],
        "fourier": {n: [0.0, -1.0, -2.0, -2.5] for n in names},
        "high_frequency": list(hf.mean(0)),
        "variance": list(var.mean(0)),
        "per_image": {"high_frequency": hf.tolist(), "variance": var.tolist()},
        "noise": {
            "frequencies_pi": [0.1, 0.9],
            "drop_points": [-25.0, -50.0],
            "clean_accuracy": 0.75,
            "correct": [[1, 1, 1, 0], [1, 1, 0, 0], [1, 0, 0, 0]],
        },
        "hessian": {
            "eigenvalues": [[3.0, -1.0], [2.0, 1.0]],
            "nep": 0.25,
            "ape": 2.0,
            "min": -1.0,
            "nep_interval": [0.0, 0.5],
            "ape_interval": [1.5, 3.0],
        },
        "landscape": {
            "axis": [-1.0, 0.0, 1.0],
            "loss": surfaces.mean(0).tolist(),
            "batch_loss": surfaces.tolist(),
            "penalty_at_optimum": 0.1,
            "loss_at_optimum": 1.1,
            "nll_at_optimum": 1.0,
            "delta_at_half": 1.0,
            "delta_at_one": 1.0,
        },
    }


def test_figures_and_rows_from_results(tmp_path):
    from posattn.plots import analysis as plots
    from posattn.plots import save_png

    results = {"ResNet": _fake_results(False), "ViT": _fake_results(True)}
    for name in ("hessian_spectra", "fourier_profiles", "feature_variance", "loss_landscapes"):
        assert (
            len(getattr(plots, name)(results).axes) >= 2
        )  # a panel per model (rendering is slow: not here)
    save_png(plots.noise_robustness(results), tmp_path / "noise.png")
    assert (tmp_path / "noise.png").stat().st_size > 1000
    rows = claims.rows({"resnet": _fake_results(False), "vit_positional": _fake_results(True)})
    by_key = {r["key"]: r for r in rows}
    assert all(set(r["ours"]) == {"resnet", "vit_positional"} for r in rows)
    # the 0.9 pi drop of 4 images (clean 1 1 1 0, noisy 1 0 0 0): -50 points; its interval resamples images
    assert by_key["noise_high"]["ours"]["resnet"].startswith("-50.0 [")
    est = by_key["noise_high"]["estimates"]["resnet"]
    assert -100 <= est["lo"] < -50 < est["hi"] <= 0
    assert by_key["accuracy"]["estimates"]["resnet"]["value"] == 75.0
    assert by_key["fourier_attention"]["ours"]["resnet"] == "no attention"
    att = by_key["fourier_attention"]["estimates"]["vit_positional"]
    assert att["value"] == pytest.approx(-0.5) and att["lo"] <= -0.5 <= att["hi"] < 0
    assert (
        by_key["fourier_attention"]["verdict"] == "ViT (positional): holds"
    )  # its interval lies below 0
    assert by_key["hessian_nep"]["ours"]["resnet"] == "0.25 [0.00, 0.50]"
    # NLL at theta*: the batches' centre losses (1, 1.2) less the L2 term 0.1
    assert by_key["landscape_nll"]["estimates"]["resnet"]["value"] == pytest.approx(1.0)
    assert by_key["landscape_one"]["estimates"]["resnet"]["value"] == pytest.approx(1.0)
    # without the L2 term: results that do not hold it at every point have no such number
    assert by_key["landscape_one_nll"]["ours"]["resnet"] == "n/a"
    with_l2 = _fake_results(False)
    with_l2["landscape"]["penalty"] = [[0.5, 0.3, 0.5], [0.2, 0.1, 0.4], [0.5, 0.3, 0.5]]
    est = per_model.estimates(with_l2)
    # the loss rises by 1.0 from the centre to x = 1 (the grid's last point); the L2 term by 0.4 - 0.1
    assert est["landscape_one_nll"]["value"] == pytest.approx(1.0 - 0.3)
    assert est["landscape_one"]["value"] - est["landscape_one_nll"]["value"] == pytest.approx(0.3)
    # ResNet vs vanilla ViT decide the orders; without a vanilla ViT there is nothing to decide
    assert by_key["hessian_ape"]["verdict"] == "-" and by_key["landscape_nll"]["verdict"] == "-"
    shifted = claims.rows(
        {
            "resnet": _fake_results(False, shift=-5.0),
            "vit_vanilla": _fake_results(True),
            "vit_positional": _fake_results(True, shift=0.01),
        }
    )
    fourier_min = next(r for r in shifted if r["key"] == "fourier_min")
    assert fourier_min["positional"] == "vs ViT (vanilla): not separated; vs ResNet: above"
    hessian_ape = next(r for r in shifted if r["key"] == "hessian_ape")
    assert hessian_ape["verdict"] == "undecided (ResNet vs ViT (vanilla): not separated)"


def test_last_epoch_change_is_the_criterion_of_image_results(tmp_path):
    logs = [
        {"step": s, "train_loss": loss}
        for s, loss in ((11, 2.0), (22, 1.0), (33, 0.70), (44, 0.69))
    ]
    (tmp_path / "metrics.jsonl").write_text(
        "\n".join(json.dumps(m) for m in logs + [{"step": 44, "test_loss": 1}])
    )
    # each log is the mean since the one before: the last epoch's are those whose steps all lie in it
    flat = pk22_report.last_epoch_change(tmp_path, 22.5)  # steps 21.5 .. 44: the logs at 33 and 44
    assert (flat["first_loss"], flat["last_loss"], flat["logs"]) == (0.70, 0.69, 2) and flat[
        "converged"
    ]
    falling = pk22_report.last_epoch_change(tmp_path, 34)  # steps 10 .. 44: the logs at 22, 33, 44
    assert falling["change"] == pytest.approx(-0.31) and not falling["converged"]


def test_two_runs_of_one_model_stop_the_report_before_any_training(tmp_path):
    # one model key is one results file and one column: the second would overwrite the first
    with pytest.raises(ConfigError, match=r"two runs of the same model \(resnet\)"):
        pk22_report.run(
            str(tmp_path / "pk22"), models=["resnet", "vit_vanilla", "resnet"], quick=True
        )
    assert not (tmp_path / "pk22").exists()


def test_two_given_runs_of_one_model_stop_the_report_before_any_measurement(tmp_path):
    # --config.runs: the model of each run is read from its config.json
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(
            json.dumps({"dataset": "digits", "model": {"name": "vit", "attention": "vanilla"}})
        )
    with pytest.raises(ConfigError, match=r"two runs of the same model \(vit_vanilla\)"):
        pk22_report.run(str(tmp_path / "pk22"), runs=[str(tmp_path / "a"), str(tmp_path / "b")])
    assert not (tmp_path / "pk22").exists()


def test_results_are_kept_only_for_the_same_run_settings_and_seed(tmp_path, monkeypatch):
    config = ConfigDict({"model": {"name": "vit", "attention": "positional", "variant": "XS/2"}})
    monkeypatch.setattr(
        pk22_report.trained_runs, "load_run", lambda run_dir: (None, None, config, None)
    )
    measured = []

    def measure(model, variables, config, settings, key, name):
        measured.append(settings)
        r = _fake_results(True)
        return {**r, "seconds_by_program": {}, "hessian": {**r["hessian"], "max": 3.0}}

    monkeypatch.setattr(pk22_report.suite, "measure", measure)
    monkeypatch.setattr(pk22_report, "training_summary", lambda run_dir, config: {})
    (tmp_path / "results").mkdir()
    one = lambda settings, seed, run_dir="run": pk22_report.measure_one(  # noqa: E731
        epath.Path(tmp_path), run_dir, settings, seed, None, logged.append
    )
    logged = []
    assert one(suite.QUICK, 0)[0] == "vit_positional" and len(measured) == 1
    one(suite.QUICK, 0)
    assert len(measured) == 1  # the same run, settings and seed: read back
    for settings, seed, run_dir in (
        (suite.QUICK, 1, "run"),
        (suite.Settings(noise_eps=0.5), 1, "run"),
        (suite.Settings(noise_eps=0.5), 1, "other_run"),
    ):
        one(settings, seed, run_dir)
    assert len(measured) == 4  # another seed, other settings, another run: each measured again
    assert [r["model"] for r in logged] == ["vit_positional"] * 4  # a metrics record per measure


def test_positional_statements_are_kept_only_where_every_length_agrees():
    row = lambda positional: [{"claim": "c", "verdict": "holds", "positional": positional}]  # noqa: E731
    table = claims.across_lengths(
        {
            "short": row("vs ViT (vanilla): above; vs ResNet: below"),
            "long": row("vs ViT (vanilla): above; vs ResNet: not separated"),
        }
    )
    assert table.splitlines()[2].endswith("| vs ViT (vanilla): above |")
    table = claims.across_lengths(
        {"short": row("vs ViT (vanilla): below"), "long": row("vs ViT (vanilla): above")}
    )
    assert table.splitlines()[2].endswith("| none |")


def test_results_of_several_workdirs_are_read_in_the_models_order(tmp_path):
    for workdir, models in (("a", ["vit_positional"]), ("b", ["alternet", "resnet"])):
        (tmp_path / workdir / "results").mkdir(parents=True)
        for m in models:
            (tmp_path / workdir / "results" / f"{m}.json").write_text(json.dumps({"model": m}))
    results = pk22_report.read_results(str(tmp_path / "a"), str(tmp_path / "b"))
    assert list(results) == ["resnet", "alternet", "vit_positional"]
    with pytest.raises(ConfigError, match="vit_positional is measured in two of"):
        pk22_report.read_results(str(tmp_path / "a"), str(tmp_path / "a"))


def test_a_measured_resnet18_run_plays_the_resnet_of_the_claims():
    # `--config.runs` of train_images runs measures a ResNet-18 (key "resnet18"), not the study's own
    # ResNet: the orders against "the ResNet" are decided on it (they were all "-" on Fashion-MNIST).
    est = lambda lo, hi: {"value": (lo + hi) / 2, "lo": lo, "hi": hi}  # noqa: E731
    ests = {"resnet18": est(300, 460), "vit_vanilla": est(40, 64), "vit_positional": est(70, 90)}
    assert (
        claims.verdict(("order", [("resnet", "vit_vanilla")]), ests)
        == "holds (ResNet-18 vs ViT (vanilla): above)"
    )
    assert claims.positional_comparison(ests) == "vs ViT (vanilla): above; vs ResNet-18: below"
    both = {**ests, "resnet": est(0, 1)}  # the study's own ResNet, where present, keeps the role
    assert (
        claims.verdict(("order", [("resnet", "vit_vanilla")]), both)
        == "fails (ResNet vs ViT (vanilla): below)"
    )


def test_rows_mark_empty_noise_bands_and_unconverged_hessians():
    # 8 x 8 digits: the bands at 0.1 and 0.9 pi hold no frequency; their passes equal the clean one
    def results(converged):
        r = _fake_results(False)
        r["noise"] = {
            **r["noise"],
            "empty_bands_pi": [0.1, 0.9],
            "drop_points": [float("nan")] * 2,
            "correct": [[1, 1, 1, 0], [None] * 4, [None] * 4],
        }
        r["hessian"] = {**r["hessian"], "converged": converged}
        return r

    rows = {
        r["key"]: r
        for r in claims.rows(
            {
                "resnet": results([[True, True], [True, False]]),
                "vit_vanilla": results([[True, True], [True, True]]),
            }
        )
    }
    for key in ("noise_low", "noise_high"):
        assert set(rows[key]["ours"].values()) == {"no frequency at this size"}
    # the order claim of PK22 is not judged (today's code read the empty band as a drop of 0 for both models)
    assert rows["noise_high"]["verdict"].startswith("not measured: no frequency in this band")
    assert (
        rows["hessian_nep"]["ours"]["resnet"]
        == "0.25 [0.00, 0.50] (1 of 4 eigenvalues NOT converged)"
    )
    assert rows["hessian_nep"]["ours"]["vit_vanilla"] == "0.25 [0.00, 0.50]"
    assert rows["hessian_nep"]["verdict"].startswith("NOT CONVERGED (ResNet): ")
    # results written before the flags: a run whose iterations reached settings.hessian_iterations
    old = {**_fake_results(False), "settings": {"hessian_iterations": 5}}
    old["hessian"] = {**old["hessian"], "iterations": [[5, 5], [3, 5]]}
    assert per_model.hessian_not_converged(old) == 3
    assert (
        per_model.hessian_not_converged(_fake_results(False)) is None
    )  # neither flags nor a cap: unknown


def test_the_noise_figure_leaves_empty_bands_out():
    from posattn.plots import analysis as plots

    r = _fake_results(False)
    r["noise"] = {**r["noise"], "empty_bands_pi": [0.9], "drop_points": [-25.0, 0.0]}
    ax = plots.noise_robustness({"ResNet": r}).axes[0]
    assert np.isnan(ax.lines[0].get_ydata()[1])  # not drawn as a drop of 0
    assert any("no frequency at this size: 0.9 pi" in t.get_text() for t in ax.texts)


def test_over_seeds_averages_measurements_within_a_model_and_judges_kinds_over_training_seeds(
    tmp_path,
):
    from posattn.papers.pk22 import over_seeds

    # two measurement seeds of each trained model are averaged into that model's number
    measured = [
        ("resnet", s, m, {"noise_high": -10.0 - s + m, "landscape_one": 20.0 + s})
        for s in range(3)
        for m in (0, 1)
    ] + [
        ("vit_vanilla", s, m, {"noise_high": -2.0 + 0.1 * s, "landscape_one": 20.5 + s})
        for s in range(3)
        for m in (0, 1)
    ]
    got = over_seeds.samples(measured)
    np.testing.assert_allclose(got["resnet"]["noise_high"], [-9.5, -10.5, -11.5])
    # the ViT loses far less to the noise on every seed: holds; the rises overlap: undecided
    noise = over_seeds.judge(got, "noise_high", "vit_vanilla", "resnet", 0.99)
    assert noise["verdict"] == "holds" and noise["value"] == pytest.approx(-1.9 + 10.5)
    rise = over_seeds.judge(got, "landscape_one", "resnet", "vit_vanilla", 0.99)
    assert rise["verdict"] == "undecided"
    # the claim the other way round fails
    assert over_seeds.judge(got, "noise_high", "resnet", "vit_vanilla", 0.99)["verdict"] == "fails"
    # a sign claim: "0 > lower"
    signed = over_seeds.samples(
        [("vit_vanilla", s, 0, {"fourier_attention": -0.5 - 0.01 * s}) for s in range(3)]
    )
    assert (
        over_seeds.judge(signed, "fourier_attention", None, "vit_vanilla", 0.99)["verdict"]
        == "holds"
    )
    text = over_seeds.markdown(got)
    assert "| noise_high | ViT (vanilla) > ResNet |" in text and "not measured" in text

    # collect: one results file per kind and workdir, the training seed from the run's config
    for seed in (0, 1):
        run_dir = tmp_path / f"run{seed}"
        run_dir.mkdir()
        (run_dir / "config.json").write_text(json.dumps({"seed": seed}))
        w = tmp_path / f"m{seed}" / "results"
        w.mkdir(parents=True)
        r = {**_fake_results(False), "run_dir": str(run_dir), "seed": 0, "settings": {"a": 1}}
        (w / "resnet.json").write_text(json.dumps(r))
    found = over_seeds.collect(str(tmp_path / "m0"), str(tmp_path / "m1"))
    assert [f[:3] for f in found] == [("resnet", 0, 0), ("resnet", 1, 0)]
    assert found[0][3]["accuracy"] == 75.0
    with pytest.raises(ConfigError, match="measured twice"):
        over_seeds.collect(str(tmp_path / "m0"), str(tmp_path / "m0"))
