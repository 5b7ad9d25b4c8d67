"""JVM dependencies: declared once in `jvm/<set>/pom.xml`, resolved once with Maven into `.jvm/<set>/`.

The sets: `spark` (Delta for Spark and Spark's Kafka connector, on the job's classpath),
`kafka` (Apache Kafka, a broker or a cluster for the tests and benchmarks), `rocketmq`,
`rocketmq-4.9` and `rocketmq-5.5` (RocketMQ's NameServer, broker, tools and client of each line:
the peers of the tests and benchmarks) and `hdfs` (HDFS's servers, the multi-host bed's store). `./run.sh`
resolves them during set-up (`python -m conf.jvm resolve`), with
Maven's `dependency:copy-dependencies`, and records a stamp of the pom it resolved. Later starts
compare the stamp and never ask a repository, so a machine that resolved once starts offline.

An artifact that cannot be resolved is an error that names it and says what to do; there is no
fallback. `NAMESRV_MAVEN_REPOSITORY` points Maven at another repository (a mirror of every
repository); empty means Maven's own configuration.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from conf import load_config
from conf.version import argument_parser

ROOT = Path(__file__).resolve().parents[1]
DECLARATIONS = ROOT / "jvm"
CLASS_SOURCES = DECLARATIONS / "spark" / "src"  # our own JVM classes (`classes_jar`)
CACHE = ROOT / ".jvm"
STAMP = ".resolved"
_VERSION = re.compile(r"-\d[\w.+-]*\.jar$")
_URL = re.compile(r"https?://\S+")  # in Maven's "Downloaded from central: <url> (12 kB at 34 kB/s)"


class JarsMissing(RuntimeError):
    """A JVM dependency set is not resolved, or cannot be; the message says which and what to do."""


def declared_sets() -> list[str]:
    return sorted(p.parent.name for p in DECLARATIONS.glob("*/pom.xml"))


def _pom(name: str) -> Path:
    pom = DECLARATIONS / name / "pom.xml"
    if not pom.is_file():
        raise JarsMissing(f"no JVM dependency set {name!r}: {pom} does not exist (sets: {', '.join(declared_sets())})")
    return pom


def _stamp(name: str) -> str:
    return hashlib.sha256(_pom(name).read_bytes()).hexdigest()


def declared_artifacts(name: str) -> list[str]:
    """The set's direct dependencies as group:artifact:version (what a person asked for)."""
    text = re.sub(r"<dependencyManagement>.*?</dependencyManagement>", "", _pom(name).read_text(), flags=re.S)
    props = dict(re.findall(r"<([\w.]+)>([^<]*)</\1>", text.split("<properties>")[1].split("</properties>")[0])) \
        if "<properties>" in text else {}
    out = []
    for dep in re.findall(r"<dependency>(.*?)</dependency>", text, flags=re.S):
        fields = dict(re.findall(r"<(groupId|artifactId|version)>([^<]*)</\1>", dep))
        version = re.sub(r"\$\{([\w.]+)\}", lambda m: props.get(m.group(1), m.group(0)), fields.get("version", "?"))
        out.append(f"{fields.get('groupId')}:{fields.get('artifactId')}:{version}")
    return out


def is_resolved(name: str, cache: Path = CACHE) -> bool:
    stamp = cache / name / STAMP
    return stamp.is_file() and stamp.read_text().strip() == _stamp(name)


def jars(name: str, cache: Path = CACHE) -> list[Path]:
    """The resolved jars of a set; JarsMissing (with what to do) when it was not resolved."""
    if not is_resolved(name, cache):
        raise JarsMissing(f"the JVM dependencies {', '.join(declared_artifacts(name))} (jvm/{name}/pom.xml) are not "
                          f"resolved in {cache / name}: run './run.sh setup' (needs Maven and a reachable repository)")
    return sorted((cache / name).glob("*.jar"))


def delta_spark_conf() -> dict[str, str]:
    """The Spark settings that put the `spark` set on the classpath (Spark ships `spark.jars` to
    a cluster's executors) and make `format("delta")` and Delta SQL work: one definition for the
    job, the notebooks and the benchmarks."""
    return {"spark.jars": ",".join(str(p) for p in jars("spark")),
            "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
            "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog"}


def local_fs_conf() -> dict[str, str]:
    """The Spark settings that give `file:` paths the local file system that forks no process per
    file (jvm/spark/src/namesrv/hadoop). On the driver's own classpath, not `spark.jars`: Spark's
    launcher opens the local file system before it loads those. For local masters only, where the
    driver is every executor; a cluster's executors would need the jar on each host."""
    return {"spark.driver.extraClassPath": str(classes_jar()),
            "spark.hadoop.fs.file.impl": "namesrv.hadoop.NioLocalFileSystem",
            "spark.hadoop.fs.AbstractFileSystem.file.impl": "namesrv.hadoop.NioLocalFs"}


