"""``unlearnkit run``: data -> split -> original & retrain (cached) -> methods -> evaluation -> results.

Writes ``results.json`` (schema ``unlearnkit.results/1``, design.md) and ``results.md`` into
``cfg.out``, and each unlearned model to ``out/models/<method>.pt``. A method whose checkpoint
already exists for the same original model, split, hyperparameters and seed is not rerun, so an
interrupted run resumes where it stopped.

Under ``torchrun`` every rank trains the references and the methods together (data-parallel, each
method must support it: checked before any work); rank 0 alone evaluates, audits and writes.

:func:`run_experiment` is five named steps: :func:`prepare` (configuration -> data, split, recipe),
:func:`train_references` (original, retrain, the audit's further retrains), :class:`Evaluation`
(evaluate and audit one model), :func:`run_method` (unlearn with one method), :func:`assemble` (the
:class:`unlearnkit.results.RunResults`, whose ``to_dict()`` is results.json).
"""
from __future__ import annotations

import hashlib
import json
import math
import subprocess
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

import torch
from rich.markup import escape

from . import distributed, validate
from .audit import AuditConfig, write_audit
from .audit import audit as audit_model
from .audit.memo import AuditCache
from .checkpoints import atomic_write_text, load_checkpoint, save_checkpoint, write_together
from .config import RunConfig, _construct
from .data.concepts import make_concept_split
from .data.datasets import DatasetBundle, load_dataset
from .data.splits import ForgetSpec, UnlearningSplit, make_split
from .data.vfl import is_flat
from .errors import CheckpointError, UserError
from .evaluation import model_outputs, output_metrics
from .loop import Recipe
from .markdown import markdown_table
from .methods import METHODS, preset_for
from .methods.names import method_names
from .metrics.summary import gap, h_mean
from .mirage_table import mirage_table_markdown
from .models.vfl import default_bottom, transmitted_layers
from .models.zoo import audit_layers
from .progress import console
from .progress import print_table as print_rich_table
from .results import RunResults, describe_forget, model_label
from .runtime import Runtime, resolve_device
from .training import (
    Reference,
    check_cache_dir,
    check_model,
    default_recipe,
    numerics,
    reference_model,
    reference_models,
    versions,
    with_overrides,
)


def forget_spec(cfg: RunConfig) -> ForgetSpec:
    """The ForgetSpec of ``cfg``'s forget keys (classes, random, indices or flipped labels)."""
    return ForgetSpec(classes=tuple(cfg.forget_classes), random=cfg.forget_random, indices_file=cfg.forget_indices,
                      flipped=cfg.forget_flipped)


def build_split(cfg: RunConfig, bundle):
    """Class/sample forgetting, or a TARF concept task when ``cfg.task`` is set."""
    if cfg.task:
        if len(cfg.forget_classes) != 1:
            raise UserError(f"task {cfg.task} forgets exactly one fine class: give one --forget-classes")
        return make_concept_split(bundle, cfg.task, cfg.forget_classes[0], cfg.concept or None)
    return make_split(bundle, forget_spec(cfg), seed=cfg.data_seed)


def task_params(name: str, split, given: dict) -> dict:
    """The hyperparameters method ``name`` runs with on ``split``'s task: the user's ``given`` ones plus
    what the method itself derives from the task (:meth:`UnlearningMethod.task_defaults`; e.g. TARF's
    identification rule), never overriding a given key."""
    return METHODS.get(name).task_defaults(split, given)


