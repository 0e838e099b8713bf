"""The told-apart rule's level, swept on the attack suite's models: keepers and genuine retrains `erased`
at each level (issue 42).

    .venv/bin/python benchmarks/told_apart_level.py --seeds 0,1,2,3,4,5 --audit-seeds 3 --references 5,8 \
        --out benchmarks/results/told_apart_level_digits.json
    # every genuine retrain 100-111 against every seed's references, with the adaptive families:
    .venv/bin/python benchmarks/told_apart_level.py --seeds 0,1,2 --audit-seeds 2 --genuine 12 \
        --families hardened,hardened_keep3,hardened_keep10,hardened_indist,hardened_indist_keep3,hardened_tight,\
hardened_tight_keep3 --out a.json    # and --seeds 3,4,5 --out b.json on the other core, then
    .venv/bin/python benchmarks/told_apart_level.py --combine a.json b.json --out both.json

Per seed s of ``--dataset`` (digits or mnist5k; class 3, small_cnn, the models `attack_suite.py` caches; build them
with it first): the genuine held-out retrains (``--genuine pair``: seeds 100 + 2s and 101 + 2s; ``--genuine N``:
seeds 100 .. 100 + N − 1, the same N models against every seed's references) and the ``--families`` attacks, each
audited against the seed's K references (retrains of seeds s .. s + K − 1) with ``--audit-seeds`` fresh audit seeds,
at the flag's level (``told_apart_level`` = 1 − confidence, the default since 2026-12-07, with the joint test at
its default level). The audit's own measures are then judged again (:func:`unlearnkit.audit.checks.judge_all`) at
each level of ``--levels``: an audit `erased` at the flag's level stays `erased` at a level where no testable check
is told apart (the rule before `erased`, which reads nothing else that the level changes: a higher level can only
take `erased` away). ``--measures`` keeps every audit's measures, so that ``combined_rule.py`` can judge them again
under other rules (the per-statistic rule alone, without the joint test, included). Whether a model keeps the
class is the suite's ground truth (``attack_suite.keeps``, the suite's genuine retrains 100-111 as yardstick).

It prints, per K and level, the keepers' audits certified and the genuine retrains' audits certified, with exact
95 % bounds, and the same per seed at the default level (one set of references each: how much the verdicts
depend on which K retrains the auditor happens to hold); writes ``--out`` (JSON, atomically).
"""
from __future__ import annotations

import argparse
import json
import secrets
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
FAMILIES = ("hardened", "hardened_keep3", "hardened_keep10", "hardened_indist", "hardened_indist_keep3")


def audits(seed: int, ks: list[int], n_audit: int, S, split, genuine_gt: dict, levels: list[float],
           genuine: list[int], families: list[str], keep_measures: bool = False) -> list[dict]:
    """Every audit of one seed's models (module docstring), with its verdict at each level (and, with
    ``keep_measures``, every measure it read: what ``combined_rule.py`` judges again offline)."""
    from unlearnkit.audit import AuditConfig
    from unlearnkit.audit.checks import judge_all
    from unlearnkit.audit.core import audit
    from unlearnkit.audit.memo import AuditCache
    from unlearnkit.evaluation import model_outputs
    from unlearnkit.models.zoo import audit_layers

    original = S.model_of("original", split, seed)
    attacker = S.model_of("retrain", split, 1000 + seed)
    refs = [S.model_of("retrain", split, seed + i) for i in range(max(ks))]
    cases = [(f"retrain{s}", S.model_of("retrain", split, s), None)
             for s in genuine or (100 + 2 * seed, 101 + 2 * seed)]
    for family in families:
        m, _ = S.cached_attack(family, original, attacker, split, seed, Path(S.DEFAULT_CACHE))
        cases.append((family, m, {"relearn": S.gt_relearn(m, split), "probe": S.gt_probe(m, split, seed)}))
    outs = {id(m): model_outputs(m, split, audit_layers(original)) for m in [original, *refs]}
    rows = []
    for k in ks:
        for _ in range(n_audit):
            cfg = AuditConfig(audit_seed=secrets.randbits(31), told_apart_level=1.0 - AuditConfig().confidence)
            cache = AuditCache()
            for name, model, gt in cases:
                rep = audit(original, model, refs[:k], split, config=cfg, cache=cache,
                            outputs={"original": outs[id(original)], "retrained": [outs[id(r)] for r in refs[:k]]})
                measures = [c.measure for c in rep.checks]
                at = {}
                for level in levels:
                    told = [c for c in judge_all(measures, replace(cfg, told_apart_level=level))
                            if c.testable and c.deviates]
                    at[str(level)] = "erased" if rep.verdict == "erased" and not told else (
                        "inconclusive" if rep.verdict == "erased" else rep.verdict)
                kept, why = (False, "genuine retrain") if gt is None else S.keeps(gt, list(genuine_gt.values()),
                                                                                  10.0, 0.75)
                rows.append({"seed": seed, "k": k, "model": name, "audit_seed": cfg.audit_seed,
                             "keeps_class": kept, "keeps_why": why, "verdict_at": at, "verdict": rep.verdict,
                             "mlp_probe": rep.mlp_probe.to_dict() if rep.mlp_probe is not None else None,
                             "erased_without_probe": erased_without_probe(rep.verdict, rep.evidence),
                             **({"measures": [asdict(m) for m in measures]} if keep_measures else {})})
                print(f"s{seed} K={k} {name:22s} keeps={kept!s:5s} " +
                      " ".join(f"{lv}:{v[:6]}" for lv, v in at.items()), flush=True)
    return rows


