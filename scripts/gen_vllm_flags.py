#!/usr/bin/env python3
"""Generate ``planner/vllm/argv_flags.py``: the option strings of ``vllm serve``, release by release.

vLLM builds its parser from config dataclasses (``get_kwargs(ModelConfig)`` turns every field into a
flag whose arity follows the field's type hint), so the flag list cannot be grepped: this script
reads each release's Python source with :mod:`ast` (never importing vLLM, which needs torch) and
interprets the few statement shapes ``add_cli_args`` uses. It records facts only (option string,
``dest`` and how many values the option takes), never vLLM code.

``scripts/vllm_facts.py`` runs it on each modelled release's wheel and writes (or, with ``--check``,
compares) the table; by hand: ``python3 scripts/gen_vllm_flags.py SRC > planner/vllm/argv_flags.py``
where SRC holds ``<version>/vllm/**.py`` for each release. ``tests/vllm_argv`` checks known flags.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

# Kinds stored per option string (what argparse does when it meets the option):
#   value     one value (nargs=None)             multi   one or more values (nargs="+")
#   optional  zero or one value (nargs="?")      true / false   no value, stores True / False
#   count     no value, counts (action="count")  n<k>    exactly k values
Kind = str

_SCAN_DIRS = ("config", "engine", "entrypoints", "utils", "lora", "v1/engine", "compilation", "attention")


@dataclass
class ClassInfo:
    node: ast.ClassDef
    module: str

    @property
    def is_dataclass(self) -> bool:
        for dec in self.node.decorator_list:
            text = ast.unparse(dec)
            if "dataclass" in text or text in ("config",) or text.startswith("config("):
                return True
        return False


@dataclass
class Index:
    classes: dict[str, ClassInfo] = field(default_factory=dict)
    aliases: dict[str, ast.expr] = field(default_factory=dict)
    functions: dict[str, ast.FunctionDef] = field(default_factory=dict)

    def add_module(self, path: Path, module: str) -> None:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            return
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                # First definition wins: config classes are defined once; duplicates are test helpers.
                self.classes.setdefault(node.name, ClassInfo(node, module))
            elif isinstance(node, ast.FunctionDef):
                self.functions.setdefault(node.name, node)
            elif isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                if isinstance(target, ast.Name) and _looks_like_type(node.value):
                    self.aliases.setdefault(target.id, node.value)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                if node.value is not None and "TypeAlias" in ast.unparse(node.annotation):
                    self.aliases.setdefault(node.target.id, node.value)
            elif type(node).__name__ == "TypeAlias":  # `type X = ...` (3.12 syntax)
                name = getattr(node, "name", None)
                value = getattr(node, "value", None)
                if isinstance(name, ast.Name) and isinstance(value, ast.expr):
                    self.aliases.setdefault(name.id, value)

    def fields(self, cls_name: str, seen: frozenset[str] = frozenset()) -> dict[str, ast.expr]:
        info = self.classes.get(cls_name)
        if info is None or cls_name in seen:
            return {}
        result: dict[str, ast.expr] = {}
        for base in info.node.bases:
            base_name = ast.unparse(base).split(".")[-1].split("[")[0]
            result.update(self.fields(base_name, seen | {cls_name}))
        for stmt in info.node.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                text = ast.unparse(stmt.annotation)
                if "ClassVar" in text or "InitVar" in text:
                    continue
                if (
                    stmt.value is not None
                    and "field(" in ast.unparse(stmt.value)
                    and "init=False" in (ast.unparse(stmt.value))
                ):
                    continue
                result.pop(stmt.target.id, None)
                result[stmt.target.id] = stmt.annotation
        return result

    def method(self, cls_name: str, name: str) -> tuple[str, ast.FunctionDef] | None:
        info = self.classes.get(cls_name)
        if info is None:
            return None
        for stmt in info.node.body:
            if isinstance(stmt, ast.FunctionDef) and stmt.name == name:
                return cls_name, stmt
        for base in info.node.bases:
            found = self.method(ast.unparse(base).split(".")[-1], name)
            if found:
                return found
        return None

    def base_of(self, cls_name: str) -> str | None:
        info = self.classes.get(cls_name)
        if info is None or not info.node.bases:
            return None
        return ast.unparse(info.node.bases[0]).split(".")[-1]


def _looks_like_type(value: ast.expr) -> bool:
    text = ast.unparse(value)
    return bool(re.match(r"^(Literal|Union|Optional|Annotated|list|dict|tuple|set|Callable)\b", text)) or (
        isinstance(value, ast.BinOp) and isinstance(value.op, ast.BitOr)
    )


def _union_members(expr: ast.expr, index: Index, depth: int = 0) -> list[ast.expr]:
    """Flatten a type hint to its union members, resolving aliases and Annotated/Optional."""
    if depth > 12:
        return [expr]
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        try:
            expr = ast.parse(expr.value, mode="eval").body
        except SyntaxError:
            return [expr]
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.BitOr):
        return _union_members(expr.left, index, depth + 1) + _union_members(expr.right, index, depth + 1)
    if isinstance(expr, ast.Subscript):
        head = ast.unparse(expr.value).split(".")[-1]
        inner = expr.slice
        if head == "Optional":
            return [*_union_members(inner, index, depth + 1), ast.Constant(None)]
        if head == "Union":
            elts = inner.elts if isinstance(inner, ast.Tuple) else [inner]
            return [m for e in elts for m in _union_members(e, index, depth + 1)]
        if head == "Annotated":
            first = inner.elts[0] if isinstance(inner, ast.Tuple) else inner
            return _union_members(first, index, depth + 1)
        return [expr]
    if isinstance(expr, ast.Name) and expr.id in index.aliases and expr.id not in index.classes:
        return _union_members(index.aliases[expr.id], index, depth + 1)
    if isinstance(expr, ast.Attribute) and expr.attr in index.aliases and expr.attr not in index.classes:
        return _union_members(index.aliases[expr.attr], index, depth + 1)
    return [expr]


def _member_name(member: ast.expr) -> str:
    if isinstance(member, ast.Constant) and member.value is None:
        return "None"
    if isinstance(member, ast.Subscript):
        return ast.unparse(member.value).split(".")[-1]
    return ast.unparse(member).split(".")[-1]


@dataclass
class Rules:
    """Release-specific parts of vLLM's type-hint -> argparse mapping (read from its get_kwargs)."""

    optional_bool_str: bool  # `bool | str | None` -> nargs="?"  (present in newer releases)


