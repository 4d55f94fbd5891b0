"""deploy/: what can be checked here is checked, and the spark-submit recipe really runs.

No Docker engine and no Kubernetes run here. The image is checked by replaying its
Dockerfile over a model of its file system (service_tests/dockerfile_model.py) and every
recipe naming a path in it (Kubernetes manifests, spark-submit lines, the entry point, the
systemd unit, the READMEs) against that model; the entry point runs with stand-ins for the
programs it starts; the wheel the image installs is built and installed into a fresh
virtualenv (`build` lane); `docker build` runs where a Docker engine answers.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
import yaml

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

from corpus.compare import row_multiset
from meltwater.service.config import load_config
from meltwater.stream import changes
from service_tests.dockerfile_model import Replay, dockerfile_steps, dockerignore_sends, replay

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DOCKER = DEPLOY / "docker"
KUBERNETES = DEPLOY / "kubernetes"
ENTRYPOINT = DOCKER / "entrypoint.sh"
UNIT = DEPLOY / "systemd" / "meltwater.service"
SYSUSERS = DEPLOY / "systemd" / "meltwater.sysusers"
MODES = ("serve", "driver", "executor")  # entrypoint.sh's own commands
# The documents that tell how to install meltwater, and the command that builds its wheel.
INSTALL_DOCS = (ROOT / "README.md", DEPLOY / "README.md", DEPLOY / "spark" / "README.md", UNIT)
WHEEL_COMMAND = "python3 -m pip wheel --no-deps --wheel-dir dist ."


def pyspark_home() -> Path:
    """The Spark distribution pyspark installs: what the image links at /opt/spark."""
    return Path(importlib.util.find_spec("pyspark").origin).parent


def wheel_name() -> str:
    """The file `pip wheel` makes of this repository."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return f"{project['name']}-{project['version']}-py3-none-any.whl"


@functools.cache
def image() -> Replay:
    """deploy/docker/Dockerfile replayed. Its links hold a Java runtime (`bin/java`,
    wherever Debian put it) and the folders of the pyspark the wheel's dependencies install."""
    return replay(DOCKER / "Dockerfile", ROOT, links=image_links(), wheel_name=wheel_name())


def image_links() -> dict[str, Path | frozenset[str]]:
    """What each link the Dockerfile makes holds."""
    spark = {f"/opt/spark/{name}": pyspark_home() / name for name in ("bin", "sbin", "jars")}
    return {"/opt/java": frozenset({"bin/java"}), **spark}