def git_commit() -> str | None:
    try:
        r = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                           cwd=Path(__file__).parent)
        return r.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def summary_metrics(m: dict, ref: dict, runtime_s: float, retrain_time_s: float) -> dict:
    """Add Gap (TARF, §2.8: UA = forget accuracy, RA, TA, MIA-efficacy vs retrain), H-Mean, speedup."""
    out = dict(m)
    keys = {"ua": "forget_acc", "ra": "retain_acc", "ta": "test_acc", "mia": "mia_efficacy"}
    out["gap"] = gap({k: m[v] for k, v in keys.items()}, {k: ref[v] for k, v in keys.items()})
    tfa = m["test_forget_acc"] if math.isfinite(m["test_forget_acc"]) else m["forget_acc"]
    out["h_mean"] = h_mean(tfa, m["test_retain_acc"])
    out["runtime_s"] = runtime_s
    out["speedup"] = retrain_time_s / runtime_s if runtime_s > 0 else None
    return validate.finite_or_none(out)


def audit_settings(cfg: RunConfig):
    """The AuditConfig of a run: its defaults with ``cfg.audit_config``'s overrides (bad keys: UserError);
    ``cfg.idi`` (``--idi``) turns IDI on. The audit seed (every draw of the audit: relearning shots, probe
    splits) is ``audit_config: {audit_seed: N}`` when given, else derived from the run's seed, so the same
    configuration and seed give the same results.json (a run audits the researcher's own methods; a
    certificate for someone else's model comes from ``unlearnkit audit``, which draws a fresh seed), and every
    method of the run is audited against the same draws (the references' numbers are computed once)."""
    overrides = {"idi": True, **cfg.audit_config} if cfg.idi else dict(cfg.audit_config)
    overrides.setdefault("audit_seed", derived_audit_seed(cfg.seed))
    return _construct("audit_config", AuditConfig, overrides)


def derived_audit_seed(seed: int) -> int:
    """The audit seed of a run of ``seed`` (a fixed hash: reproducible, and not the training seed itself)."""
    import zlib

    return zlib.crc32(f"unlearnkit-audit-{seed}".encode()) & 0x7FFFFFFF


#: retrained references the audit uses unless told otherwise: ``erased`` needs K >= 2, and the t quantiles of its
#: equivalence tests make few references expensive (docs/audit.md, "How many references": 5 on digits, 8 on
#: mnist5k; 16 on digits where the party audited may attack the audit)
DEFAULT_REFERENCES = 5


def audit_references(cfg: RunConfig, model) -> int:
    """How many retrained references the audit uses: ``cfg.references``, else :data:`DEFAULT_REFERENCES`
    (one reference can flag a model but never certify ``erased``; see docs/audit.md)."""
    return cfg.references if cfg.references is not None else DEFAULT_REFERENCES


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


@dataclass(kw_only=True)
class Experiment:
    """One configuration made ready to run (:func:`prepare`): its methods, task, split and recipe."""

    cfg: RunConfig              # with ``model`` filled in (:func:`resolve_model`)
    names: list[str]            # canonical method names (:func:`method_names`)
    audit_config: AuditConfig | None    # :func:`audit_settings`; None without an audit
    runtime: Runtime
    device: torch.device
    bundle: DatasetBundle
    split: UnlearningSplit      # :func:`build_split`
    model_name: str             # what is built: ``cfg.model``, or ``vfl`` (:func:`resolve_model`)
    model_kwargs: dict
    recipe: Recipe              # the references' training recipe
    preset: str                 # the methods' hyperparameter preset
    progress: bool = True

    @property
    def out(self) -> Path:
        return Path(self.cfg.out)

    def say(self, text: str) -> None:
        """Print on rank 0 only (every rank trains; one speaks)."""
        if distributed.world().is_main:
            console.print(text)


@dataclass
class References:
    """The original, the retrained reference, and the further retrains (other seeds) the audit uses."""

    original: Reference
    retrain: Reference
    extra: list[Reference]


