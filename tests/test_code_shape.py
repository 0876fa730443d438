"""The shape the code keeps (issue 48), read from its syntax trees and import graph:

- the executor's kind is asked only in `service/executors` (a capability, `own_queue`), never
  by a type check elsewhere;
- no function over 60 lines and no module over 300, unless its docstring says why it is
  "long because";
- one meaning per name: no two top-level classes or functions share a name across `gpuq/`,
  `service/` and `worker/`, except a `python -m` module's `main`, the client's view of the
  API's shapes (`gpuq/client.py`) and routes and CLI commands (their path or command is
  what they mean; their Python name is never called);
- no import cycle, imports inside functions included;
- tests make jobs as production does: no `create_job`.

`make lint` runs this file.
"""

import ast
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("gpuq", "service", "worker")
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 300
EXEMPT = "long because"
#: decorators that make a function a route or a command: `@router.get(...)`, `@app.command()`
ENDPOINTS = {"get", "post", "put", "patch", "delete", "websocket", "command", "callback"}


def sources() -> Iterator[tuple[Path, ast.Module, str]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            text = path.read_text()
            yield path.relative_to(ROOT), ast.parse(text), text


def functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def says_why(node: ast.AST) -> bool:
    assert isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef)
    return EXEMPT in (ast.get_docstring(node) or "").lower()


def test_no_function_over_60_lines_nor_module_over_300():
    long = []
    for path, tree, text in sources():
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES and not says_why(tree):
            long.append(f"{path}: {lines} lines")
        for node in functions(tree):
            assert node.end_lineno is not None
            length = node.end_lineno - node.lineno + 1
            if length > MAX_FUNCTION_LINES and not says_why(node):
                long.append(f"{path}:{node.lineno} {node.name}: {length} lines")
    assert not long, "too long to hold in mind:\n" + "\n".join(long)


def executor_classes() -> set[str]:
    found = set()
    for path in (ROOT / "service" / "executors").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and "Executor" in node.name:
                found.add(node.name)
    return found


def named(node: ast.expr) -> Iterator[str]:
    """The names an `isinstance`'s second argument (or a `type(x) is` operand) gives."""
    if isinstance(node, ast.Name):
        yield node.id
    elif isinstance(node, ast.Attribute):
        yield node.attr
    elif isinstance(node, ast.Tuple):
        for item in node.elts:
            yield from named(item)
    elif isinstance(node, ast.BinOp):  # A | B
        yield from named(node.left)
        yield from named(node.right)


def type_checks(tree: ast.AST, kinds: set[str]) -> Iterator[int]:
    """The lines that ask whether something is one of `kinds` by its type."""
    for node in ast.walk(tree):
        asked: list[str] = []
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in ("isinstance", "issubclass") and len(node.args) == 2:
                asked = list(named(node.args[1]))
        elif isinstance(node, ast.Compare):
            asked = [n for operand in node.comparators for n in named(operand)]
        if kinds & set(asked):
            yield node.lineno


def test_the_executors_kind_is_asked_only_in_service_executors():
    kinds = executor_classes()
    assert {"LocalExecutor", "SlurmExecutor", "QueueingExecutor"} <= kinds
    checks = [
        f"{path}:{line}"
        for path, tree, _ in sources()
        if path.parts[:2] != ("service", "executors")
        for line in type_checks(tree, kinds)
    ]
    assert not checks, "executor type checks outside service/executors:\n" + "\n".join(checks)


def test_the_type_check_finder_finds_each_form():
    code = """
isinstance(e, QueueingExecutor)
isinstance(e, (int, executors.SlurmExecutor))
type(e) is LocalExecutor
isinstance(e, Launch)
e.own_queue() is None
"""
    kinds = {"QueueingExecutor", "SlurmExecutor", "LocalExecutor"}
    assert list(type_checks(ast.parse(code), kinds)) == [2, 3, 4]


def is_endpoint(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for decorator in node.decorator_list:
        call = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(call, ast.Attribute) and call.attr in ENDPOINTS:
            return True
    return False


def registered_commands(tree: ast.AST) -> Iterator[str]:
    """The functions a module registers as commands: `app.command("ls")(jobs.list_jobs)`."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Call)
            and isinstance(node.func.func, ast.Attribute)
            and node.func.func.attr in ENDPOINTS
        ):
            for argument in node.args:
                yield from named(argument)


def test_one_meaning_per_name():
    every = list(sources())
    commands = {name for path, tree, _ in every for name in registered_commands(tree)}
    where: dict[str, list[str]] = defaultdict(list)
    for path, tree, _ in every:
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                if path.as_posix() != "gpuq/client.py":  # the API's shapes, as users get them
                    where[node.name].append(str(path))
            elif (
                isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                and node.name != "main"
                and not is_endpoint(node)
                and not (path.parts[:2] == ("service", "cli") and node.name in commands)
            ):
                where[node.name].append(str(path))
    twice = {name: paths for name, paths in where.items() if len(paths) > 1}
    listed = "\n".join(f"{name}: {', '.join(paths)}" for name, paths in sorted(twice.items()))
    assert not twice, "one name, several definitions:\n" + listed


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The import graph's strongly connected components of more than one module (Tarjan)."""
    edges = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in edges.get(module, ()):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return found


def test_no_import_cycles_function_level_imports_included():
    # grimp reads every import statement, inside functions too.
    graph = grimp.build_graph(*PACKAGES, include_external_packages=False, cache_dir=None)
    assert not cycles(graph)


def test_the_cycle_finder_finds_one():
    graph = grimp.ImportGraph()
    for module in ("a", "a.b", "a.c", "a.d"):
        graph.add_module(module)
    graph.add_import(importer="a.b", imported="a.c")
    graph.add_import(importer="a.c", imported="a.b")
    graph.add_import(importer="a.d", imported="a.b")
    assert cycles(graph) == [["a.b", "a.c"]]


def test_jobs_are_made_as_production_makes_them():
    makers = [
        f"{path.relative_to(ROOT)}:{number}"
        for folder in (*PACKAGES, "tests", "bench")
        for path in (ROOT / folder).rglob("*.py")
        if path != Path(__file__).resolve()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "create_job" in line
    ]
    assert not makers, "jobs made past admission and grouped submission:\n" + "\n".join(makers)
