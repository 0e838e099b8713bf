"""``unlearnkit run``: data -> split -> original & retrain (cached) -> methods -> evaluation -> results.

Writes ``results.json`` (schema ``unlearnkit.results/1``, design.md) and ``results.md`` into
``cfg.out``, and each unlearned model to ``out/models/<method>.pt``. A method whose checkpoint
already exists for the same original model, split, hyperparameters and seed is not rerun, so an
interrupted run resumes where it stopped.

Under ``torchrun`` every rank trains the references and the methods together (data-parallel, each
method must support it: checked before any work); rank 0 alone evaluates, audits and writes.
"""
from __future__ import annotations

import hashlib
import json
import math
import subprocess
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

from rich.markup import escape

from . import distributed, validate
from .checkpoints import atomic_write_text, load_checkpoint, save_checkpoint
from .config import RunConfig
from .data.concepts import make_concept_split
from .data.datasets import load_dataset
from .data.splits import ForgetSpec, make_split
from .data.vfl import is_flat
from .errors import CheckpointError, UserError
from .evaluation import model_outputs, output_metrics
from .markdown import markdown_table
from .methods import METHODS, preset_for
from .metrics.summary import gap, h_mean
from .mirage_table import mirage_table_markdown
from .models.vfl import default_bottom, transmitted_layers
from .models.zoo import audit_layers
from .progress import console
from .runtime import Runtime
from .training import check_model, default_recipe, reference_model, resolve_device, versions, with_overrides

SCHEMA = "unlearnkit.results/1"


def forget_spec(cfg: RunConfig) -> ForgetSpec:
    return ForgetSpec(classes=tuple(cfg.forget_classes), random=cfg.forget_random, indices_file=cfg.forget_indices)


def build_split(cfg: RunConfig, bundle):
    """Class/sample forgetting, or a TARF concept task when ``cfg.task`` is set."""
    if cfg.task:
        if len(cfg.forget_classes) != 1:
            raise UserError(f"task {cfg.task} forgets exactly one fine class: give one --forget-classes")
        return make_concept_split(bundle, cfg.task, cfg.forget_classes[0], cfg.concept or None)
    return make_split(bundle, forget_spec(cfg), seed=cfg.data_seed)


def task_params(name: str, split, given: dict) -> dict:
    """Task knowledge TARF's identification rule assumes (seed 002, §3.15), unless the user set it.

    No false-remaining data exists in class/sample forgetting, all-matched and model-mismatch tasks,
    so nothing is identified (``beta_rule="none"``); in target mismatch the number of D_un classes
    belonging to the target is assumed known (per-class rule, scored by I_con, which picked the
    right class where the accuracy score did not); data mismatch uses the top-10 % quantile rule.
    """
    if name != "tarf" or "beta_rule" in given:
        return given
    task = split.spec.task if split.spec.kind == "concept" else None
    if task == "target_mismatch":
        return {**given, "beta_rule": "per_class", "n_target_classes": len(split.spec.concept) - 1,
                "class_score": given.get("class_score", "icon")}
    if task == "data_mismatch":
        return {**given, "beta_rule": "quantile"}
    return {**given, "beta_rule": "none"}


def method_names(names: list[str], setting: str = "standard") -> list[str]:
    """Canonical method names; ``all`` leaves out VFL-only methods (target) outside ``--setting vfl``."""
    if [n.lower() for n in names] == ["all"]:
        return [n for n in METHODS.names() if setting == "vfl" or not METHODS.get(n).requires_vfl]
    out = []
    for n in names:
        c = METHODS.canonical(n)
        if METHODS.get(c).requires_vfl and setting != "vfl":
            raise UserError(f"{c} unlearns vertical federated models only: add --setting vfl")
        if c not in out:
            out.append(c)
    return out


def git_commit() -> str | None:
    try:
        r = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                           cwd=Path(__file__).parent)
        return r.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _finite(x):
    return None if isinstance(x, float) and not math.isfinite(x) else x


def summary_metrics(m: dict, ref: dict, runtime_s: float, retrain_time_s: float) -> dict:
    """Add Gap (TARF, §2.8: UA = forget accuracy, RA, TA, MIA-efficacy vs retrain), H-Mean, speedup."""
    out = dict(m)
    keys = {"ua": "forget_acc", "ra": "retain_acc", "ta": "test_acc", "mia": "mia_efficacy"}
    out["gap"] = gap({k: m[v] for k, v in keys.items()}, {k: ref[v] for k, v in keys.items()})
    tfa = m["test_forget_acc"] if math.isfinite(m["test_forget_acc"]) else m["forget_acc"]
    out["h_mean"] = h_mean(tfa, m["test_retain_acc"])
    out["runtime_s"] = runtime_s
    out["speedup"] = retrain_time_s / runtime_s if runtime_s > 0 else None
    return {k: _finite(v) for k, v in out.items()}