def unit_file(path: Path) -> dict[str, list[tuple[str, str]]]:
    """A systemd unit as {section: [(key, value), ...]}; keys may repeat, as systemd allows."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current = None
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1]
            sections[current] = []
            continue
        assert current is not None and "=" in line, f"not a unit file line: {raw!r}"
        key, value = line.split("=", 1)
        sections[current].append((key.strip(), value.strip()))
    return sections


def test_systemd_unit_runs_the_service_and_stops_it_with_sigterm():
    unit = unit_file(DEPLOY / "systemd" / "meltwater.service")
    assert set(unit) == {"Unit", "Service", "Install"}
    service = dict(unit["Service"])
    command = service["ExecStart"].split()
    assert command[0].endswith("/meltwater") and command[1:3] == ["serve", "--config"]
    assert service["ExecStartPre"].split()[-1] == "--check"
    assert service["KillSignal"] == "SIGTERM" and service["Restart"] == "on-failure"
    # SIGTERM to the main process only; the service stops its JVM itself (it survives a
    # SIGTERM to its process group too: test_service_supervisors.py)
    assert service["KillMode"] == "mixed"
    assert service["RestartPreventExitStatus"] == "2"  # a bad config is not retried


def test_dockerfile_copies_the_packages_and_runs_serve():
    build = image()
    assert not build.problems, "\n".join(build.problems)
    copied = [step.args.split()[0] for step in dockerfile_steps(DOCKER / "Dockerfile")
              if step.stage == "wheel" and step.keyword == "COPY"]
    with (ROOT / "pyproject.toml").open("rb") as file:
        package_dirs = tomllib.load(file)["tool"]["setuptools"]["package-dir"].values()
    for folder in sorted({path.split("/")[0] for path in package_dirs}):
        assert folder in copied, f"Dockerfile does not copy package folder {folder}/"
    final = build.final
    assert final.entrypoint == ["/usr/bin/tini", "--", "/opt/entrypoint.sh"]
    assert final.cmd == ["serve", "--config", "/etc/meltwater/meltwater.toml"]
    assert final.has("/etc/meltwater")  # the folder a run mounts the configuration into
    text = (DOCKER / "Dockerfile").read_text()
    assert "HEALTHCHECK" in text and "/health" in text


def test_readmes_reference_files_that_exist():
    for readme in (DEPLOY / "README.md", DEPLOY / "spark" / "README.md", ROOT / "README.md"):
        for name in re.findall(r"`((?:deploy/|\.\./|examples/|docker/|systemd/|spark/|kubernetes/)"
                               r"[\w./-]+)`", readme.read_text()):
            target = (readme.parent / name).resolve()
            if not target.exists():
                target = ROOT / name
            assert target.exists(), f"{readme.relative_to(ROOT)} names {name}, missing"


def test_spark_submit_recipe_on_local_cluster(tmp_path, corpus, serve):
    """deploy/spark/submit.py under spark-submit --master local-cluster: the archive pipeline
    (available-now) holds exactly the table's change feed."""
    scenario = corpus.scenarios["mor_partitioned"]
    archive = tmp_path / "archive"
    config = tmp_path / "cluster.toml"
    config.write_text(f"""
[service]
http = "off"
progress = "lines"

[[pipelines]]
name = "mor"
table = "{scenario.location}"
checkpoint = "{tmp_path / 'chk'}"
trigger = "available-now"
[pipelines.options]
starting = "earliest"
[pipelines.sink]
type = "parquet"
path = "{archive}"
""")
    load_config(config)  # the recipe's config is a valid one
    result = serve.submit("--master", "local-cluster[2,1,1024]",
                          "--conf", "spark.executor.memory=768m",
                          str(DEPLOY / "spark" / "submit.py"), "--config", str(config))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    output = result.stdout + result.stderr  # spark-submit merges the driver's streams
    assert "pipeline finished" in output, output[-3000:]

    files = [str(p) for p in archive.rglob("*.parquet")]
    assert files, "the archive is empty"
    written = ds.dataset(files, format="parquet", partitioning="hive",
                         partition_base_dir=str(archive)).to_table()
    expected = changes(scenario.location).read_all()
    columns = [c for c in expected.column_names
               if c not in ("_commit_timestamp", "_commit_snapshot_id")]
    got = written.select(columns)
    got = got.append_column("_commit_snapshot_id", written["_commit_snapshot_id"].cast(pa.int64()))
    want = expected.select([*columns, "_commit_snapshot_id"])
    got = got.cast(want.schema)  # Spark's Parquet timestamps carry no zone; values are UTC
    got_rows, want_rows = row_multiset(got), row_multiset(want)
    assert got_rows == want_rows, (list((got_rows - want_rows).elements())[:3],
                                   list((want_rows - got_rows).elements())[:3], got.schema)
    assert expected.num_rows > 0


@pytest.mark.parametrize("name", ["sqlite-mirror.toml", "postgres-mirror.toml"])
def test_example_mirror_configs_name_a_mirror(name):
    config = load_config(DEPLOY / "examples" / name)
    assert {p.sink.type for p in config.pipelines} <= {"sqlite", "postgres"}


# ---- the image: what the Dockerfile copies and makes --------------------------------------


def test_dockerignore_sends_what_the_dockerfile_copies_and_nothing_else():
    ignore = DOCKER / "Dockerfile.dockerignore"
    for relative in ("pyproject.toml", "README.md", "planner/scans/scan.py", "cli/main.py",
                     "deploy/spark/submit.py", "deploy/docker/entrypoint.sh"):
        assert dockerignore_sends(ignore, relative), relative
    for relative in (".venv/bin/python", ".git/HEAD", "tests/conftest.py", "build/lib/x.py",
                     "planner/__pycache__/scan.cpython-311.pyc", "deploy/demo.py"):
        assert not dockerignore_sends(ignore, relative), relative


def test_the_model_finds_what_a_dockerfile_lacks(tmp_path):
    """The replay has teeth: a Dockerfile without the step that copies submit.py, or copying
    a file that is not there, or linking what it has not installed, is caught."""
    original = (DOCKER / "Dockerfile").read_text()
    broken = tmp_path / "Dockerfile"
    shutil.copy(DOCKER / "Dockerfile.dockerignore", tmp_path / "Dockerfile.dockerignore")
    broken.write_text(original.replace("COPY deploy/spark/submit.py", "COPY deploy/spark/gone.py")
                      .replace("ls /opt/spark/bin/spark-submit", "ls /opt/spark/bin/spark-gone"))
    build = replay(broken, ROOT, links=image_links(), wheel_name=wheel_name())
    assert any("deploy/spark/gone.py is not in the build context" in p for p in build.problems)
    assert any("/opt/spark/bin/spark-gone" in p for p in build.problems)
    assert not build.final.has("/opt/meltwater/submit.py")
    assert image().final.has("/opt/meltwater/submit.py")


