"""The results schema ``unlearnkit.results/1``: what a run's results.json holds, and how it is read.

``unlearnkit run`` writes it (:mod:`unlearnkit.runner`), ``unlearnkit bench`` stores it
(:mod:`unlearnkit.bench`) and ``unlearnkit report`` reads it (:mod:`unlearnkit.report`); this
module is the one copy of what the three share: the results dataclass, the labels of models and
forget tasks, and which audit data and which layer a table reads. Plain functions over the results
dict; it imports nothing of the toolkit above it (only :mod:`unlearnkit.validate`, to check the
tasks of a suite it names).

results.json::

    schema      "unlearnkit.results/1"
    config      the RunConfig (RunConfig.to_dict)
    provenance  created, versions, git_commit, device, processes, runtime, recipe, preset,
                original_sha256, retrain_sha256
    task        dataset, model, num_classes, setting (VFL: parties, bottom, transmitted), forget
                (ForgetSpec.to_dict), test_convention, the split's summary (split_hash, n_train_forget, ...)
    models      {"original" | "retrain" | method: {metrics, ..., audit (AuditReport.to_dict, or null)}}

An audit holds its layers on both audit data (``audit_data.test`` / ``audit_data.train``) and, as
``layers``, those of the data its verdict rests on (``rests_on``). Every table reads ``layers``:
the numbers a table shows are the numbers the verdict was decided on.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import validate

SCHEMA = "unlearnkit.results/1"
#: the schema of ``forgetting_quality.json`` (written by :mod:`unlearnkit.forgetting_quality_experiment`, read by
#: the report)
FORGETTING_QUALITY_SCHEMA = "unlearnkit.forgetting_quality/1"
#: the keys of the two reference rows of ``models`` (every other key is a method's label)
ORIGINAL, RETRAIN = "original", "retrain"
#: the verdicts an audit gives: :data:`unlearnkit.audit.verdict.VERDICTS`, named here so that a report
#: reads them without importing the auditor (tests/unit/report/test_report_ranges.py keeps the two equal)
VERDICTS = ("erased", "suppressed", "overforgotten", "collapsed", "not_forgotten", "inconclusive")
PERCENT = (0.0, 100.0)
#: the range of the metrics a results file holds, where it is not that of an accuracy (``*_acc``: percent)
METRIC_RANGES = {"mia_efficacy": PERCENT, "mia_auc": (0.0, 1.0), "gap": PERCENT, "h_mean": PERCENT,
                 "ua_f": PERCENT, "ua_r": PERCENT, "runtime_s": (0.0, None), "speedup": (0.0, None)}


def metric_range(name: str) -> tuple[float | None, float | None] | None:
    """``(low, high)`` a metric of a results file lies in (None: no bound on that side), or None for a
    name this schema does not know: accuracies in percent, MIA efficacy in percent, MIA AUROC in [0, 1]."""
    return PERCENT if name.endswith("_acc") else METRIC_RANGES.get(name)


@dataclass
class RunResults:
    """What one ``unlearnkit run`` found; :meth:`to_dict` is its results.json (keys as above)."""

    config: dict
    provenance: dict
    task: dict
    models: dict[str, dict]
    schema: str = SCHEMA

    def to_dict(self) -> dict:
        return {"schema": self.schema, "config": self.config, "provenance": self.provenance,
                "task": self.task, "models": self.models}


# --- labels --------------------------------------------------------------------------------------

def model_label(task: dict) -> str:
    """The model as titles and report blocks name it: ``vfl (K parties, bottom B)`` in the VFL setting,
    the model's name otherwise (also for results written before VFL, which have no ``setting``)."""
    return f"vfl ({task['parties']} parties, bottom {task['model']})" if task.get("setting") == "vfl" \
        else task["model"]


def describe_forget(forget: dict) -> str:
    """The forget set as results.md's title shows it (``classes [3]``, ``random 0.1``, ``flipped 0.05``, a
    concept task)."""
    if forget["kind"] == "concept":
        return f"{forget['task']}: class {forget['classes'][0]} of concept {forget['concept']}"
    if forget.get("flipped") is not None:
        return f"flipped {forget['flipped']:g} (mislabeled training samples)"
    return f"{forget['kind']} {forget['classes'] or forget['random'] or forget['indices_file']}"


def task_label(task: dict) -> str:
    """The name of a forget task in a suite (``class 3``, ``classes 3,8``, ``random 10%``, ``flipped 5%``,
    ``data_mismatch 3 of 1,2``, ``indices f.txt``), or its ``name`` when it has one; the task's
    keys are those of a suite (``forget_classes``, ``forget_random``, ``forget_flipped``, ...), each checked."""
    if task.get("name"):
        return validate.text("name of a task", task["name"])
    classes = ",".join(str(c) for c in _ints(task.get("forget_classes"), "forget_classes of a task"))
    if task.get("task"):
        concept = task.get("concept")
        return f"{task['task']} {classes}" + (
            f" of {','.join(str(c) for c in _ints(concept, 'concept of a task'))}" if concept else "")
    if task.get("forget_random") is not None:
        r = validate.forget_random("forget_random of a task", task["forget_random"])
        return f"random {r * 100:g}%" if r < 1 else f"random {int(r)}"
    if task.get("forget_flipped") is not None:
        f = validate.forget_flipped("forget_flipped of a task", task["forget_flipped"])
        return f"flipped {f * 100:g}%"
    if task.get("forget_indices"):
        return f"indices {Path(str(task['forget_indices'])).name}"
    return f"class {classes}" if "," not in classes else f"classes {classes}"


