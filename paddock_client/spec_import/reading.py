"""Reading a peer's config as its users write it: a YAML file that inherits its base through
`defaults:`, a command line of Hydra overrides (`key=value`, `+key=`, `++key=`, `~key`),
or both, into one mapping, and which file set each key.

The bases are resolved as the frameworks resolve them: NeMo-RL's `defaults:` names files
relative to the including file (`../../grpo_math_1B.yaml`), merged depth-first with later
files winning and `_override_: true` replacing a section whole; verl's Hydra `defaults:
[ppo_trainer, _self_]` and its command lines start from `ppo_trainer.yaml`; NeMo-RL's
`run_grpo.py` without `--config` from `grpo_math_1B.yaml`. Those bases are vendored under
`bases/` (Apache-2.0, sources named in bases/NOTICE), so a recipe pasted in the browser
imports whole. A file on disk is read only when the caller gives the directory to read
from (the CLI: the user's own files); the platform passes none, so nothing a user sends
makes it open a path: a reference is only ever matched against the vendored list.

Shell variables assigned in the pasted text (`MODEL=/m`, `export N=8`) are substituted;
any other expansion (`$HOME`, `$(( … ))`) cannot be known here, and the key holding it is
left out and listed (an `Unresolved` value)."""

from __future__ import annotations

import ast
import operator
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from .engine import MISSING, SpecImportError, Unresolved, flatten

BASES = Path(__file__).parent / "bases"
# each framework's vendored tree, laid out as in its repository
VENDORED = {"nemo-rl": BASES / "nemo-rl", "verl": BASES / "verl"}
VERL_BASE = "verl/trainer/config/_generated_ppo_trainer.yaml"  # ppo_trainer.yaml, composed
VERL_BASE_NAMES = ("ppo_trainer",)  # the Hydra config name it stands for
NEMO_DEFAULT = "examples/configs/grpo_math_1B.yaml"  # run_grpo.py's config without --config
COMMAND_LINE = "command line"
MAX_DEPTH = 8  # a chain of `defaults:` longer than this is a cycle or a mistake
# a config's size once its YAML aliases are followed: real ones hold a few thousand values;
# aliases nested in aliases (or one holding itself) would otherwise expand without end
MAX_NODES, MAX_NESTING = 100_000, 64

_OVERRIDE = re.compile(r"^(~|\+\+|\+)?([A-Za-z_][\w\-@/]*(?:\.[\w\-@/]+)*)(?:=(.*))?$", re.S)
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
_SHELL_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
_ARITH = re.compile(r"\$\(\(((?:[^()]|\([^()]*\))*)\)\)")  # $(( … )), parentheses one deep
_ARITH_ASSIGN = re.compile(r"^\s*(?:export\s+)?([A-Za-z_]\w*)=(\$\(\(.*\)\))\s*(?:#.*)?$")
_STOP = {"|", "||", "&&", ";", "&", ">", ">>", "2>&1", "<"}
_INT_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
            ast.Mod: operator.mod}  # fmt: skip


@dataclass(frozen=True)
class Layer:
    name: str  # shown beside each key it set: a file's name, or "command line"
    data: dict[str, Any]


@dataclass(frozen=True)
class Override:
    key: str
    value: Any
    delete: bool = False


@dataclass
class Command:
    program: list[str] = field(default_factory=list)
    config: str | None = None  # NeMo-RL's --config, verl's --config-name
    config_dir: str | None = None  # verl's --config-path
    overrides: list[Override] = field(default_factory=list)


@dataclass
class Reading:
    source: str
    layers: list[Layer]


# ----------------------------------------------------------------------------------- YAML


def looks_like_command(text: str) -> bool:
    """A command line or a shell script rather than a YAML mapping: a line that runs a
    program, or `key=value` words (YAML has no such line at the top of a mapping)."""
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        first = s.split()[0]
        if first in ("python", "python3", "uv", "torchrun", "set", "export", "ray"):
            return True
        if re.match(r"^[+~]*[A-Za-z_][\w\-]*(\.[\w\-]+)+=", first):
            return True
    return False


