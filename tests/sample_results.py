"""A results.json as ``unlearnkit run`` writes it (schema unlearnkit.results/1), for report tests.

The numbers are made up; only their shape matters (the audits' test-set data differ from the
training-split data their verdicts rest on, as on the bundled data). Shared by the report tests and
the bad-input sweep.
"""
from __future__ import annotations


def metrics(**kw) -> dict:
    base = {"forget_acc": 1.0, "retain_acc": 99.0, "test_acc": 97.0, "test_acc_full": 88.0, "test_forget_acc": 2.0,
            "test_retain_acc": 97.0, "mia_efficacy": 100.0, "mia_auc": 0.5, "gap": 1.0, "h_mean": 97.0,
            "runtime_s": 2.0, "speedup": 5.0}
    return {**base, **kw}


def audit(delta: float = 2.0, verdict: str = "suppressed") -> dict:
    layers = {name: {"lpr": 90 + delta, "delta_lpr": delta + i, "delta_lpr_ci": [delta + i - 1, delta + i + 1],
                     "cka_original": 0.9, "cka_retrain": 0.8, "separability": 0.5, "separability_ratio": 1.5,
                     "lpr_retrained": 88.0, "separability_retrained": 0.3, "cka_retrain_original": 0.7,
                     "margin_source": "calibrated", "probed": True, "tolerance": None}
              for i, name in enumerate(["block1", "penultimate"])}
    # the test-set data hold other numbers: the tables must read the data the verdict rests on (train)
    test_layers = {name: {**layer, "lpr": layer["lpr"] - 7.5, "delta_lpr": layer["delta_lpr"] - 4.0,
                          "delta_lpr_ci": [v - 4.0 for v in layer["delta_lpr_ci"]], "cka_original": 0.6,
                          "separability": 0.25, "lpr_retrained": 81.0, "separability_retrained": 0.15,
                          "cka_retrain_original": 0.55}
                   for name, layer in layers.items()}
    return {"schema": "unlearnkit.audit/1", "verdict": verdict, "penultimate_layer": "penultimate",
            "rests_on": "train", "rests_on_reason": "the test set holds too few forget samples",
            "layers": layers,
            "audit_data": {"test": {"protocol": "full test set, forgotten classes vs the rest (Mirage)",
                                    "layers": test_layers},
                           "train": {"protocol": "training split, forget set vs retained data", "layers": layers}},
            "cka": "centered (Kornblith 2019), on standardised units",
            "idi": {"idi": None, "note": "not computed"}, "transmitted": {}}


def sample_results() -> dict:
    """Original, retrain and one method, with audits."""
    return {
        "schema": "unlearnkit.results/1",
        "config": {"dataset": "digits", "model": "small_cnn", "seed": 0, "methods": ["GA"]},
        "provenance": {"created": "2025-01-01T00:00:00+00:00", "versions": {"torch": "2.4", "unlearnkit": "0.1"},
                       "git_commit": "0123456789abcdef", "device": "cpu", "processes": 1, "preset": "paper"},
        "task": {"dataset": "digits", "model": "small_cnn", "num_classes": 10, "setting": "standard",
                 "forget": {"kind": "classes", "classes": [3], "random": None, "indices_file": None, "task": None,
                            "concept": []},
                 "test_convention": "salun", "split_hash": "abc123", "n_train_forget": 100, "n_train_retain": 900},
        "models": {
            "original": {"metrics": metrics(forget_acc=100.0), "checkpoint": "o.pt", "sha256": "o",
                         "audit": audit(5.0, "not_forgotten")},
            "retrain": {"metrics": metrics(gap=0.0, speedup=1.0), "checkpoint": "r.pt", "sha256": "r", "audit": None},
            "gradient_ascent": {"metrics": metrics(test_forget_acc=None), "hyperparameters": {"lr": 0.01},
                                "stop_reason": "epochs", "history": [], "audit": audit()},
        },
    }
