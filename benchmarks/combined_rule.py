"""The joint told-apart test (``audit/joint.py``), judged offline on audits that ``told_apart_level.py --measures``
kept, and its error rate simulated (issue 42).

    # audits with every measure kept (digits, seeds 0-5, the hardened family, twelve genuine retrains 100-111):
    .venv/bin/python benchmarks/told_apart_level.py --seeds 0,1,2,3,4,5 --references 5,8 --audit-seeds 1 \\
        --genuine 12 --families hardened,...,hardened_tighter --measures --out capture_a.json
    .venv/bin/python benchmarks/combined_rule.py capture_a.json [more.json ...]     # the rules side by side
    .venv/bin/python benchmarks/combined_rule.py --simulate                          # the joint test's error rate
    .venv/bin/python benchmarks/combined_rule.py capture_a.json ... --sweep 0.05,0.1,0.2   # the joint level swept

Each audit's measures are judged again (:func:`judge_all`, :func:`decide`) under each rule, the joint test
computed from the same measures (:func:`unlearnkit.audit.joint.joint_deviation`):

* ``per-statistic 0.2``: the rule of 2026-12-06 (told apart, Holm within each family, at 0.2; no joint test);
* ``per-statistic 0.05``: the same at the flag's level;
* ``0.05 + joint, Gaussian``: the rule of the morning of 2026-12-07: per statistic at 0.05, and the joint test at
  0.05, with the testability requirement's Gaussian 2.576 (every rule above reads it too);
* ``0.05 + joint, Student t (the default)``: this release's: the same, but a statistic must be certified only where
  a genuine retrain t_{K−1, 0.995} prediction standard deviations out would be (testable); the flags, the
  told-apart tests and the joint test read every statistic the Gaussian requirement admits (informative);
* ``the default + directional 0.05 (not adopted)``: the default, and the model also told apart when the *mean* of
  its joint z's (signed: towards the original) lies above the references' own means' Student-t prediction bound
  at 0.05 (a Stouffer-like sum, more powerful than the mean square against a model a little beyond the references
  on most statistics in one direction). Tried on 2026-12-07 against ``hardened_centre_canon``'s keeper; it did not
  stop it (docs/audit.md).

Output-level verdicts (``collapsed``, ``not_forgotten``) are taken from the audit as run (no rule here moves
them); everything after them is decided again. Keepers are the pool's (``gt_pool.pool_keeper``: below every one
of 48 genuine retrains on the ground truth's probe, or relearning beyond every one; ``--pool-json``), the other
attacked models are counted apart, and genuine retrains give the power. Prints per K and rule the audits
`erased` of each group with exact 95 % bounds.

``--sweep LEVELS``: the default rule with its joint test at each level instead (:func:`sweep`, from each audit's
:func:`joint_p`): keepers' and genuine retrains' audits `erased` per K and level, what a stricter joint level would
stop and what it would cost in power (docs/audit.md, "What five references can see").

``--simulate``: a genuine retrain told apart jointly (and by the per-statistic rule at 0.05), 24 statistics in two
families with equicorrelation ρ, K Gaussian or heavy-tailed (multivariate Student t, one scale per model)
references and the model drawn afresh in every trial, ``--trials`` a cell; and a model shifted 2 prediction
standard deviations towards the original on every statistic (power).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

from unlearnkit.metrics.equivalence import Z_POWER

HERE = Path(__file__).resolve().parent
#: rule: (told_apart_level, the joint test, the testability requirement's z: None = Student t, the default, the
#: directional test beside the joint one)
RULES = {"per-statistic 0.2": (0.2, False, Z_POWER, False), "per-statistic 0.05": (0.05, False, Z_POWER, False),
         "0.05 + joint, Gaussian": (0.05, True, Z_POWER, False),
         "0.05 + joint, Student t (the default)": (0.05, True, None, False),
         "the default + directional 0.05 (not adopted)": (0.05, True, None, True)}
OUT = {"forget_acc": 0.0, "retain_acc": 99.0, "test_retain_acc": 98.0}
#: the digits ground-truth pools (``gt_pool.py`` outputs) every family of the suite is placed in
POOLS = [str(HERE / "results" / f"gt_pool_digits{x}.json")
         for x in ("", "_tighter_s012", "_tighter_s345", "_joint", "_marginal", "_block3", "_util", "_centre",
                   "_centre_canon")]


def load(path: str) -> dict:
    """A run's JSON, plain or gzipped (``.gz``: how the committed captures are stored)."""
    import gzip

    raw = Path(path).read_bytes()
    return json.loads(gzip.decompress(raw) if path.endswith(".gz") else raw)


def measures_of(row: dict):
    """The audit's measures, as ``told_apart_level.py --measures`` kept them."""
    from unlearnkit.audit.checks import Measure

    out = []
    for d in row["measures"]:
        d = dict(d)
        d["references"] = tuple(d["references"])
        if d.get("flag_values") is not None:
            fu, fo, fr = d["flag_values"]
            d["flag_values"] = (fu, fo, tuple(fr))
        d["separated"] = tuple(d.get("separated") or ())
        out.append(Measure(**d))
    return out


