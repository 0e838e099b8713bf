"""The figures people read (issue 31): ticks render (mathtext stays on for matplotlib's own labels), names a
user chose print literally, the separability ratio is plotted per layer with its tolerance band in
report.html and audit.html, and 35 methods stay legible (panels of PER_PANEL methods, a numbered key)."""
from __future__ import annotations

import math
import random
from types import SimpleNamespace

import matplotlib
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from unlearnkit.audit import render
from unlearnkit.audit.layers import Interval, LayerResult
from unlearnkit.report import plots
from unlearnkit.report.records import Record

matplotlib.use("Agg")

ODD = "x $a^$ y"  # invalid mathtext: drawing it as math would raise


def fake_audit(rng: random.Random, layers: list[str]) -> dict:
    out = {}
    for i, name in enumerate(layers):
        v = rng.uniform(0.4, 6.0)
        out[name] = {"delta_lpr": rng.uniform(-3, 20), "separability_ratio": v,
                     "separability_ratio_ci": [v / 1.5, v * 1.6], "separability_margin": 2.0 + 0.1 * i,
                     "probed": True}
    return {"verdict": "suppressed", "penultimate_layer": layers[-1], "rests_on": "train", "layers": out}


def fake_records(n_methods: int, method=lambda i: f"method_{i:02d}", dataset="digits",
                 layers=("layer1", "layer2", "penultimate"), seeds=2) -> list[Record]:
    rng = random.Random(0)
    out = []
    for m in ["original", "retrain", *(method(i) for i in range(n_methods))]:
        for seed in range(seeds):
            metrics = {"test_retain_acc": rng.uniform(60, 99), "forget_acc": rng.uniform(0, 100),
                       "runtime_s": rng.uniform(1, 300), "gap": rng.uniform(0, 30)}
            out.append(Record(dataset, "small_cnn", "classes 3", seed, m, metrics,
                              None if m == "retrain" else fake_audit(rng, list(layers))))
    return out


@pytest.fixture
def drawn(monkeypatch):
    """Every figure the report's and the audit's plotting functions make, kept after it is saved."""
    figs = []
    report_png, audit_png = plots._png, render._png
    monkeypatch.setattr(plots, "_png", lambda plt, fig: figs.append(fig) or report_png(plt, fig))
    monkeypatch.setattr(render, "_png", lambda fig: figs.append(fig) or audit_png(fig))
    return figs


def texts(fig):
    return [t for t in fig.findobj(matplotlib.text.Text) if t.get_visible() and t.get_text()]


def drawn_literally(t) -> bool:
    return t._preprocess_math(t.get_text())[1] is False


def fake_audit_report(layer_names: list[str]):
    rows = [LayerResult(name, True, separability_ratio=Interval(v, v / 1.4, v * 1.5),
                        separability_ratio_original=Interval(5.0, 4.0, 6.0),
                        delta_auroc=Interval(1.0, 0.0, 2.0), delta_auroc_original=Interval(9.0, 8.0, 10.0),
                        cka_original=0.8, cka_retrain=0.9, cka_retrain_original=0.7)
            for name, v in zip(layer_names, (0.7, 1.5, 3.0))]
    return SimpleNamespace(layers={"train": rows}, rests_on="train", layer_names=layer_names, verdict="suppressed",
                           config=SimpleNamespace(confidence=0.95, center=True, kept_margin=0.5), embedding={},
                           checks=[],
                           penultimate=layer_names[-1])


def test_log_axis_ticks_render_as_math_and_user_names_print_literally(drawn):
    """A log axis labels its ticks ``$\\mathdefault{10^{0}}$``: drawn as math, never as that literal string;
    a layer, dataset or method name holding ``$`` is drawn as written (as math it would fail to draw)."""
    records = fake_records(3, method=lambda i: f"{ODD} {i}", dataset=ODD, layers=("layer1", ODD, "penultimate"))
    assert plots.separability(records) and plots.runtime(records) and plots.layerwise(records)
    assert plots.trilemma(records)
    render.figures(fake_audit_report(["layer1", ODD, "penultimate"]))
    log_axes, with_names = 0, 0
    for fig in drawn:
        for ax in fig.axes:
            for axis in (ax.xaxis, ax.yaxis):
                if axis.get_scale() != "log":
                    continue
                log_axes += 1
                labels = [t for t in axis.get_ticklabels(which="both") if t.get_visible() and t.get_text()]
                assert labels
                for t in labels:
                    assert not (drawn_literally(t) and "\\mathdefault" in t.get_text()), t.get_text()
        user = [t for t in texts(fig) if "$a^$" in t.get_text()]
        assert all(drawn_literally(t) for t in user), [t.get_text() for t in user]
        with_names += bool(user)
    assert log_axes >= 2  # report: separability, runtime
    assert with_names >= 6  # the report's four figures; the audit's ΔAUROC and CKA