def parse_yaml(text: str, where: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecImportError(where, f"is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SpecImportError(where, f"must be a mapping of sections, got {type(data).__name__}")
    bounded(data, where)
    return data


def bounded(data: Any, where: str) -> None:
    """Refuse a value whose aliases expand past MAX_NODES values or MAX_NESTING levels (a
    YAML "billion laughs", or a mapping that holds itself) before anything walks it."""
    stack: list[tuple[Any, int]] = [(data, 0)]
    seen = 0
    while stack:
        node, depth = stack.pop()
        seen += 1
        if seen > MAX_NODES or depth > MAX_NESTING:
            raise SpecImportError(
                where, f"is larger than a config can be ({MAX_NODES} values, {MAX_NESTING} levels)"
            )
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)


# ----------------------------------------------------------------------------- command line


def _arithmetic(expr: str, env: dict[str, str]) -> int | None:
    """Shell integer arithmetic over numbers and known variables (`$(( a * b / 2 ))`, the
    example scripts' batch sizes), read as a tree of + − × ÷ % and never evaluated as code;
    None for anything else."""
    try:
        names = re.sub(r"\$\{?([A-Za-z_]\w*)\}?", r"\1", expr)  # $a and ${a} are a there
        tree = ast.parse(names.strip(), mode="eval").body
    except SyntaxError:
        return None

    def value(node: ast.AST) -> int | None:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.Name):
            text = env.get(node.id, "")
            return int(text) if re.fullmatch(r"-?\d+", text) else None
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            v = value(node.operand)
            return None if v is None else (-v if isinstance(node.op, ast.USub) else v)
        if isinstance(node, ast.BinOp):
            a, b = value(node.left), value(node.right)
            if a is None or b is None:
                return None
            if isinstance(node.op, ast.Div | ast.FloorDiv):
                return None if b == 0 else int(a / b)  # the shell truncates toward zero
            op = _INT_OPS.get(type(node.op))
            return None if op is None or (op is operator.mod and b == 0) else op(a, b)
        return None

    return value(tree)


def _expand(text: str, env: dict[str, str]) -> str | Unresolved:
    def arith(m: re.Match) -> str:
        n = _arithmetic(m.group(1), env)
        return m.group(0) if n is None else str(n)

    text = _ARITH.sub(arith, text)
    missing: list[str] = []

    def sub(m: re.Match) -> str:
        name = m.group(1) or m.group(2)
        if name in env:
            return env[name]
        missing.append(name)
        return m.group(0)

    out = _SHELL_VAR.sub(sub, text)
    if missing or "$(" in out or "`" in out:
        why = ", ".join(f"${n}" for n in missing) or "a command substitution"
        return Unresolved(out, f"holds {why}, a shell expansion that cannot be resolved here")
    return out


def _value(raw: str, env: dict[str, str]) -> Any:
    """A Hydra override's value: shell variables substituted, then read as YAML (`[a, b]`,
    `null`, `true`, numbers), as Hydra's grammar reads them."""
    text = _expand(raw, env)
    if isinstance(text, Unresolved):
        return text
    try:
        value = yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError:
        return text
    bounded(value, "command")
    return value


def parse_command(text: str) -> Command:
    """The trainer's command of a pasted command line or shell script, with the shell
    variables the text assigns before it."""
    joined = re.sub(r"\\\r?\n", " ", text)  # line continuations
    env: dict[str, str] = {}
    for line in joined.splitlines():
        # NAME=$(( … )): shlex would split the arithmetic at its spaces
        if m := _ARITH_ASSIGN.match(line):
            value = _expand(m.group(2), env)
            if not isinstance(value, Unresolved):
                env[m.group(1)] = value
            continue
        try:
            words = shlex.split(line, comments=True)
        except ValueError as exc:
            raise SpecImportError("command", f"cannot be read as a command line: {exc}") from None
        if words and words[0] == "export":
            words = words[1:]
        if len(words) == 1 and (m := _ASSIGN.match(words[0])) and "." not in m.group(1):
            value = _expand(m.group(2), env)
            if not isinstance(value, Unresolved):
                env[m.group(1)] = value
            continue
        command = _command(words, env)
        if command is not None:
            return command
    raise SpecImportError("command", "holds no trainer command (`key=value` overrides)")