def _judged(row: dict, level: float, z_power: float | None):
    """``row``'s checks judged again at the per-statistic ``level`` with the testability requirement ``z_power``."""
    from unittest import mock

    from unlearnkit.audit import AuditConfig
    from unlearnkit.audit import checks as checks_module
    from unlearnkit.metrics.equivalence import judge

    cfg = AuditConfig(told_apart_level=level)
    with mock.patch.object(checks_module, "judge", lambda *a, **kw: judge(*a, z_power=z_power, **kw)):
        return checks_module.judge_all(measures_of(row), cfg), cfg


def _decided(checks, cfg, joint) -> str:
    from unlearnkit.audit.verdict import decide, measurements

    m = measurements(outputs_unlearned=OUT, outputs_retrained=OUT, checks=checks, n_forget={"train": 100},
                     sample_level=False, n_train_forget=100, n_refs=len(checks[0].measure.references), config=cfg,
                     joint=joint)
    return decide(m).verdict


def erased_under(row: dict, level: float, joint: bool, z_power: float | None = None,
                 directional: bool = False) -> bool:
    """Whether the audit of ``row`` reads `erased` under a rule (module docstring; ``z_power``: the testability
    requirement, None for the default; ``directional``: the directional test too)."""
    from unlearnkit.audit.joint import beyond_references, joint_deviation, joint_values
    from unlearnkit.metrics.equivalence import joint_z

    if row["verdict"] in ("collapsed", "not_forgotten"):
        return False
    checks, cfg = _judged(row, level, z_power)
    if _decided(checks, cfg, joint_deviation(checks, cfg.joint_level) if joint else None) != "erased":
        return False
    got = joint_values(checks) if directional else None
    return got is None or beyond_references(joint_z(*got).mean(axis=0)) >= cfg.joint_level


def joint_p(row: dict) -> float | None:
    """Under the default rule without its joint test: None where ``row`` is not `erased`; else the joint test's
    p-value (1.0 where it cannot run), so that the default rule at joint level L certifies it iff p >= L."""
    from unlearnkit.audit.joint import joint_deviation

    if row["verdict"] in ("collapsed", "not_forgotten"):
        return None
    checks, cfg = _judged(row, 0.05, None)
    if _decided(checks, cfg, None) != "erased":
        return None
    jt = joint_deviation(checks, cfg.joint_level)
    return 1.0 if jt is None else jt.p


def kinds(runs: list[str], pools: list[str]):
    """(row, "genuine" | "keeper" | "other") over ``runs``: keepers by ``pools`` (``gt_pool.py`` outputs), or by
    each row's own ground truth (``keeps_class``) where ``pools`` is empty."""
    sys.path.insert(0, str(HERE))
    import gt_pool

    keeper = {(r["seed"], r["family"]): gt_pool.pool_keeper(r)
              for f in pools for r in load(f)["rows"]}
    for f in runs:
        for row in load(f)["rows"]:
            if row["model"].startswith("retrain"):
                yield row, "genuine"
            elif not pools:
                yield row, "keeper" if row["keeps_class"] else "other"
            elif (row["seed"], row["model"]) not in keeper:
                raise SystemExit(f"error: seed {row['seed']} {row['model']} is in no --pool-json")
            else:
                yield row, "keeper" if keeper[(row["seed"], row["model"])] else "other"


def sweep(runs: list[str], pools: list[str], levels: list[float]) -> list[str]:
    """The default rule with its joint test at each of ``levels``: pool keepers' and genuine retrains' audits
    `erased` per K (what a stricter joint level would cost in power for what it would stop), and per K the
    smallest joint p of a keeper's audit the default certifies beside the genuine retrains' joint p's."""
    ps: dict = {}
    for row, kind in kinds(runs, pools):
        ps.setdefault((row["k"], kind), []).append(joint_p(row))
    lines = ["| K | joint level | pool keepers' audits `erased` | other attacked models' | genuine retrains' |",
             "|---|---|---|---|---|"]
    for k in sorted({k for k, _ in ps}):
        for lv in levels:
            cells = []
            for kind in ("keeper", "other", "genuine"):
                got = ps.get((k, kind), [])
                cells.append(exact(sum(p is not None and p >= lv for p in got), len(got)) if got else "-")
            lines.append(f"| {k} | {lv:g} | " + " | ".join(cells) + " |")
    for k in sorted({k for k, _ in ps}):
        kept = sorted(p for p in ps.get((k, "keeper"), []) if p is not None)
        gen = np.array([p for p in ps.get((k, "genuine"), []) if p is not None])
        if kept and gen.size:
            lines.append(f"K = {k}: keepers' audits certified without the joint test: {len(kept)}, their joint p "
                         f"{', '.join(f'{p:.3f}' for p in kept[-8:])} (largest 8); genuine retrains' audits certified "
                         f"without it: {gen.size}, of which {int((gen < kept[-1]).sum())} have a joint p below the "
                         f"largest keeper's ({kept[-1]:.3f})")
    return lines


