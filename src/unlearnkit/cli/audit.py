"""``unlearnkit audit``: audit three checkpoints someone else produced.

A plain function with typer defaults, registered in cli/__init__.py. Bad input raises
:class:`unlearnkit.errors.UserError` (one line, exit code 2 through ``handles_errors``).
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from .. import validate
from ..errors import UserError

VERDICT_STYLE = {"erased": "bold green", "suppressed": "bold yellow", "overforgotten": "bold yellow",
                 "collapsed": "bold red",
                 "not_forgotten": "bold red", "inconclusive": "bold"}


def _load(path: Path, role: str, model: Optional[str], bundle):
    """The checkpoint given as ``role`` (``--original``...) and its meta; NaN or infinite weights of the
    original or a reference are refused here, naming the option and the file, before any feature is
    extracted (an unlearned model with broken weights is audited: its verdict is ``collapsed``)."""
    from ..checkpoints import load_checkpoint, require_finite

    m, meta = load_checkpoint(path, model_name=model, num_classes=bundle.num_classes,
                              in_channels=bundle.in_channels, image_size=bundle.image_size)
    return (m if role == "--unlearned" else require_finite(m, f"{role} {path}")), meta


def parse_layers(layers: Optional[str]) -> Optional[list[str]]:
    """``--layers "layer3, fc"`` -> ``["layer3", "fc"]`` (None: the model's audit layers); a name given
    twice is a :class:`UserError`."""
    names = [t for t in (layers or "").replace(" ", "").split(",") if t]
    twice = sorted({t for t in names if names.count(t) > 1})
    if twice:
        raise UserError(f"--layers names {twice[0]!r} twice; give each layer once")
    if layers is not None and not names:
        raise UserError(f"--layers is empty; give layer names such as penultimate or layer3,fc, not {layers!r}")
    return names or None


def audit_command(
    *,
    original: Path = typer.Option(..., help="checkpoint of the original model (trained on everything)"),
    unlearned: Path = typer.Option(..., help="checkpoint of the unlearned model to audit"),
    retrained: Optional[List[Path]] = typer.Option(
        None, "--retrained", help="checkpoint of a model retrained without the forget set; repeat the option "
                                  "for several seeds (5 to 8 recommended, 16 on digits-sized data where the party "
                                  "audited may attack the audit: the verdict compares the unlearned model with their "
                                  "spread; erased needs 2 or more)"),
    train_references: int = typer.Option(
        0, min=0, max=64, help="train this many references here (besides any --retrained), with the original's "
                               "recipe and seeds drawn from the audit seed: the party audited cannot train the "
                               "same ones (an unlearnkit original on unlearnkit's split)"),
    dataset: str = typer.Option(..., help="dataset the models were trained on (unlearnkit list datasets): their "
                                          "classes and input shape, and the split for any part not given as a file"),
    forget_data: Optional[Path] = typer.Option(None, help="your forget set: a torch.save'd {'x': x, 'y': y} or (x, y) "
                                                          "file, audited as given (no normalisation)"),
    retain_data: Optional[Path] = typer.Option(None, help="your retain set (a tensor file as --forget-data)"),
    test_data: Optional[Path] = typer.Option(None, help="your test set (a tensor file as --forget-data)"),
    forget_classes: Optional[str] = typer.Option(None, help="forgotten classes, e.g. 3 or 3,8"),
    forget_random: Optional[float] = typer.Option(None, help="random forget set: fraction (0,1) or count "
                                                             "(drawn with --data-seed, as when it was made)"),
    forget_indices: Optional[Path] = typer.Option(None, help="file of forgotten training indices"),
    forget_flipped: Optional[float] = typer.Option(None, help="mislabeled data: the fraction in (0, 0.5) of train "
                                                   "whose labels were flipped (drawn with --data-seed, as run "
                                                   "draws it), then forgotten"),
    model: Optional[str] = typer.Option(None, help="architecture of plain state_dict checkpoints, e.g. "
                                                   "torchvision:resnet18 (unlearnkit checkpoints know it)"),
    out: Path = typer.Option(Path("audit"), help="folder for audit.json, audit.md and audit.html"),
    data_seed: int = typer.Option(0, **validate.SEED_RANGE, help="seed of the train/val/test split and of a random "
                                                                 "forget set"),
    data_dir: Path = typer.Option(Path("data"), help="where torchvision datasets live"),
    download: bool = typer.Option(False, "--download", help="download a missing torchvision dataset"),
    device: str = typer.Option("auto", help="auto | cpu | cuda | cuda:N"),
    layers: Optional[str] = typer.Option(None, help="comma-separated layers: audit layer names or module paths "
                                                    "(e.g. layer3,fc) [the model's audit layers]"),
    center: bool = typer.Option(True, "--center/--no-center",
                                help="centered linear CKA (Kornblith); --no-center reproduces Mirage's code"),
    confidence: float = typer.Option(0.95, help="confidence of every interval and test"),
    n_splits: int = typer.Option(5, help="probe resplits behind each reported ΔLPR / ΔAUROC interval"),
    audit_data: str = typer.Option("auto", help="auto | test | train: which data the verdict rests on"),
    resurface: bool = typer.Option(True, "--resurface/--no-resurface",
                                   help="run the resurfacing checks (BatchNorm recalibration, head re-fit, "
                                        "k-shot relearning)"),
    idi: bool = typer.Option(False, "--idi/--no-idi",
                             help="also estimate IDI (Jeon et al.): trains InfoNCE critics per layer and model, "
                                  "about a minute on mnist5k with the small CNN"),
    jobs: Optional[int] = typer.Option(None, help="parallel probe threads (default: the CPU count, at most 4; "
                                       "-1: every core)"),
    audit_seed: Optional[int] = typer.Option(None, min=0, max=2 ** 31 - 1,
                                             help="seed of every draw of the audit (relearning shots, probe splits) "
                                                  "[fresh from the operating system; audit.json records it: give it "
                                                  "to repeat an audit]"),
    margin: float = typer.Option(0.5, help="equivalence margin: erased needs every testable statistic of the "
                                           "representation and the output to keep less than this fraction of the "
                                           "original's excess over the references"),
    recovery_margin: float = typer.Option(0.1, help="the same for what comes back under attack (relearning, head "
                                                    "checks, BatchNorm re-estimation): the fraction of the original's "
                                                    "recovery a model may give back"),
    told_apart_level: float | None = typer.Option(None, help="erased also needs no statistic told apart from the "
                                                             "references at this level (Holm within each family; "
                                                             "for Gaussian values at most this share of genuine "
                                                             "retrains is left uncertified by it) [default: the "
                                                             "flag's level, 1 - confidence]"),
    joint_level: float = typer.Option(0.05, help="erased also needs the model not told apart from the "
                                                 "references over every informative statistic at once at this "
                                                 "level (the joint test, docs/audit.md)"),
    mlp_probe: str = typer.Option("auto", help="the MLP probe test (erased also needs the forgotten class no easier "
                                               "for a held-out MLP probe to find than in the references): auto (with "
                                               "3 to 7 references), on, off"),
):
    """Did the unlearned model really forget? Verdict, evidence, per-layer numbers and plots.

    Why it is long: typer reads the options from the signature (most of its lines); the body is ten lines."""
    from ..audit import AuditConfig
    from ..audit.core import with_audit_seed

    files = {"forget": forget_data, "retain": retain_data, "test": test_data}
    spec = _forget_spec(files, forget_classes, forget_random, forget_indices, forget_flipped)
    layer_list = parse_layers(layers)
    retrained = list(retrained or [])
    _check_files(original, unlearned, retrained, out, train_references, files)
    config = AuditConfig(center=center, confidence=confidence, n_splits=n_splits, audit_data=audit_data,
                         bn_recalibration=resurface, head_refit=resurface, head_relearn=resurface,
                         relearn=resurface, n_jobs=jobs, idi=idi, audit_seed=audit_seed, kept_margin=margin,
                         recovery_margin=recovery_margin, told_apart_level=told_apart_level,
                         joint_level=joint_level, mlp_probe=mlp_probe)
    data = {"dataset": dataset, "data_dir": data_dir, "download": download, "data_seed": data_seed, "files": files,
            "train_references": train_references}
    return _audit([original, unlearned, *retrained], spec, data, model=model, layers=layer_list,
                  config=with_audit_seed(config) if train_references else config, device=device, out=out)


def _forget_spec(files: dict, forget_classes, forget_random, forget_indices, forget_flipped=None):
    """The forget specification of the options, each user file checked; None when the user gave all three
    data parts as files (the forget set is --forget-data: a forget option then is refused)."""
    from ..data.splits import ForgetSpec

    for role, path in files.items():
        if path is not None:
            validate.input_file(f"--{role}-data", path)
    if all(p is not None for p in files.values()):
        given = [o for o, v in (("--forget-classes", forget_classes), ("--forget-random", forget_random),
                                ("--forget-indices", forget_indices), ("--forget-flipped", forget_flipped))
                 if v is not None]
        if given:
            raise UserError(f"{given[0]} is not needed with --forget-data, --retain-data and --test-data all given "
                            f"(the forget set is --forget-data): drop it")
        return None
    return ForgetSpec.from_options(forget_classes, forget_random, forget_indices, forget_flipped)


def _audit(paths: list[Path], spec, data: dict, *, model, layers, config, device, out: Path):
    """Load the data and the checkpoints (original, unlearned, references), audit, print, write."""
    from rich.console import Console

    from ..audit import audit_split, write_audit
    from ..checkpoints import write_together
    from ..data.datasets import load_dataset
    from ..data.splits import make_split
    from ..runtime import resolve_device

    dev = resolve_device(device)
    bundle = load_dataset(data["dataset"], data["data_dir"], data["download"], data["data_seed"])
    files = data.get("files") or {}
    theirs = spec is not None and not any(files.values())
    split = make_split(bundle, spec, seed=data["data_seed"]) if spec is not None else None
    if not theirs:
        split = user_data_split(files, split, bundle)
    console = Console()
    m_o, m_u, refs, plain, provenance = _models(paths[0], paths[1], paths[2:], model=model, bundle=bundle,
                                                split_hash=split.split_hash if theirs else None, console=console)
    if data.get("train_references"):
        given_seeds = [p.get("seed") for p in provenance]
        more, more_provenance = trained_references(paths[0], data["train_references"], config.audit_seed, split,
                                                   device=dev, avoid=given_seeds)
        refs, provenance = [*refs, *more], [*provenance, *more_provenance]
    if theirs and plain:
        warn(f"the checkpoints are plain state dicts, audited on unlearnkit's {bundle.name} split and normalisation "
             f"(not your own data pipeline): give --forget-data, --retain-data and --test-data to audit on yours")
    try:  # the Python API's audit (uk.audit) on this split; --layers checked before any feature is extracted
        report = audit_split(m_o, m_u, refs, split, layers=layers, config=config, device=dev, references=provenance,
                             say=lambda line: typer.echo(line, err=True))
    except UserError:  # its own line, as written (a UserError is a ValueError too)
        raise
    except (KeyError, ValueError) as e:
        raise UserError(str(e).strip("'\"")) from None
    _print_report(report, console)
    # the three files or none (a full disk left a lone audit.json)
    written = write_together(out, lambda folder: write_audit(report, folder))
    console.print(f"wrote {written['json']}, {written['md'].name} and {written['html'].name}", markup=False,
                  highlight=False)
    return report


def warn(text: str) -> None:
    """One ``warning: ...`` line on stderr, printed literally."""
    typer.echo(f"warning: {text}", err=True)


#: what unlearnkit's split gives for a part the user did not give as a file
SUBSTITUTE = {"forget": ("train_forget", "its training rows to forget"),
              "retain": ("train_retain", "its training rows without the forget set"),
              "test": ("test", "its whole test set")}


def user_data_split(files: dict, split, bundle):
    """The audit's split from the user's tensor files (``--forget-data`` ...; :func:`load_tensor_file`), each
    part not given taken from unlearnkit's ``split`` of ``bundle`` with a warning on stderr saying so."""
    from ..data.user import load_tensor_file, user_split

    parts = {}
    for role, path in files.items():
        if path is not None:
            parts[role] = load_tensor_file(path, f"--{role}-data {path}", num_classes=bundle.num_classes)
    for role in files:
        if role not in parts:
            attr, what = SUBSTITUTE[role]
            parts[role] = getattr(split, attr)
            warn(f"--{role}-data not given: the {role} set is unlearnkit's {bundle.name} split ({what}, "
                 f"{len(parts[role])} rows, with unlearnkit's normalisation)")
    flat = bundle.train.x.dim() == 2
    want = tuple(bundle.train.x.shape[1:] if flat else bundle.train.x.shape[1:2])
    for role, p in parts.items():
        if isinstance(p, tuple) and tuple(p[0].shape[1:] if flat else p[0].shape[1:2]) != want:
            shown = ", ".join(map(str, want)) + ("" if flat else ", ...")
            raise UserError(f"--{role}-data {files[role]}: its inputs are shaped {list(p[0].shape)}, but the models "
                            f"take {bundle.name}'s [N, {shown}]")
    return user_split(parts["forget"], parts["retain"], parts["test"], num_classes=bundle.num_classes)


def _check_files(original: Path, unlearned: Path, retrained: list[Path], out: Path, train_references: int = 0,
                 files: dict | None = None) -> None:
    """The checkpoints exist and can be read; ``--out`` can be written (a 35-second audit that cannot
    write its report fails now, not at the end); references to train need unlearnkit's split."""
    if not retrained and not train_references:
        raise UserError("give at least one --retrained checkpoint (a model retrained without the forget set) or "
                        "--train-references K")
    if train_references and any((files or {}).values()):
        given = next(f"--{role}-data" for role, p in files.items() if p is not None)
        raise UserError(f"--train-references trains on unlearnkit's split, not on {given}: train references on your "
                        f"data with uk.train_references and give them as --retrained")
    for role, path in [("--original", original), ("--unlearned", unlearned), *(("--retrained", p) for p in retrained)]:
        validate.input_file(role, path)
    validate.output_dir("--out", out)


def _models(original: Path, unlearned: Path, retrained: list[Path], *, model, bundle, split_hash: str, console):
    """The three roles' checkpoints and whether any is a plain state dict; a reference trained on another split
    than ``split_hash`` (None: the user's own data, not compared) is named in a warning."""
    from rich.markup import escape

    m_o, meta_o = _load(original, "--original", model, bundle)
    m_u, meta_u = _load(unlearned, "--unlearned", model, bundle)
    refs, metas = [], [meta_o, meta_u]
    for path in retrained:
        m_r, meta_r = _load(path, "--retrained", model, bundle)
        trained_on = (meta_r.get("key") or {}).get("split_hash")
        if split_hash and trained_on and trained_on != split_hash:
            console.print(f"[yellow]warning: {escape(str(path))} was retrained on split {trained_on}, but this "
                          f"forget request gives split {split_hash} (another forget set or --data-seed?)[/]")
        refs.append(m_r)
        metas.append(meta_r)
    return m_o, m_u, refs, any(m.get("source") == "plain state_dict" for m in metas), \
        [_provenance(path, meta) for path, meta in zip(retrained, metas[2:])]


def trained_references(original: Path, k: int, audit_seed: int, split, *, device, avoid=()) -> tuple[list, list]:
    """``k`` references trained here (or found in the model cache): retrains of the original's recipe, model and
    runtime (read from its unlearnkit checkpoint) on ``split`` without the forget set, with seeds drawn from the
    audit seed (:func:`unlearnkit.audit.integrity.reference_seeds`); the models and their provenance."""
    from ..audit.integrity import DRAWN, reference_seeds
    from ..checkpoints import read_checkpoint
    from ..loop import Recipe
    from ..runtime import Runtime
    from ..training import reference_models

    meta = read_checkpoint(original).get("meta")
    key = (meta.get("key") if isinstance(meta, dict) else None) or {}
    if key.get("kind") != "original" or "recipe" not in key or key.get("model") == "vfl":
        raise UserError(f"--train-references needs an original trained by unlearnkit in the standard setting (its "
                        f"checkpoint names the recipe references must share); {original} does not say how it was "
                        f"trained: train references with uk.train_references and give them as --retrained")
    if key.get("label_noise") != split.extra.get("label_noise"):
        theirs = "with flipped labels" if key.get("label_noise") else "on clean labels"
        raise UserError(f"--original {original} was trained {theirs}, unlike this forget request (--forget-flipped "
                        f"with the same fraction and --data-seed as its training): references trained here would "
                        f"not be its retrains")
    if key.get("dataset") != split.dataset.fingerprint():
        raise UserError(f"--original {original} was trained on other data than --dataset {split.dataset.name} with "
                        f"--data-seed {split.dataset.data_seed} (another dataset, or another --data-seed?): references "
                        f"trained here would not be its retrains")
    recipe = Recipe(**{**key["recipe"], "milestones": tuple(key["recipe"].get("milestones") or ())})
    seeds = reference_seeds(audit_seed, k, avoid)
    typer.echo(f"references: {k} retrains of the recipe {original}'s checkpoint names (epochs {recipe.epochs}, "
               f"lr {recipe.lr:g}, batch {recipe.batch_size}, {recipe.optimizer}, {recipe.schedule}; audit.json has "
               f"all of it), seeds drawn from audit seed {audit_seed} (trained here, or read from the model cache "
               f"where an audit trained them before)", err=True)
    refs = reference_models("retrain", split, key["model"], recipe, seeds=seeds, model_kwargs=key.get("model_kwargs"),
                            device=device, runtime=Runtime(amp=key.get("amp", "off")))
    return [r.model for r in refs], [
        {"source": "unlearnkit (audit --train-references: seed drawn from the audit seed)", "seed": s,
         "recipe": recipe.to_dict(), "split_hash": split.split_hash, DRAWN: True}
        for s in seeds]


def _provenance(path: Path, meta: dict) -> dict:
    """What a reference's checkpoint says of itself: unlearnkit's cache or run (its seed and recipe), or a file
    the user supplied."""
    key = meta.get("key") or {}
    trained = "unlearnkit" if key.get("kind") == "retrain" else "user"
    return {"source": f"{trained} (--retrained {path})", "seed": key.get("seed"), "recipe": key.get("recipe"),
            "split_hash": key.get("split_hash")}


def _print_report(report, console) -> None:
    """Verdict, evidence and the table of the checks that decided (testable or flagged); user text (layer
    names, evidence) printed literally."""
    from rich.markup import escape

    from ..audit.tables import check_rows, check_state
    from ..progress import print_table

    style = VERDICT_STYLE.get(report.verdict, "bold")
    console.print(f"verdict: [{style}]{escape(report.verdict_line)}[/]")
    for line in report.evidence:
        console.print(f"  - {line}", highlight=False, markup=False)
    d = report.to_dict()
    got = check_rows(d)
    if not got:
        return
    counts: dict[str, int] = {}
    for c in d["checks"]["items"]:
        counts[check_state(c)] = counts.get(check_state(c), 0) + 1
    console.print(f"checks ({d['checks']['size']}; margin: kept fraction {d['checks']['kept_margin']:g}; audit seed "
                  f"{d.get('audit_seed')}): " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())),
                  highlight=False, markup=False)
    _, rows = got
    # at most 100 columns: what decides first (statistic, where, kept fraction, what it says), the values folded
    shown = [[f"{r[0]}: {r[1]}", r[2], r[6], r[7], r[3], r[4], r[5]]
             for r, c in zip(rows, d["checks"]["items"]) if c["testable"] or c.get("flag")]
    print_table("testable or flagged checks (every check: audit.md)",
                ["check", "where", "kept [CI]", "says", "unlearned", "original", "references"], shown,
                right={2, 4, 5, 6}, file=console.file)