def test_the_image_names_no_architecture_and_runs_as_a_numeric_user():
    """JAVA_HOME is a link made while building, not Debian's per-architecture folder; the
    same holds for every recipe here."""
    for path in (DOCKER / "Dockerfile", ENTRYPOINT, UNIT, *KUBERNETES.glob("*.yaml")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.strip().startswith("#"):
                continue
            assert not re.search(r"amd64|arm64|x86_64|aarch64|i386", line), \
                f"{path.relative_to(ROOT)}:{number} names an architecture: {line.strip()}"
    final = image().final
    assert final.env["JAVA_HOME"] == "/opt/java" and final.has("$JAVA_HOME/bin/java")
    assert final.env["SPARK_HOME"] == "/opt/spark"
    assert final.has("$SPARK_HOME/bin/spark-submit")
    assert final.has("$SPARK_HOME/jars/spark-kubernetes_*.jar")  # Spark's Kubernetes scheduler
    assert final.has(final.env["PYSPARK_PYTHON"]) and final.has("/usr/local/bin/meltwater")
    assert re.fullmatch(r"\d+(:\d+)?", final.user), "runAsNonRoot needs a numeric USER"


# ---- the entry point ---------------------------------------------------------------------


def test_entrypoint_is_an_executable_bash_script():
    assert os.access(ENTRYPOINT, os.X_OK)
    mode = subprocess.run(["git", "ls-files", "-s", str(ENTRYPOINT)], cwd=ROOT,
                          capture_output=True, text=True).stdout.split()
    assert mode and mode[0] == "100755", "git must keep entrypoint.sh executable"
    subprocess.run(["bash", "-n", str(ENTRYPOINT)], check=True)


def stub(path: Path) -> None:
    """An executable at `path` writing its own path and arguments, a line each, to $STUB_LOG."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('#!/bin/sh\n{ echo "$0"; for a in "$@"; do echo "$a"; done; } > "$STUB_LOG"\n')
    path.chmod(0o755)


def entrypoint(tmp_path: Path, *args: str, env: dict[str, str] | None = None,
               java_home: bool = True) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run entrypoint.sh with stand-ins for meltwater, spark-submit and java (the image's
    layout under tmp_path); the command it started, as argv, or [] if it started none."""
    for program in ("bin/meltwater", "spark/bin/spark-submit", "jdk/bin/java"):
        stub(tmp_path / program)
    if not (tmp_path / "bin" / "java").exists():
        (tmp_path / "bin" / "java").symlink_to(tmp_path / "jdk" / "bin" / "java")
    log = tmp_path / "started"
    log.unlink(missing_ok=True)
    environment = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "STUB_LOG": str(log),
                   "SPARK_HOME": str(tmp_path / "spark"), "HOME": str(tmp_path), **(env or {})}
    if java_home:
        environment["JAVA_HOME"] = str(tmp_path / "jdk")
    result = subprocess.run(["bash", str(ENTRYPOINT), *args], env=environment, cwd=tmp_path,
                            capture_output=True, text=True, timeout=30)
    return result, log.read_text().splitlines() if log.exists() else []


def test_entrypoint_serve_is_the_default(tmp_path):
    meltwater = str(tmp_path / "bin" / "meltwater")
    config = ["--config", "/etc/meltwater/meltwater.toml"]
    assert entrypoint(tmp_path, *image().final.cmd)[1] == [meltwater, "serve", *config]
    assert entrypoint(tmp_path, *config)[1] == [meltwater, "serve", *config]
    assert entrypoint(tmp_path)[1] == [meltwater, "serve"]
    # anything else runs as given: `docker run meltwater meltwater version`
    assert entrypoint(tmp_path, "meltwater", "version")[1] == [meltwater, "version"]


def test_entrypoint_driver_is_spark_submit_in_client_mode_bound_to_the_pod(tmp_path):
    args = ["--properties-file", "/opt/spark/conf/spark.properties", "--class",
            "org.apache.spark.deploy.PythonRunner", "local:///opt/meltwater/submit.py",
            "--config", "/etc/meltwater/meltwater.toml"]
    result, started = entrypoint(tmp_path, "driver", *args,
                                 env={"SPARK_DRIVER_BIND_ADDRESS": "10.1.2.3"})
    assert result.returncode == 0, result.stderr
    assert started == [str(tmp_path / "spark" / "bin" / "spark-submit"),
                       "--conf", "spark.driver.bindAddress=10.1.2.3",
                       "--conf", "spark.executorEnv.SPARK_DRIVER_POD_IP=10.1.2.3",
                       "--deploy-mode", "client", *args]
    result, started = entrypoint(tmp_path, "driver", *args)  # not in a driver pod
    assert result.returncode != 0 and not started
    assert "SPARK_DRIVER_BIND_ADDRESS" in result.stderr