def exact(k: int, n: int) -> str:
    from scipy.stats import beta

    lo = beta.ppf(0.025, k, n - k + 1) if k else 0.0
    hi = beta.ppf(0.975, k + 1, n - k) if k < n else 1.0
    return f"{k}/{n} [{100 * lo:.1f}, {100 * hi:.1f} %]"


def table(runs: list[str], pools: list[str]) -> list[str]:
    """The table (module docstring); with no ``pools``, keepers are the suite's own ground truth as each row
    records it (``keeps_class``: against the suite's twelve genuine retrains; mnist5k has no 48-retrain pool)."""
    counts: dict = {}
    for row, kind in kinds(runs, pools):
        for rule, (level, joint, z, directional) in RULES.items():
            c = counts.setdefault((row["k"], rule, kind), [0, 0])
            c[0] += erased_under(row, level, joint, z, directional)
            c[1] += 1
    lines = ["| K | rule | pool keepers' audits `erased` | other attacked models' | genuine retrains' |",
             "|---|---|---|---|---|"]
    for k in sorted({k for k, _, _ in counts}):
        for rule in RULES:
            cells = [exact(*counts[(k, rule, kind)]) if (k, rule, kind) in counts else "-"
                     for kind in ("keeper", "other", "genuine")]
            lines.append(f"| {k} | {rule} | " + " | ".join(cells) + " |")
    return lines


def simulate(trials: int, seed: int = 0) -> list[str]:
    from unlearnkit.audit import AuditConfig
    from unlearnkit.audit.checks import Measure, judge_all
    from unlearnkit.audit.joint import joint_deviation

    cfg = AuditConfig()
    lines = ["| K | ρ | values | genuine told apart jointly | by the per-statistic rule | a model 2 sd beyond on "
             "every statistic: jointly | per statistic |", "|---|---|---|---|---|---|---|"]
    rng = np.random.default_rng(seed)
    n = 24
    for k in (3, 5, 8, 16):
        for rho in (0.0, 0.5, 0.9):
            for tail in (None, 3):
                hits = np.zeros(4)
                for _ in range(trials):
                    x = (math.sqrt(rho) * rng.standard_normal((1, k + 1))
                         + math.sqrt(1 - rho) * rng.standard_normal((n, k + 1)))
                    if tail:
                        x = x / np.sqrt(rng.chisquare(tail, size=(1, k + 1)) / tail)
                    for j, shift in enumerate((0.0, 2.0 * math.sqrt(1 + 1 / k))):
                        u = x[:, 0] + shift
                        ms = [Measure("representation" if i % 2 else "output", f"s{i}", "train", None, "two", "u",
                                      u[i], 60.0, tuple(x[i, 1:])) for i in range(n)]
                        checks = judge_all(ms, cfg)
                        jt = joint_deviation(checks, cfg.joint_level)
                        hits[2 * j] += jt is not None and jt.told_apart
                        hits[2 * j + 1] += any(c.deviates for c in checks)
                r = hits / trials
                lines.append(f"| {k} | {rho:g} | {'Student t, 3 df' if tail else 'Gaussian'} | {100 * r[0]:.1f} % | "
                             f"{100 * r[1]:.1f} % | {100 * r[2]:.1f} % | {100 * r[3]:.1f} % |")
                print(lines[-1], flush=True)
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="*", help="told_apart_level.py --measures outputs")
    ap.add_argument("--pool-json", nargs="+", default=POOLS)
    ap.add_argument("--suite-ground-truth", action="store_true",
                    help="keepers by each row's own ground truth (keeps_class), not a pool (mnist5k)")
    ap.add_argument("--sweep", default=None, metavar="LEVELS",
                    help="comma-separated joint levels: the default rule with its joint test at each (sweep())")
    ap.add_argument("--simulate", action="store_true")
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--out", default=None, help="write the tables as JSON (atomically)")
    a = ap.parse_args(argv)
    if not a.runs and not a.simulate:
        ap.error("give told_apart_level.py --measures outputs, or --simulate")
    result = {"runs": a.runs}
    pools = [] if a.suite_ground_truth else a.pool_json
    if a.runs and a.sweep:
        try:
            levels = [float(v) for v in a.sweep.split(",")]
        except ValueError:
            ap.error(f"--sweep: comma-separated numbers, got {a.sweep!r}")
        if not all(0.0 < v < 1.0 for v in levels):
            ap.error(f"--sweep: levels in (0, 1), got {a.sweep!r}")
        result["sweep"] = sweep(a.runs, pools, levels)
        print("\n".join(result["sweep"]))
    elif a.runs:
        result["table"] = table(a.runs, pools)
        print("\n".join(result["table"]))
    if a.simulate:
        result["simulation"] = simulate(a.trials)
        result["trials"] = a.trials
    if a.out:
        from unlearnkit.checkpoints import atomic_write_text

        atomic_write_text(a.out, json.dumps(result, indent=1) + "\n")
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
