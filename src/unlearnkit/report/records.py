"""What a report reads: one :class:`Record` per (model row, seed), from the store or from results.json.

A record is one row of one run: the ``original``, the ``retrain`` reference or a method, on one
dataset, model, forget task and seed, with its metrics and audit exactly as results.json holds
them. Retrain is not audited itself; its representation numbers (LPR, separability, CKA to the
original) are the ``*_retrained`` numbers of an audit of the same group, which every audit of that
group computes identically (same retrained features, same probe splits).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from .. import validate
from ..errors import UserError
from ..results import (
    RETRAIN,
    VERDICTS,
    check_forget,
    forget_label,
    group_audit,
    metric_range,
    model_label,
    retrain_view,
)

REFERENCE_ROWS = ("retrain", "original")


@dataclass
class Record:
    dataset: str
    model: str
    task: str
    seed: int
    method: str                 # "original", "retrain", or the method's label (with its variant)
    metrics: dict
    audit: dict | None = None
    source: str = ""
    provenance: dict = field(default_factory=dict)

    @property
    def block(self) -> tuple[str, str, str]:
        return (self.dataset, self.model, self.task)

    @property
    def verdict(self) -> str | None:
        """The audit's verdict, qualified ``· utility lost`` when it flagged lost retained accuracy (the
        utility axis, ``audit.json``'s ``utility``); ``collapsed`` already says it."""
        audit = self.audit or {}
        v = audit.get("verdict")
        lost = v and v != "collapsed" and (audit.get("utility") or {}).get("flagged")
        return f"{v} · utility lost" if lost else v


def from_store(path: str | Path, rows: list[dict]) -> list[Record]:
    """The records of a results store's rows (``ResultStore.rows()`` of the store at ``path``, which
    the caller opens read-only: the report reads results, not the code that stores them)."""
    out = []
    for r in rows:
        method = r["entry"] if r["kind"] == "reference" else r["label"]
        # bench stores what a run's results.json holds, so the rows are numbers; a store edited by hand
        # (or by another tool) is checked like a results.json before any of it reaches the report
        where = f"results database {Path(path).expanduser()}: cell {r['cell_id']} {r['entry']}"
        metrics, audit = _checked_entry(where, {"metrics": r["metrics"], "audit": r["audit"]}, "")
        prov = {k: r[k] for k in ("config_hash", "split_hash", "original_sha256", "retrain_sha256",
                                  "unlearned_sha256", "unlearnkit_version", "git_commit", "torch_version",
                                  "device", "finished", "wall_s", "cell_id")}
        cfg = r.get("config") or {}
        if not isinstance(cfg, dict):
            raise UserError(f"{where}: config must be a mapping, not {_show(cfg)}")
        model = model_label({"setting": cfg.get("setting"), "parties": cfg.get("parties"), "model": r["model"]})
        out.append(Record(r["dataset"], model, r["task"], int(r["seed"]), method, metrics, audit,
                          f"cell {r['cell_id']}", prov))
    return out


# --- what a results.json must hold for the report (checked once, right after loading) -----------

# the numbers the report reads from an audit's layers (tables, figures, cells.csv, retrain's view)
LAYER_NUMBERS = ("lpr", "delta_lpr", "cka_original", "cka_retrain", "separability", "separability_ratio",
                 "lpr_retrained", "separability_retrained", "cka_retrain_original")
LAYER_INTERVALS = ("delta_lpr_ci",)