EXECUTOR_POD = {  # what Spark sets on an executor pod (BasicExecutorFeatureStep)
    "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@10.1.2.3:7078",
    "SPARK_EXECUTOR_ID": "4", "SPARK_EXECUTOR_CORES": "2", "SPARK_EXECUTOR_MEMORY": "2048m",
    "SPARK_APPLICATION_ID": "spark-0123", "SPARK_EXECUTOR_POD_IP": "10.1.2.9",
    "SPARK_EXECUTOR_POD_NAME": "meltwater-exec-4", "SPARK_RESOURCE_PROFILE_ID": "0",
    "SPARK_CONF_DIR": "/opt/spark/conf",
    "SPARK_JAVA_OPT_0": "-Dspark.driver.port=7078",
    "SPARK_JAVA_OPT_1": "-Dspark.app.name=meltwater orders",
    "SPARK_JAVA_OPT_10": "-Dspark.opt=10", "SPARK_JAVA_OPT_2": "-Dspark.opt=2",
}


def test_entrypoint_executor_starts_spark_kubernetes_executor_backend(tmp_path):
    result, started = entrypoint(tmp_path, "executor", env=EXECUTOR_POD)
    assert result.returncode == 0, result.stderr
    java, *argv = started
    assert java == str(tmp_path / "jdk" / "bin" / "java")
    assert argv[:6] == ["-Dspark.driver.port=7078", "-Dspark.app.name=meltwater orders",
                        "-Dspark.opt=2", "-Dspark.opt=10", "-Xms2048m", "-Xmx2048m"]
    classpath = argv[argv.index("-cp") + 1].split(":")
    assert classpath[:2] == ["/opt/spark/conf", f"{tmp_path / 'spark'}/jars/*"]
    backend = argv.index("org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend")
    flags = dict(zip(argv[backend + 1::2], argv[backend + 2::2], strict=True))
    assert flags == {"--driver-url": EXECUTOR_POD["SPARK_DRIVER_URL"], "--executor-id": "4",
                     "--cores": "2", "--app-id": "spark-0123", "--hostname": "10.1.2.9",
                     "--resourceProfileId": "0", "--podName": "meltwater-exec-4"}
    # the flags are the ones this Spark's executor backend parses
    assert set(flags) <= kubernetes_jar_strings(
        "org/apache/spark/scheduler/cluster/k8s/KubernetesExecutorBackend$.class", rb"--\w[\w-]*")

    missing = dict(EXECUTOR_POD)
    del missing["SPARK_EXECUTOR_ID"]
    result, started = entrypoint(tmp_path, "executor", env=missing)
    assert result.returncode != 0 and not started and "SPARK_EXECUTOR_ID" in result.stderr


def test_entrypoint_reads_the_variables_spark_sets_on_its_pods():
    """Every SPARK_* variable the entry point reads is one Spark's Kubernetes code names
    (org.apache.spark.deploy.k8s.Constants in the jar pyspark installs), but for SPARK_HOME
    (the image's) and the classpath additions Hadoop setups and Spark's images use."""
    read = set(re.findall(r"\$\{?!?(SPARK_[A-Z_]+)", ENTRYPOINT.read_text()))
    read |= {"SPARK_JAVA_OPT_"} if "SPARK_JAVA_OPT_" in ENTRYPOINT.read_text() else set()
    ours = {"SPARK_HOME", "SPARK_EXTRA_CLASSPATH", "SPARK_DIST_CLASSPATH", "SPARK_USER_NAME"}
    spark = kubernetes_jar_strings("org/apache/spark/deploy/k8s/Constants$.class",
                                   rb"SPARK_[A-Z_]+")
    assert read - ours <= spark, read - ours - spark
    assert {"SPARK_DRIVER_BIND_ADDRESS", "SPARK_DRIVER_URL", "SPARK_EXECUTOR_POD_NAME"} <= read


def kubernetes_jar_strings(member: str, pattern: bytes) -> set[str]:
    """The strings matching `pattern` in a class of the spark-kubernetes jar pyspark ships."""
    jar = next((pyspark_home() / "jars").glob("spark-kubernetes_*.jar"))
    with zipfile.ZipFile(jar) as archive:
        return {m.decode() for m in re.findall(pattern, archive.read(member))}


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv")
                    or not list(Path("/usr/lib").glob("*/libnss_wrapper.so")),
                    reason="needs root, setpriv and libnss-wrapper (make sysdeps installs it)")