def classify(annotation: ast.expr, index: Index, rules: Rules) -> Kind:
    members = _union_members(annotation, index)
    names = {_member_name(m) for m in members}
    if any(n in index.classes and index.classes[n].is_dataclass for n in names):
        return "value"  # dataclass-typed fields take one JSON value
    if rules.optional_bool_str and names == {"bool", "str", "None"}:
        return "optional"
    if "bool" in names:
        return "bool"
    if "Literal" in names:
        return "value"
    for member in members:
        if isinstance(member, ast.Subscript) and _member_name(member) == "tuple":
            elts = member.slice.elts if isinstance(member.slice, ast.Tuple) else [member.slice]
            if any(isinstance(e, ast.Constant) and e.value is Ellipsis for e in elts):
                return "multi"
            return f"n{len(elts)}"
    if names & {"list", "set", "List", "Set"}:
        return "multi"
    return "value"


@dataclass
class Entry:
    """The argparse kwargs vLLM builds for one config field (the parts that change parsing)."""

    kind: Kind
    extra: dict[str, object] = field(default_factory=dict)  # explicit action / nargs / flags overrides


@dataclass
class Interp:
    index: Index
    rules: Rules
    options: dict[str, tuple[str, Kind]] = field(default_factory=dict)
    bool_actions: list[tuple[list[str], str]] = field(default_factory=list)
    visited: set[int] = field(default_factory=set)

    def kwargs_for(self, cls_name: str) -> dict[str, Entry]:
        return {name: Entry(classify(ann, self.index, self.rules)) for name, ann in self.index.fields(cls_name).items()}

    # --- evaluation of the small expression language add_cli_args uses --------------------------------
    def eval_kwdict(self, expr: ast.expr, env: dict[str, object], cls: str | None) -> object:
        if isinstance(expr, ast.Name):
            return env.get(expr.id)
        if isinstance(expr, ast.Call):
            func = ast.unparse(expr.func)
            if func.endswith("get_kwargs") and expr.args:
                arg = ast.unparse(expr.args[0])
                target = cls if arg == "cls" and cls else arg.split(".")[-1]
                return self.kwargs_for(target)
            if func.endswith("_customize_cli_kwargs") and expr.args:
                start = self.index.base_of(cls) if func.startswith("super()") and cls else cls
                value = self.eval_kwdict(expr.args[0], env, cls)
                return self.customize(start, value)
            if func.endswith(".copy") or func in ("dict", "deepcopy", "copy.deepcopy"):
                base = expr.func.value if isinstance(expr.func, ast.Attribute) else expr.args[0]
                return self.eval_kwdict(base, env, cls)
        if isinstance(expr, ast.Subscript):
            base = self.eval_kwdict(expr.value, env, cls)
            key = expr.slice
            if isinstance(base, dict) and isinstance(key, ast.Constant):
                return base.get(key.value)
        return None

    def customize(self, cls_name: str | None, value: object) -> object:
        if cls_name is None:
            return value
        found = self.index.method(cls_name, "_customize_cli_kwargs")
        if not found:
            return value
        owner, func = found
        params = [a.arg for a in func.args.args]
        env: dict[str, object] = {params[-1]: value} if params else {}
        returned = self.run(func.body, env, owner)
        return returned if returned is not None else value

    def entry_of(self, expr: ast.expr, env: dict[str, object], cls: str | None) -> Entry | None:
        value = self.eval_kwdict(expr, env, cls)
        return value if isinstance(value, Entry) else None

    # --- statements ----------------------------------------------------------------------------------
    def run(self, body: list[ast.stmt], env: dict[str, object], cls: str | None) -> object:
        returned: object = None
        for stmt in body:
            result = self.stmt(stmt, env, cls)
            if result is not None:
                returned = result
        return returned

    def stmt(self, stmt: ast.stmt, env: dict[str, object], cls: str | None) -> object:
        if isinstance(stmt, ast.Return) and stmt.value is not None:
            value = self.eval_kwdict(stmt.value, env, cls)
            self.scan_calls(stmt.value, env, cls)
            return value
        if isinstance(stmt, ast.Assign):
            value = self.eval_kwdict(stmt.value, env, cls)
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    if value is not None:
                        env[target.id] = value
                elif isinstance(target, ast.Subscript):
                    self.assign_key(target, stmt.value, env, cls)
            self.scan_calls(stmt.value, env, cls)
            return None
        if isinstance(stmt, ast.Delete):
            for target in stmt.targets:
                if isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant):
                    owner = self.eval_kwdict(target.value, env, cls)
                    key = target.slice.value
                    if isinstance(owner, Entry):
                        owner.extra[str(key)] = None
                    elif isinstance(owner, dict):
                        owner.pop(key, None)
            return None
        if isinstance(stmt, ast.Expr):
            call = stmt.value
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and call.func.attr == "pop"
                and call.args
                and isinstance(call.args[0], ast.Constant)
            ):
                owner = self.eval_kwdict(call.func.value, env, cls)
                if isinstance(owner, dict):
                    owner.pop(call.args[0].value, None)
                    return None
            self.scan_calls(stmt.value, env, cls)
            return None
        if isinstance(stmt, ast.If):
            # Both branches: vLLM guards flags with `if not ("--help" in argv)`-style tests only.
            self.run(stmt.body, env, cls)
            self.run(stmt.orelse, env, cls)
            return None
        if isinstance(stmt, (ast.With, ast.Try)):
            self.run(stmt.body, env, cls)
            return None
        if isinstance(stmt, ast.For):
            self.for_loop(stmt, env, cls)
            return None
        return None

    def assign_key(self, target: ast.Subscript, value: ast.expr, env: dict[str, object], cls: str | None) -> None:
        owner = self.eval_kwdict(target.value, env, cls)
        if not isinstance(owner, Entry) or not isinstance(target.slice, ast.Constant):
            return
        key = str(target.slice.value)
        if key in ("action", "nargs", "flags"):
            if isinstance(value, ast.Constant):
                owner.extra[key] = value.value
            elif isinstance(value, ast.List):
                owner.extra[key] = [e.value for e in value.elts if isinstance(e, ast.Constant)]
            else:
                owner.extra[key] = ast.unparse(value).split(".")[-1]

    def for_loop(self, stmt: ast.For, env: dict[str, object], cls: str | None) -> None:
        # `for key, value in X.items(): group.add_argument(*flags, f"--{key...}", **value)`
        it = stmt.iter
        if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr == "items"):
            return
        source = self.eval_kwdict(it.func.value, env, cls)
        if not isinstance(source, dict):
            return
        for name, entry in source.items():
            if not isinstance(entry, Entry):
                continue
            flags = entry.extra.get("flags") or []
            options = [*(flags if isinstance(flags, list) else []), "--" + name.replace("_", "-")]
            self.register(options, name, entry.kind, entry.extra)

    def scan_calls(self, expr: ast.expr, env: dict[str, object], cls: str | None) -> None:
        for node in ast.walk(expr):
            if isinstance(node, ast.Call):
                self.call(node, env, cls)

    def call(self, node: ast.Call, env: dict[str, object], cls: str | None) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "add_argument":
            self.add_argument(node, env, cls)
            return
        # Follow calls into other parser builders: X.add_cli_args(parser), make_arg_parser(parser), ...
        target: tuple[str | None, ast.FunctionDef] | None = None
        if isinstance(func, ast.Attribute):
            owner = ast.unparse(func.value)
            if owner == "super()" and cls:
                base = self.index.base_of(cls)
                found = self.index.method(base, func.attr) if base else None
            elif owner in ("cls", "self") and cls:
                found = self.index.method(cls, func.attr)
            else:
                receiver = owner.split(".")[-1]
                found = self.index.method(receiver, func.attr)
                if found and receiver in self.index.classes:
                    # `FrontendArgs.add_cli_args(parser)` runs the inherited classmethod with
                    # cls = FrontendArgs, so get_kwargs(cls) sees the subclass's fields.
                    found = (receiver, found[1])
            if found:
                target = found
        elif isinstance(func, ast.Name) and func.id in self.index.functions:
            target = (None, self.index.functions[func.id])
        if target is None:
            return
        owner_cls, fdef = target
        if not _builds_parser(fdef) or id(fdef) in self.visited:
            return
        self.visited.add(id(fdef))
        self.run(fdef.body, {}, owner_cls)

    def add_argument(self, node: ast.Call, env: dict[str, object], cls: str | None) -> None:
        options = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        options = [o for o in options if o.startswith("-")]
        if not options:
            return  # positional (model_tag) or a computed name
        kind: Kind = "value"
        dest: str | None = None
        extra: dict[str, object] = {}
        for kw in node.keywords:
            if kw.arg is None:
                entry = self.entry_of(kw.value, env, cls)
                if entry is not None:
                    kind = entry.kind
                    extra.update(entry.extra)
                elif isinstance(kw.value, ast.Dict):  # **{**X["f"], "action": ...}
                    for k, v in zip(kw.value.keys, kw.value.values, strict=True):
                        if k is None:
                            inner = self.entry_of(v, env, cls)
                            if inner is not None:
                                kind = inner.kind
                                extra.update(inner.extra)
                        elif isinstance(k, ast.Constant) and k.value in ("action", "nargs"):
                            extra[str(k.value)] = (
                                v.value if isinstance(v, ast.Constant) else (ast.unparse(v).split(".")[-1])
                            )
            elif kw.arg in ("action", "nargs"):
                extra[kw.arg] = (
                    kw.value.value if isinstance(kw.value, ast.Constant) else (ast.unparse(kw.value).split(".")[-1])
                )
            elif kw.arg == "dest" and isinstance(kw.value, ast.Constant):
                dest = str(kw.value.value)
        longs = [o for o in options if o.startswith("--")]
        if dest is None:
            dest = (longs[0] if longs else options[0]).lstrip("-").replace("-", "_")
        self.register(options, dest, kind, extra)

    def register(self, options: list[str], dest: str, kind: Kind, extra: dict[str, object]) -> None:
        action = extra.get("action")
        nargs = extra.get("nargs", "<unset>")
        if action is not None:
            if action == "store_true":
                kind = "true"
            elif action == "store_false":
                kind = "false"
            elif action == "count":
                kind = "count"
            elif action in ("BooleanOptionalAction", "EnableDisableAction"):
                kind = "bool"
            elif isinstance(action, str) and kind in ("bool", "true", "false"):
                kind = "value"  # store / append / a custom Action: takes a value
        if nargs != "<unset>":
            if nargs is None:
                kind = "value" if kind not in ("bool", "true", "false", "count") else kind
            elif nargs in ("+", "*"):
                kind = "multi"
            elif nargs == "?":
                kind = "optional"
            elif isinstance(nargs, int):
                kind = f"n{nargs}" if nargs != 1 else "value"
        if kind == "bool":
            self.bool_actions.append((options, dest))
            for option in options:
                self.options[option] = (dest, "true")
                if option.startswith("--"):
                    self.options["--no-" + option[2:]] = (dest, "false")
            return
        for option in options:
            self.options[option] = (dest, kind)