def _command(words: list[str], env: dict[str, str]) -> Command | None:
    cmd = Command()
    it = iter(words)
    for word in it:
        if word in _STOP or word.startswith((">", "2>")):
            break
        if word in ("$@", "$*"):
            continue  # the script's own arguments: nothing here
        if word in ("--config", "--config-name", "--config-path", "-cn", "-cp"):
            word = f"{word}={next(it, '')}"
        flag, eq, arg = word.partition("=")
        if eq and flag in ("--config", "--config-name", "-cn"):
            cmd.config = str(_expand(arg, env))
            continue
        if eq and flag in ("--config-path", "-cp"):
            cmd.config_dir = str(_expand(arg, env))
            continue
        m = _OVERRIDE.match(word)
        # VAR=value before the program is an environment variable; a dotted key never is
        env_var = m is not None and not cmd.program and "." not in m.group(2)
        if m is None or (m.group(3) is None and m.group(1) != "~") or env_var:
            cmd.program.append(word)
            continue
        if m.group(1) == "~":
            cmd.overrides.append(Override(m.group(2), None, delete=True))
        else:
            cmd.overrides.append(Override(m.group(2), _value(m.group(3), env)))
    return cmd if cmd.overrides or cmd.config else None


def command_source(cmd: Command) -> str | None:
    words = " ".join(cmd.program)
    if "verl." in words or "main_ppo" in words:
        return "verl"
    if "run_grpo" in words or cmd.config:
        return "nemo-rl"
    return None


# ---------------------------------------------------------------------------- the defaults


def keys_source(data: dict[str, Any]) -> str | None:
    if "actor_rollout_ref" in data or "trainer" in data:
        return "verl"
    if {"policy", "grpo", "loss_fn"} & data.keys():
        return "nemo-rl"
    return None


def _vendored(source: str, ref: str) -> Path | None:
    """The vendored file a reference names: matched on its path's tail (`../../grpo_math_1B
    .yaml` is examples/configs/grpo_math_1B.yaml), never opened as a path itself."""
    root = VENDORED[source]
    if source == "verl" and ref.removesuffix(".yaml") in VERL_BASE_NAMES:
        return root / VERL_BASE
    parts = [p for p in PurePosixPath(ref).parts if p not in (".", "..", "/")]
    if not parts:
        return None
    for path in sorted(root.rglob("*.yaml")):
        rel = path.relative_to(root).parts
        if len(parts) <= len(rel) and list(rel[-len(parts) :]) == parts:
            return path
    return None


def vendored_names(source: str) -> list[str]:
    root = VENDORED[source]
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.yaml"))


def _find(source: str, ref: str, here: Path | None, where: str) -> tuple[str, Path]:
    """(name, path) of a file a config refers to: on disk beside `here` when the caller
    reads files (the CLI), else the vendored base it names."""
    if here is not None:
        path = Path(ref) if Path(ref).is_absolute() else here / ref
        if path.is_file():
            return ref, path
    found = _vendored(source, ref)
    if found is None:
        have = ", ".join(vendored_names(source))
        raise SpecImportError(
            where,
            f"names {ref}, which {'is not on this machine and ' if here else ''}is not one of "
            f"the {source} bases Paddock carries ({have}): paste that file's content as the "
            "config instead",
        )
    return f"{source}: {found.relative_to(VENDORED[source])}", found


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """OmegaConf's merge as NeMo-RL applies it: mappings merge key by key, anything else
    replaces; a section marked `_override_: true` replaces the base's whole; `???` (no
    value yet) leaves the base's value."""
    out = dict(base)
    for key, value in over.items():
        if value == MISSING and key in out:
            continue
        if isinstance(value, dict):
            value = dict(value)
            replace = value.pop("_override_", False) is True
            if not replace and isinstance(out.get(key), dict):
                out[key] = merge(out[key], value)
                continue
            value = merge({}, value)  # nested markers go too
        out[key] = value
    return out


