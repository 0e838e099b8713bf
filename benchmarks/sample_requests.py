"""Sample requests certified (issue 43): the audit's `erased` rate on genuine held-out retrains (power) and its
false-`erased` rate on models that keep the forget rows, on flipped labels and random samples, at K = 8 and 16.

    .venv/bin/python benchmarks/sample_requests.py --tasks digits-flipped --seeds 0,1,2,3,4 --references 8,16
    .venv/bin/python benchmarks/sample_requests.py --quick      # digits-flipped, seed 0, K = 8: a smoke run

Tasks: ``digits-flipped`` / ``mnist5k-flipped`` (5 % of the training rows trained with a wrong label, then
forgotten: ``ForgetSpec(flipped=0.05)``) and ``mnist5k-random`` (a random 10 %). Per seed s (small_cnn, the
default recipe, the project's model cache): the original is seed s, the auditor's references the retrains of
seeds s .. s + K − 1, two genuine held-out retrains seeds 100 + 2s and 101 + 2s (no reference has them), the
attacker's own retrain seed 1000 + s. Models audited:

* ``original``: the model that memorised the rows;
* ``finetune``: unlearnkit's ``finetune`` method (its reference defaults) on the original;
* ``distiller``: the output-only forger of a sample request: the original fine-tuned on the retained rows and,
  on the forget rows, distilled to the attacker's retrain's outputs (``attack_suite.Attack``: outputs like a
  retrain's, example by example);
* ``hardened``: the distiller also trained against the audit's sample relearning: every other step a first-order
  (FOMAML) step on the gap between its own and the attacker's retrain's relearning of the held-out half (a
  random half of the forget rows as shots, at most the audit's 64; random learning rate and budget of the
  audit's sweep: the attacker knows the procedure, not the audit seed). Statistic matching and a kept probe (the
  class suite's ``hardened``) are left out: with 64 forget rows they collapsed the model (retained
  cross-entropy 15 after 12 epochs, digits seed 0), and on flipped labels the representation is not what
  decides (its statistics cannot be tested).

Ground truth (draws the audit never uses; the model as given): plain SGD (lr 0.01, momentum 0.9, eval mode)
from a random half of the forget rows with their training labels plus 5 retained rows of each class, accuracy
on the other half's training labels after 10, 20 and 50 steps (3 draws); and the held-out MLP probe of forget
vs retained training rows at the penultimate layer (``attack_suite.gt_probe``). A model **keeps the rows** when
its relearning exceeds every genuine retrain's of the task by more than ``--gt-margin`` points at some budget,
or its probe's held-out log loss is below ``--gt-probe`` times the smallest of the genuine retrains'.

Prints one row per audit, then per family the false-``erased`` rate among the models that keep the rows (exact
Clopper-Pearson 95 % bounds) and the genuine retrains' ``erased`` rate, and (``--rescaled``) the bit-identical
copies whose verdict or deciding numbers moved; writes ``--out`` atomically after every
seed (an interrupted run keeps what it finished). Every audit draws a fresh audit seed (recorded). The models,
the attacks and the genuine retrains' ground truth are cached under ``--cache``: runs of disjoint seeds can run
side by side (same ``--genuine``; they share the ground truth's work) and be joined with ``--combine``
(``--rescore`` joins runs of different ``--genuine``, every row re-judged against the largest yardstick).
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import secrets
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "sample_requests.json"
FAMILIES = ("original", "finetune", "distiller", "hardened")
TASKS = {"digits-flipped": ("digits", {"flipped": 0.05}), "mnist5k-flipped": ("mnist5k", {"flipped": 0.05}),
         "mnist5k-random": ("mnist5k", {"random": 0.1})}
GT_SEEDS = (917_100, 917_101, 917_102)  # the ground truth's draws: never an audit's


def suite():
    """``benchmarks/attack_suite.py``, whose attack loop, probe and audit helpers this benchmark shares."""
    import importlib.util

    if "attack_suite" not in sys.modules:
        spec = importlib.util.spec_from_file_location("attack_suite", HERE / "attack_suite.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["attack_suite"] = module
        spec.loader.exec_module(module)
    return sys.modules["attack_suite"]


def _half_draw(n_forget: int, yr: np.ndarray, rng: np.random.Generator, retain_k: int, cap: int | None = None):
    """(shots, held-out, retained shots): a random half of the forget rows (at most ``cap``), the rest, and
    ``retain_k`` retained rows of each class."""
    perm = rng.permutation(n_forget)
    half = n_forget // 2 if cap is None else min(n_forget // 2, cap)
    r = np.concatenate([rng.choice(np.flatnonzero(yr == c), retain_k, replace=False) for c in np.unique(yr)])
    return perm[:half], perm[half:], r


def sample_attack_class():
    """``attack_suite.Attack`` whose relearning simulation draws a sample request's shots (a random half)."""
    from unlearnkit.audit.relearning import SAMPLE_MAX_SHOTS

    base = suite().Attack

    class SampleAttack(base):
        def _shots(self):
            rng = np.random.default_rng(int(torch.randint(0, 2 ** 31, (1,), generator=self.g)))
            f, held, r = _half_draw(len(self.yf), self.yr.numpy(), rng, 2, cap=SAMPLE_MAX_SHOTS)
            return (torch.cat([self.xf[f], self.xr[r]]), torch.cat([self.yf[f], self.yr[r]])), \
                (self.xf[held], self.yf[held])

    return SampleAttack


