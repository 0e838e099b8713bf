"""An audited party that hands in the references: from N genuine retrains of its own, it picks the K that certify
its model (issue 42: "cherry-picked references make certification harder"; this measures whether they do).

    # digits, the audits of captures A, B and D at K = 8: every choice of 5 of those 8 references
    .venv/bin/python benchmarks/reference_choice.py benchmarks/results/joint_rule_capture_{a,b,d}.json.gz \\
        --pick 5 --of 8 --out benchmarks/results/reference_choice_digits.json
    # K = 16 audits (capture E): 5 of 16, a random sample of the 4368 choices per audit
    .venv/bin/python benchmarks/reference_choice.py benchmarks/results/joint_rule_capture_e.json.gz --pick 5 --of 16 \\
        --max-choices 300
    # the same party, and the auditor adds 3 references of its own drawing (K = 16 audits: the party picks 5 of the
    # first 8, the audit draws 3 of the other 8)
    .venv/bin/python benchmarks/reference_choice.py benchmarks/results/joint_rule_capture_e.json.gz --pick 5 --of 8 \
        --add-drawn 3
    # mnist5k (keepers by the suite's own ground truth)
    .venv/bin/python benchmarks/reference_choice.py benchmarks/results/joint_rule_mnist5k_attacks_s{0,1,2}.json.gz \\
        --pick 5 --of 8 --suite-ground-truth

Each audit that ``told_apart_level.py --measures`` kept with at least ``--of`` references (exactly ``--k``, if given)
is judged again by this release's rule (``combined_rule.erased_under``: per statistic at 0.05, the joint test, the
Student-t testability requirement) against every choice of ``--pick`` of its first ``--of`` references (or
``--max-choices`` of them drawn at random, seed 0), with ``--add-drawn`` more drawn at random from the rest where
the auditor adds references of its own drawing. The audited model's values and the original's are as measured; a
reference's values are its own. One statistic is an approximation: the output agreement was measured against the
mean of all the audit's references (the audited model's) and of all the others (a reference's), not of the chosen
ones.

Printed per group (the pool's keepers, the other attacked models, genuine held-out retrains): the audits for which
**some** choice certifies the model (what a party that picks its references gets) with exact 95 % bounds, and the
share of choices that certify (what an auditor who draws ``--pick`` of the ``--of`` at random gets). The fix is not a
test on the references' values (every chosen one is a genuine retrain): it is who draws them
(``unlearnkit audit --train-references K``; :func:`unlearnkit.audit.integrity.scope`, which audit.json records and
which an ``erased`` verdict on given references states).
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import combined_rule  # noqa: E402  (a sibling benchmark: the rule judged offline)


def with_references(row: dict, chosen: tuple[int, ...]) -> dict:
    """``row`` with only the references ``chosen`` (indices) in every measure."""
    measures = []
    for d in row["measures"]:
        d = dict(d)
        d["references"] = [d["references"][i] for i in chosen]
        if d.get("flag_values") is not None:
            fu, fo, fr = d["flag_values"]
            d["flag_values"] = [fu, fo, [fr[i] for i in chosen]]
        measures.append(d)
    return {**row, "measures": measures}


def choices(of: int, pick: int, max_choices: int | None, rng: np.random.Generator) -> list[tuple[int, ...]]:
    """Every choice of ``pick`` of ``of`` references, or ``max_choices`` distinct ones at random."""
    n = math.comb(of, pick)
    if max_choices is None or n <= max_choices:
        return list(itertools.combinations(range(of), pick))
    got: set = set()
    while len(got) < max_choices:
        got.add(tuple(sorted(rng.choice(of, pick, replace=False).tolist())))
    return sorted(got)


def kind_of(row: dict, keeper: dict | None) -> str:
    if row["model"].startswith("retrain"):
        return "genuine"
    if keeper is None:
        return "keeper" if row["keeps_class"] else "other"
    return "keeper" if keeper[(row["seed"], row["model"])] else "other"


def run(paths: list[str], pick: int, of: int, max_choices: int | None, keeper: dict | None,
        add_drawn: int = 0, k: int | None = None) -> dict:
    """Per group: audits, audits some choice certifies, choices judged, choices that certify; and the audits a
    choice certified (which, how many of the choices). ``add_drawn``: the auditor adds that many references drawn
    at random (once per audit) from the audit's references the party had no say in (those after the first
    ``of``). The audits judged are those with at least ``of + add_drawn`` references; the party picks from the
    first ``of``; ``k``: only the audits of exactly ``k`` references."""
    rng = np.random.default_rng(0)
    counts: dict = {g: {"audits": 0, "some_choice": 0, "choices": 0, "certifying_choices": 0}
                    for g in ("keeper", "other", "genuine")}
    won = []
    for path in paths:
        for row in combined_rule.load(path)["rows"]:
            if row["k"] < of + add_drawn or (k is not None and row["k"] != k):
                continue
            group = kind_of(row, keeper)
            c = counts[group]
            c["audits"] += 1
            if row["verdict"] in ("collapsed", "not_forgotten"):
                continue  # read from the outputs: no choice of references moves them
            picks = choices(of, pick, max_choices, rng)
            if add_drawn:
                drawn = tuple(sorted(of + rng.choice(row["k"] - of, add_drawn, replace=False)))
                picks = [p + drawn for p in picks]
            hits = sum(combined_rule.erased_under(with_references(row, p), 0.05, True, None) for p in picks)
            c["choices"] += len(picks)
            c["certifying_choices"] += hits
            c["some_choice"] += hits > 0
            if hits and group != "genuine":
                won.append({"run": Path(path).name, "seed": row["seed"], "model": row["model"], "group": group,
                            "certifying_choices": hits, "choices": len(picks)})
                print(f"  {Path(path).name} seed {row['seed']} {row['model']} ({group}): {hits} of {len(picks)} "
                      f"choices certify it", flush=True)
    return {"counts": counts, "won": won}


def table(counts: dict) -> list[str]:
    lines = ["| group | audits some choice certifies (a party that picks) | choices that certify (an auditor who draws "
             "at random) |", "|---|---|---|"]
    for group, c in counts.items():
        if not c["audits"]:
            continue
        share = f"{c['certifying_choices']}/{c['choices']} ({100 * c['certifying_choices'] / c['choices']:.2f} %)" \
            if c["choices"] else "-"
        lines.append(f"| {group} | {combined_rule.exact(c['some_choice'], c['audits'])} | {share} |")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="told_apart_level.py --measures outputs (plain or .gz)")
    ap.add_argument("--pick", type=int, default=5, help="references the party hands in (K)")
    ap.add_argument("--of", type=int, default=8, help="genuine retrains it picks them from (audits of this K)")
    ap.add_argument("--max-choices", type=int, default=None, help="judge this many random choices per audit")
    ap.add_argument("--k", type=int, default=None, help="only the audits of exactly this many references")
    ap.add_argument("--add-drawn", type=int, default=0,
                    help="the auditor adds this many references drawn from those the party did not pick from")
    ap.add_argument("--pool-json", nargs="+", default=combined_rule.POOLS)
    ap.add_argument("--suite-ground-truth", action="store_true",
                    help="keepers by each row's own ground truth (keeps_class), not a pool (mnist5k)")
    ap.add_argument("--out", default=None, help="write the result as JSON (atomically)")
    a = ap.parse_args(argv)
    if not 2 <= a.pick < a.of:
        ap.error(f"--pick must be at least 2 and below --of ({a.of}), got {a.pick}")
    if a.max_choices is not None and a.max_choices < 1:
        ap.error(f"--max-choices must be at least 1, got {a.max_choices}")
    if a.add_drawn < 0:
        ap.error(f"--add-drawn must be at least 0, got {a.add_drawn}")
    if a.k is not None and a.k < a.of + a.add_drawn:
        ap.error(f"--k must be at least --of + --add-drawn ({a.of + a.add_drawn}), got {a.k}")
    for p in a.runs:
        if not Path(p).is_file():
            ap.error(f"no such run: {p}")
    keeper = None
    if not a.suite_ground_truth:
        import gt_pool

        keeper = {(r["seed"], r["family"]): gt_pool.pool_keeper(r)
                  for f in a.pool_json for r in combined_rule.load(f)["rows"]}
    got = run(a.runs, a.pick, a.of, a.max_choices, keeper, a.add_drawn, a.k)
    lines = table(got["counts"])
    print("\n".join(lines))
    if a.out:
        from unlearnkit.checkpoints import atomic_write_text

        result = {"runs": [Path(p).name for p in a.runs], "pick": a.pick, "of": a.of, "max_choices": a.max_choices,
                  "add_drawn": a.add_drawn, "k": a.k,
                  "ground_truth": "suite" if a.suite_ground_truth else "pool", **got, "table": lines}
        atomic_write_text(a.out, json.dumps(result, indent=1) + "\n")
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