def _show(value) -> str:
    """A JSON value as a message shows it: text quoted (and cut), containers by their kind."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _key(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _mapping(prefix: str, where: str, value, what: str = "a mapping") -> dict:
    if not isinstance(value, dict):
        raise UserError(f"{prefix}: {where} must be {what}, not {_show(value)}")
    return value


def _required(prefix: str, parent: dict, where: str, name: str):
    if name not in parent:
        raise UserError(f"{prefix}: {_key(where, name)} is missing")
    return parent[name]


def _text_or_null(prefix: str, parent: dict, where: str, name: str) -> None:
    v = parent.get(name)
    if v is not None and not isinstance(v, str):
        raise UserError(f"{prefix}: {_key(where, name)} must be text (or null), not {_show(v)}")


def _number_or_null(prefix: str, where: str, value):
    """A finite number, or null; NaN (which Python's json writes and reads) counts as null, inf does not."""
    if value is None:
        return None
    if not validate.is_number(value):
        raise UserError(f"{prefix}: {where} must be a number (or null), not {_show(value)}")
    if math.isnan(value):
        return None
    if not math.isfinite(value):
        raise UserError(f"{prefix}: {where} must be a finite number (or null), not {value}")
    return value


def _whole_list_or_null(prefix: str, parent: dict, where: str, name: str) -> None:
    v = parent.get(name)
    if v is None:
        return
    if not isinstance(v, list):
        raise UserError(f"{prefix}: {_key(where, name)} must be a list of whole numbers (or null), not {_show(v)}")
    for i, item in enumerate(v):
        if isinstance(item, bool) or not isinstance(item, int):
            raise UserError(f"{prefix}: {_key(where, name)}[{i}] must be a whole number, not {_show(item)}")


def _checked_audit(prefix: str, where: str, audit) -> dict | None:
    if audit is None:
        return None
    _mapping(prefix, where, audit, "a mapping (or null)")
    for name in ("verdict", "penultimate_layer"):
        _text_or_null(prefix, audit, where, name)
    if audit.get("verdict") is not None and audit["verdict"] not in VERDICTS:
        raise UserError(f"{prefix}: {where}.verdict must be one of {', '.join(VERDICTS)} (or null), not "
                        f"{_show(audit['verdict'])}")
    transmitted = audit.get("transmitted")
    if transmitted is not None:
        _mapping(prefix, f"{where}.transmitted", transmitted, "a mapping (or null)")
        names = transmitted.get("layers")
        if names is not None and not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
            raise UserError(f"{prefix}: {where}.transmitted.layers must be a list of layer names, not "
                            f"{_show(names)}")
    layers = audit.get("layers")
    if layers is not None:
        _mapping(prefix, f"{where}.layers", layers, "a mapping of layer names (or null)")
        for lname, layer in layers.items():
            lwhere = f"{where}.layers.{lname}"
            _mapping(prefix, lwhere, layer)
            for key in LAYER_NUMBERS:
                if key in layer:
                    layer[key] = _number_or_null(prefix, f"{lwhere}.{key}", layer[key])
            for key in LAYER_INTERVALS:
                ci = layer.get(key)
                if ci is None:
                    continue
                if not isinstance(ci, list) or len(ci) != 2:
                    raise UserError(f"{prefix}: {lwhere}.{key} must be a list [low, high] (or null), not {_show(ci)}")
                layer[key] = [_number_or_null(prefix, f"{lwhere}.{key}[{i}]", v) for i, v in enumerate(ci)]
    idi = audit.get("idi")
    if idi is not None:
        _mapping(prefix, f"{where}.idi", idi, "a mapping (or null)")
        if "idi" in idi:
            idi["idi"] = _number_or_null(prefix, f"{where}.idi.idi", idi["idi"])
    return audit


def _checked_entry(prefix: str, entry, where: str) -> tuple[dict, dict | None]:
    """``(metrics, audit)`` of one model row: every metric a finite number or null (NaN read as null)."""
    _mapping(prefix, where or "the row", entry)
    metrics = _mapping(prefix, _key(where, "metrics"), _required(prefix, entry, where, "metrics"))
    metrics = {name: _in_range(prefix, f"{_key(where, 'metrics')}.{name}", name,
                               _number_or_null(prefix, f"{_key(where, 'metrics')}.{name}", v))
               for name, v in metrics.items()}
    return metrics, _checked_audit(prefix, _key(where, "audit"), entry.get("audit"))


def _in_range(prefix: str, where: str, name: str, value):
    """``value`` (a number or None), checked against the metric's range (:func:`unlearnkit.results.metric_range`)."""
    bounds = metric_range(str(name))
    if value is not None and bounds is not None:
        validate.number(f"{prefix}: {where}", value, low=bounds[0], high=bounds[1])
    return value


#: (the config key, the task.forget key) of each forget setting results.json records twice
_FORGET_PAIRS = (("forget_classes", "classes"), ("forget_random", "random"), ("forget_flipped", "flipped"))


def _same_forget_set(prefix: str, config: dict, forget: dict, num_classes) -> None:
    """The forget set ``config`` asked for is the one ``task.forget`` records (``unlearnkit run`` writes both
    from one value): a file whose two disagree (``config.forget_classes: [99]`` on a task that forgot class
    3) was edited or assembled by hand, and its rows cannot be labelled. A UserError naming both keys."""
    classes = config.get("forget_classes")
    if classes not in (None, [], ""):
        got = validate.int_list(f"{prefix}: config.forget_classes", classes)
        if num_classes is not None:
            for c in got:
                validate.whole(f"{prefix}: config.forget_classes", c, low=0, high=num_classes - 1)
    for key, task_key in _FORGET_PAIRS:
        given, recorded = config.get(key), forget.get(task_key)
        if given in (None, [], ""):
            continue
        if key == "forget_classes":
            same = set(validate.int_list(key, given)) == set(recorded or [])
        else:
            same = validate.is_number(given) and validate.is_number(recorded) and float(given) == float(recorded)
        if not same:
            raise UserError(f"{prefix}: config.{key} {given!r} contradicts task.forget.{task_key} {recorded!r}; one "
                            f"of them was edited: give the results.json unlearnkit wrote")


def _checked_results(prefix: str, res: dict) -> dict[str, tuple[dict, dict | None]]:
    """What :func:`from_results` reads, checked once: the first problem is the one line raised.
    Returns every model row's ``(metrics, audit)``, checked."""
    models = _mapping(prefix, "models", _required(prefix, res, "", "models"),
                      "a mapping of model rows (name: {metrics, audit})")
    if not models:
        raise UserError(f"{prefix} holds no models (models is empty)")
    task = _mapping(prefix, "task", _required(prefix, res, "", "task"))
    for name in ("dataset", "model"):
        if not isinstance(_required(prefix, task, "task", name), str):
            raise UserError(f"{prefix}: task.{name} must be text, not {_show(task[name])}")
    for name in ("setting", "split_hash"):
        _text_or_null(prefix, task, "task", name)
    if task.get("setting") == "vfl":
        validate.whole(f"{prefix}: task.parties", _required(prefix, task, "task", "parties"), low=1)
    forget = _mapping(prefix, "task.forget", _required(prefix, task, "task", "forget"))
    for name in ("classes", "concept"):
        _whole_list_or_null(prefix, forget, "task.forget", name)
    for name in ("indices_file", "task"):
        _text_or_null(prefix, forget, "task.forget", name)
    if forget.get("random") is not None:
        validate.number(f"{prefix}: task.forget.random", forget["random"], low=0, low_open=True)
    num_classes = task.get("num_classes")
    if num_classes is not None:
        validate.whole(f"{prefix}: task.num_classes", num_classes, low=1)
    check_forget(prefix, forget, num_classes)  # a set the report can name, of classes the dataset has
    config = _mapping(prefix, "config", _required(prefix, res, "", "config"))
    validate.whole(f"{prefix}: config.seed", _required(prefix, config, "config", "seed"))
    _same_forget_set(prefix, config, forget, num_classes)
    prov = res.get("provenance")
    if prov is not None:
        _mapping(prefix, "provenance", prov, "a mapping (or null)")
        for name in ("git_commit", "device", "created"):
            _text_or_null(prefix, prov, "provenance", name)
        versions = prov.get("versions")
        if versions is not None:
            _mapping(prefix, "provenance.versions", versions, "a mapping (or null)")
            for name in ("torch", "unlearnkit"):
                _text_or_null(prefix, versions, "provenance.versions", name)
    return {name: _checked_entry(prefix, entry, f"models.{name}") for name, entry in models.items()}


def from_results(path: str | Path) -> list[Record]:
    p = Path(path).expanduser()
    if p.is_dir():
        p = p / "results.json"
    validate.not_special("results file", p)
    if not p.exists():
        raise UserError(f"results file {p} does not exist (unlearnkit run writes <out>/results.json)")
    if not p.is_file():
        raise UserError(f"results file {p} is {'a folder' if p.is_dir() else 'not a regular file'}, not a "
                        f"results.json")
    p, text = validate.text_file("results file", p)  # UTF-8, at most MAX_TEXT_BYTES
    res = validate.json_text(f"results file {p}", text, "a results.json")  # strict: no key twice, no NaN
    if not isinstance(res, dict) or not str(res.get("schema", "")).startswith("unlearnkit.results/"):
        raise UserError(f"{p} is not an unlearnkit results.json (no schema unlearnkit.results/1)")
    rows = _checked_results(f"results.json {p}", res)  # before anything is read from it
    t, prov = res["task"], res.get("provenance") or {}
    versions = prov.get("versions") or {}
    info = {"git_commit": prov.get("git_commit"), "torch_version": versions.get("torch"),
            "unlearnkit_version": versions.get("unlearnkit"), "device": prov.get("device"),
            "split_hash": t.get("split_hash"), "finished": prov.get("created")}
    model, task, seed = model_label(t), forget_label(t["forget"]), int(res["config"]["seed"])
    return [Record(t["dataset"], model, task, seed, name, metrics, audit, str(p), info)
            for name, (metrics, audit) in rows.items()]


def with_retrain_views(records: list[Record]) -> list[Record]:
    """Give every retrain record the representation numbers of its group (see the module docstring):
    :func:`unlearnkit.results.retrain_view` of the group's audit (:func:`unlearnkit.results.group_audit`)."""
    audits: dict[tuple, list[tuple[str, dict | None]]] = {}
    for r in records:
        audits.setdefault((*r.block, r.seed), []).append((r.method, r.audit))
    for r in records:
        a = group_audit(audits[(*r.block, r.seed)])
        if r.method == RETRAIN and not r.audit and a:
            r.audit = retrain_view(a)
    return records


def load_records(db: str | Path | None = None, results: list[str | Path] | None = None, *,
                 store_rows: list[dict] | None = None,
                 stores: list[tuple[str | Path, list[dict]]] = ()) -> tuple[list[Record], int]:
    """The records of a store (its rows ``store_rows``, read from ``db``; or several ``stores``, each
    ``(db, rows)``) and/or results.json files, and how many repeated rows were dropped."""
    if db is not None and store_rows is None:
        raise ValueError("load_records(db=...) needs the rows the caller read from the store (store_rows)")
    records: list[Record] = []
    for path, rows in ([(db, store_rows)] if db is not None else []) + list(stores):
        records += from_store(path, rows)
    for path in results or []:
        records += from_results(path)
    if not records:
        raise UserError("nothing to report: the store holds no finished cell" if db is not None or stores else
                        "give --db results/unlearnkit.db and/or --results path/to/results.json")
    seen, unique = set(), []
    for r in records:  # the same row given twice (a cell's results.json and the store) counts once
        key = (*r.block, r.seed, r.method)
        if key not in seen:
            seen.add(key)
            unique.append(r)
    return with_retrain_views(unique), len(records) - len(unique)