def check_config(cfg: RunConfig) -> tuple[list[str], AuditConfig | None]:
    """``(method names, AuditConfig or None)``; everything a run can fail on fails here, before any work:
    method names, audit settings, output and cache folders, the indices file, every method's
    hyperparameters (types, domains) and, under torchrun, whether each method can run there."""
    names = method_names(cfg.methods, cfg.setting)  # unknown names fail before any work
    audit_config = audit_settings(cfg) if cfg.audit else None
    validate.output_dir("out", cfg.out)  # a run that cannot save its results fails before it trains
    check_cache_dir("cache_dir", cfg.cache_dir)
    if cfg.forget_indices:
        validate.input_file("forget_indices", cfg.forget_indices)
    preset = preset_for(cfg.dataset, cfg.model or "") if cfg.preset == "auto" else cfg.preset
    for name in names:  # hyperparameters (types, domains) before any model is trained or copied
        METHODS.get(name).from_preset(preset, cfg.dataset, **cfg.method_params.get(name, {}))
    for name in names:
        METHODS.get(name).check_distributed()  # under torchrun: before any work
    return names, audit_config


def prepare(cfg: RunConfig, progress: bool = True, build=build_split) -> Experiment:
    """Step 1: the configuration checked (:func:`check_config`), then the data, the split (``build(cfg,
    bundle)``; :func:`build_split`), the model to build and the references' training recipe."""
    names, audit_config = check_config(cfg)
    rt = Runtime.from_dict(cfg.runtime)
    device = resolve_device(cfg.device)
    bundle = load_dataset(cfg.dataset, cfg.data_dir, cfg.download, cfg.data_seed)
    split = build(cfg, bundle)
    cfg, model_name, model_kwargs = resolve_model(cfg, bundle)
    check_model(model_name, bundle, model_kwargs)
    recipe = with_overrides(default_recipe(bundle.name, model_name), **cfg.recipe) if cfg.recipe else \
        default_recipe(bundle.name, model_name)
    preset = preset_for(bundle.name, cfg.model) if cfg.preset == "auto" else cfg.preset
    exp = Experiment(cfg=cfg, names=names, audit_config=audit_config, runtime=rt, device=device,
                     bundle=bundle, split=split, model_name=model_name, model_kwargs=model_kwargs,
                     recipe=recipe, preset=preset, progress=progress)
    shown = model_label({"setting": cfg.setting, "parties": cfg.parties, "model": cfg.model})
    exp.say(f"[bold]{escape(bundle.name)}[/] {len(bundle.train)} train / {len(bundle.test)} test, forget "
            f"{escape(split.spec.describe())}: {len(split.train_forget)} train samples; "
            f"model {escape(shown)}; device {device}")
    return exp


def train_references(exp: Experiment) -> References:
    """Step 2: the original and the retrained reference (cached), and with an audit the further retrains
    of seeds ``seed+1 ..`` whose spread it judges against (:func:`audit_references`). The further retrains
    are trained together, batched across the models, on a GPU where the architecture allows
    (:func:`unlearnkit.training.reference_models`); the retrain of ``seed`` is trained alone, so its
    training time, which the methods' speedups divide, is that of one retrain."""
    cfg = exp.cfg
    common = dict(split=exp.split, model_name=exp.model_name, recipe=exp.recipe, seed=cfg.seed,
                  model_kwargs=exp.model_kwargs, cache_dir=cfg.cache_dir, device=exp.device,
                  progress=exp.progress, runtime=exp.runtime)
    original = reference_model("original", **common)
    retrain = reference_model("retrain", **common)
    for ref in (original, retrain):
        exp.say(f"{ref.meta['kind']}: {'cached' if ref.cached else 'trained'} {escape(str(ref.path))}")
    extra = []
    if cfg.audit:
        k = audit_references(cfg, original.model)
        rest = {key: v for key, v in common.items() if key != "seed"}
        extra = reference_models("retrain", **rest, seeds=[cfg.seed + i for i in range(1, k)])
        together = sorted({len(r.meta["batched"]["seeds"]) for r in extra if not r.cached and r.meta.get("batched")})
        if k > 1:
            exp.say(f"audit: {k} retrained references (seeds {cfg.seed}..{cfg.seed + k - 1}"
                    f"{'; trained batched, ' + '/'.join(map(str, together)) + ' at once' if together else ''}): "
                    f"the verdict compares each model with their spread")
    return References(original, retrain, extra)