def audit_settings(cfg: RunConfig):
    """The AuditConfig of a run: its defaults with ``cfg.audit_config``'s overrides (bad keys: UserError);
    ``cfg.idi`` (``--idi``) turns IDI on."""
    from .audit import AuditConfig
    from .config import _construct

    return _construct("audit_config", AuditConfig, {"idi": True, **cfg.audit_config} if cfg.idi
                      else dict(cfg.audit_config))


def audit_references(cfg: RunConfig, model) -> int:
    """How many retrained references the audit uses: ``cfg.references``, or 1 on an architecture
    whose constant tolerance was calibrated (:data:`unlearnkit.audit.tolerance.CALIBRATED`) and 5
    elsewhere (tolerances derived from their spread; see docs/audit.md)."""
    from .audit.tolerance import calibrated_for

    if cfg.references is not None:
        return cfg.references
    return 1 if calibrated_for(model) else 5


def resolve_model(cfg: RunConfig, bundle) -> tuple[RunConfig, str, dict]:
    """``(cfg, model_name, model_kwargs)`` to build: the model itself, or in the VFL setting a
    ``vfl`` model whose bottom is ``cfg.model`` (default by data); ``cfg.model`` is filled in."""
    flat = is_flat(bundle.in_channels, bundle.image_size)
    if cfg.setting == "vfl":
        bottom = cfg.model or default_bottom(bundle.in_channels, bundle.image_size)
        kwargs = {"parties": cfg.parties, "bottom": bottom}
        if cfg.model_kwargs:
            kwargs["bottom_kwargs"] = dict(cfg.model_kwargs)
        return replace(cfg, model=bottom), "vfl", kwargs
    if flat and cfg.model != "mlp":
        raise UserError(f"{bundle.name} holds flat features ({bundle.in_channels} per sample), which "
                        f"{cfg.model} cannot read: use --model mlp (or --setting vfl)")
    return cfg, cfg.model, dict(cfg.model_kwargs)