def build(family: str, original, attacker, split, seed: int, log=print):
    """The audited model of ``family`` (module docstring)."""
    if family == "original":
        return original
    if family == "finetune":
        from unlearnkit.api import _method, unlearn_split

        return unlearn_split(original, _method("finetune", split, None, {}), split, device="cpu", seed=seed).model
    epochs = 12 if split.dataset.name == "digits" else 6
    kw = dict(seed=seed, epochs=epochs, log=log)
    attack = sample_attack_class()
    if family == "distiller":
        return attack(original, attacker, split, match=False, keep=None, harden=False, **kw).run()
    if family == "hardened":
        return attack(original, attacker, split, match=False, keep=None, harden=True, **kw).run()
    raise ValueError(f"unknown family {family!r}")


def cached(task: str, family: str, original, attacker, split, seed: int, cache: Path, log=print):
    """:func:`build`, saved under ``cache`` (state dict) and read back on a rerun."""
    if family == "original":
        return original, 0.0
    path = cache / f"{task}-s{seed}-{family}.pt"
    if path.exists():
        m = copy.deepcopy(original)
        m.load_state_dict(torch.load(path, weights_only=True))
        return m.eval(), 0.0
    t0 = time.perf_counter()
    m = build(family, original, attacker, split, seed, log).eval()
    cache.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(m.state_dict(), tmp)
    tmp.replace(path)
    return m, time.perf_counter() - t0


def gt_relearn(model, split) -> dict:
    """Accuracy (%) on the held-out half's training labels after each of ``attack_suite.GT_STEPS`` plain SGD steps
    from the other half and 5 retained rows per class (``attack_suite.gt_accuracy_curve``), mean over
    :data:`GT_SEEDS`."""
    s = suite()
    xf, yf = s._rows(split.train_forget)
    xr, yr = s._rows(split.train_retain)
    curves = []
    for seed in GT_SEEDS:
        f, held, r = _half_draw(len(yf), yr.numpy(), np.random.default_rng(seed), 5)
        curves.append(s.gt_accuracy_curve(model, torch.cat([xf[f], xr[r]]), torch.cat([yf[f], yr[r]]), xf[held],
                                          yf[held]))
    return s.mean_curves(curves)