def test_entrypoint_names_a_user_id_that_has_no_passwd_entry():
    """Kubernetes may run the image as any uid: the entry point gives it a passwd entry
    (nss_wrapper), which Hadoop's login in Spark's JVM needs."""
    uid = 54321
    assert subprocess.run(["getent", "passwd", str(uid)], capture_output=True).returncode != 0
    work = Path(tempfile.mkdtemp())
    try:
        work.chmod(0o777)
        program = work / "bin" / "meltwater"
        program.parent.mkdir()
        program.write_text('#!/bin/sh\n{ id -un; getent passwd "$(id -u)"; } > "$STUB_LOG"\n')
        program.chmod(0o755)
        log = work / "started"
        # TMPDIR: the entry point's passwd and group files (mktemp) go where this test
        # removes them, not into /tmp
        env = {"PATH": f"{program.parent}:/usr/bin:/bin", "STUB_LOG": str(log),
               "HOME": "/var/lib/meltwater", "JAVA_HOME": "/nonexistent", "TMPDIR": str(work)}
        result = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}",
                                 "--clear-groups", "bash", str(ENTRYPOINT), "serve"],
                                env=env, cwd=work, capture_output=True, text=True, timeout=30)
        assert result.returncode == 0, result.stderr
        name, entry = log.read_text().splitlines()
        assert name == "meltwater"
        assert entry.split(":")[2:4] == [str(uid), str(uid)]
        assert entry.split(":")[5] == "/var/lib/meltwater"
    finally:
        shutil.rmtree(work)


def test_entrypoint_finds_java_on_path_without_java_home(tmp_path):
    _, started = entrypoint(tmp_path, "executor", env=EXECUTOR_POD, java_home=False)
    assert started[0] == str(tmp_path / "jdk" / "bin" / "java")


# ---- the Kubernetes recipes ----------------------------------------------------------------


def manifests() -> dict[tuple[str, str], dict]:
    """deploy/kubernetes/meltwater.yaml's objects by (kind, name)."""
    documents = yaml.safe_load_all((KUBERNETES / "meltwater.yaml").read_text())
    return {(d["kind"], d["metadata"]["name"]): d for d in documents if d}


def container_paths(container: dict, pod: dict, final) -> list[str]:
    """What in `container`'s command line names a path that is not in the image (and not
    under one of its volume mounts), or a mount whose volume the pod does not define."""
    mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", ())}
    volumes = {v["name"] for v in pod.get("volumes", ())}
    wrong = [f"mount {path}: no volume {name}" for path, name in mounts.items()
             if name not in volumes]
    for word in container.get("args", []):
        path = word.removeprefix("local://")
        if not path.startswith("/") or final.has(path):
            continue
        if not any(path.startswith(mount.rstrip("/") + "/") for mount in mounts):
            wrong.append(path)
    return wrong


def test_kubernetes_deployment_runs_the_image_as_a_driver():
    objects = manifests()
    final = image().final
    deployment = objects["Deployment", "meltwater"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = container["args"]
    assert args[0] in MODES and args[0] == "driver"
    assert container_paths(container, pod, final) == []
    conf = dict(a.split("=", 1) for a in args if a.startswith("spark.") and "=" in a)
    assert conf["spark.kubernetes.container.image"] == container["image"]  # executors: the same
    env = {e["name"] for e in container["env"]}
    assert {"SPARK_DRIVER_BIND_ADDRESS"} <= env  # entrypoint.sh's driver needs it
    for word in args:
        for name in re.findall(r"\$\((\w+)\)", word):
            assert name in env, f"{word} refers to ${name}, which the container does not set"
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"]["type"] \
        == "Recreate"  # never two drivers writing one checkpoint
    # the objects it refers to are in the manifest, and the service account may run executors
    assert ("ServiceAccount", pod["serviceAccountName"]) in objects
    binding = objects["RoleBinding", "meltwater-spark-driver"]
    assert binding["subjects"][0]["name"] == pod["serviceAccountName"]
    rules = objects["Role", binding["roleRef"]["name"]]["rules"]
    assert any("pods" in r["resources"] and {"create", "delete", "watch"} <= set(r["verbs"])
               for r in rules)
    for volume in pod["volumes"]:
        if "configMap" in volume:
            assert ("ConfigMap", volume["configMap"]["name"]) in objects
        if "persistentVolumeClaim" in volume:
            assert ("PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"]) \
                in objects
    uid = final.user.split(":")[0]
    assert str(pod["securityContext"]["fsGroup"]) == uid  # the image's user writes the state