def run_experiment(cfg: RunConfig, progress: bool = True, audit_original: bool = True) -> dict:
    """Run one configuration end to end; returns the results dict also written to ``cfg.out``.

    ``audit_original=False`` skips the audit of the original model (``unlearnkit bench`` audits it
    once per group of cells that share it, in the group's reference cell).
    """
    names = method_names(cfg.methods, cfg.setting)  # unknown names fail before any work
    audit_config = audit_settings(cfg) if cfg.audit else None
    validate.output_dir("out", cfg.out)  # a run that cannot save its results fails before it trains
    validate.cache_dir("cache_dir", cfg.cache_dir)
    if cfg.forget_indices:
        validate.input_file("forget_indices", cfg.forget_indices)
    preset = preset_for(cfg.dataset, cfg.model or "") if cfg.preset == "auto" else cfg.preset
    for name in names:  # hyperparameters (types, domains) before any model is trained or copied
        METHODS.get(name).from_preset(preset, cfg.dataset, **cfg.method_params.get(name, {}))
    for name in names:
        METHODS.get(name).check_distributed()  # under torchrun: before any work
    rt = Runtime.from_dict(cfg.runtime)
    main = distributed.world().is_main
    device = resolve_device(cfg.device)
    bundle = load_dataset(cfg.dataset, cfg.data_dir, cfg.download, cfg.data_seed)
    split = build_split(cfg, bundle)
    cfg, model_name, model_kwargs = resolve_model(cfg, bundle)
    check_model(model_name, bundle, model_kwargs)
    recipe = with_overrides(default_recipe(bundle.name, model_name), **cfg.recipe) if cfg.recipe else \
        default_recipe(bundle.name, model_name)
    preset = preset_for(bundle.name, cfg.model) if cfg.preset == "auto" else cfg.preset
    out = Path(cfg.out)
    say = console.print if main else (lambda *a, **k: None)
    shown = model_label({"setting": cfg.setting, "parties": cfg.parties, "model": cfg.model})
    say(f"[bold]{escape(bundle.name)}[/] {len(bundle.train)} train / {len(bundle.test)} test, forget "
        f"{escape(split.spec.describe())}: {len(split.train_forget)} train samples; model {escape(shown)}; "
        f"device {device}")

    common = dict(split=split, model_name=model_name, recipe=recipe, seed=cfg.seed, model_kwargs=model_kwargs,
                  cache_dir=cfg.cache_dir, device=device, progress=progress, runtime=rt)
    original = reference_model("original", **common)
    retrain = reference_model("retrain", **common)
    for ref in (original, retrain):
        say(f"{ref.meta['kind']}: {'cached' if ref.cached else 'trained'} {escape(str(ref.path))}")
    extra_refs = []
    if cfg.audit:
        k = audit_references(cfg, original.model)
        extra_refs = [reference_model("retrain", **{**common, "seed": cfg.seed + i}) for i in range(1, k)]
        if k > 1:
            say(f"audit: {k} retrained references (seeds {cfg.seed}..{cfg.seed + k - 1}), tolerances derived from "
                f"their spread")

    models: dict[str, dict] = {}
    layers: list[str] = audit_layers(original.model) if cfg.audit else []

    def record(name: str, model, runtime_s: float, extra: dict) -> dict:
        outputs = model_outputs(model, split, layers, device)
        metrics = output_metrics(outputs, split, cfg.test_convention)
        models[name] = {"metrics": metrics, "runtime_s": runtime_s, **extra}
        return outputs

    if not main:  # the other ranks only take part in the methods' data-parallel training
        for name in names:
            if name != "retrain":
                _run_method(_method(name, preset, bundle, split, cfg), original, split, cfg, device, out, progress, rt)
        return {}
    out_o = record("original", original.model, original.meta["train_time_s"],
                   {"checkpoint": str(original.path), "sha256": original.meta["sha256"]})
    out_r = record("retrain", retrain.model, retrain.meta["train_time_s"],
                   {"checkpoint": str(retrain.path), "sha256": retrain.meta["sha256"]})
    refs = [retrain.model, *(r.model for r in extra_refs)]
    outs_r = [out_r, *(model_outputs(r.model, split, layers, device) for r in extra_refs)]

    from .audit.memo import AuditCache

    audit_cache = AuditCache()  # the original's and retrain's audit numbers, computed once for all methods

    def run_audit(name: str, model, outputs) -> None:
        """The representation audit of one model against original and retrain (one forward pass reused)."""
        if not cfg.audit:
            return
        from .audit import audit, write_audit

        rep = audit(original.model, model, refs, split, layers, config=audit_config, device=device,
                    outputs={"original": out_o, "unlearned": outputs, "retrained": outs_r}, cache=audit_cache)
        write_audit(rep, out / "audits" / name)
        models[name]["audit"] = rep.to_dict()
        console.print(f"  audit {name}: [bold]{rep.verdict}[/] ({rep.timing['total_s']:.1f}s)")
        if rep.transmitted:
            console.print(f"  transmitted embeddings: {rep.transmitted['summary']}")

    if audit_original:
        run_audit("original", original.model, out_o)

    for name in names:
        if name == "retrain":
            continue  # the cached reference is the retrain row
        cls = METHODS.get(name)
        method = _method(name, preset, bundle, split, cfg)
        model, runtime_s, stop_reason, history, path = _run_method(method, original, split, cfg, device, out,
                                                                   progress, rt)
        outputs = record(name, model, runtime_s, {"hyperparameters": method.params(), "preset": preset,
                                                  "needs": sorted(method.needs), "stop_reason": stop_reason,
                                                  "history": history, "checkpoint": str(path), "paper": cls.paper})
        console.print(f"{name}: {runtime_s:.1f}s ({stop_reason})")
        run_audit(name, model, outputs)
        del outputs

    ref_metrics = models["retrain"]["metrics"]
    retrain_time = models["retrain"]["runtime_s"]
    for name, entry in models.items():
        entry["metrics"] = summary_metrics(entry["metrics"], ref_metrics, entry.pop("runtime_s"), retrain_time)
        entry.setdefault("audit", None)

    results = {
        "schema": SCHEMA,
        "config": cfg.to_dict(),
        "provenance": {"created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                       "versions": versions(), "git_commit": git_commit(), "device": str(device),
                       "processes": distributed.world().size, "runtime": rt.to_dict(),
                       "recipe": recipe.to_dict(), "preset": preset,
                       "original_sha256": original.meta["sha256"], "retrain_sha256": retrain.meta["sha256"]},
        "task": {"dataset": bundle.name, "model": cfg.model, "num_classes": bundle.num_classes,
                 "setting": cfg.setting, **vfl_task(original.model, cfg),
                 "forget": split.spec.to_dict(), "test_convention": cfg.test_convention, **split.summary()},
        "models": models,
    }
    write_results(results, out)
    return results


def _method(name: str, preset: str, bundle, split, cfg: RunConfig):
    params = task_params(name, split, cfg.method_params.get(name, {}))
    return METHODS.get(name).from_preset(preset, bundle.name, **params)


def vfl_task(model, cfg: RunConfig) -> dict:
    """The VFL setting's task keys: parties, bottom, and the taps the passive parties transmit."""
    if cfg.setting != "vfl":
        return {}
    return {"parties": cfg.parties, "bottom": cfg.model, "transmitted": transmitted_layers(model)}


