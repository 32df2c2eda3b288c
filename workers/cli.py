"""The `paddock` command. Imports are lazy per verb: `paddock train` never loads Django, and
`paddock up`, `doctor` and the API verbs never load torch."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _add_platform_to_path() -> None:
    # platform/ is a source root (never a package): put it on sys.path for the Django verbs.
    platform_dir = Path(__file__).resolve().parent.parent / "platform"
    if platform_dir.is_dir() and str(platform_dir) not in sys.path:
        sys.path.insert(0, str(platform_dir))


def cmd_up(args: argparse.Namespace) -> int:
    _add_platform_to_path()
    from paddock.embedded.up import UpOptions, up

    return up(UpOptions(host=args.host, port=args.port, demo=not args.no_demo))


def cmd_doctor(args: argparse.Namespace) -> int:
    _add_platform_to_path()
    from paddock.core.doctor import doctor

    return doctor()


def cmd_train(args: argparse.Namespace) -> int:
    from workers.spec import SpecError
    from workers.train import default_out_dir, train

    out = Path(args.out) if args.out else default_out_dir()
    try:
        outcome = train(args.spec, out_dir=out, overrides=args.set or [], progress=True)
    except SpecError as exc:
        for error in exc.errors:
            print(f"{args.spec}: {error['field']}: {error['message']}", file=sys.stderr)
        return 2
    except FileNotFoundError as exc:
        print(f"paddock train: {exc}", file=sys.stderr)
        return 2
    print(f"{outcome.state} at step {outcome.step} (adapter v{outcome.adapter_version}); {out}")
    return 0 if outcome.state == "succeeded" else 1


def cmd_spec(args: argparse.Namespace) -> int:
    import json

    from workers import spec

    if args.spec_verb == "schema":
        print(json.dumps(spec.spec_json_schema(), indent=2))
        return 0
    try:
        spec.load_spec(Path(args.file))
    except spec.SpecError as exc:
        for error in exc.errors:
            print(f"{args.file}: {error['field']}: {error['message']}", file=sys.stderr)
        return 1
    print(f"{args.file}: valid")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="paddock", description=__doc__)
    verbs = parser.add_subparsers(dest="verb", required=True)

    p = verbs.add_parser("up", help="run the platform on embedded defaults")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--no-demo", action="store_true", help="do not create the demo experiment")
    p.set_defaults(func=cmd_up)

    p = verbs.add_parser("doctor", help="which components and rollout backends are available")
    p.set_defaults(func=cmd_doctor)

    p = verbs.add_parser("train", help="run a spec in this process (no platform, no Ray)")
    p.add_argument("spec", help="a run spec, YAML or JSON")
    p.add_argument("--out", help="output directory (default: a new folder under runs/)")
    p.add_argument("--set", action="append", metavar="KEY.PATH=VALUE", help="override a field")
    p.set_defaults(func=cmd_train)

    p = verbs.add_parser("spec", help="the run spec: its JSON Schema, or check a file")
    spec_verbs = p.add_subparsers(dest="spec_verb", required=True)
    spec_verbs.add_parser("schema", help="print the RunSpec JSON Schema")
    v = spec_verbs.add_parser("validate", help="check a spec file")
    v.add_argument("file")
    p.set_defaults(func=cmd_spec)

    from workers import api_cli  # requests only: neither Django nor torch

    api_cli.register(verbs)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