def cached_truths(task: str, seeds: list[int], compute, cache: Path, stale_s: float = 1800.0, poll_s: float = 10.0):
    """Yield ``(seed, ground truth)`` of each genuine retrain in ``seeds``, read from ``cache`` or computed with
    ``compute(seed)`` and saved there. Runs of disjoint seeds started side by side share the work: a process
    claims a seed with a lock file, skips those another process holds, and waits for them at the end (a lock
    older than ``stale_s`` seconds is taken over: its process died)."""
    from unlearnkit.checkpoints import atomic_write_text

    cache.mkdir(parents=True, exist_ok=True)
    pending = list(seeds)
    while pending:
        progressed = False
        for g in list(pending):
            path = cache / f"{task}-gt-retrain{g}.json"
            if not path.exists():
                lock = path.with_suffix(".lock")
                try:
                    os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                except FileExistsError:
                    if time.time() - lock.stat().st_mtime < stale_s:
                        continue  # another process is computing it
                    lock.touch()
                try:
                    atomic_write_text(path, json.dumps(compute(g)) + "\n")
                finally:
                    lock.unlink(missing_ok=True)
            pending.remove(g)
            progressed = True
            yield g, json.loads(path.read_text())
        if pending and not progressed:
            time.sleep(poll_s)


def ground_truth(model, split, seed: int) -> dict:
    return {"relearn": gt_relearn(model, split), "probe": suite().gt_probe(model, split, seed)}


def run_seed(task: str, seed: int, a, rows: list[dict], genuine_gt: dict, log=print) -> None:
    from unlearnkit import ForgetSpec, load_dataset, make_split
    from unlearnkit.audit import AuditConfig
    from unlearnkit.audit.memo import AuditCache
    from unlearnkit.evaluation import model_outputs
    from unlearnkit.models.zoo import audit_layers

    s = suite()
    dataset, spec = TASKS[task]
    split = make_split(load_dataset(dataset), ForgetSpec(**spec))
    original = s.model_of("original", split, seed)
    attacker = s.model_of("retrain", split, 1000 + seed)
    refs_all = [s.model_of("retrain", split, seed + i) for i in range(max(a.references))]
    pending = [g for g in range(100, 100 + a.genuine) if (task, g) not in genuine_gt]  # the ground truth's yardstick
    for g, gt in cached_truths(task, pending, lambda g: ground_truth(s.model_of("retrain", split, g), split, g),
                               Path(a.cache)):
        genuine_gt[(task, g)] = gt
    gen = [v for (t, _), v in genuine_gt.items() if t == task]
    cases = [("genuine", f"retrain{g}", s.model_of("retrain", split, g), None) for g in (100 + 2 * seed,
                                                                                         101 + 2 * seed)]
    for family in a.families:
        m, secs = cached(task, family, original, attacker, split, seed, Path(a.cache), log=log)
        gt = {**ground_truth(m, split, seed), "build_s": secs}
        cases.append((family, "", m, gt))
        if a.rescaled:
            for tag, c in s.sibling("attack_reparam").copies(m, seed, exact=True).items():
                if tag in ("scale100@penultimate", "permute", "compose"):
                    cases.append((family, tag, c, gt))
    layers = audit_layers(original)
    outs = {id(m): model_outputs(m, split, layers) for m in [original, *refs_all]}
    for k in a.references:
        cache, cfg = AuditCache(), AuditConfig(audit_seed=secrets.randbits(31))
        for family, tag, model, gt in cases:
            if tag and family != "genuine" and k != min(a.references):
                continue  # the bit-identical copies are audited at the smallest K
            res = s.audit_one(original, model, refs_all[:k], split, outs, cache, cfg)
            kept, why = (False, "genuine retrain") if gt is None else s.keeps(gt, gen, a.gt_margin, a.gt_probe)
            row = {"dataset": task, "seed": seed, "k": k, "family": family, "copy": tag, **res,
                   "ground_truth": gt if gt is not None else genuine_gt[(task, int(tag[7:]))], "keeps_class": kept,
                   "keeps_why": why, "false_erased": bool(kept and res["verdict"] == "erased")}
            rows.append(row)
            log(f"{task:16s} s{seed} K={k:<2d} {family:10s} {tag:20s} -> {res['verdict']:14s} keeps={kept!s:5s} "
                f"{'** FALSE ERASED' if row['false_erased'] else ''} ({res['seconds']:.0f}s) {why[:90]}")


