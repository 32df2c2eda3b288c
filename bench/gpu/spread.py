"""The figures of two or more GPU calls side by side: median, spread, same-run ratios.

    python3 bench/gpu/spread.py CALL1 CALL2 [CALL3 ...]    # each a call's $OUT folder
    python3 bench/gpu/spread.py --base old ab-1 ab-2       # ab.sh's calls: new/old per call

A call is one device call, ideally on a freshly started machine: its folder holds the
PART.json files that the scripts of bench/gpu write under --out, at its top or in
sub-folders (ab.sh's `rollout-old1/`, `rollout-new1/`, ...). For every figure found in them
(a row's tokens/s, seconds a step, peak GB, an adapter sync's time; a ratio a script
computed within its run: `speedup`, `paired_ratio`, `vs_*`) it prints each call's value,
the median over the calls, the spread (min-max, and max - min as a % of the median), and
flags a figure whose calls differ by more than --flag % (10): investigate it, do not
average it.

A sub-folder named `NAME-SIDE[ROUND]`, SIDE one of --sides (old,new), is one side of an A/B
pair run in the same call: the figures of every side beside --base's (old) give the
same-run ratio side/base as a speed (tokens/s new/old; seconds old/new; so > 1 is faster),
for each round of the call, the call's ratio the median of its rounds'; then the median
and spread of those over the calls. A figure found on one side only is listed as such.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
from collections import defaultdict
from pathlib import Path

from common import table

# what a row (a dict with a name, or a value of a "runs" mapping) may hold: key, and the
# figure's unit; of the times, the first present
SPEED = ("tok_s", "tokens/s")
TIMES = (("step_s", "s a step"), ("time/step_s", "s a step"), ("s", "s"))
PEAK = ("peak_gb", "peak GB")
RATIO = "x"
# ratios of a whole part, at its top (pool_runs: pool/sequence; multi: N GPUs over 1)
PART_RATIOS = ("speedup", "scaling", "scaling_shard_lora", "async_over_sync")


def is_number(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def row_figures(name: str, r: dict) -> dict[tuple[str, str], float | None]:
    """(figure, unit) -> value of one row; None where the row failed (OOM, an error)."""
    name = name.strip()
    if r.get("oom") or r.get("failed") or "error" in r:
        return {(name, "failed"): None}
    out: dict[tuple[str, str], float | None] = {}
    key, unit = SPEED
    if is_number(r.get(key)):
        out[(name, unit)] = r[key]
    for key, unit in TIMES:  # a step's time; a generate's or a round's where no tokens/s
        if is_number(r.get(key)) and (unit != "s" or (name, SPEED[1]) not in out):
            out[(name, unit)] = r[key]
            break
    key, unit = PEAK
    if is_number(r.get(key)) and r[key] > 0:  # 0 on a CPU
        out[(name, unit)] = r[key]
    if is_number(r.get("publish_s")) and is_number(r.get("load_s")):
        label = "adapter sync" + (f", {name}" if name != "sync" else "")  # rollout.py's old
        out[(label, "s")] = r["publish_s"] + r["load_s"]
    for k, v in r.items():  # the run's own ratios: against the row its script names
        if (k in ("speedup", "paired_ratio") or k.startswith("vs_")) and is_number(v):
            out[(f"{name} [{k.replace('_', ' ')}]", RATIO)] = v
    return out


def figures(result: dict) -> dict[tuple[str, str], float | None]:
    """Every figure of one PART.json, as the scripts write them: lists of named rows
    ("rows", pool's "steps"), mappings of runs by name ("runs"), named rows at the top
    (pool_runs' "pool", "sequence"), adapter syncs by engine (rollout's "sync", sync.py's
    top), and the part's own ratios at its top."""
    out: dict[tuple[str, str], float | None] = {}
    for key in ("rows", "steps"):
        rows = result.get(key)
        for r in rows if isinstance(rows, list) else []:  # pool_runs' "steps" is a count
            if isinstance(r, dict) and isinstance(r.get("name"), str):
                out.update(row_figures(r["name"], r))
    runs = result.get("runs")
    for name, r in runs.items() if isinstance(runs, dict) else []:
        if isinstance(r, dict):
            out.update(row_figures(name, r))
    syncs = result.get("sync")
    for key, r in [*result.items(), *(syncs.items() if isinstance(syncs, dict) else [])]:
        if not isinstance(r, dict):
            continue
        if isinstance(r.get("name"), str):
            out.update(row_figures(r["name"], r))
        elif "publish_s" in r:
            out.update(row_figures(key, r))
    # async_overlap repeats its first variant's speedup at the top: its runs have it already
    for key in () if "runs" in result else PART_RATIOS:
        if is_number(result.get(key)):
            out[(key, RATIO)] = result[key]
    return out


def part_files(call: Path) -> list[Path]:
    """A call's PART.json files: profiler traces (Chrome JSON) left out."""
    return sorted(
        p
        for p in call.rglob("*.json")
        if "trace" not in p.stem and not any("trace" in d for d in p.relative_to(call).parts)
    )


def read_call(call: Path, sides: list[str]) -> dict:
    """{(run, part, figure, unit): {side: {round: value}}} of one call folder; run is the
    sub-folder with its side and round taken off ("" at the top), side "" where none."""
    alts = "|".join(map(re.escape, sides))
    side_re = re.compile(rf"^(?:(?P<run>.+)-)?(?P<side>{alts})(?P<n>\d*)$")
    found: dict = defaultdict(lambda: defaultdict(dict))
    for path in part_files(call):
        try:
            result = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        if not isinstance(result, dict):
            continue
        folder = path.parent.relative_to(call)
        run, side, n = folder.as_posix().removeprefix("."), "", 0
        m = side_re.match(folder.name)
        if m:
            run = (folder.parent / (m["run"] or "")).as_posix().removeprefix(".").strip("/")
            side, n = m["side"], int(m["n"] or 0)
        for (fig, unit), v in figures(result).items():
            found[(run, path.stem, fig, unit)][side][n] = v
    return found


def speed_ratio(unit: str, new: float, base: float) -> float:
    """new against base as a speed: > 1 is faster (a time's ratio is inverted)."""
    return base / new if unit in ("s", "s a step") else new / base


def fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "failed"
    if unit == "tokens/s":
        return f"{v / 1e3:.2f}k" if v < 1e4 else f"{v / 1e3:.1f}k"
    if unit == RATIO:
        return f"{v:.3f}x"
    if unit in ("s", "s a step"):
        return f"{v * 1e3:.1f} ms" if v < 1 else f"{v:.2f} s"
    return f"{v:.1f}"


def spread(values: list[float]) -> tuple[float, float, float, float]:
    """(median, min, max, (max - min) as a % of the median)."""
    med = statistics.median(values)
    lo, hi = min(values), max(values)
    return med, lo, hi, (hi - lo) / abs(med) * 100 if med else math.inf


def line(label: str, per_call: list, unit: str, flag: float) -> tuple:
    """One table row: each call's value ("failed" where its row failed, empty where the call
    has no such figure), then the median and the spread of those that have one."""
    cells = [fmt(v, unit) if present else "" for v, present in per_call]
    ok = [v for v, _ in per_call if v is not None]
    if len(ok) < 2:
        return (label, *cells, fmt(ok[0], unit) if ok else "", "", "one call" if ok else "")
    med, lo, hi, pct = spread(ok)
    mark = f"{pct:.1f} %" + ("  > FLAG" if pct > flag else "")
    return (label, *cells, fmt(med, unit), f"{fmt(lo, unit)}-{fmt(hi, unit)}", mark)


def header(n_calls: int, flag: float) -> tuple:
    calls = (f"call {i + 1}" for i in range(n_calls))
    return ("figure", *calls, "median", "min-max", f"spread (flag > {flag:g} %)")


def report(calls: list[Path], sides: list[str], base: str, flag: float) -> int:
    """Print the tables; returns how many figures were flagged."""
    data = [read_call(c, sides) for c in calls]
    key_set = {k for d in data for k in d}
    keys = sorted(key_set)
    if not keys:
        raise SystemExit(f"no figures found under {', '.join(map(str, calls))}")
    width = min(80, max(len(k[2]) + len(k[3]) + 14 for k in keys))
    flagged, pairs, last = 0, [], None
    print("calls: " + ", ".join(f"{i + 1} = {c}" for i, c in enumerate(calls)))
    for key in keys:
        run, part, fig, unit = key
        if (run, part) != last:
            last = (run, part)
            print(f"\n{part}.json" + (f" in {run}/" if run else ""))
            table([header(len(calls), flag)], width)
        found = [d.get(key, {}) for d in data]
        for side in sorted(set().union(*found), key=lambda s: sides.index(s) + 1 if s else 0):
            per_call = []  # each call's value (the median of its rounds), and whether it has one
            for got in found:
                rounds = [v for v in got.get(side, {}).values() if v is not None]
                per_call.append((statistics.median(rounds) if rounds else None, side in got))
            label = f"{fig} [{unit}]" + (f" ({side})" if side else "")
            row = line(label, per_call, unit, flag)
            flagged += row[-1].endswith("FLAG")
            table([row], width)
        # a pair's ratio of each figure: its tokens/s, else its time (the two say the same)
        times = () if (run, part, fig, SPEED[1]) in key_set else ("s", TIMES[0][1])
        if any(base in got for got in found) and unit in (SPEED[1], *times):
            pairs.append(key)
    if pairs:
        flagged += report_pairs(data, pairs, sides, base, flag, len(calls))
    if flagged:
        print(f"\n{flagged} figure(s) whose calls differ by more than {flag:g} %: "
              "investigate them, do not average them")  # fmt: skip
    else:
        print(f"\nno figure's calls differ by more than {flag:g} %")
    return flagged


def report_pairs(data, pairs, sides, base, flag, n_calls) -> int:
    """The same-run ratios of every side against the base side, per call and over calls."""
    flagged = 0
    others = [s for s in sides if s != base]
    width = min(80, max(len(p[2]) + len(p[3]) + 24 for p in pairs))
    print(f"\nsame-run ratios, as a speed (> 1: faster than {base}): each call's is the median "
          "of its rounds' (a round: the two sides run one after the other)")  # fmt: skip
    last = None
    for run, part, fig, unit in pairs:
        for side in others:
            per_call, any_side = [], False
            for d in data:
                got = d.get((run, part, fig, unit), {})
                b, s = got.get(base, {}), got.get(side, {})
                any_side |= bool(s)
                ratios = [
                    speed_ratio(unit, s[n], b[n])
                    for n in sorted(b.keys() & s.keys())
                    if s[n] is not None and b[n] is not None
                ]
                per_call.append((statistics.median(ratios) if ratios else None, bool(s)))
            if not any_side:
                continue
            if (run, part) != last:
                last = (run, part)
                print(f"\n{part}.json" + (f" in {run}-{{{','.join(sides)}}}/" if run else ""))
                table([header(n_calls, flag)], width)
            row = line(f"{fig} [{unit}] {side}/{base}", per_call, RATIO, flag)
            flagged += row[-1].endswith("FLAG")
            table([row], width)
    return flagged


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("calls", type=Path, nargs="+", help="each call's $OUT folder")
    ap.add_argument("--sides", default="old,new", help="A/B sub-folder sides: NAME-SIDE[ROUND]")
    ap.add_argument("--base", default="old", help="the side the others' ratios are against")
    ap.add_argument("--flag", type=float, default=10.0, help="flag a spread above this %")
    args = ap.parse_args()
    sides = args.sides.split(",")
    if args.base not in sides:
        raise SystemExit(f"--base {args.base} is not one of --sides {args.sides}")
    missing = [str(c) for c in args.calls if not c.is_dir()]
    if missing:
        raise SystemExit(f"not a folder: {', '.join(missing)}")
    report(args.calls, sides, args.base, args.flag)


if __name__ == "__main__":
    main()