def forget_label(forget: dict) -> str:
    """:func:`task_label` of results.json's ``task.forget`` (the name a suite gives the same task)."""
    return task_label({"forget_classes": forget.get("classes") or [], "forget_random": forget.get("random"),
                       "forget_indices": forget.get("indices_file"), "forget_flipped": forget.get("flipped"),
                       "task": forget.get("task"),
                       "concept": forget.get("concept") or []})


def check_forget(prefix: str, forget: dict, num_classes=None) -> None:
    """Raise a UserError (``prefix: ...``) unless results' ``task.forget`` names a forget set (classes,
    a random fraction or count, an indices file, a flipped-label fraction, or a concept task) whose
    classes are whole numbers below ``num_classes`` (the dataset's class count, when the file gives it)."""
    from .errors import UserError

    classes = forget.get("classes") or []
    if not isinstance(classes, list):
        raise UserError(f"{prefix}: task.forget.classes must be a list of whole numbers, not {classes!r}")
    for c in classes:
        validate.whole(f"{prefix}: task.forget.classes", c, low=0,
                       high=None if num_classes is None else num_classes - 1)
    if forget.get("flipped") is not None:
        validate.forget_flipped(f"{prefix}: task.forget.flipped", forget["flipped"])
    if not (classes or forget.get("random") is not None or forget.get("indices_file") or forget.get("task")
            or forget.get("flipped") is not None):
        raise UserError(f"{prefix}: task.forget names no forget set (no classes, random, indices_file, flipped "
                        f"or task)")


def _ints(value, what: str) -> list[int]:
    return [] if value is None else validate.int_list(what, value)


# --- what a table reads --------------------------------------------------------------------------

def forget_accuracy(metrics: dict):
    """The forget accuracy a table shows: on the forgotten test samples (Mirage's ``yu_acc``), or on
    the training forget set where the task has no forgotten test samples (sample-level forgetting)."""
    v = metrics.get("test_forget_acc")
    return v if v is not None else metrics.get("forget_acc")


def rests_on(audit: dict | None) -> str | None:
    """The audit data the verdict rests on (``test`` or ``train``), None where the audit does not say."""
    return (audit or {}).get("rests_on")


def data_protocol(audit: dict | None) -> str:
    """How the data the verdict rests on were drawn (e.g. ``training split, forget set vs retained data``)."""
    audit = audit or {}
    return ((audit.get("audit_data") or {}).get(rests_on(audit)) or {}).get("protocol", "")


def verdict_layers(audit: dict | None) -> dict[str, dict]:
    """``{layer: numbers}`` on the audit data the verdict rests on: what every table reads.
    results.json writes them as the audit's ``layers`` (equal to ``audit_data[rests_on].layers``)."""
    return (audit or {}).get("layers") or {}


def main_layer(audit: dict | None) -> str | None:
    """The layer a table reads: for a VFL model (its audit lists the taps its passive parties transmit)
    the concatenated cut-layer ``embedding``, Mirage's audit features (reference-specs §2.5);
    otherwise the penultimate layer."""
    audit = audit or {}
    transmitted = (audit.get("transmitted") or {}).get("layers") or []
    return "embedding" if "embedding" in transmitted else audit.get("penultimate_layer")


def main_numbers(audit: dict | None) -> dict:
    """``{number: value}`` of :func:`main_layer` on the data the verdict rests on (empty without an audit)."""
    return verdict_layers(audit).get(main_layer(audit)) or {}


def layer_value(audit: dict | None, key: str, layer: str | None = None):
    """One number of one layer (default :func:`main_layer`) on the data the verdict rests on."""
    return (verdict_layers(audit).get(layer or main_layer(audit)) or {}).get(key)


def group_audit(audits: list[tuple[str, dict | None]]) -> dict | None:
    """The audit a group's retrain numbers are read from: the original's when it was audited, else the
    first audit with layers. Every audit of a group computes the retrained reference's numbers
    identically (same retrained features, same probe splits), so any of them would do."""
    with_layers = [(name, a) for name, a in audits if a and a.get("layers")]
    first = with_layers[0][1] if with_layers else None
    return next((a for name, a in with_layers if name == "original"), first)


def retrain_view(audit: dict) -> dict:
    """Retrain as an audit row: the ``*_retrained`` numbers of an audit of its group (LPR, separability,
    CKA to the original), as its own ``lpr``, ``separability`` and ``cka_original``; no verdict."""
    return {"verdict": None, "penultimate_layer": audit.get("penultimate_layer"), "view": "retrained",
            "rests_on": audit.get("rests_on"), "transmitted": audit.get("transmitted"),
            "layers": {name: {"lpr": layer.get("lpr_retrained"),
                              "separability": layer.get("separability_retrained"),
                              "cka_original": layer.get("cka_retrain_original")}
                       for name, layer in verdict_layers(audit).items()}}
