"""A benchmark suite (YAML) expanded into cells: datasets x models x tasks x methods (x variants) x seeds.

A suite file (YAML, plain data only; a key twice in one mapping is refused)::

    suite: cpu                       # name (default: the file's stem)
    db: results/unlearnkit.db        # results store (``--db`` overrides)
    out: results/cpu                 # each cell's run folder goes below it (``--out`` overrides)
    defaults:                        # RunConfig keys for every cell (src/unlearnkit/config.py)
      recipe: {epochs: 10}
      audit_config: {n_splits: 5}
    grids:                           # or the keys of one grid at the top level
      - name: class
        datasets: [digits]
        models: [small_cnn]
        tasks: [{forget_classes: [3]}, {forget_random: 0.1, name: random 10%},
                {forget_flipped: 0.05}]    # mislabeled data, named "flipped 5%" (data/splits.py)
        methods: [all]               # every registered method but retrain
        seeds: [0, 1, 2]
      - name: mismatch
        tasks: [{task: data_mismatch, forget_classes: [3]}]
        methods: [gradient_ascent, {name: salun, variants: [{lr: 0.01}, {lr: 0.05}]}]
        seeds: [0, 1, 2]
        recipe: {epochs: 10}         # any RunConfig key here overrides ``defaults`` for this grid

Each (dataset, model, task, seed) is a *group*: one ``reference`` cell evaluates and audits the
original and the retrained model once, and one cell per method (and hyperparameter variant) runs
that method through :func:`unlearnkit.runner.run_experiment`, so its numbers are those
``unlearnkit run`` prints for the same configuration. A cell's id is the hash of its configuration:
the same cell in two grids (or two suites) is one cell, and a finished one is never run again.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from .. import validate
from ..config import RunConfig, config_keys
from ..errors import UserError
from ..results import task_label

GRID_KEYS = {"name", "datasets", "models", "tasks", "methods", "seeds"}
TASK_KEYS = {"name", "forget_classes", "forget_random", "forget_indices", "forget_flipped", "task", "concept"}
CELL_KEYS = {"dataset", "model", "methods", "seed", "out", "cache_dir", "device", "data_dir", "download",
             *TASK_KEYS - {"name"}}
TOP_KEYS = {"suite", "db", "out", "defaults", "grids"}
#: RunConfig keys that do not change a cell's numbers (where files go, which device runs it)
MACHINE_KEYS = ("out", "cache_dir", "device", "data_dir", "download")
#: RunConfig keys that only matter to the methods (not to the reference models)
METHOD_KEYS = ("methods", "method_params", "preset")


@dataclass(frozen=True)
class Cell:
    """One unit of work. ``kind`` is ``reference`` (original + retrain rows) or ``method``."""

    suite: str
    grid: str
    kind: str
    label: str                  # method name, with its variant: ``salun[lr=0.01]``; ``reference``
    method: str | None
    variant: dict
    task: str                   # task label, e.g. ``class 3`` or ``data_mismatch 3``
    config: dict                # RunConfig keys, without the machine keys
    cell_id: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "cell_id", self.config_hash[:16])

    @property
    def config_hash(self) -> str:
        """sha256 of what the cell is (its kind and configuration); the id is its first 16 digits."""
        blob = json.dumps({"kind": self.kind, "config": self.config}, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()

    @property
    def group(self) -> tuple:
        c = self.config
        return (c["dataset"], c["model"], self.task, c["seed"])

    def describe(self) -> str:
        c = self.config
        return f"{c['dataset']}/{c['model']} {self.task} seed {c['seed']}: {self.label}"

    def folder(self, out: Path) -> Path:
        c = self.config
        return (Path(out) / _slug(f"{c['dataset']}-{c['model']}") / _slug(self.task) / f"seed{c['seed']}"
                / f"{_slug(self.label)}-{self.cell_id[:8]}")


@dataclass
class Suite:
    name: str
    cells: list[Cell]
    db: str | None
    out: str | None
    path: str | None = None


def _slug(text: str) -> str:
    """``text`` as one path component: letters, digits and ``.+=-`` (``_`` for the rest); never ``.`` or ``..``
    (a task named ``..`` would climb out of its folder)."""
    slug = re.sub(r"[^A-Za-z0-9.+=-]+", "_", str(text)).strip("_")[:80]
    return slug if slug.strip(".") else "_"


def _check(data: dict, allowed: set, where: str) -> dict:
    for key in data:
        if key not in allowed:
            raise UserError(f"unknown key {key!r} in {where}{validate.suggestion(key, allowed)}")
    return data


def _as_list(value, what: str, item=None) -> list:
    """A list (a single name or number stands for a list of one; a mapping is an error), its items
    checked with ``item(where, value)`` when given."""
    if value is None:
        raise UserError(f"{what} is missing")
    if isinstance(value, dict):
        raise UserError(f"{what} must be a list, not a mapping ({value!r})")
    out = value if isinstance(value, list) else [value]
    if not out:
        raise UserError(f"{what} is empty")
    return [item(what, v) for v in out] if item else out


def _methods(entries: list, where: str, setting: str = "standard") -> list[tuple[str, dict]]:
    """``[(canonical name, overrides)]``: a name, ``all``, or ``{name, params | variants}``; ``all``
    and the names follow ``unlearnkit run`` (:func:`unlearnkit.methods.names.method_names`): outside
    ``setting: vfl`` ``all`` leaves out the VFL-only methods and naming one is a UserError."""
    from ..methods import METHODS
    from ..methods.names import method_names

    out: list[tuple[str, dict]] = []
    for entry in entries:
        if isinstance(entry, str) and entry.lower() == "all":
            out += [(n, {}) for n in method_names(["all"], setting) if not METHODS.get(n).is_reference]
            continue
        if isinstance(entry, str):
            entry = {"name": entry}
        if not isinstance(entry, dict) or "name" not in entry:
            raise UserError(f"a method in {where} must be a name or a mapping with 'name', got {entry!r}")
        _check(entry, {"name", "params", "variants"}, f"method {entry['name']!r} of {where}")
        name = method_names([str(entry["name"])], setting)[0]  # unknown names fail here, with a suggestion
        if METHODS.get(name).is_reference:
            continue  # every group's reference cell holds the retrained model
        base = dict(entry.get("params") or {})
        variants = entry.get("variants") or [{}]
        if not isinstance(variants, list) or not all(isinstance(v, dict) for v in variants):
            raise UserError(f"variants of {name} in {where} must be a list of mappings")
        out += [(name, {**base, **v}) for v in variants]
    return out


def _variant_label(name: str, params: dict) -> str:
    if not params:
        return name
    return f"{name}[{','.join(f'{k}={params[k]}' for k in sorted(params))}]"


def _validate_method(name: str, params: dict, preset: str, dataset: str, model: str) -> None:
    from ..methods import METHODS, preset_for

    p = preset_for(dataset, model) if preset == "auto" else preset
    METHODS.get(name).from_preset(p, dataset, **params)  # unknown hyperparameters: UserError


def expand(data: dict, name: str) -> list[Cell]:
    """The cells of a parsed suite, in run order: group by group, reference cell first."""
    _check(data, TOP_KEYS | GRID_KEYS | (set(config_keys()) - CELL_KEYS), "the suite")
    for key in ("suite", "db", "out"):
        if data.get(key) is not None:
            validate.text(f"the suite's {key}", data[key])
    defaults = dict(validate.mapping("the suite's defaults", data.get("defaults") or {}))
    _check(defaults, set(config_keys()) - CELL_KEYS, "defaults")
    grids = data.get("grids")
    if grids is None:
        grids = [{k: v for k, v in data.items() if k not in TOP_KEYS}]
    if not isinstance(grids, list) or not grids:
        raise UserError("grids must be a non-empty list of grids")
    cells: dict[str, Cell] = {}
    for i, grid in enumerate(grids):
        if not isinstance(grid, dict):
            raise UserError(f"grid {i + 1} must be a mapping")
        gname = str(grid.get("name") or f"grid{i + 1}")
        where = f"grid {gname!r}"
        _check(grid, GRID_KEYS | (set(config_keys()) - CELL_KEYS), where)
        base = _with_preset_file({**defaults, **{k: v for k, v in grid.items() if k not in GRID_KEYS}})
        datasets = _as_list(grid.get("datasets"), f"datasets of {where}", validate.text)
        models = _as_list(grid.get("models", ["small_cnn"]), f"models of {where}", validate.text)
        tasks = _as_list(grid.get("tasks"), f"tasks of {where}")
        seeds = _as_list(grid.get("seeds", [0]), f"seeds of {where}",
                         lambda what, s: validate.whole(what, s, low=0, high=validate.MAX_SEED))
        methods = _methods(_as_list(grid.get("methods"), f"methods of {where}"), where,
                           str(base.get("setting", "standard")))
        for t in tasks:
            if not isinstance(t, dict):
                raise UserError(f"a task of {where} must be a mapping such as {{forget_classes: [3]}}, got {t!r}")
            _check(t, TASK_KEYS, f"a task of {where}")
        for dataset in datasets:
            for model in models:
                for m_name, params in methods:
                    _validate_method(m_name, {**base.get("method_params", {}).get(m_name, {}), **params},
                                     base.get("preset", "auto"), str(dataset), str(model))
                for t in tasks:
                    spec = {k: v for k, v in t.items() if k != "name"}
                    label = task_label(t)
                    for seed in seeds:
                        common = {**base, **spec, "dataset": str(dataset), "model": str(model), "seed": seed}
                        ref = {k: v for k, v in common.items() if k not in METHOD_KEYS}
                        _add(cells, Cell(name, gname, "reference", "reference", None, {}, label,
                                         _config({**ref, "methods": ["retrain"]})))
                        for m_name, params in methods:
                            given = {**base.get("method_params", {}).get(m_name, {}), **params}
                            cfg = {**common, "methods": [m_name], "method_params": {m_name: given} if given else {}}
                            _add(cells, Cell(name, gname, "method", _variant_label(m_name, params), m_name, params,
                                             label, _config(cfg)))
    return list(cells.values())


def _with_preset_file(base: dict) -> dict:
    """``preset: tuned.yaml`` folded in: its base preset, its hyperparameters under the suite's
    ``method_params`` (:mod:`unlearnkit.methods.tuned`), so a cell's id follows the file's content."""
    from ..methods import METHODS
    from ..methods.tuned import apply_preset_file, is_preset_file

    if not is_preset_file(base.get("preset")):
        return base
    given = validate.mapping("method_params", base.get("method_params") or {})
    preset, params = apply_preset_file(base["preset"], METHODS.names(), given, METHODS.canonical)
    return {**base, "preset": preset, "method_params": params}


def _config(keys: dict) -> dict:
    """The cell's RunConfig as a plain dict, validated, without the machine keys (nor an unset
    ``forget_flipped``, so that the cells of suites written before it keep their ids)."""
    try:
        cfg = RunConfig(**keys).to_dict()
    except TypeError as e:
        raise UserError(f"bad configuration in the suite: {e}") from None
    return {k: v for k, v in cfg.items() if k not in MACHINE_KEYS and not (k == "forget_flipped" and v is None)}


def _add(cells: dict, cell: Cell) -> None:
    cells.setdefault(cell.cell_id, cell)


def load_suite(path: str | Path) -> Suite:
    """The suite in the YAML file ``path`` (:func:`unlearnkit.validate.yaml_file`), expanded and checked."""
    p, data = validate.yaml_file("suite file", path)
    if not isinstance(data, dict):
        raise UserError(f"suite file {p} must hold a mapping of keys")
    name = validate.file_name("suite", data["suite"]) if data.get("suite") is not None else p.stem
    return Suite(name, expand(data, name), data.get("db"), data.get("out"), str(p))


def check_tasks(suite: Suite, data_dir: str | Path = "data") -> None:
    """Every task of ``suite`` against its dataset, as ``unlearnkit run`` checks its own, before the store
    or any cell folder is written: an indices file that exists and holds valid indices, forget classes
    the dataset has, a forget set that leaves something to retain. A dataset not on disk here (a Ray
    cluster's workers may hold it, or a cell downloads it) is checked by its cells. Raises UserError
    naming the task and its grid; returns None."""
    from ..data.datasets import load_dataset
    from ..errors import DataUnavailableError
    from ..runner import build_split

    bundles: dict[tuple, object] = {}
    seen: set[str] = set()
    for cell in suite.cells:
        c = cell.config
        key = json.dumps({k: c.get(k) for k in ("dataset", "data_seed", *sorted(TASK_KEYS - {"name"}))},
                         sort_keys=True, default=str)
        if cell.kind != "reference" or key in seen:  # every group has a reference cell, with its task
            continue
        seen.add(key)
        where = f"task {cell.task!r} of grid {cell.grid!r} ({c['dataset']})"
        if c.get("forget_indices"):
            validate.input_file(f"forget_indices of {where}", c["forget_indices"])
        data = (c["dataset"], c["data_seed"])
        if data not in bundles:
            try:
                bundles[data] = load_dataset(c["dataset"], data_dir, False, c["data_seed"])
            except DataUnavailableError:
                bundles[data] = None
        if bundles[data] is None:
            continue
        try:
            build_split(RunConfig(**c), bundles[data])
        except UserError as e:
            raise UserError(f"{where}: {e}") from None
