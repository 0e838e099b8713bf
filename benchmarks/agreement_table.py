"""Does the audit's verdict agree with the ground truth of the NeurIPS 2023 challenge? (issue 29, item 5)

    .venv/bin/python benchmarks/agreement_table.py --runs runs/agree/class3/seed0 runs/agree/class3/seed1 \
        runs/agree/class3/seed2 --fq runs/agree/fq_class3/forgetting_quality.json \
        [--fq runs/agree/fq_class3_s1/forgetting_quality.json ...] --out benchmarks/results/agreement_digits_class3.json

Reads the ``results.json`` of ``unlearnkit run --methods all --references 5 --seed s`` on several seeds (the
verdicts, with the utility axis) and the ``forgetting_quality.json`` of ``unlearnkit forgetting-quality
--methods all --runs N --seed s`` (each method's final score with its 95 % bootstrap interval over forget
examples) for the first seed's original, and optionally more for other seeds' originals (e.g. only the
methods `erased` there). One row per method: the verdicts over seeds, the first seed's forgetting quality,
and whether they agree under the issue's rule: **every `erased` has forgetting quality at least half the
retrain control's**, read on the forgetting quality of the same seed's original where one was run (else
the first seed's, said so). A method never `erased` cannot break the rule; the table also marks a method
whose forgetting quality is retrain-like (its interval reaches half the control's) but that is never
`erased` (the audit also reads the representation), which is not a disagreement under the rule.

Prints a markdown table and writes the JSON that docs cite.
"""
from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path


def _verdicts(run_dirs: list[Path]) -> dict[str, list[tuple[int, str]]]:
    """{method: [(seed, verdict line), ...]} over the runs."""
    out: dict[str, list[tuple[int, str]]] = {}
    for d in run_dirs:
        r = json.loads((d / "results.json").read_text())
        seed = int(r["config"]["seed"])
        for name, row in r["models"].items():
            audit = row.get("audit") or {}
            if audit.get("verdict"):
                out.setdefault(name, []).append((seed, audit.get("verdict_line") or audit["verdict"]))
    return out


def _fq(paths: list[Path]) -> dict[int, tuple[dict, float]]:
    """{original's seed: (rows by method, the retrain control's final score)}."""
    out = {}
    for path in paths:
        r = json.loads(path.read_text())
        rows = r["methods"]
        control = next(v for v in rows.values() if v.get("control") and v.get("final_score") is not None)
        out[int(r["config"]["seed"])] = (rows, float(control["final_score"]))
    return out


def _count(verdicts: list[str]) -> str:
    """``not_forgotten 3/3 (utility lost on 2)``: the verdicts without their utility suffix, counted."""
    base = Counter(v.split(" ")[0] for v in verdicts)
    lost = sum("utility" in v for v in verdicts)
    return (", ".join(f"{v} {n}" for v, n in base.most_common()) + f" /{len(verdicts)}"
            + (f" (utility lost on {lost})" if lost else ""))


def _fmt(score, ci) -> str:
    return "n/a" if score is None else f"{score:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


def main() -> None:
    ap = argparse.ArgumentParser(description="verdict vs forgetting quality, every method")
    ap.add_argument("--runs", nargs="+", type=Path, required=True, help="folders of unlearnkit run (one per seed)")
    ap.add_argument("--fq", nargs="+", type=Path, required=True,
                    help="forgetting_quality.json: the first seed's original first, then any other seeds'")
    ap.add_argument("--out", type=Path, required=True, help="the JSON written")
    a = ap.parse_args()
    verdicts = _verdicts(a.runs)
    fqs = _fq(a.fq)
    first = json.loads(a.fq[0].read_text())["config"]["seed"]
    rows, control = fqs[first]
    table, disagree = [], []
    for name, fq in rows.items():
        v = verdicts.get(name, [])
        checks = []
        for seed, line in v:
            if line.split(" ")[0] != "erased":
                continue
            at = seed if seed in fqs and name in fqs[seed][0] else first
            r, c = fqs[at][0][name], fqs[at][1]
            ok = r.get("final_score") is not None and r["final_score"] >= c / 2
            checks.append({"seed": seed, "fq_seed": at, "final_score": r.get("final_score"),
                           "final_score_ci": r.get("final_score_ci"), "control": c, "agrees": ok})
        if name == "original":
            agree = "positive control"
        elif fq.get("control"):
            agree = "control"
        elif not checks:
            agree = "yes (never erased)" + ("; FQ retrain-like" if (fq.get("final_score_ci") or [0, 0])[1]
                                            >= control / 2 else "")
        elif all(c["agrees"] for c in checks):
            agree = "yes"
        else:
            agree = "NO: " + "; ".join(
                f"erased on seed {c['seed']}, FQ of seed {c['fq_seed']}'s original "
                f"{_fmt(c['final_score'], c['final_score_ci'])} < half the control's {c['control']:.3f}"
                for c in checks if not c["agrees"])
            disagree.append(name)
        table.append({"method": name, "verdicts": [{"seed": s_, "verdict": x} for s_, x in v],
                      "final_score": fq.get("final_score"), "final_score_ci": fq.get("final_score_ci"),
                      "forget_score": fq.get("forget_score"), "runs": fq.get("runs"), "erased_checks": checks,
                      "agree": agree})
    print(f"forgetting quality (seed {first}'s original) of the retrain control {control:.3f}; the rule: every "
          f"erased has FQ >= half the control's")
    print("| method | verdicts (seeds) | forgetting quality [95 % CI over examples] | agrees |")
    print("|---|---|---|---|")
    for t in table:
        vs = [x["verdict"] for x in t["verdicts"]]
        print(f"| {t['method']} | {_count(vs) if vs else '—'} | {_fmt(t['final_score'], t['final_score_ci'])} "
              f"| {t['agree']} |")
    print(f"disagreements: {', '.join(disagree) or 'none'}")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"runs": [str(p) for p in a.runs], "fq": [str(p) for p in a.fq],
                                 "control_final_score": control,
                                 "rule": "every erased has forgetting quality >= half the retrain control's",
                                 "rows": table, "disagreements": disagree}, indent=1) + "\n")


if __name__ == "__main__":
    main()