def write(rows: list[dict], out: str, meta: dict) -> list[str]:
    """The summary of ``rows`` (false-``erased`` rates, power, bit-identical copies that moved), written with
    the rows and ``meta`` to ``out`` atomically; returns the summary's lines."""
    from unlearnkit.checkpoints import atomic_write_text

    lines = [line.replace("keep the class", "keep the rows") for line in suite().summary(rows)]
    moved = suite().invariance(rows)
    lines.append(f"bit-identical copies that moved: {len(moved)}" + "".join(f"\n  {b}" for b in moved))
    atomic_write_text(out, json.dumps({**meta, "rows": rows, "summary": lines}, indent=1, default=str) + "\n")
    return lines


def rescore(rows: list[dict], genuine: int, cache: Path, margin: float, probe: float) -> None:
    """Re-judge every audited row's ``keeps_class`` (and ``false_erased``) against the yardstick of ``genuine``
    genuine retrains (seeds 100 ..), whose ground truths are read from ``cache`` (every one must be there)."""
    s = suite()
    yardstick = {}
    for task in sorted({r["dataset"] for r in rows}):
        paths = [cache / f"{task}-gt-retrain{g}.json" for g in range(100, 100 + genuine)]
        missing = [p.name for p in paths if not p.exists()]
        if missing:
            raise SystemExit(f"error: --rescore needs the ground truth of {missing[0]} in {cache} (run the seeds "
                             f"with --genuine {genuine} first)")
        yardstick[task] = [json.loads(p.read_text()) for p in paths]
    for r in rows:
        if r["family"] != "genuine":
            r["keeps_class"], r["keeps_why"] = s.keeps(r["ground_truth"], yardstick[r["dataset"]], margin, probe)
            r["false_erased"] = bool(r["keeps_class"] and r["verdict"] == "erased")