def test_kubernetes_config_map_is_a_valid_configuration(tmp_path):
    """The configuration the Deployment mounts parses, sits where its arguments name it,
    and serves /health on the port the readiness probe asks."""
    objects = manifests()
    config_map = objects["ConfigMap", "meltwater-config"]
    pod = objects["Deployment", "meltwater"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "config")
    named = container["args"][container["args"].index("--config") + 1]
    assert named == f"{mount['mountPath']}/meltwater.toml"
    assert "meltwater.toml" in config_map["data"]
    file = tmp_path / "meltwater.toml"
    file.write_text(config_map["data"]["meltwater.toml"])
    config = load_config(file)
    assert config.spark_master is None  # spark-submit chooses it
    assert config.http_host == "0.0.0.0"  # the kubelet's probe comes from outside the pod
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    assert ports[container["readinessProbe"]["httpGet"]["port"]] == config.http_port
    state = next(m for m in container["volumeMounts"] if m["name"] == "state")
    for pipeline in config.pipelines:
        assert pipeline.checkpoint.startswith(state["mountPath"] + "/")


def test_cluster_mode_driver_template_and_spark_submit_line():
    """deploy/spark/README.md's Kubernetes line: the application is in the image, the pod
    template is in the repository, and the template mounts what the Deployment mounts."""
    objects = manifests()
    final = image().final
    lines = [c for c in readme_commands(DEPLOY / "spark" / "README.md") if "k8s://" in " ".join(c)]
    assert len(lines) == 1
    command = lines[0]
    conf = dict(command[i + 1].split("=", 1) for i, w in enumerate(command) if w == "--conf")
    template_file = ROOT / conf["spark.kubernetes.driver.podTemplateFile"]
    template = yaml.safe_load(template_file.read_text())
    deployment = objects["Deployment", "meltwater"]["spec"]["template"]["spec"]
    assert conf["spark.kubernetes.container.image"] == deployment["containers"][0]["image"]
    assert ("ServiceAccount", conf["spark.kubernetes.authenticate.driver.serviceAccountName"]) \
        in objects
    application = next(w for w in command if w.startswith("local://"))
    assert final.has(application.removeprefix("local://"))
    (container,) = template["spec"]["containers"]
    container = {**container, "args": command[command.index(application):]}
    assert container_paths(container, template["spec"], final) == []
    assert template["spec"]["volumes"] == deployment["volumes"]
    assert container["volumeMounts"] == deployment["containers"][0]["volumeMounts"]


# ---- install lines and what the documents name --------------------------------------------


def readme_commands(path: Path) -> list[list[str]]:
    """The shell commands of a document's sh code blocks (or of a unit file's `#   ` comment
    lines), continuation lines joined, comments left out."""
    text = path.read_text()
    if path.suffix == ".md":
        blocks = re.findall(r"```(?:sh|bash)\n(.*?)```", text, re.S)
    else:
        blocks = ["\n".join(line[4:] for line in text.splitlines() if line.startswith("#   "))]
    commands = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"(^|\s)#.*", "", line)  # a comment; `archive.tar.gz#env` is none
            lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
            lexer.whitespace_split = True
            lexer.commenters = ""
            command: list[str] = []
            for word in [*lexer, ";"]:
                if word in (";", "&&", "||", "|"):
                    if command:
                        commands.append(command)
                    command = []
                else:
                    command.append(word)
    return commands


def test_install_lines_build_the_wheel_and_never_ask_an_index_for_meltwater():
    """meltwater is not on PyPI: no document says `pip install meltwater`; each that installs
    it builds the wheel with the command the `build` test runs."""
    for path in (*INSTALL_DOCS, *DEPLOY.rglob("*.md"), DOCKER / "Dockerfile",
                 ROOT / "planner" / "table" / "catalogs.py"):
        text = path.read_text()
        for match in re.finditer(r"pip install ([^`\n)]*)", text):
            words = shlex.split(match.group(1).replace("\\", " "), comments=True)
            for word in words:
                if word.startswith("-"):
                    continue
                assert not re.fullmatch(r"meltwater(\[[\w,-]+\])?", word), \
                    f"{path.relative_to(ROOT)}: `pip install {match.group(1)}` asks an index"
    for path in INSTALL_DOCS:
        assert WHEEL_COMMAND in path.read_text(), f"{path.relative_to(ROOT)} lacks the wheel"


def test_documents_name_files_that_exist_and_the_wheel_that_is_built():
    """What the code blocks and the inline code of the documents name in the repository is
    there (`deploy/...`, `tests/...`), and a wheel they name is the one `pip wheel` makes."""
    for path in INSTALL_DOCS:
        inline = re.findall(r"`([^`\n]+)`", path.read_text()) if path.suffix == ".md" else []
        for command in [*readme_commands(path), *(span.split() for span in inline)]:
            for word in command:
                for candidate in (word, word.split("=", 1)[-1]):
                    if re.match(r"(deploy|tests|bench)/", candidate):
                        assert list(ROOT.glob(candidate)), \
                            f"{path.relative_to(ROOT)} names {candidate}, which is missing"
        for name in re.findall(r"meltwater-[\w.]+-py3-none-any\.whl", path.read_text()):
            assert name == wheel_name(), f"{path.relative_to(ROOT)} names {name}"