def erased_without_probe(verdict: str, evidence: list[str]) -> bool:
    """Whether the audit would have read `erased` without the MLP probe test (audit/probe_test.py): `erased`, or
    `inconclusive` with the probe test the only told-apart line (``verdict.distinguishable``, the rule before
    `erased`, then had nothing else to say)."""
    told = [e for e in evidence if e.startswith("told apart from the references")]
    probe_only = bool(told) and all(e.startswith("told apart from the references by the MLP probe") for e in told)
    return verdict == "erased" or (verdict == "inconclusive" and probe_only)


def probe_table(rows: list[dict], cp) -> list[str]:
    """Per K: keepers' and genuine retrains' audits `erased`, with the MLP probe test (as run) and without it."""
    lines = ["| K | MLP probe test ran | keepers' `erased` | without the probe | genuine `erased` | without it |",
             "|---|---|---|---|---|---|"]
    for k in sorted({r["k"] for r in rows}):
        cells = []
        for group in (lambda r: r["keeps_class"], lambda r: r["model"].startswith("retrain")):
            rs = [r for r in rows if r["k"] == k and group(r) and "erased_without_probe" in r]
            for n in (sum(r["verdict"] == "erased" for r in rs), sum(r["erased_without_probe"] for r in rs)):
                lo, hi = cp(n, len(rs))
                cells.append(f"{n}/{len(rs)} [{100 * lo:.1f}, {100 * hi:.1f} %]")
        ran = sum(r.get("mlp_probe") is not None for r in rows if r["k"] == k)
        lines.append(f"| {k} | {ran} audits | " + " | ".join(cells) + " |")
    return lines


def table(rows: list[dict], levels: list[float], cp) -> list[str]:
    lines = ["| K | level | keepers' audits `erased` | genuine retrains' audits `erased` |", "|---|---|---|---|"]
    for k in sorted({r["k"] for r in rows}):
        for level in levels:
            cells = []
            for group in (lambda r: r["keeps_class"], lambda r: r["model"].startswith("retrain")):
                rs = [r for r in rows if r["k"] == k and group(r)]
                n_erased = sum(r["verdict_at"][str(level)] == "erased" for r in rs)
                lo, hi = cp(n_erased, len(rs))
                cells.append(f"{n_erased}/{len(rs)} [{100 * lo:.0f}, {100 * hi:.0f} %]")
            lines.append(f"| {k} | {level:g} | {cells[0]} | {cells[1]} |")
    return lines


def per_seed(rows: list[dict], level: float) -> list[str]:
    """At one level, per K and seed (one set of references): the keepers' and genuine retrains' audits erased."""
    lines = [f"| K | seed | keepers' audits `erased` at {level:g} | genuine retrains' audits `erased` |",
             "|---|---|---|---|"]
    for k in sorted({r["k"] for r in rows}):
        for seed in sorted({r["seed"] for r in rows}):
            cells = []
            for group in (lambda r: r["keeps_class"], lambda r: r["model"].startswith("retrain")):
                rs = [r for r in rows if r["k"] == k and r["seed"] == seed and group(r)]
                cells.append(f"{sum(r['verdict_at'][str(level)] == 'erased' for r in rs)}/{len(rs)}")
            lines.append(f"| {k} | {seed} | {cells[0]} | {cells[1]} |")
    return lines


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", default="0,1,2,3,4,5")
    p.add_argument("--references", default="5,8")
    p.add_argument("--audit-seeds", type=int, default=3)
    p.add_argument("--levels", default="0.05,0.1,0.2,0.3")
    p.add_argument("--genuine", default="pair",
                   help="'pair' (retrains 100 + 2s, 101 + 2s) or N (retrains 100 .. 100 + N - 1)")
    p.add_argument("--genuine-from", type=int, default=100,
                   help="with --genuine N: the first genuine retrain's seed (e.g. 112: retrains the suite's "
                        "yardstick, 100-111, does not hold)")
    p.add_argument("--families", default=",".join(FAMILIES))
    p.add_argument("--combine", nargs="+", metavar="JSON",
                   help="merge the rows of earlier runs (same levels) into --out")
    p.add_argument("--dataset", default="digits", choices=["digits", "mnist5k"])
    p.add_argument("--measures", action="store_true", help="keep every audit's measures in --out")
    p.add_argument("--out", default=None, help="default: benchmarks/results/told_apart_level_<dataset>.json")
    a = p.parse_args(argv)
    a.out = a.out or str(HERE / "results" / f"told_apart_level_{a.dataset}.json")
    try:
        a.seeds = [int(s) for s in a.seeds.split(",")]
        a.ks = [int(k) for k in a.references.split(",")]
        a.level_list = [float(v) for v in a.levels.split(",")]
        a.genuine_seeds = [] if a.genuine == "pair" else list(range(a.genuine_from, a.genuine_from + int(a.genuine)))
    except ValueError:
        p.error("--seeds, --references and --levels are comma-separated numbers; --genuine is 'pair' or a number")
    if a.audit_seeds < 1 or any(k < 2 for k in a.ks) or not all(0.05 - 1e-12 <= v < 1 for v in a.level_list):
        p.error("--audit-seeds must be >= 1, each K >= 2, each level in [0.05, 1)")
    if a.genuine != "pair" and not 1 <= len(a.genuine_seeds) <= 64:
        p.error("--genuine N must lie in [1, 64]")
    if not 100 <= a.genuine_from <= 999:
        p.error("--genuine-from must lie in [100, 999] (seeds 0-99 are references, 1000 + s the attackers')")
    return a