def _band(ax):
    return [c for c in ax.collections if c.get_label() == "within tolerance of retrain"]


def test_separability_ratio_is_plotted_per_layer_without_a_band_the_verdict_does_not_read(drawn):
    """The separability ratio is reported (the verdict reads kept fractions, audit.json's checks): one marker per
    method, seed and layer, the original as positive control, and no tolerance band that would suggest a rule."""
    records = fake_records(2)
    assert plots.separability(records)[:4] == b"\x89PNG"
    assert any(key == "separability" for key, _, _ in plots.build_figures(records))
    ax = drawn[0].axes[0]
    assert ax.get_yscale() == "log" and [t.get_text() for t in ax.get_xticklabels()] == ["layer1", "layer2",
                                                                                          "penultimate"]
    assert not _band(ax)
    # one marker per method and seed at each layer: original + 2 methods, 2 seeds, 3 layers
    assert len([ln for ln in ax.lines if ln.get_marker() in ("o", "x")]) == 3 * 2 * 3


def _overlap(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


@pytest.mark.parametrize("figure", ["trilemma", "layerwise", "separability", "runtime"])
def test_35_methods_stay_legible(drawn, figure):
    png = getattr(plots, figure)(fake_records(35, method=lambda i: f"a_rather_long_method_name_{i:02d}", seeds=1))
    assert png[:4] == b"\x89PNG"
    fig = drawn[0]
    width, height = fig.get_size_inches() * 80
    assert width <= 2400 and height <= 3200, (width, height)
    canvas = FigureCanvasAgg(fig)  # pyplot detached the saved figure from its canvas
    canvas.draw()
    renderer = canvas.get_renderer()
    axes = [ax for ax in fig.axes if ax.get_visible() and ax.get_label() != "<colorbar>"]
    legends = [ax.get_legend() for ax in axes if ax.get_legend() is not None]
    names = [t.get_text() for lg in legends for t in lg.get_texts()]
    assert sum("a_rather_long_method_name_" in n for n in names) == 35  # every method named once
    assert all(len(lg.get_texts()) <= max(plots.PER_PANEL + 3, 40) for lg in legends)
    figure_box = fig.bbox
    boxes = [(lg, lg.get_window_extent(renderer)) for lg in legends]
    for lg, box in boxes:
        assert box.x0 >= -1 and box.y0 >= -1 and box.x1 <= figure_box.x1 + 1 and box.y1 <= figure_box.y1 + 1
        for ax in axes:  # a legend covers no panel's plotting area (its own included: it sits outside)
            assert not _overlap(box, ax.get_window_extent(renderer)), figure
        for other, obox in boxes:
            assert other is lg or not _overlap(box, obox)
    if figure not in ("trilemma", "runtime"):  # these two: one panel, numbered points, a key
        assert len(axes) == math.ceil(35 / plots.PER_PANEL)
        for ax in axes:
            shown = [t for t in ax.get_legend().get_texts() if t.get_text().startswith("a_rather")]
            assert 1 <= len(shown) <= plots.PER_PANEL


def test_report_log_axes_read_as_plain_ratios_and_seconds(drawn):
    """Issue 44: log-axis ticks read ``3×10⁰`` and ``6×10⁻¹``. The separability ratio's axis reads 0.5×, 1×, 2×,
    4× (powers of two, 1× among them); the runtime axis plain seconds (0.5, 2, 10)."""
    records = fake_records(3)
    assert plots.separability(records) and plots.runtime(records)
    ratio_axes = seconds_axes = 0
    for fig in drawn:
        FigureCanvasAgg(fig).draw()
        for ax in fig.axes:
            for axis in (ax.xaxis, ax.yaxis):
                if axis.get_scale() != "log":
                    continue
                labels = [t.get_text() for t in axis.get_ticklabels(which="both") if t.get_visible() and t.get_text()]
                assert labels and not any("10" in t and ("^" in t or "×10" in t) for t in labels), labels
                assert not any("mathdefault" in t for t in labels), labels
                if axis is ax.yaxis:  # the separability ratio
                    ratio_axes += 1
                    assert all(t.endswith("×") for t in labels) and "1×" in labels, labels
                    values = [float(t[:-1]) for t in labels]
                    assert all(math.log2(v) == round(math.log2(v)) for v in values), values
                else:
                    seconds_axes += 1
                    assert all(float(t) > 0 for t in labels), labels
    assert ratio_axes >= 1 and seconds_axes >= 1


def test_ratio_ticks_keep_one_and_thin_out_over_many_powers():
    from unlearnkit.plotting import RatioLocator

    loc = RatioLocator()
    assert loc.tick_values(0.3, 5) == [0.25, 0.5, 1.0, 2.0, 4.0, 8.0]
    wide = loc.tick_values(1e-4, 1e4)
    assert 1.0 in wide and len(wide) <= 10