def _builds_parser(fdef: ast.FunctionDef) -> bool:
    return any(
        isinstance(n, ast.Attribute) and n.attr in ("add_argument", "add_cli_args", "_customize_cli_kwargs")
        for n in ast.walk(fdef)
    )


def load_index(root: Path) -> Index:
    index = Index()
    vllm = root / "vllm"
    files: list[Path] = []
    for name in ("config.py", "utils.py", "envs.py"):
        if (vllm / name).is_file():
            files.append(vllm / name)
    for sub in _SCAN_DIRS:
        if (vllm / sub).is_dir():
            files.extend(sorted((vllm / sub).rglob("*.py")))
    for path in files:
        index.add_module(path, str(path.relative_to(root)))
    return index


def serve_options(root: Path) -> dict[str, tuple[str, Kind]]:
    """Every option string of ``vllm serve`` in the release unpacked at ``root``."""
    index = load_index(root)
    text = ""
    for candidate in ("engine/arg_utils.py",):
        text += (root / "vllm" / candidate).read_text()
    rules = Rules(optional_bool_str="type_hints == {bool, str, type(None)}" in text)
    interp = Interp(index, rules)
    make = index.functions.get("make_arg_parser")
    if make is None:
        raise SystemExit(f"{root}: make_arg_parser not found")
    interp.run(make.body, {}, None)
    # `vllm serve` adds a few options of its own after make_arg_parser (entrypoints/cli/serve.py).
    serve = root / "vllm" / "entrypoints" / "cli" / "serve.py"
    if serve.is_file():
        tree = ast.parse(serve.read_text())
        for node in ast.walk(tree):
            is_add = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            if is_add and node.func.attr == "add_argument":
                interp.add_argument(node, {}, None)
    # 0.33+: EnableDisableAction replaces BooleanOptionalAction and pairs --enable-x with --disable-x.
    if "class EnableDisableAction" in _parser_source(root):
        for options, dest in interp.bool_actions:
            for option in options:
                for prefix, inverse in (("--enable-", "--disable-"), ("--disable-", "--enable-")):
                    if option.startswith(prefix):
                        interp.options.setdefault(inverse + option[len(prefix) :], (dest, "false"))
    interp.options.setdefault("--help", ("help", "true"))
    interp.options.setdefault("-h", ("help", "true"))
    return interp.options