class Evaluation:
    """Step 3: evaluate and audit models against one run's references, collecting results.json's
    ``models`` rows. Each model is passed over the data once (:func:`unlearnkit.evaluation.model_outputs`,
    every audit layer and the logits); its metrics and its audit both read those outputs. The original
    and the retrains are evaluated on construction; their audit numbers are computed once for all
    methods (:class:`unlearnkit.audit.memo.AuditCache`)."""

    def __init__(self, exp: Experiment, refs: References) -> None:
        self.exp, self.refs = exp, refs
        self.layers: list[str] = audit_layers(refs.original.model) if exp.cfg.audit else []
        self.models: dict[str, dict] = {}
        self.original_outputs = self._reference("original", refs.original)
        self.retrain_outputs = [self._reference("retrain", refs.retrain),
                                *(model_outputs(r.model, exp.split, self.layers, exp.device)
                                  for r in refs.extra)]
        self.cache = AuditCache()

    def _reference(self, name: str, ref: Reference) -> dict:
        return self.record(name, ref.model, ref.meta["train_time_s"],
                           {"checkpoint": str(ref.path), "sha256": ref.meta["sha256"]})

    def record(self, name: str, model, runtime_s: float, extra: dict) -> dict:
        """Evaluate ``model`` into the row ``name`` (``{"metrics", "runtime_s", **extra}``); returns its
        outputs."""
        outputs = model_outputs(model, self.exp.split, self.layers, self.exp.device)
        metrics = output_metrics(outputs, self.exp.split, self.exp.cfg.test_convention)
        self.models[name] = {"metrics": metrics, "runtime_s": runtime_s, **extra}
        return outputs

    def audit(self, name: str, model, outputs: dict) -> None:
        """The representation audit of one model against the original and the retrains (without an audit:
        nothing), written to ``out/audits/<name>`` and kept in its row."""
        exp = self.exp
        if not exp.cfg.audit:
            return
        found = [self.refs.retrain, *self.refs.extra]
        rep = audit_model(self.refs.original.model, model, [r.model for r in found], exp.split, self.layers,
                          config=exp.audit_config, device=exp.device, cache=self.cache,
                          outputs={"original": self.original_outputs, "unlearned": outputs,
                                   "retrained": self.retrain_outputs},
                          references=[reference_provenance(r) for r in found])
        write_together(exp.out / "audits" / name, lambda folder: write_audit(rep, folder))  # all three or none
        self.models[name]["audit"] = rep.to_dict()
        console.print(f"  audit {name}: [bold]{escape(rep.verdict_line)}[/] ({rep.timing['total_s']:.1f}s)")
        if rep.transmitted:
            console.print(f"  transmitted embeddings: {rep.transmitted['summary']}")


def reference_provenance(ref: Reference) -> dict:
    """What a run knows of one reference: unlearnkit trained it (``run``), its seed, recipe and cache entry (the
    file's name, which holds the hash of its training key: the cache folder is the machine's business), and,
    when it was trained together with others (batched), their seeds (``batched_with``)."""
    meta = ref.meta or {}
    key = meta.get("key") or {}
    batched = (meta.get("batched") or {}).get("seeds")
    return {"source": "unlearnkit run", "seed": key.get("seed", meta.get("seed")), "recipe": key.get("recipe"),
            "checkpoint": Path(ref.path).name if ref.path else None, "cached": bool(ref.cached),
            **({"batched_with": list(batched)} if batched else {})}