def _run_method(method, original, split, cfg: RunConfig, device, out: Path, progress: bool,
                runtime: Runtime | None = None):
    """Run a method, or reuse its checkpoint from an earlier (interrupted) run of the same cell
    (rank 0 decides and tells the others; only rank 0 writes)."""
    rt = runtime or Runtime()
    cell = {"method": method.name, "params": method.params(), "original": original.meta["sha256"],
            "split": split.split_hash, "seed": cfg.seed, **rt.cache_key()}
    cell_hash = hashlib.sha256(json.dumps(cell, sort_keys=True, default=str).encode()).hexdigest()[:16]
    path = out / "models" / f"{method.name}.pt"
    reused = None
    if distributed.world().is_main and path.exists():
        try:
            model, meta = load_checkpoint(path)
            if meta.get("cell_hash") == cell_hash:
                console.print(f"{method.name}: reusing {escape(str(path))}")
                reused = model.to(device), meta["runtime_s"], meta["stop_reason"], meta["history"], path
        except CheckpointError:
            pass
    if distributed.broadcast_torch(reused is not None):
        return reused
    res = method.unlearn(original.model, split, original=original.model, device=device, seed=cfg.seed,
                         progress=progress, runtime=rt)
    if not distributed.world().is_main:
        return None
    save_checkpoint(res.model, path, {"cell_hash": cell_hash, "cell": cell, "runtime_s": res.runtime_s,
                                      "stop_reason": res.stop_reason, "history": res.history,
                                      "kind": "unlearned", "versions": versions()})
    return res.model, res.runtime_s, res.stop_reason, res.history, path


# ---------------------------------------------------------------------------------------------

COLUMNS = [("forget_acc", "forget acc", "{:.2f}"), ("retain_acc", "retain acc", "{:.2f}"),
           ("test_acc", "test acc", "{:.2f}"), ("test_forget_acc", "test forget", "{:.2f}"),
           ("mia_efficacy", "MIA-eff.", "{:.2f}"), ("mia_auc", "MIA AUC", "{:.3f}"), ("gap", "Gap", "{:.2f}"),
           ("runtime_s", "time (s)", "{:.1f}"), ("speedup", "speedup", "{:.1f}x")]


def table_rows(results: dict) -> tuple[list[str], list[list[str]]]:
    header = ["model"] + [c[1] for c in COLUMNS]
    rows = []
    for name, entry in results["models"].items():
        m = entry["metrics"]
        cells = [name]
        for key, _, fmt in COLUMNS:
            v = m.get(key)
            cells.append("n/a" if v is None else fmt.format(v))
        audit = entry.get("audit") or {}
        if audit.get("verdict"):
            cells.append(audit["verdict"])
        rows.append(cells)
    if any(len(r) > len(header) for r in rows):
        header.append("verdict")
        rows = [r + [""] * (len(header) - len(r)) for r in rows]
    return header, rows


def describe_forget(f: dict) -> str:
    if f["kind"] == "concept":
        return f"{f['task']}: class {f['classes'][0]} of concept {f['concept']}"
    return f"{f['kind']} {f['classes'] or f['random'] or f['indices_file']}"


def model_label(t: dict) -> str:
    """The model as a title shows it: ``vfl (K parties, bottom B)`` in the VFL setting."""
    return f"vfl ({t['parties']} parties, bottom {t['model']})" if t.get("setting") == "vfl" else t["model"]


def results_markdown(results: dict) -> str:
    t = results["task"]
    header, rows = table_rows(results)
    lines = [f"# unlearnkit run: {t['dataset']} / {model_label(t)}, forget {describe_forget(t['forget'])}", "",
             f"split {t['split_hash']}: {t['n_train_forget']} forget / {t['n_train_retain']} retain train samples, "
             f"test convention `{t['test_convention']}`; accuracies and MIA-efficacy in %, MIA AUC in [0,1] "
             f"(0.5 ideal), Gap = mean |diff| to retrain over forget/retain/test acc and MIA-efficacy.", "",
             *markdown_table(header, rows)]
    return "\n".join(lines) + "\n"


def write_results(results: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "results.json", json.dumps(results, indent=2, allow_nan=False) + "\n")
    atomic_write_text(out / "results.md", results_markdown(results) + mirage_table_markdown(results))


def print_table(results: dict) -> None:
    from rich.table import Table
    from rich.text import Text

    header, rows = table_rows(results)
    table = Table(title=escape(f"{results['task']['dataset']} / {model_label(results['task'])}: forget "
                               f"{describe_forget(results['task']['forget'])}"))
    for i, h in enumerate(header):
        table.add_column(h, justify="left" if i == 0 or h == "verdict" else "right")
    for r in rows:
        table.add_row(*(Text(c) for c in r))
    import sys

    from rich.console import Console

    Console(width=None if sys.stdout.isatty() else 160).print(table)
