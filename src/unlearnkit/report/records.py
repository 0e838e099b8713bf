"""What a report reads: one :class:`Record` per (model row, seed), from the store or from results.json.

A record is one row of one run: the ``original``, the ``retrain`` reference or a method, on one
dataset, model, forget task and seed, with its metrics and audit exactly as results.json holds
them. Retrain is not audited itself; its representation numbers (LPR, separability, CKA to the
original) are the ``*_retrained`` numbers of an audit of the same group, which every audit of that
group computes identically (same retrained features, same probe splits).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UserError

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
        return (self.audit or {}).get("verdict")


def model_label(task: dict) -> str:
    """The model as a block names it: ``vfl (K parties, bottom B)`` in the VFL setting (as the run's own
    titles do, :func:`unlearnkit.runner.model_label`), the model's name otherwise."""
    from ..runner import model_label as label

    return label(task)


def task_label(forget: dict) -> str:
    from ..bench.grid import task_label as label

    return label({"forget_classes": forget.get("classes") or [], "forget_random": forget.get("random"),
                  "forget_indices": forget.get("indices_file"), "task": forget.get("task"),
                  "concept": forget.get("concept") or []})


def from_store(path: str | Path) -> list[Record]:
    from ..bench.store import ResultStore

    with ResultStore(path, create=False) as store:
        rows = store.rows()
    out = []
    for r in rows:
        method = r["entry"] if r["kind"] == "reference" else r["label"]
        prov = {k: r[k] for k in ("config_hash", "split_hash", "original_sha256", "retrain_sha256",
                                  "unlearned_sha256", "unlearnkit_version", "git_commit", "torch_version",
                                  "device", "finished", "wall_s", "cell_id")}
        cfg = r.get("config") or {}
        model = model_label({"setting": cfg.get("setting"), "parties": cfg.get("parties"), "model": r["model"]})
        out.append(Record(r["dataset"], model, r["task"], int(r["seed"]), method, r["metrics"], r["audit"],
                          f"cell {r['cell_id']}", prov))
    return out


def from_results(path: str | Path) -> list[Record]:
    p = Path(path).expanduser()
    if p.is_dir():
        p = p / "results.json"
    if not p.is_file():
        raise UserError(f"results file {p} does not exist (unlearnkit run writes <out>/results.json)")
    try:
        res = json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{p} is not a results.json ({e})") from None
    if not isinstance(res, dict) or not str(res.get("schema", "")).startswith("unlearnkit.results/"):
        raise UserError(f"{p} is not an unlearnkit results.json (no schema unlearnkit.results/1)")
    t, prov = res["task"], res.get("provenance", {})
    info = {"git_commit": prov.get("git_commit"), "torch_version": prov.get("versions", {}).get("torch"),
            "unlearnkit_version": prov.get("versions", {}).get("unlearnkit"), "device": prov.get("device"),
            "split_hash": t.get("split_hash"), "finished": prov.get("created")}
    return [Record(t["dataset"], model_label(t), task_label(t["forget"]), int(res["config"]["seed"]), name,
                   entry["metrics"], entry.get("audit"), str(p), info) for name, entry in res["models"].items()]


def with_retrain_views(records: list[Record]) -> list[Record]:
    """Give every retrain record the representation numbers of its group (see the module docstring)."""
    audits: dict[tuple, dict] = {}
    for r in records:
        if r.audit and r.audit.get("layers"):
            key = (*r.block, r.seed)
            if key not in audits or r.method == "original":
                audits[key] = r.audit
    for r in records:
        a = audits.get((*r.block, r.seed))
        if r.method == "retrain" and not r.audit and a:
            r.audit = {"verdict": None, "penultimate_layer": a.get("penultimate_layer"), "view": "retrained",
                       "transmitted": a.get("transmitted"),
                       "layers": {name: {"lpr": layer.get("lpr_retrained"), "separability":
                                         layer.get("separability_retrained"),
                                         "cka_original": layer.get("cka_retrain_original")}
                                  for name, layer in a["layers"].items()}}
    return records


def load_records(db: str | Path | None = None,
                 results: list[str | Path] | None = None) -> tuple[list[Record], int]:
    """The records of a store and/or results.json files, and how many repeated rows were dropped."""
    records: list[Record] = []
    if db is not None:
        records += from_store(db)
    for path in results or []:
        records += from_results(path)
    if not records:
        raise UserError("nothing to report: the store holds no finished cell" if db is not None else
                        "give --db results/unlearnkit.db and/or --results path/to/results.json")
    seen, unique = set(), []
    for r in records:  # the same row given twice (a cell's results.json and the store) counts once
        key = (*r.block, r.seed, r.method)
        if key not in seen:
            seen.add(key)
            unique.append(r)
    return with_retrain_views(unique), len(records) - len(unique)
