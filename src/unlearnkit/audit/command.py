"""``unlearnkit audit``: audit three checkpoints someone else produced.

A plain function with typer defaults; cli.py registers it with
``app.command("audit")(handles_errors(audit_command))``. Bad input raises
:class:`unlearnkit.errors.UserError` (one line, exit code 2 through ``handles_errors``).
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from .. import validate
from ..errors import UserError

VERDICT_STYLE = {"erased": "bold green", "suppressed": "bold yellow", "collapsed": "bold red",
                 "not_forgotten": "bold red", "inconclusive": "bold"}


def _load(path: Path, role: str, model: Optional[str], bundle):
    from ..checkpoints import load_checkpoint

    m, meta = load_checkpoint(path, model_name=model, num_classes=bundle.num_classes,
                              in_channels=bundle.in_channels, image_size=bundle.image_size)
    return m, meta


def audit_command(
    original: Path = typer.Option(..., help="checkpoint of the original model (trained on everything)"),
    unlearned: Path = typer.Option(..., help="checkpoint of the unlearned model to audit"),
    retrained: List[Path] = typer.Option(
        ..., "--retrained", help="checkpoint of a model retrained without the forget set; repeat the option "
                                 "for several seeds: with 2 or more, each layer's tolerance is derived from "
                                 "their spread (5 recommended; one is enough only on small_cnn, the calibrated "
                                 "architecture)"),
    dataset: str = typer.Option(..., help="dataset the models were trained on (unlearnkit list datasets)"),
    forget_classes: Optional[str] = typer.Option(None, help="forgotten classes, e.g. 3 or 3,8"),
    forget_random: Optional[float] = typer.Option(None, help="random forget set: fraction (0,1) or count "
                                                             "(drawn with --data-seed, as when it was made)"),
    forget_indices: Optional[Path] = typer.Option(None, help="file of forgotten training indices"),
    model: Optional[str] = typer.Option(None, help="architecture of plain state_dict checkpoints, e.g. "
                                                   "torchvision:resnet18 (unlearnkit checkpoints know it)"),
    out: Path = typer.Option(Path("audit"), help="folder for audit.json, audit.md and audit.html"),
    data_seed: int = typer.Option(0, **validate.SEED_RANGE, help="seed of the train/val/test split and of a random "
                                                                 "forget set"),
    data_dir: Path = typer.Option(Path("data"), help="where torchvision datasets live"),
    download: bool = typer.Option(False, "--download", help="download a missing torchvision dataset"),
    device: str = typer.Option("auto", help="auto | cpu | cuda | cuda:N"),
    layers: Optional[str] = typer.Option(None, help="comma-separated layers [the model's audit layers]"),
    center: bool = typer.Option(True, "--center/--no-center",
                                help="centered linear CKA (Kornblith); --no-center reproduces Mirage's code"),
    confidence: float = typer.Option(0.95, help="confidence of every interval and test"),
    n_splits: int = typer.Option(20, help="probe resplits behind each ΔLPR interval"),
    audit_data: str = typer.Option("auto", help="auto | test | train: which data the verdict rests on"),
    resurface: bool = typer.Option(True, "--resurface/--no-resurface",
                                   help="run the resurfacing checks (BatchNorm recalibration, head re-fit, k-shot relearning)"),
    idi: bool = typer.Option(False, "--idi/--no-idi",
                             help="also estimate IDI (Jeon et al.): trains InfoNCE critics per layer and model, "
                                  "about a minute on mnist5k with the small CNN"),
    jobs: Optional[int] = typer.Option(None, help="parallel probe threads (default: the CPU count, at most 4; "
                                       "-1: every core)"),
):
    """Did the unlearned model really forget? Verdict, evidence, per-layer numbers and plots."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    from ..data.datasets import load_dataset
    from ..data.splits import ForgetSpec, make_split
    from ..training import resolve_device
    from . import AuditConfig, audit, write_audit

    given = [forget_classes is not None, forget_random is not None, forget_indices is not None]
    if sum(given) != 1:
        raise UserError("say what was forgotten with exactly one of --forget-classes, --forget-random, "
                        "--forget-indices")
    if not retrained:
        raise UserError("give at least one --retrained checkpoint (a model retrained without the forget set)")
    classes = validate.int_list("--forget-classes", forget_classes) if forget_classes is not None else []
    if forget_classes is not None and not classes:
        raise UserError("--forget-classes is empty")
    if forget_random is not None:
        forget_random = validate.forget_random("--forget-random", forget_random)
    for role, path in [("--original", original), ("--unlearned", unlearned),
                       *(("--retrained", p) for p in retrained), ("--forget-indices", forget_indices)]:
        if path is not None:
            validate.input_file(role, path)
    validate.output_dir("--out", out)  # a 35-second audit that cannot write its report fails now
    try:
        config = AuditConfig(center=center, confidence=confidence, n_splits=n_splits, audit_data=audit_data,
                             bn_recalibration=resurface, head_refit=resurface, head_relearn=resurface,
                             relearn=resurface,
                             n_jobs=jobs, idi=idi)
    except (TypeError, ValueError) as e:
        raise UserError(str(e)) from None
    dev = resolve_device(device)
    bundle = load_dataset(dataset, data_dir, download, data_seed)
    spec = ForgetSpec(classes=tuple(classes),
                      random=forget_random, indices_file=str(forget_indices) if forget_indices else None)
    split = make_split(bundle, spec, seed=data_seed)
    console = Console()
    m_o, meta_o = _load(original, "original", model, bundle)
    m_u, _ = _load(unlearned, "unlearned", model, bundle)
    refs = []
    for path in retrained:
        m_r, meta_r = _load(path, "retrained", model, bundle)
        trained_on = (meta_r.get("key") or {}).get("split_hash")
        if trained_on and trained_on != split.split_hash:
            console.print(f"[yellow]warning: {escape(str(path))} was retrained on split {trained_on}, but this "
                          f"forget request gives split {split.split_hash} (another forget set or --data-seed?)[/]")
        refs.append(m_r.to(dev))
    layer_list = [t for t in (layers or "").replace(" ", "").split(",") if t] or None
    if layer_list:
        from ..models.zoo import taps_of

        known = list(taps_of(m_u))
        missing = [name for name in layer_list if name not in known]
        if missing:
            raise UserError(f"--layers: no layer {missing[0]!r} in the model; it has {', '.join(known)}")
    try:
        report = audit(m_o.to(dev), m_u.to(dev), refs, split, layers=layer_list, config=config, device=dev)
    except (KeyError, ValueError) as e:
        raise UserError(str(e).strip("'\"")) from None
    style = VERDICT_STYLE.get(report.verdict, "bold")
    console.print(f"verdict: [{style}]{report.verdict}[/] (rests on the {report.rests_on} data: "
                  f"{report.rests_on_reason})")
    for line in report.evidence:
        console.print(f"  - {line}", highlight=False, markup=False)
    table = Table(title=f"layers, {report.rests_on} data", show_lines=False)
    for col in ("layer", "ΔAUROC [CI]", "sep. ratio [CI]", "LPR (Mirage)", "CKA orig.", "CKA retr.", "tolerance"):
        table.add_column(col, no_wrap=col == "layer")
    for r in report.layers[report.rests_on]:
        name = Text(r.layer)  # a user's layer name is printed literally, never as markup
        if r.probed:
            d, s = r.delta_auroc, r.separability_ratio
            table.add_row(name, f"{d.value:+.1f} [{d.low:+.1f}, {d.high:+.1f}]",
                          f"{s.value:.2f} [{s.low:.2f}, {s.high:.2f}]", f"{r.lpr:.1f}", f"{r.cka_original:.3f}",
                          f"{r.cka_retrain:.3f}", f"{r.separability_margin:.3g}x")
        else:
            table.add_row(name, "too few samples", "", "n/a", f"{r.cka_original:.3f}",
                          f"{r.cka_retrain:.3f}", "")
    if report.layers[report.rests_on]:
        console.print(table)
        pen = report.layer(report.penultimate)
        if pen.tolerance is not None:
            console.print(f"tolerance: {pen.tolerance.describe()}", highlight=False, markup=False)
    paths = write_audit(report, out)
    console.print(f"wrote {paths['json']}, {paths['md'].name} and {paths['html'].name}", markup=False,
                  highlight=False)
    return report
