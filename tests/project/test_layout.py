"""The layout's promises: who may import whom, semantics references that resolve inside the
repository, and reference tables of the docs that match the code's declarations."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from conf import settings_table

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# the package list is declared once, as setuptools' packages; bench is checked beside the product
PACKAGES = tuple(PYPROJECT["tool"]["setuptools"]["packages"])
PRODUCT = tuple(p for p in PACKAGES if p != "bench")


def test_every_tool_sees_the_same_packages():
    """isort's first-party list and mypy's files are the declared packages (and the tests)."""
    assert set(PYPROJECT["tool"]["ruff"]["lint"]["isort"]["known-first-party"]) == {*PACKAGES, "tests"}
    assert set(PYPROJECT["tool"]["mypy"]["files"]) == set(PACKAGES)
    on_disk = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests", "notebooks"}
    assert on_disk == set(PACKAGES), on_disk ^ set(PACKAGES)


def imported_packages(package: str) -> dict[str, set[str]]:
    """module path -> top-level packages it imports (anywhere in the module, lazy imports included)."""
    out: dict[str, set[str]] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        tops: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                tops.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                tops.add(node.module.split(".")[0])
        out[str(path.relative_to(ROOT))] = tops
    return out


@pytest.mark.parametrize("package, forbidden", [
    # the pure core: no I/O frameworks, and no way back into the layers that use it
    ("routeinfo", {"flask", "pyspark", "deltalake", "kafka", "serving", "pipelines", "eventlog", "ops", "tests"}),
    # liveness decides what only keeps a broker alive, for the front and the job alike: pure, no I/O
    ("liveness", {"flask", "pyspark", "deltalake", "kafka", "serving", "pipelines", "remoting", "eventlog", "ops",
                  "snapshots", "tests"}),
    ("schemas", {"flask", "pyspark", "deltalake", "kafka", "serving", "pipelines", "routeinfo", "tests"}),
    ("conf", {"flask", "pyspark", "deltalake", "kafka", "serving", "pipelines", "tests"}),
    # the Kafka client is shared by the job, the server, the launcher and the tools: no Spark
    ("eventlog", {"pyspark", "flask", "serving", "pipelines", "tests"}),
    # the cuts both fronts serve: neither front's business, nor the streaming job's
    ("snapshots", {"flask", "pyspark", "kafka", "serving", "remoting", "pipelines", "eventlog", "ops", "fleet", "tests"}),
    # the server reads Delta and answers; the streaming job's modules are not its business
    ("serving", {"pipelines", "pyspark", "ops", "fleet", "tests"}),
    ("pipelines", {"serving", "flask", "ops", "fleet", "tests"}),
    # the remoting front reads cuts like the HTTP server (from snapshots), but is no Flask app
    ("remoting", {"flask", "serving", "pyspark", "pipelines", "ops", "fleet", "tests"}),
    ("ops", {"serving", "flask", "tests"}),
    ("fleet", {"flask", "tests"}),  # the soak times snapshot loads with snapshots.reader
    ("bench", {"tests"}),
])
def test_layers_import_only_what_they_may(package, forbidden):
    bad = {path: sorted(tops & forbidden) for path, tops in imported_packages(package).items() if tops & forbidden}
    assert not bad, f"forbidden imports: {bad}"


def test_the_launcher_process_loads_neither_spark_nor_flask():
    code = ("import sys, ops.launcher; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'pyspark', 'flask', 'deltalake', 'py4j'}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_no_product_file_points_outside_the_repository():
    hits = [str(p.relative_to(ROOT)) for package in (*PRODUCT, "bench", "notebooks") for p in (ROOT / package).rglob("*")
            if p.is_file() and p.suffix in (".py", ".ipynb", ".toml", ".properties") and "shared/" in p.read_text()]
    assert not hits


SECTION_REF = re.compile(r"§(\d+(?:\.\d+)*)(?:-(\d+))?")


def cited_sections() -> dict[str, set[str]]:
    """Section number -> files citing it, over product code, tests and benchmarks."""
    cited: dict[str, set[str]] = {}
    for package in (*PRODUCT, "bench", "tests"):
        for path in (ROOT / package).rglob("*.py"):
            for m in SECTION_REF.finditer(path.read_text()):
                numbers = [m.group(1)]
                if m.group(2):  # "§3.2.9-10": the range's last section too
                    numbers.append(m.group(1).rsplit(".", 1)[0] + "." + m.group(2))
                for n in numbers:
                    cited.setdefault(n, set()).add(str(path.relative_to(ROOT)))
    return cited


def test_every_semantics_reference_names_a_section_of_docs_semantics():
    # the catalogue of RocketMQ's own unit tests (section 11's subsections) has a page of its own
    doc = "\n".join((ROOT / "docs" / page).read_text() for page in ("semantics.md", "upstream-tests.md"))
    headings = set(re.findall(r"^#+\s+(\d+(?:\.\d+)*)[.\s]", doc, flags=re.M))
    cited = cited_sections()
    assert len(cited) > 20, "the code cites the semantics by section"
    missing = {n: sorted(files) for n, files in cited.items() if n not in headings}
    assert not missing, f"§ references without a heading in docs/semantics.md: {missing}"


def test_the_configuration_page_is_the_declared_settings():
    page = (ROOT / "docs" / "configuration.md").read_text()
    assert settings_table() in page, ("docs/configuration.md's table differs from conf.Config's declarations; "
                                      "paste the output of `python -c 'import conf; print(conf.settings_table())'`")


def test_the_metrics_reference_lists_every_prometheus_metric():
    """The metrics table (docs/reference/metrics.md, its one home; the guides link to it) names
    every family the code defines (docs match the code)."""
    from remoting.codes import REQUEST_CODES
    from schemas.metrics import JobMetrics, RemotingMetrics, ServerMetrics, SnapshotMetrics
    readme = (ROOT / "docs" / "reference" / "metrics.md").read_text()
    server = ServerMetrics()
    SnapshotMetrics(server.registry)
    names = set()
    for registry in (JobMetrics().registry, RemotingMetrics(REQUEST_CODES).registry, server.registry):
        for family in registry.collect():
            names.add(family.name + ("_total" if family.type == "counter" else ""))
    scrape_time = {"namesrv_snapshot_id", "namesrv_snapshot_age_seconds", "namesrv_snapshot_staleness_seconds",
                   "namesrv_consumer_lag_records", "namesrv_consumer_lag_seconds", "namesrv_kafka_up",
                   "namesrv_broker_groups", "namesrv_brokers_live", "namesrv_clusters", "namesrv_topics", "namesrv_ready"}
    import inspect

    from serving import metrics
    assert all(f'"{n}"' in inspect.getsource(metrics) for n in scrape_time)
    missing = sorted(n for n in names | scrape_time if f"`{n}`" not in readme)
    assert not missing, f"docs/reference/metrics.md's table lacks {missing}"


def _module_imports() -> dict[str, set[str]]:
    """Product module -> the product modules it imports (lazy imports included)."""
    files = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            files[name] = path
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name in files)
            elif isinstance(node, ast.ImportFrom) and node.module in files and node.level == 0:
                deps.update(f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in files else node.module
                            for a in node.names)
        graph[name] = deps - {name}
    return graph


def test_no_module_imports_itself_through_others():
    """No import circle, lazy imports included: a circle means two modules that are one."""
    graph = _module_imports()
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> None:
        if node in path:
            raise AssertionError("import circle: " + " -> ".join(path[path.index(node):] + [node]))
        if node in done:
            return
        for dep in sorted(graph.get(node, ())):
            visit(dep, [*path, node])
        done.add(node)

    for module in sorted(graph):
        visit(module, [])