# ---- systemd --------------------------------------------------------------------------------


def test_systemd_unit_user_install_lines_and_java():
    unit = unit_file(UNIT)
    service = dict(unit["Service"])
    environment = [v for k, v in unit["Service"] if k == "Environment"]
    assert not any("JAVA_HOME" in v for v in environment)
    # the install lines make the virtualenv the unit runs from
    venv = next(c[-1] for c in readme_commands(UNIT) if c[:3] == ["python3", "-m", "venv"])
    assert service["ExecStart"].startswith(f"{venv}/bin/meltwater ")
    assert f"PYSPARK_PYTHON={venv}/bin/python" in environment
    # its user is the one meltwater.sysusers creates, with the state directory as home
    (line,) = [ln for ln in SYSUSERS.read_text().splitlines() if ln and not ln.startswith("#")]
    kind, name, _, _gecos, home, _shell = shlex.split(line)
    assert kind == "u" and name == service["User"] == service["Group"]
    assert home == service["WorkingDirectory"] == f"/var/lib/{service['StateDirectory']}"
    assert any(c[:2] == ["cp", "deploy/systemd/meltwater.sysusers"] for c in readme_commands(UNIT))


@pytest.mark.skipif(not shutil.which("systemd-sysusers"), reason="needs systemd-sysusers")
def test_systemd_sysusers_creates_the_units_user(tmp_path):
    (tmp_path / "etc" / "sysusers.d").mkdir(parents=True)
    shutil.copy(SYSUSERS, tmp_path / "etc" / "sysusers.d" / "meltwater.conf")
    subprocess.run(["systemd-sysusers", f"--root={tmp_path}"], check=True, capture_output=True)
    users = {line.split(":")[0]: line.split(":") for line in
             (tmp_path / "etc" / "passwd").read_text().splitlines()}
    service = dict(unit_file(UNIT)["Service"])
    assert users[service["User"]][5] == service["WorkingDirectory"]
    assert users[service["User"]][6] == "/usr/sbin/nologin"
    assert (tmp_path / "etc" / "group").read_text().startswith(f"{service['Group']}:")


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="needs systemd-analyze")
def test_systemd_analyze_verify_accepts_the_unit(tmp_path):
    """`systemd-analyze verify` in a root holding the unit, systemd's own units and an
    executable where the install lines put meltwater: no warning at all."""
    for program in ("meltwater", "python"):
        stub(tmp_path / "opt" / "meltwater" / "bin" / program)
    shutil.copytree("/usr/lib/systemd/system", tmp_path / "usr" / "lib" / "systemd" / "system",
                    symlinks=True)
    units = tmp_path / "etc" / "systemd" / "system"
    units.mkdir(parents=True)
    shutil.copy(UNIT, units)
    result = subprocess.run(["systemd-analyze", "verify", "--man=no", f"--root={tmp_path}",
                             str(units / UNIT.name)], capture_output=True, text=True)
    assert result.returncode == 0 and result.stderr.strip() == "", result.stderr


