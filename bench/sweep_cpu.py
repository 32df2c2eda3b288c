"""A whole sweep on a running platform, as a user launches one: ranks × learning rates ×
seeds of a spec (by default the chat-reasoning task), packed into pools, median stopping;
prints what each member did and what the sweep took, measured in one run.

    PADDOCK_HOME=/tmp/paddock-sweep paddock up --no-demo       # and a token from the team page
    PADDOCK_URL=http://127.0.0.1:8000 PADDOCK_TOKEN=pdk_… \\
        .venv/bin/python bench/sweep_cpu.py [--steps 60] [--min-steps 10]

The sweep is `paddock sweeps launch SPEC -p lora.r=… -p train.lr=… -p seed=… --stop median
--min-steps N` (its command is printed first). The bench follows it through the API until
it finishes, printing each member's change of state as it sees it (every 2 s), then a row
per member: its settings, how it ended, the steps it trained, the best reward/mean, its
last eval/accuracy and its run's wall-clock; and the sweep's: wall-clock from launch to
finish, steps trained against the steps of every member run whole, how many of its members
trained at once (as seen at each poll), the pool and its job's dispatches.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from paddock_client.client import PaddockClient  # noqa: E402
from workers.spec import apply_overrides  # noqa: E402


def _seconds(a: str | None, b: str | None) -> float | None:
    if not a or not b:
        return None
    return (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spec", default=str(REPO / "examples" / "chat-reasoning.yaml"))
    parser.add_argument("--steps", type=int, default=60, help="train.steps of every member")
    parser.add_argument("--ranks", default="8,16")
    parser.add_argument("--lrs", default="0.0005,0.002")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--min-steps", type=int, default=10, help="median stopping after")
    parser.add_argument("--min-members", type=int, default=3)
    parser.add_argument("--parallel", type=int, default=None, help="default: one pool's")
    parser.add_argument("--team", default=None)
    parser.add_argument("--poll", type=float, default=2.0)
    parser.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE",
                        help="another override of the spec (repeatable)")  # fmt: skip
    args = parser.parse_args()

    client = PaddockClient.from_environment()
    overrides = [f"train.steps={args.steps}", *args.set]
    spec = apply_overrides(yaml.safe_load(Path(args.spec).read_text()), overrides)
    params = {"lora.r": [int(r) for r in args.ranks.split(",")],
              "train.lr": [float(x) for x in args.lrs.split(",")],
              "seed": [int(s) for s in args.seeds.split(",")]}  # fmt: skip
    stopping = {"rule": "median", "min_steps": args.min_steps, "min_members": args.min_members}
    sets = " ".join(f"--set {o}" for o in overrides)
    print(f"$ paddock sweeps launch {args.spec} {sets} "
          f"-p lora.r={args.ranks} -p train.lr={args.lrs} -p seed={args.seeds} --stop median "
          f"--min-steps {args.min_steps} --min-members {args.min_members}"
          + (f" --parallel {args.parallel}" if args.parallel else ""), flush=True)  # fmt: skip
    started = time.monotonic()
    sweep = client.sweep_create(
        team=args.team, name=f"bench sweep {time.strftime('%H:%M:%S')}", spec=spec,
        method="grid", params=params, parallel=args.parallel, early_stopping=stopping,
    )  # fmt: skip
    print(f"sweep {sweep['id']}: {len(sweep['members'])} members, {sweep['parallel']} at once",
          flush=True)  # fmt: skip
    seen: dict[int, tuple] = {}
    most_training = 0
    while sweep["state"] != "finished":
        time.sleep(args.poll)
        sweep = client.sweep(sweep["id"])
        training = 0
        for m in sweep["members"]:
            run = m["run"] or {}
            now = (m["state"], run.get("state"))
            training += run.get("state") == "running"
            if seen.get(m["index"]) != now:
                seen[m["index"]] = now
                why = f" ({m['reason']})" if m["reason"] else ""
                print(f"{time.monotonic() - started:7.1f} s  member {m['index']} "
                      f"{m['settings']}: {m['state']}, run {run.get('state', '-')} at step "
                      f"{run.get('step', 0)}{why}", flush=True)  # fmt: skip
        most_training = max(most_training, training)
    wall = time.monotonic() - started

    print(f"\nsweep {sweep['id']} finished in {wall:.0f} s: {sweep['end_reason']}")
    header = f"{'member':<7}{'lora.r':>7}{'train.lr':>10}{'seed':>5}  {'ended':<8}{'steps':>6}"
    print(header + f"{'best reward/mean':>18}{'eval/accuracy':>15}{'run s':>8}")
    trained = 0
    for m in sweep["members"]:
        run = client.run(m["run"]["id"]) if m["run"] else {}
        s = m["settings"]
        trained += run.get("step", 0)
        best = "-" if m["best"] is None else f"{m['best']:.3f}"
        if m["is_best"]:
            best = "* " + best
        acc = run.get("latest", {}).get("eval/accuracy")
        secs = _seconds(run.get("started_at"), run.get("finished_at"))
        print(f"{m['index']:<7}{s['lora.r']:>7}{s['train.lr']:>10g}{s['seed']:>5}  "
              f"{m['state']:<8}{run.get('step', 0):>6}{best:>18}"
              f"{'-' if acc is None else f'{acc:.3f}':>15}"
              f"{'-' if secs is None else f'{secs:.0f}':>8}")  # fmt: skip
    whole = args.steps * len(sweep["members"])
    stopped = sum(m["state"] == "stopped" for m in sweep["members"])
    print(f"\n{stopped} of {len(sweep['members'])} members stopped early; {trained} steps "
          f"trained of {whole} had every member run whole ({trained / whole:.0%})")  # fmt: skip
    print(f"at most {most_training} members training at once (seen every {args.poll:g} s)")
    pools = [p for p in client.request("GET", "pools") if p["name"] == f"sweep-{sweep['id']}"]
    for pool in pools:
        print(f"pool {pool['name']}: capacity {pool['capacity']}, its job started "
              f"{pool['dispatch_count']} time(s)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