def chain(
    source: str, data: dict[str, Any], name: str, here: Path | None, depth: int = 0
) -> list[Layer]:
    """`data` with the files its `defaults:` names before it, base first."""
    if depth > MAX_DEPTH:
        raise SpecImportError(f"{name}: defaults", f"nests more than {MAX_DEPTH} files deep")
    data = dict(data)
    data.pop("hydra", None)  # Hydra's own settings (searchpath): not the trainer's
    defaults = data.pop("defaults", None)
    if defaults is None:
        return [Layer(name, data)]
    entries = [defaults] if isinstance(defaults, str) else defaults
    if not isinstance(entries, list):
        raise SpecImportError(f"{name}: defaults", "must be a file name or a list of them")
    before: list[Layer] = []
    after: list[Layer] = []
    self_seen = False
    for entry in entries:
        if entry == "_self_":
            self_seen = True
            continue
        if not isinstance(entry, str):
            raise SpecImportError(
                f"{name}: defaults",
                f"holds {entry!r}: Hydra config-group entries are not read here; give "
                "the composed config (verl's _generated_ppo_trainer.yaml layout) instead",
            )
        ref_name, path = _find(source, entry, here, f"{name}: defaults")
        parent = parse_yaml(path.read_text(encoding="utf-8"), ref_name)
        layers = chain(source, parent, ref_name, path.parent, depth + 1)
        (after if self_seen else before).extend(layers)
    # Hydra puts _self_ where it is listed (last when NeMo-RL-style: the file wins)
    return [*before, Layer(name, data), *after] if self_seen else [*before, Layer(name, data)]


def read(
    *,
    config: str | None,
    command: str | None,
    source: str | None,
    config_name: str = "config",
    config_dir: Path | None = None,
    cwd: Path | None = None,
) -> Reading:
    """The layers of a pasted config and/or command line, base first, the command's
    overrides last. The CLI alone reads the user's files: `config_dir`, the config file's
    directory (its `defaults:` are relative to it), and `cwd`, where a command's `--config`
    and `--config-path` are."""
    if config is None and command is None:
        raise SpecImportError("config", "give a config (YAML) or a command line")
    data = parse_yaml(config, config_name) if config is not None else None
    cmd = parse_command(command) if command is not None else None
    source = source or (command_source(cmd) if cmd else None)
    if source is None and data is not None:
        source = keys_source(data)
    if source is None and cmd is not None:
        heads = {o.key.split(".")[0]: None for o in cmd.overrides}
        source = keys_source(heads)
    if source not in VENDORED:
        raise SpecImportError(
            "source", "cannot tell verl from NeMo-RL here: say which (--from verl|nemo-rl)"
        )
    if data is not None:
        layers = chain(source, data, config_name, config_dir)
    elif source == "verl":
        ref = cmd.config if cmd and cmd.config else VERL_BASE_NAMES[0]
        here = None
        if cwd is not None and cmd and cmd.config_dir:
            here = cwd / cmd.config_dir
        ref_name, path = _find(source, ref if ref.endswith(".yaml") or ref in VERL_BASE_NAMES
                               else f"{ref}.yaml", here, "--config-name")  # fmt: skip
        layers = chain(source, parse_yaml(path.read_text(encoding="utf-8"), ref_name), ref_name,
                       path.parent)  # fmt: skip
    else:
        ref = cmd.config if cmd and cmd.config else NEMO_DEFAULT
        ref_name, path = _find(source, ref, cwd, "--config")
        layers = chain(source, parse_yaml(path.read_text(encoding="utf-8"), ref_name), ref_name,
                       path.parent)  # fmt: skip
    if cmd is not None and cmd.overrides:
        layers.append(Layer(COMMAND_LINE, _overrides_as_layer(cmd.overrides)))
    return Reading(source, layers)


def _overrides_as_layer(overrides: list[Override]) -> dict[str, Any]:
    """Hydra overrides as a nested mapping merged last; a deletion (`~key`) is a value of
    None there, which no rule maps and no list shows (as a key the config does not set)."""
    out: dict[str, Any] = {}
    for o in overrides:
        node = out
        *parents, leaf = o.key.split(".")
        for part in parents:
            nxt = node.get(part)
            if not isinstance(nxt, dict):
                nxt = node[part] = {}
            node = nxt
        node[leaf] = None if o.delete else o.value
    return out


def compose(layers: list[Layer]) -> tuple[dict[str, Any], dict[str, str]]:
    """The layers merged, and the layer that set each dotted key last."""
    merged: dict[str, Any] = {}
    for layer in layers:
        merged = merge(merged, layer.data)
    origin: dict[str, str] = {}
    final = flatten(merged)
    for layer in layers:
        for key in flatten(merge({}, layer.data)):
            if key in final:
                origin[key] = layer.name
    return merged, origin