def combine(paths: list[str], out: str, rescore_cache: str | None = None) -> int:
    """``--combine``: the rows of several runs in one summary. Refuses runs whose ground truths had different
    yardsticks (``--genuine``) unless ``rescore_cache`` is given (``--rescore``: every row re-judged against the
    largest yardstick, from the genuine retrains' ground truths cached there), and runs that audited the same
    task, seed and K twice (the same seeds at another K join)."""
    runs = []
    for p in paths:
        try:
            runs.append(json.loads(Path(p).read_text()))
        except (OSError, ValueError) as e:
            raise SystemExit(f"error: --combine cannot read {p}: {e}") from None
        if not isinstance(runs[-1], dict) or "rows" not in runs[-1] or "args" not in runs[-1]:
            raise SystemExit(f"error: {p} is not a sample_requests.py run (no rows or args)")
    parts = [(run, args) for run in runs for args in (run["args"] if isinstance(run["args"], list) else [run["args"]])]
    yardsticks = {run.get("rescored_against") or args.get("genuine") or 2 * max(args["seeds"]) + 2  # older runs
                  for run, args in parts}
    rules = {(args["gt_margin"], args["gt_probe"]) for _, args in parts}
    if len(rules) > 1:
        raise SystemExit("error: the runs' ground truths used different --gt-margin / --gt-probe")
    if len(yardsticks) > 1 and rescore_cache is None:
        got = ", ".join(sorted(map(str, yardsticks)))
        raise SystemExit(f"error: the runs' ground truths used different yardsticks (--genuine {got}); rerun "
                         "with the same --genuine, or join with --rescore")
    seen: dict = {}
    for path, run in zip(paths, runs):
        for key in sorted({(r["dataset"], r["seed"], r["k"]) for r in run["rows"]}):
            if key in seen:
                raise SystemExit(f"error: {key[0]} seed {key[1]} at K = {key[2]} is in both {seen[key]} and {path}")
            seen[key] = path
    rows = [r for run in runs for r in run["rows"]]
    meta = {}
    if len(yardsticks) > 1:
        margin, probe = rules.pop()
        rescore(rows, max(yardsticks), Path(rescore_cache), margin, probe)
        meta["rescored_against"] = max(yardsticks)
    lines = write(rows, out,
                  {**meta, "combined": list(paths), "args": [args for _, args in parts],
                   "elapsed_s": sum(run["elapsed_s"] for run in runs), "versions": runs[0].get("versions")})
    print("\n".join(lines))
    print(f"wrote {out}")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", default="digits-flipped,mnist5k-flipped,mnist5k-random")
    p.add_argument("--seeds", default="0,1,2,3,4")
    p.add_argument("--references", default="8,16")
    p.add_argument("--families", default=",".join(FAMILIES))
    p.add_argument("--gt-margin", type=float, default=10.0, help="ground truth: relearning points above every "
                                                                  "genuine retrain's")
    p.add_argument("--gt-probe", type=float, default=0.75, help="ground truth: probe loss below this x the genuine "
                                                                 "retrains' smallest")
    p.add_argument("--rescaled", action="store_true", help="also audit each model's bit-identical copies (units "
                                                               "rescaled by 2^±100, permuted, both; at the smallest K)")
    p.add_argument("--cache", default=str(Path.home() / ".cache" / "unlearnkit" / "attacks"))
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--quick", action="store_true", help="digits-flipped, seed 0, K = 8")
    p.add_argument("--genuine", type=int, default=None, help="genuine held-out retrains (seeds 100 ..) that make the "
                   "ground truth's yardstick (default 2 x the largest seed + 2: every seed's two; give the same "
                   "number to runs of disjoint seeds that --combine joins)")
    p.add_argument("--combine", nargs="+", metavar="JSON", help="only join the rows of earlier runs (same "
                   "--genuine) into one summary, written to --out")
    p.add_argument("--rescore", action="store_true", help="with --combine: join runs of different --genuine by "
                   "re-judging every row against the largest yardstick (the genuine retrains' ground truths from "
                   "--cache)")
    p.add_argument("--out", default=str(RESULTS))
    a = p.parse_args(argv)
    if a.rescore and not a.combine:
        p.error("--rescore only applies with --combine")
    if a.combine:
        return combine(a.combine, a.out, a.cache if a.rescore else None)
    if a.quick:
        a.tasks, a.seeds, a.references = "digits-flipped", "0", "8"
    a.tasks = [t for t in a.tasks.split(",") if t]
    bad = [t for t in a.tasks if t not in TASKS]
    if bad:
        p.error(f"unknown task {bad[0]!r} (known: {', '.join(TASKS)})")
    a.seeds = [int(v) for v in a.seeds.split(",")]
    a.references = [int(v) for v in a.references.split(",")]
    a.families = [f for f in a.families.split(",") if f]
    if a.genuine is None:
        a.genuine = 2 * max(a.seeds) + 2
    if a.genuine < 2 * max(a.seeds) + 2:
        p.error(f"--genuine {a.genuine} leaves out the held-out retrains of seed {max(a.seeds)} "
                f"(needs at least {2 * max(a.seeds) + 2})")
    torch.set_num_threads(a.threads)

    rows: list[dict] = []
    genuine_gt: dict = {}
    t0 = time.perf_counter()
    args = {k: v for k, v in vars(a).items() if k not in ("out", "combine")}

    def save() -> list[str]:
        return write(rows, a.out, {"args": args, "elapsed_s": time.perf_counter() - t0,
                                   "versions": {"torch": torch.__version__, "numpy": np.__version__}})

    for task in a.tasks:
        for seed in a.seeds:
            run_seed(task, seed, a, rows, genuine_gt, log=lambda text: print(text, flush=True))
            save()
    print("\n".join(save()))
    print(f"wrote {a.out} ({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
