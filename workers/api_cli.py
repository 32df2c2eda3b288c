"""The API verbs of the `paddock` CLI, on top of workers.api_client (no Django, no torch):

    paddock login --url http://127.0.0.1:8000 [--token pdk_…]
    paddock runs list [--state running] [--backend vllm] [--tag t] [--creator u] [-n 20]
    paddock launch SPEC.yaml --backends torch,vllm [--seeds 2] [--team demo] [--set k=v]
    paddock runs pause|resume|abort ID
    paddock runs logs ID [--follow]

workers/cli.py calls `register(verbs)` with its subparsers object; each verb's function
takes the argparse namespace and returns an exit code."""

from __future__ import annotations

import argparse
import getpass
import itertools
import sys
from pathlib import Path

from workers.api_client import PaddockAPIError, PaddockClient


def _client() -> PaddockClient:
    return PaddockClient.from_environment()


def _fail(exc: PaddockAPIError) -> int:
    print(f"paddock: {exc}", file=sys.stderr)
    return 1


def cmd_login(args: argparse.Namespace) -> int:
    token = args.token or getpass.getpass("API token (create one on your team's page): ")
    client = PaddockClient(args.url, token.strip())
    try:
        me = client.me()
    except PaddockAPIError as exc:
        return _fail(exc)
    path = client.save_credentials()
    teams = ", ".join(f"{t['slug']} ({t['role']})" for t in me["teams"]) or "no team"
    print(f"logged in to {client.url} as {me['username']}: {teams}; saved to {path}")
    return 0


def cmd_runs_list(args: argparse.Namespace) -> int:
    filters = {"state": args.state, "backend": args.backend, "tag": args.tag,
               "creator": args.creator, "experiment": args.experiment}  # fmt: skip
    try:
        runs = list(itertools.islice(_client().runs(**filters), args.limit))
    except PaddockAPIError as exc:
        return _fail(exc)
    print(f"{'ID':>6}  {'STATE':<11} {'BACKEND':<7} {'SEED':>4} {'STEP':>9}  EXPERIMENT")
    for r in runs:
        progress = f"{r['step']}/{r['total_steps']}"
        print(f"{r['id']:>6}  {r['state']:<11} {r['backend']:<7} {r['seed']:>4} {progress:>9}  "
              f"{r['experiment_name']}")  # fmt: skip
    return 0


def cmd_runs_control(args: argparse.Namespace) -> int:
    client = _client()
    try:
        run = getattr(client, args.runs_verb)(args.id)
    except PaddockAPIError as exc:
        return _fail(exc)
    print(f"run {run['id']}: {run['state']} (desired: {run['desired_state']})")
    return 0


def cmd_runs_logs(args: argparse.Namespace) -> int:
    try:
        for event in _client().follow_events(args.id, follow=args.follow):
            print(f"{event['time']}  {event['level']:<7} {event['kind']:<6} {event['message']}")
    except PaddockAPIError as exc:
        return _fail(exc)
    except KeyboardInterrupt:
        return 130
    return 0


def cmd_launch(args: argparse.Namespace) -> int:
    import yaml

    from workers.spec import apply_overrides  # pydantic and PyYAML only

    spec = yaml.safe_load(Path(args.spec).read_text()) or {}
    spec = apply_overrides(spec, args.set or [])
    backends = [b.strip() for b in args.backends.split(",")] if args.backends else None
    try:
        reply = _client().launch(
            team=args.team, name=args.name or Path(args.spec).stem, spec=spec,
            backends=backends, seeds=args.seeds, tags=args.tag or [],
            validate_only=args.validate_only,
        )  # fmt: skip
    except PaddockAPIError as exc:
        return _fail(exc)
    if args.validate_only:
        for error in reply["errors"]:
            print(f"{args.spec}: {error['field']}: {error['message']}", file=sys.stderr)
        if reply["valid"]:
            print(f"valid: {len(reply['runs'])} run(s) would start")
        return 0 if reply["valid"] else 1
    experiment = reply["experiment"]
    print(f"experiment {experiment['id']} '{experiment['name']}':")
    for run in reply["runs"]:
        print(f"  run {run['id']}  {run['backend']:<7} seed {run['seed']}  {run['state']}")
    return 0


def register(verbs) -> None:
    """Add `login`, `launch` and `runs …` to the CLI's subparsers."""
    p = verbs.add_parser("login", help="save the URL and API token of a Paddock platform")
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--token", help="an API token (asked for when left out)")
    p.set_defaults(func=cmd_login)

    p = verbs.add_parser("launch", help="launch a spec on the platform")
    p.add_argument("spec", help="a run spec, YAML or JSON")
    p.add_argument("--backends", help="comma-separated rollout backends, e.g. torch,vllm")
    p.add_argument("--seeds", type=int, default=1, help="runs per backend (seed, seed+1, …)")
    p.add_argument("--team", help="team slug or id (default: your only team)")
    p.add_argument("--name", help="experiment name (default: the file's name)")
    p.add_argument("--tag", action="append", help="a tag (repeatable)")
    p.add_argument("--set", action="append", metavar="KEY.PATH=VALUE", help="override a field")
    p.add_argument("--validate-only", action="store_true", help="check, create nothing")
    p.set_defaults(func=cmd_launch)

    p = verbs.add_parser("runs", help="list, control and follow runs on the platform")
    runs = p.add_subparsers(dest="runs_verb", required=True)
    r = runs.add_parser("list", help="runs, newest first")
    r.add_argument("--state", help="a state, or several: queued,running")
    r.add_argument("--backend")
    r.add_argument("--tag")
    r.add_argument("--creator", help="username")
    r.add_argument("--experiment", type=int)
    r.add_argument("-n", "--limit", type=int, default=50)
    r.set_defaults(func=cmd_runs_list)
    for verb in ("pause", "resume", "abort"):
        r = runs.add_parser(verb, help=f"{verb} a run")
        r.add_argument("id", type=int)
        r.set_defaults(func=cmd_runs_control)
    r = runs.add_parser("logs", help="a run's log and status events")
    r.add_argument("id", type=int)
    r.add_argument("-f", "--follow", action="store_true", help="until the run finishes")
    r.set_defaults(func=cmd_runs_logs)