def classes_jar(cache: Path = CACHE) -> Path:
    """The jar of our own JVM classes (jvm/spark/src), compiled against the pyspark wheel's jars
    once per version of their sources (`.jvm/spark-classes/`). javac is the JDK's, as Maven's is;
    a failure is an error with javac's output, never a session without them."""
    sources = sorted(CLASS_SOURCES.rglob("*.java"))
    digest = hashlib.sha256()
    for source in sources:
        digest.update(source.relative_to(CLASS_SOURCES).as_posix().encode() + b"\0" + source.read_bytes())
    jar = cache / "spark-classes" / f"namesrv-{digest.hexdigest()[:16]}.jar"
    if jar.is_file():
        return jar
    jar.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=jar.parent) as tmp:
        classes = Path(tmp) / "classes"
        done = subprocess.run(["javac", "-nowarn", "--release", "17", "-cp", ":".join(map(str, pyspark_jars())),
                               "-d", str(classes), *map(str, sources)], capture_output=True, text=True)
        if done.returncode != 0:
            raise JarsMissing(f"javac could not compile {CLASS_SOURCES}: {(done.stderr or done.stdout).strip()[-2000:]}")
        built = Path(tmp) / jar.name
        with zipfile.ZipFile(built, "w") as z:
            for f in sorted(classes.rglob("*.class")):
                z.write(f, f.relative_to(classes).as_posix())
        os.replace(built, jar)  # whole or not at all: two jobs starting at once build the same jar
    return jar


def pyspark_jars() -> list[Path]:
    """The jars the pyspark wheel ships (found without importing pyspark, which starts nothing
    but is slow to import)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise JarsMissing("pyspark is not installed: run './run.sh setup'")
    return sorted((Path(spec.submodule_search_locations[0]) / "jars").glob("*.jar"))


def _bundled_with_pyspark() -> set[str]:
    """Artifact names (without version) of the jars the pyspark wheel already has."""
    return {_VERSION.sub("", p.name) for p in pyspark_jars()}


def _settings(repository: str, where: Path) -> list[str]:
    """Maven arguments that send every request to `repository` (a mirror of everything)."""
    if not repository:
        return []
    settings = where / "settings.xml"
    settings.write_text(f"""<settings><mirrors><mirror><id>namesrv-repository</id><mirrorOf>*</mirrorOf>
<url>{repository}</url></mirror></mirrors></settings>""")
    return ["-s", str(settings)]


def _failure(name: str, output: str, log: Path) -> JarsMissing:
    found = re.search(r"(?:Could not (?:find|transfer) artifact|Failure to (?:find|transfer)) (\S+)", output)
    missing = f" (missing: {found.group(1)})" if found else ""
    reason = next((line.strip() for line in output.splitlines() if "[ERROR]" in line and line.strip() != "[ERROR]"),
                  "Maven failed")
    return JarsMissing(f"Maven could not resolve {', '.join(declared_artifacts(name))} (jvm/{name}/pom.xml)"
                       f"{missing}. {reason[:400]}\n"
                       f"Check the network, or point NAMESRV_MAVEN_REPOSITORY at a reachable Maven repository, "
                       f"then run './run.sh setup' again. Full Maven output: {log}")


def resolve(name: str, *, repository: str = "", cache: Path = CACHE,
            progress: Callable[[str], None] = print) -> list[Path]:
    """Resolve a set unless its stamp is current; return its jars."""
    if is_resolved(name, cache):
        return jars(name, cache)
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarsMissing(f"Maven ('mvn') is needed once to fetch {', '.join(declared_artifacts(name))}: "
                          "apt-get install maven, then run './run.sh setup' again")
    cache.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    progress(f"resolving {name}: {', '.join(declared_artifacts(name))}")
    with tempfile.TemporaryDirectory(prefix=f"jvm-{name}-", dir=cache) as tmp:
        work = Path(tmp)
        out_dir = work / "jars"
        log = cache / f"{name}.mvn.log"
        cmd = [mvn, "-B", "-f", str(_pom(name)), *_settings(repository, work),
               "dependency:copy-dependencies", f"-DoutputDirectory={out_dir}"]
        lines: list[str] = []
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              stdin=subprocess.DEVNULL) as proc:
            assert proc.stdout is not None
            fetched = 0
            for line in proc.stdout:
                lines.append(line)
                if "Downloaded from" in line:
                    fetched += 1
                    url = _URL.search(line)
                    if fetched % 25 == 1 and url:
                        progress(f"  {name}: {fetched} file(s) fetched, latest {url.group(0).rsplit('/', 1)[-1]}")
        output = "".join(lines)
        log.write_text(output)
        if proc.returncode != 0 or not out_dir.is_dir():
            raise _failure(name, output, log)
        if name == "spark":  # Spark's own jars are on the classpath already; a second copy only conflicts
            bundled = _bundled_with_pyspark()
            for jar in out_dir.glob("*.jar"):
                if _VERSION.sub("", jar.name) in bundled:
                    jar.unlink()
        target = cache / name
        shutil.rmtree(target, ignore_errors=True)
        out_dir.rename(target)
    (target / STAMP).write_text(_stamp(name))
    found = jars(name, cache)
    size = sum(p.stat().st_size for p in found) / 1e6
    progress(f"  {name}: {len(found)} jar(s), {size:.0f} MB, in {time.monotonic() - started:.0f} s")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argument_parser("python -m conf.jvm", "Resolve (once) and list the JVM dependency sets "
                             "declared in jvm/<set>/pom.xml.")
    parser.add_argument("action", choices=("resolve", "classpath"))
    parser.add_argument("sets", nargs="*", help=f"default: every declared set ({', '.join(declared_sets())})")
    args = parser.parse_args(argv)
    cfg = load_config()
    try:
        for name in args.sets or declared_sets():
            if args.action == "resolve":
                resolve(name, repository=cfg.maven_repository, progress=lambda m: print(f"jvm: {m}", flush=True))
            else:
                print(":".join(str(p) for p in jars(name)))
    except JarsMissing as exc:
        print(f"jvm: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