def run_method(exp: Experiment, refs: References, name: str, evaluation: Evaluation | None = None) -> None:
    """Step 4: run method ``name`` on the original (or reuse its checkpoint, :func:`_run_method`); on rank 0
    evaluate and audit the unlearned model into ``evaluation`` (the other ranks only train, with none)."""
    method = _method(name, exp.preset, exp.bundle, exp.split, exp.cfg)
    done = _run_method(method, refs.original, exp.split, exp.cfg, device=exp.device, out=exp.out,
                       progress=exp.progress, runtime=exp.runtime)
    if evaluation is None:
        return
    model, runtime_s, stop_reason, history, path = done
    outputs = evaluation.record(name, model, runtime_s, {
        "hyperparameters": method.params(), "preset": exp.preset, "needs": sorted(method.needs),
        "stop_reason": stop_reason, "history": history, "checkpoint": str(path),
        "paper": METHODS.get(name).paper})
    console.print(f"{name}: {runtime_s:.1f}s ({stop_reason})")
    evaluation.audit(name, model, outputs)


def assemble(exp: Experiment, refs: References, models: dict[str, dict]) -> RunResults:
    """Step 5: the results: every row's summary metrics against retrain (:func:`summary_metrics`), the
    provenance and the task (schema :mod:`unlearnkit.results`)."""
    ref_metrics = models["retrain"]["metrics"]
    retrain_time = models["retrain"]["runtime_s"]
    for entry in models.values():
        entry["metrics"] = summary_metrics(entry["metrics"], ref_metrics, entry.pop("runtime_s"),
                                           retrain_time)
        entry.setdefault("audit", None)
    cfg, original, retrain = exp.cfg, refs.original, refs.retrain
    provenance = {"created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                  "versions": versions(), "numerics": numerics(), "git_commit": git_commit(),
                  "device": str(exp.device),
                  "processes": distributed.world().size,
                  "runtime": exp.runtime.to_dict(), "recipe": exp.recipe.to_dict(), "preset": exp.preset,
                  "original_sha256": original.meta["sha256"], "retrain_sha256": retrain.meta["sha256"],
                  # the references may come from the cache, trained with other threads (a user's
                  # checkpoint, or one cached by an older release, has none: null)
                  "reference_numerics": {"original": original.meta.get("numerics"),
                                         "retrain": retrain.meta.get("numerics")}}
    task = {"dataset": exp.bundle.name, "model": cfg.model, "num_classes": exp.bundle.num_classes,
            "setting": cfg.setting, **vfl_task(original.model, cfg), "forget": exp.split.spec.to_dict(),
            "test_convention": cfg.test_convention, **exp.split.summary()}
    return RunResults(config=cfg.to_dict(), provenance=provenance, task=task, models=models)


def run_experiment(cfg: RunConfig, progress: bool = True, audit_original: bool = True) -> RunResults | None:
    """Run one configuration end to end: :func:`prepare`, :func:`train_references`, :class:`Evaluation`
    of the references, :func:`run_method` for each method, :func:`assemble`. Returns the results (on
    rank 0; ``None`` on the other ranks of a torchrun), also written to ``cfg.out`` (results.json is
    ``.to_dict()``, results.md).

    ``audit_original=False`` skips the audit of the original model (``unlearnkit bench`` audits it
    once per group of cells that share it, in the group's reference cell).
    """
    exp = prepare(cfg, progress)
    refs = train_references(exp)
    # the cached reference is the retrain row
    methods = [name for name in exp.names if not METHODS.get(name).is_reference]
    if not distributed.world().is_main:  # the other ranks only train, data-parallel, with rank 0
        for name in methods:
            run_method(exp, refs, name)
        return None
    evaluation = Evaluation(exp, refs)
    if audit_original:
        evaluation.audit("original", refs.original.model, evaluation.original_outputs)
    for name in methods:
        run_method(exp, refs, name, evaluation)
    results = assemble(exp, refs, evaluation.models)
    write_results(results.to_dict(), exp.out)
    return results


def _method(name: str, preset: str, bundle, split, cfg: RunConfig):
    params = task_params(name, split, cfg.method_params.get(name, {}))
    return METHODS.get(name).from_preset(preset, bundle.name, **params)