# ---- the build lane: the wheel in a fresh virtualenv, the image where Docker runs -----------


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory) -> Path:
    """The wheel built as the documents and the image's first stage build it, from exactly
    the files that stage copies, installed into a fresh virtualenv: its bin/ folder."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "src"
    source.mkdir()
    for step in dockerfile_steps(DOCKER / "Dockerfile"):
        if step.stage == "wheel" and step.keyword == "COPY":
            for name in step.args.split()[:-1]:
                if (ROOT / name).is_dir():
                    shutil.copytree(ROOT / name, source / name,
                                    ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    shutil.copy(ROOT / name, source / name)
    _python, _, pip, *wheel_args = WHEEL_COMMAND.split()
    built = subprocess.run([sys.executable, "-m", pip, *wheel_args], cwd=source,
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    wheels = list((source / "dist").glob("*.whl"))
    assert [w.name for w in wheels] == [wheel_name()]
    venv = work / "opt" / "meltwater"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    installed = subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", str(wheels[0])],
                               capture_output=True, text=True, timeout=1200)
    assert installed.returncode == 0, installed.stdout[-2000:] + installed.stderr[-2000:]
    return venv / "bin"


def test_wheel_installs_into_a_fresh_virtualenv_and_runs(wheel_venv, tmp_path):
    version = subprocess.run([str(wheel_venv / "meltwater"), "version"], capture_output=True,
                             text=True, timeout=120, cwd=tmp_path)
    assert version.returncode == 0, version.stderr
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert f"meltwater {project['version']}" in version.stdout
    helped = subprocess.run([str(wheel_venv / "meltwater"), "--help"], capture_output=True,
                            text=True, timeout=120, cwd=tmp_path)
    assert helped.returncode == 0 and "serve" in helped.stdout
    # meltwater comes from the wheel, not from this checkout
    where = subprocess.run([str(wheel_venv / "python"), "-c",
                            "import meltwater.cli.main as m; print(m.__file__)"],
                           capture_output=True, text=True, cwd=tmp_path, check=True).stdout
    assert where.startswith(str(wheel_venv.parent)), where
    # README.md's extras line: a wheel takes them as a checkout does
    wheel = wheel_venv.parents[2] / "src" / "dist" / wheel_name()
    extras = subprocess.run([str(wheel_venv / "pip"), "install", "--dry-run", f"{wheel}[sql]"],
                            capture_output=True, text=True, timeout=600)
    assert extras.returncode == 0, extras.stderr[-2000:]
    assert re.search(r"would install .*sqlalchemy", extras.stdout.lower()), extras.stdout[-2000:]


def test_entrypoint_driver_runs_the_wheels_spark(wheel_venv, tmp_path):
    """The image's layout on this machine: SPARK_HOME's folders links to the wheel's pyspark,
    JAVA_HOME left to the entry point to find; `driver --version` starts the real
    spark-submit."""
    site, version = subprocess.run(
        [str(wheel_venv / "python"), "-c",
         "import os, pyspark; print(os.path.dirname(pyspark.__file__), pyspark.__version__)"],
        capture_output=True, text=True, check=True).stdout.split()
    (tmp_path / "spark" / "conf").mkdir(parents=True)
    for name in ("bin", "sbin", "jars"):
        (tmp_path / "spark" / name).symlink_to(Path(site) / name)
    java = shutil.which("java")
    assert java, "the build lane needs a Java runtime on PATH (make sysdeps)"
    env = {"PATH": f"{wheel_venv}:{Path(java).parent}:/usr/bin:/bin",
           "SPARK_HOME": str(tmp_path / "spark"), "SPARK_DRIVER_BIND_ADDRESS": "127.0.0.1",
           "HOME": str(tmp_path)}
    result = subprocess.run(["bash", str(ENTRYPOINT), "driver", "--version"], env=env,
                            capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert f"version {version}" in result.stdout + result.stderr  # Spark's banner
    result = subprocess.run(["bash", str(ENTRYPOINT), "meltwater", "version"], env=env,
                            capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0 and "pyspark" in result.stdout, result.stderr


@pytest.fixture(scope="module")
def docker_engine() -> str:
    """The docker client, where a Docker engine answers it; the test is skipped elsewhere."""
    client = shutil.which("docker")
    if client is None:
        pytest.skip("no docker client")
    answer = subprocess.run([client, "version", "--format", "{{.Server.Version}}"],
                            capture_output=True, text=True, timeout=60)
    if answer.returncode != 0:
        pytest.skip(f"no Docker engine answers: {answer.stderr.strip()[:200]}")
    return client


def test_docker_image_builds_and_runs(docker_engine):
    """`docker build` as deploy/README.md says, then the image's three faces: meltwater
    itself, the files the recipes name, and the driver's spark-submit."""
    tag = f"meltwater-test:{os.getpid()}"
    built = subprocess.run([docker_engine, "build", "-f", str(DOCKER / "Dockerfile"), "-t", tag,
                            str(ROOT)], capture_output=True, text=True, timeout=3600)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    try:
        def run(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run([docker_engine, "run", "--rm", *args], capture_output=True,
                                  text=True, timeout=600)

        version = run(tag, "meltwater", "version")
        assert version.returncode == 0 and "meltwater" in version.stdout, version.stderr
        files = run("--entrypoint", "/bin/sh", tag, "-c",
                    'test -f /opt/meltwater/submit.py && test -d /etc/meltwater && '
                    '"$JAVA_HOME/bin/java" -version && ls "$SPARK_HOME"/jars/spark-kubernetes_*')
        assert files.returncode == 0, files.stdout + files.stderr
        driver = run("-e", "SPARK_DRIVER_BIND_ADDRESS=127.0.0.1", tag, "driver", "--version")
        assert driver.returncode == 0, driver.stdout[-2000:] + driver.stderr[-2000:]
        check = run(tag, "serve", "--config", "/etc/meltwater/meltwater.toml", "--check")
        assert check.returncode == 2  # no configuration mounted: one line, exit 2
    finally:
        subprocess.run([docker_engine, "image", "rm", "-f", tag], capture_output=True)