def combinable(runs: list[dict]) -> str | None:
    """None when runs can be joined (the same genuine retrains, levels, K and families; no seed twice: the
    genuine retrains' yardstick and the judged levels are then the same), else why not."""
    for key in ("dataset", "genuine", "levels", "references", "families"):
        values = {str(r.get(key)) for r in runs}
        if len(values) > 1:
            return f"the runs differ in --{key} ({', '.join(sorted(values))})"
    seeds = [s for r in runs for s in r["seeds"]]
    twice = sorted({s for s in seeds if seeds.count(s) > 1})
    return f"seed {', '.join(map(str, twice))} is in more than one run" if twice else None


def report(rows: list[dict], levels: list[float], args: dict, t0: float, out: str, S) -> None:
    from unlearnkit.audit import AuditConfig
    from unlearnkit.checkpoints import atomic_write_text

    cp = S.sibling("audit_calibrate").clopper_pearson
    lines = table(rows, levels, cp)
    seeds = per_seed(rows, AuditConfig().told_apart_level)
    probe = probe_table(rows, cp)
    print("\n".join(lines + [""] + seeds + [""] + probe))
    atomic_write_text(out, json.dumps({"args": args, "rows": rows, "table": lines, "per_seed": seeds,
                                       "probe_table": probe,
                                       "elapsed_s": time.perf_counter() - t0}, indent=1) + "\n")
    print(f"wrote {out} ({time.perf_counter() - t0:.0f} s)")


def main(argv=None) -> int:
    a = parse(argv)
    sys.path.insert(0, str(HERE))
    import attack_suite as S
    import torch

    from unlearnkit import ForgetSpec, load_dataset, make_split

    t0 = time.perf_counter()
    if a.combine:
        parts = [json.loads(Path(f).read_text()) for f in a.combine]
        why = combinable([d["args"] for d in parts])
        if why:
            raise SystemExit(f"error: --combine: {why}")
        report([r for d in parts for r in d["rows"]], [float(v) for v in parts[0]["args"]["levels"].split(",")],
               {"combined": a.combine, "runs": [d["args"] for d in parts]}, t0, a.out, S)
        return 0
    families = [f for f in a.families.split(",") if f]
    unknown = sorted(set(families) - set(S.FAMILIES))
    if unknown:
        raise SystemExit(f"error: unknown --families {', '.join(unknown)} (attack_suite.FAMILIES)")
    torch.set_num_threads(1)
    split = make_split(load_dataset(a.dataset), ForgetSpec(classes=(3,)))
    genuine_gt = {}
    # the suite's yardstick: every genuine retrain of these seeds (and every one audited), 100-111 for seeds 0-5
    for s in range(100, 100 + max(2 * max(a.seeds) + 2, len(a.genuine_seeds) if a.genuine_from == 100 else 12)):
        m = S.model_of("retrain", split, s)
        genuine_gt[s] = {"relearn": S.gt_relearn(m, split), "probe": S.gt_probe(m, split, s)}
    rows = [r for seed in a.seeds for r in audits(seed, a.ks, a.audit_seeds, S, split, genuine_gt, a.level_list,
                                                  a.genuine_seeds, families, a.measures)]
    args = {k: v for k, v in vars(a).items() if k not in ("ks", "level_list", "genuine_seeds")}
    report(rows, a.level_list, args, t0, a.out, S)
    return 0


if __name__ == "__main__":
    sys.exit(main())