def vfl_task(model, cfg: RunConfig) -> dict:
    """The VFL setting's task keys: parties, bottom, and the taps the passive parties transmit."""
    if cfg.setting != "vfl":
        return {}
    return {"parties": cfg.parties, "bottom": cfg.model, "transmitted": transmitted_layers(model)}


def _run_method(method, original: Reference, split: UnlearningSplit, cfg: RunConfig, *,
                device: torch.device, out: Path, progress: bool, runtime: Runtime | None = None):
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
                                      "kind": "unlearned", "versions": versions(),
                                      "numerics": numerics()})
    return res.model, res.runtime_s, res.stop_reason, res.history, path


# ---------------------------------------------------------------------------------------------

COLUMNS = [("forget_acc", "forget acc", "{:.2f}"), ("retain_acc", "retain acc", "{:.2f}"),
           ("test_acc", "test acc", "{:.2f}"), ("test_forget_acc", "test forget", "{:.2f}"),
           ("mia_efficacy", "MIA-eff.", "{:.2f}"), ("mia_auc", "MIA AUC", "{:.3f}"), ("gap", "Gap", "{:.2f}"),
           ("runtime_s", "time (s)", "{:.1f}"), ("speedup", "speedup", "{:.1f}x")]


#: shown only where a model has it: accuracy on the forget set's true labels (flipped-label tasks)
TRUE_CLASS = ("forget_true_acc", "forget true", "{:.2f}")


def table_rows(results: dict) -> tuple[list[str], list[list[str]]]:
    """``(header, rows)`` of the results table: one row per model, its verdict last where audited."""
    flipped = any("forget_true_acc" in e["metrics"] for e in results["models"].values())
    columns = [COLUMNS[0], TRUE_CLASS, *COLUMNS[1:]] if flipped else COLUMNS
    header = ["model"] + [c[1] for c in columns]
    rows = []
    for name, entry in results["models"].items():
        m = entry["metrics"]
        cells = [name]
        for key, _, fmt in columns:
            v = m.get(key)
            cells.append("n/a" if v is None else fmt.format(v))
        audit = entry.get("audit") or {}
        if audit.get("verdict"):
            cells.append(audit.get("verdict_line") or audit["verdict"])
        rows.append(cells)
    if any(len(r) > len(header) for r in rows):
        header.append("verdict")
        rows = [r + [""] * (len(header) - len(r)) for r in rows]
    return header, rows


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
    """results.json (strict JSON: a NaN anywhere, e.g. a method's history row with nothing to measure,
    is written as null) and results.md, together (:func:`~unlearnkit.checkpoints.write_together`: both or,
    on a full disk, neither)."""
    def write(folder: Path) -> dict:
        atomic_write_text(folder / "results.json",
                          json.dumps(validate.finite_or_none(results), indent=2, allow_nan=False) + "\n")
        atomic_write_text(folder / "results.md", results_markdown(results) + mirage_table_markdown(results))
        return {"json": folder / "results.json", "md": folder / "results.md"}

    write_together(out, write)


def print_table(results: RunResults) -> None:
    """The results table (as in results.md) on the terminal."""
    header, rows = table_rows(results.to_dict())
    title = f"{results.task['dataset']} / {model_label(results.task)}: forget {describe_forget(results.task['forget'])}"
    verdict = [i for i, h in enumerate(header) if h == "verdict"]
    later = [i for i, h in enumerate(header) if h in LESS_IMPORTANT]  # folded into a second table when too wide
    order = [0, *verdict, *(i for i in range(1, len(header)) if i not in verdict and i not in later), *later]
    print_rich_table(title, header, rows, right={i for i in range(1, len(header)) if i not in verdict},
                     wrap=set(verdict), order=order)


#: the run table's columns a terminal narrower than all of them sees in its second part (results.md has all)
LESS_IMPORTANT = ("MIA AUC", "time (s)", "speedup", "test acc (all)")
