"""Builds the writer environment: Apache Iceberg Java 1.10.2 on Spark 3.5, in its own venv.

meltwater runs Spark 4; Iceberg's Spark runtime on PyPI is built for Spark 3.5, and the two
cannot share one interpreter environment. So the writer lives in a virtualenv cached outside
the repository, and whatever drives it (the corpus generator, the live writer, the bench
table generators) runs scripts inside it and talks to them through files and pipes only.

Facts this module relies on (see issue 2):
- `snowpark-connect-deps-iceberg==1.0.3` ships `iceberg-spark-runtime-3.5_2.12-1.10.2.jar`,
  which lacks its relocated Jackson classes. Spark 3.5's own Jackson 2.15.2 jars, merged and
  relocated with Debian's jarjar, supply them.
- Spark SQL never writes equality deletes or position deletes carrying rows; a small Java
  class (`CorpusFiles.java`, beside this module) compiled here against the runtime jar does.

Everything is built into `<cache>/writer-<key>/` and reused while its key is unchanged.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

PYSPARK_VERSION = "3.5.9"
ICEBERG_WHEEL = "snowpark-connect-deps-iceberg==1.0.3"
ICEBERG_JAR = "iceberg-spark-runtime-3.5_2.12-1.10.2.jar"
JACKSON_JARS = ("jackson-annotations-2.15.2", "jackson-core-2.15.2", "jackson-databind-2.15.2")
JARJAR_RULE = "rule com.fasterxml.jackson.** org.apache.iceberg.shaded.com.fasterxml.jackson.@1\n"
JARJAR_CLASSPATH = ("/usr/share/java/jarjar.jar",)
JAVA_SOURCE = Path(__file__).parent / "CorpusFiles.java"


class WriterEnvError(RuntimeError):
    """The writer environment cannot be built; the message says how to fix it."""


@dataclass(frozen=True)
class WriterEnv:
    """A built writer environment: its interpreter and the jars Spark must load."""

    python: Path
    jars: tuple[Path, ...]

    def spark_jars(self) -> str:
        return ",".join(str(jar) for jar in self.jars)


def cache_root() -> Path:
    """Where built environments and corpora live: $MELTWATER_CACHE or ~/.cache/meltwater."""
    root = os.environ.get("MELTWATER_CACHE") or Path.home() / ".cache" / "meltwater"
    return Path(root)


def key() -> str:
    """What the environment is built from: the versions, the rule, this interpreter's version
    and the Java helper's source (by content, not by path, so moving a file rebuilds nothing).
    What is generated with the environment (the corpus, the bench tables) includes it."""
    digest = hashlib.sha256()
    for part in (PYSPARK_VERSION, ICEBERG_WHEEL, JARJAR_RULE, sys.version.split()[0]):
        digest.update(part.encode())
    digest.update(JAVA_SOURCE.read_bytes())
    return digest.hexdigest()[:12]


def _run(command: list[str], what: str, **kwargs) -> None:
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-15:]
        raise WriterEnvError(f"{what} failed ({' '.join(command[:3])} ...):\n" + "\n".join(tail))


def _require_tools() -> None:
    missing = [tool for tool in ("java", "javac", "jar") if shutil.which(tool) is None]
    if missing:
        raise WriterEnvError(
            f"the Iceberg Java writer needs a JDK 17 ({', '.join(missing)} not found on PATH); "
            "install one, e.g. `apt-get install -y openjdk-17-jdk-headless`"
        )
    absent = [jar for jar in JARJAR_CLASSPATH if not Path(jar).exists()]
    if absent:
        raise WriterEnvError(
            f"Debian's jarjar is needed to relocate Jackson ({absent[0]} not found); "
            "install it with `apt-get install -y libjarjar-java`"
        )


def _site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def _shade_jackson(pyspark_jars: Path, work: Path) -> Path:
    """Merge Spark 3.5's Jackson jars and relocate them where Iceberg's runtime looks."""
    merged = work / "jackson-merged.jar"
    with zipfile.ZipFile(merged, "w", zipfile.ZIP_DEFLATED) as out:
        seen: set[str] = set()
        for name in JACKSON_JARS:
            with zipfile.ZipFile(pyspark_jars / f"{name}.jar") as jar:
                for entry in jar.namelist():
                    signed = entry.startswith("META-INF/") and entry.endswith((".SF", ".RSA"))
                    if entry in seen or signed or entry.startswith("META-INF/versions/"):
                        continue
                    seen.add(entry)
                    out.writestr(entry, jar.read(entry))
    rules = work / "jackson.rules"
    rules.write_text(JARJAR_RULE)
    shaded = work / "iceberg-shaded-jackson-2.15.2.jar"
    _run(["java", "-cp", ":".join(JARJAR_CLASSPATH), "com.tonicsystems.jarjar.Main", "process",
          str(rules), str(merged), str(shaded)], "relocating Jackson with jarjar")
    merged.unlink()
    return shaded


def _compile_helper(iceberg_jar: Path, pyspark_jars: Path, work: Path) -> Path:
    classes = work / "classes"
    classes.mkdir()
    _run(["javac", "--release", "11", "-nowarn", "-cp", f"{iceberg_jar}:{pyspark_jars}/*",
          "-d", str(classes), str(JAVA_SOURCE)], "compiling CorpusFiles.java")
    helper = work / "meltwater-corpus-files.jar"
    _run(["jar", "cf", str(helper), "-C", str(classes), "."], "packaging CorpusFiles")
    shutil.rmtree(classes)
    return helper


def ensure_writer_env(log=print) -> WriterEnv:
    """Return the writer environment, building it on first use (a few minutes, once).

    A lock beside it lets concurrent runs (the tests, `make demo`, a benchmark) share one
    build: the others wait for it."""
    home = cache_root() / f"writer-{key()}"
    if not (home / "READY").exists():
        home.parent.mkdir(parents=True, exist_ok=True)
        with open(home.parent / f"{home.name}.lock", "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                log(f"waiting for another run building the Iceberg Java writer environment "
                    f"in {home} ...")
                fcntl.flock(lock, fcntl.LOCK_EX)
            _build(home, log)
    jars_dir = home / "jars"
    jars = (jars_dir / ICEBERG_JAR, jars_dir / "iceberg-shaded-jackson-2.15.2.jar",
            jars_dir / "meltwater-corpus-files.jar")
    return WriterEnv(python=home / "venv" / "bin" / "python", jars=jars)


def _build(home: Path, log) -> None:
    """Build the environment into `home` unless a complete one (`READY`) is there."""
    ready = home / "READY"
    if not ready.exists():
        _require_tools()
        log(f"building the Iceberg Java writer environment in {home} (once: pip installs "
            f"pyspark {PYSPARK_VERSION} and {ICEBERG_WHEEL}, jarjar relocates Jackson, javac "
            "compiles CorpusFiles.java; a few minutes) ...")
        shutil.rmtree(home, ignore_errors=True)  # a half-built one from an interrupted run
        home.mkdir(parents=True)
        venv = home / "venv"
        _run([sys.executable, "-m", "venv", str(venv)], "creating the writer virtualenv")
        _run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
              f"pyspark=={PYSPARK_VERSION}", ICEBERG_WHEEL],
             f"installing pyspark {PYSPARK_VERSION} and {ICEBERG_WHEEL} from PyPI")
        site = _site_packages(venv)
        iceberg_jar = site / "snowpark_connect_deps_iceberg" / "jars" / ICEBERG_JAR
        if not iceberg_jar.exists():
            raise WriterEnvError(f"{ICEBERG_WHEEL} does not contain jars/{ICEBERG_JAR}")
        jars = home / "jars"
        jars.mkdir()
        shutil.copy(iceberg_jar, jars / ICEBERG_JAR)
        with tempfile.TemporaryDirectory(dir=home) as work:
            shutil.move(_shade_jackson(site / "pyspark" / "jars", Path(work)), jars)
            shutil.move(_compile_helper(jars / ICEBERG_JAR, site / "pyspark" / "jars",
                                        Path(work)), jars)
        ready.write_text("ok\n")


if __name__ == "__main__":
    env = ensure_writer_env()
    print(env.python)
    print(env.spark_jars())