def _parser_source(root: Path) -> str:
    for rel in ("utils/argparse_utils.py", "utils/__init__.py", "utils.py"):
        path = root / "vllm" / rel
        if path.is_file() and "class FlexibleArgumentParser" in path.read_text():
            return path.read_text()
    return ""


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version)[:3])


def releases(src: Path) -> Iterator[tuple[str, Path]]:
    found = []
    for child in src.iterdir():
        if (child / "vllm" / "engine" / "arg_utils.py").is_file() and re.match(r"^\d+\.\d+", child.name):
            version = ".".join(re.findall(r"\d+", child.name)[:3])
            found.append((version, child))
    yield from sorted(found, key=lambda item: _version_key(item[0]))


def render(tables: list[tuple[str, dict[str, tuple[str, Kind]]]]) -> str:
    lines = [
        '"""Option strings of ``vllm serve`` per vLLM release (generated; do not edit).',
        "",
        "Generated by ``scripts/gen_vllm_flags.py`` from each release's own source (engine/arg_utils.py,",
        "the frontend args and FlexibleArgumentParser). Each line is ``option dest kind``; kinds:",
        "value (one value), multi (one or more), optional (zero or one), true/false (no value; stores",
        "True/False), count, n<k> (exactly k values). Later releases are stored as changes to the previous.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "RELEASES: tuple[str, ...] = (",
        *(f'    "{v}",' for v, _ in tables),
        ")",
        "",
    ]
    previous: dict[str, tuple[str, Kind]] = {}
    blocks: list[str] = []
    for version, table in tables:
        added = [f"{o} {d} {k}" for o, (d, k) in sorted(table.items()) if previous.get(o) != (d, k)]
        removed = [f"-{o}" for o in sorted(previous) if o not in table]
        body = "\n".join(added + removed)
        blocks.append(f'    "{version}": """\n{body}\n""",')
        previous = table
    lines.append("# release -> lines added or changed (`option dest kind`), or removed (`-option`)")
    lines.append("CHANGES: dict[str, str] = {")
    lines.extend(blocks)
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: gen_vllm_flags.py SRC  (SRC holds <version>/vllm/**.py per release)", file=sys.stderr)
        return 2
    src = Path(argv[1])
    tables = []
    for version, root in releases(src):
        options = serve_options(root)
        print(f"{version}: {len(options)} option strings", file=sys.stderr)
        tables.append((version, options))
    sys.stdout.write(render(tables))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
