"""Object-store benchmark (issue 14): the scan table from S3 against the same table on local
disk, by meltwater, pyiceberg and DuckDB, in one run.

Usage: .venv/bin/python bench/s3scan.py [--repeats 5] [--quick] [--skip ...]

The scan benchmark's merge-on-read table (`scan_mor`: 5M rows, 200 data files, 200
position delete files) exists twice, both written by Iceberg Java 1.10.2 on Spark 3.5: on
local disk (bench/writer/make_tables.py, as bench/scan.py reads it) and at s3://lake
(bench/s3writer/make_s3_table.py, through testbed's LocalBucketFileSystem).
The S3 copy is uploaded byte for byte to a SeaweedFS on loopback (testbed/seaweed_server.py)
and registered in its Iceberg REST catalog as db.scan_mor. Then, interleaved in rounds
(`timing.measure_rounds`): full reads by meltwater (local path; `lake.db.scan_mor` by
identifier; `s3://lake/db/scan_mor` by location), pyiceberg, DuckDB and raw pyarrow (each
local and on S3), the CLI as a whole process, the change read of the DELETE commit and a
cold plan. Before timing, one counting run per reader through a recording proxy says how
many S3 requests and bytes each read takes. Prints the figures and ratios; writes
bench/results/s3scan.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import peers
from tables import S3ScanTable, Sizes, ensure_s3_scan_table, ensure_tables
from timing import Measurement, Peer, RunFn, measure_rounds

RESULTS = Path(__file__).resolve().parent / "results" / "s3scan.json"
CATALOG = "lake"  # the catalog name meltwater is given, as PYICEBERG_CATALOG__LAKE__*
COUNTED = "counted"  # the same catalog, its S3 endpoint the recording proxy
NAMESPACE, TABLE = "db", "scan_mor"
IDENTIFIER = f"{CATALOG}.{NAMESPACE}.{TABLE}"
SKIPPABLE = ("local", "identifier", "location", "pyiceberg", "duckdb", "raw-pyarrow", "cli",
             "changes", "plan", "requests")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=5_000_000,
                        help="rows in the scan table before deletes (default 5,000,000)")
    parser.add_argument("--files", type=int, default=200,
                        help="data files in the scan table (default 200)")
    parser.add_argument("--manifests", type=int, default=600,
                        help="bench/scan.py's planning table size; part of the tables' cache "
                             "key only (default 600)")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds (default 5)")
    parser.add_argument("--quick", action="store_true", help="one timed round")
    parser.add_argument("--skip", nargs="*", default=[], choices=SKIPPABLE,
                        help="local: every local-disk peer; identifier, location: meltwater's "
                             "S3 reads that way; requests: the counting runs")
    parser.add_argument("--out", type=Path, default=RESULTS)
    return parser.parse_args(argv)


# -- the lake: SeaweedFS with the S3 copy uploaded and registered ----------------------------
@dataclass
class Lake:
    """A running SeaweedFS holding the S3 copy, and how each reader reaches it."""

    server: Any  # testbed/seaweed_server.SeaweedServer
    table: S3ScanTable
    uploaded: Any  # testbed/local_bucket.Uploaded

    @property
    def catalog_properties(self) -> dict[str, str]:
        return self.server.catalog_properties()

    @property
    def io_properties(self) -> dict[str, str]:
        return self.server.file_io_properties()

    @property
    def location(self) -> str:
        return self.table.scan["location"]

    @property
    def metadata_location(self) -> str:
        return self.table.scan["metadata_location"]


def start_lake(table: S3ScanTable) -> Lake:
    """SeaweedFS on loopback; every object of the S3 copy PUT under its own key; db.scan_mor
    registered in the REST catalog at Iceberg Java's current metadata file."""
    from local_bucket import upload_objects
    from pyiceberg.catalog import load_catalog
    from seaweed_server import SeaweedServer

    server = SeaweedServer().start()
    try:
        rest = load_catalog("bench-setup", **server.catalog_properties())
        rest.create_namespace_if_not_exists(NAMESPACE)  # the table bucket wants it first
        objects = {p.relative_to(table.buckets).as_posix(): p
                   for p in sorted(table.buckets.rglob("*")) if p.is_file()}
        uploaded = upload_objects(objects, server.s3_filesystem())
        rest.register_table((NAMESPACE, TABLE), table.scan["metadata_location"])
    except BaseException:
        server.stop()
        raise
    return Lake(server, table, uploaded)


def catalog_env(name: str, properties: dict[str, str]) -> dict[str, str]:
    """pyiceberg's environment form of a catalog (`PYICEBERG_CATALOG__LAKE__S3__ENDPOINT`)."""
    return {f"PYICEBERG_CATALOG__{name.upper()}__"
            + key.upper().replace(".", "__").replace("-", "_"): value
            for key, value in properties.items()}


# -- readers ---------------------------------------------------------------------------------
def meltwater_scan(table: str, io: Any = None) -> RunFn:
    scan = peers._meltwater_scan_function()
    return lambda: scan(table, io=io).read_all().num_rows


def meltwater_changes(table: str, parent: int) -> RunFn:
    """The changes of the table's last commit (the MOR DELETE): every removed row."""
    import meltwater.stream

    return lambda: meltwater.stream.changes(table, from_snapshot_id=parent).read_all().num_rows


def meltwater_plan(table: str) -> RunFn:
    import meltwater.stream

    return lambda: len(meltwater.stream.plan(table).tasks)


def clear_manifest_cache() -> None:
    from meltwater.planner.table.manifests import MANIFEST_CACHE

    MANIFEST_CACHE.clear()


def static_table(metadata_location: str, io: dict[str, str] | None = None) -> Any:
    from pyiceberg.table import StaticTable

    return StaticTable.from_metadata(metadata_location, properties=io or {})


def pyiceberg_s3_reader(catalog: dict[str, str], io: dict[str, str]) -> RunFn:
    """pyiceberg by identifier, as far as SeaweedFS allows: loadTable for the metadata
    location (its answer's metadata is empty for a registered table), then the table read
    from that file with the catalog's FileIO properties."""
    from pyiceberg.catalog import load_catalog

    rest = load_catalog("bench-pyiceberg", **catalog)

    def run() -> int:
        location = rest.load_table((NAMESPACE, TABLE)).metadata_location
        return static_table(location, io).scan().to_arrow().num_rows

    return run


def raw_pyarrow_s3_reader(lake: Lake, endpoint: str | None = None) -> RunFn:
    """The S3 ceiling: the live data files (listed before timing) by one multi-threaded
    pyarrow dataset scan, no deletes."""
    import pyarrow.dataset as ds
    import pyarrow.fs as pafs

    tasks = static_table(lake.metadata_location, lake.io_properties).scan().plan_files()
    paths = [task.file.file_path.removeprefix("s3://") for task in tasks]
    server = lake.server
    fs = pafs.S3FileSystem(access_key=server.access_key, secret_key=server.secret_key,
                           endpoint_override=endpoint or server.s3_endpoint, scheme="http",
                           region="us-east-1")
    return lambda: ds.dataset(paths, format="parquet", filesystem=fs).to_table(
        use_threads=True).num_rows


def duckdb_s3_reader(lake: Lake, endpoint: str | None = None, cache: bool = False) -> RunFn:
    """DuckDB's iceberg_scan on the S3 metadata file, httpfs and an S3 secret for SeaweedFS
    (path-style, plain HTTP); the extensions come from the duckdb-extension-* wheels.

    DuckDB keeps what it read from remote files in memory (`enable_external_file_cache`, on
    by default): after the warm-up its reads would never reach S3 (SeaweedFS used no CPU at
    all), so it is off unless `cache`. For local files it makes no difference."""
    server = lake.server
    con = peers.duckdb_connection(("duckdb_extension_httpfs",))
    if not cache:
        con.execute("SET enable_external_file_cache = false")
    host = (endpoint or server.s3_endpoint).removeprefix("http://")
    con.execute(f"CREATE SECRET seaweed (TYPE s3, KEY_ID '{server.access_key}', "
                f"SECRET '{server.secret_key}', REGION 'us-east-1', ENDPOINT '{host}', "
                "URL_STYLE 'path', USE_SSL false)")
    query = f"SELECT * FROM iceberg_scan('{lake.metadata_location}')"
    return lambda: con.execute(query).fetch_arrow_table().num_rows


def cli_reader(table: str, out: Path, env: dict[str, str]) -> RunFn:
    """`meltwater scan TABLE --format parquet --output OUT` as a whole process."""
    import pyarrow.parquet as pq

    command = [str(Path(sys.executable).parent / "meltwater"), "scan", table, "--format",
               "parquet", "--output", str(out)]

    def run() -> int:
        result = subprocess.run(command, env=env, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"meltwater scan exited {result.returncode}: "
                               f"{result.stderr.strip()[-300:]}")
        return pq.read_metadata(out).num_rows

    return run


def parent_of_current(metadata_location: str, io: dict[str, str] | None = None) -> int:
    return static_table(metadata_location, io).current_snapshot().parent_snapshot_id


# -- CPU: this process (and its children: the CLI), and SeaweedFS --------------------------------
class CpuMeter:
    """Wraps each peer's run to record the CPU seconds it cost this process and its waited-for
    children (user + system) and the SeaweedFS server process, with its wall seconds.

    On 2 cores SeaweedFS serves the reads on the same cores the reader decodes on, so an S3
    read's wall time is bounded below by (reader CPU + server CPU) / 2."""

    def __init__(self, server_pid: int) -> None:
        self.server_pid = server_pid
        self.samples: dict[str, list[tuple[float, float, float]]] = {}

    def _client(self) -> float:
        import resource

        own = resource.getrusage(resource.RUSAGE_SELF)
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime

    def _server(self) -> float:
        fields = Path(f"/proc/{self.server_pid}/stat").read_text().rsplit(")", 1)[1].split()
        return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")

    def wrap(self, peer: Peer) -> Peer:
        def make() -> RunFn:
            run = peer.make()

            def measured() -> int:
                client, server, wall = self._client(), self._server(), time.perf_counter()
                rows = run()
                self.samples.setdefault(peer.name, []).append(
                    (self._client() - client, self._server() - server,
                     time.perf_counter() - wall))
                return rows

            return measured

        return Peer(peer.name, peer.what, make, peer.before)

    def summary(self) -> dict[str, dict[str, float]]:
        """Medians over every run but the first (the cold warm-up)."""
        out = {}
        for name, samples in self.samples.items():
            warm = samples[1:] or samples
            out[name] = {key: statistics.median(s[i] for s in warm) for i, key in
                         enumerate(("client_cpu_seconds", "server_cpu_seconds", "wall_seconds"))}
            out[name]["runs"] = len(warm)
        return out


# -- the peers ---------------------------------------------------------------------------------
def scan_peers(local: dict[str, Any], lake: Lake, work: Path, skip: list[str]) -> list[Peer]:
    location, metadata = local["location"], local["metadata_location"]
    env = dict(os.environ)
    candidates = [
        ("local", "meltwater local", "meltwater.stream.scan(local path).read_all()",
         lambda: meltwater_scan(location)),
        ("identifier", "meltwater S3 id", f"meltwater.stream.scan('{IDENTIFIER}').read_all()",
         lambda: meltwater_scan(IDENTIFIER)),
        ("location", "meltwater S3 loc", f"meltwater.stream.scan('{lake.location}').read_all()",
         lambda: meltwater_scan(lake.location)),
        ("pyiceberg", "pyiceberg local", "StaticTable.from_metadata(m).scan().to_arrow()",
         lambda: peers.pyiceberg_reader(metadata)),
        ("pyiceberg", "pyiceberg S3", "RestCatalog.load_table -> metadata location; "
         "StaticTable.from_metadata(m, s3 props).scan().to_arrow()",
         lambda: pyiceberg_s3_reader(lake.catalog_properties, lake.io_properties)),
        ("duckdb", "duckdb local", "SELECT * FROM iceberg_scan(m) as Arrow",
         lambda: peers.duckdb_reader(metadata)),
        ("duckdb", "duckdb S3", "httpfs + S3 secret, external file cache off; SELECT * FROM "
         "iceberg_scan('s3://...') as Arrow", lambda: duckdb_s3_reader(lake)),
        ("duckdb", "duckdb S3 cached", "the same with DuckDB's default in-memory cache of "
         "remote files: warm runs never reach S3", lambda: duckdb_s3_reader(lake, cache=True)),
        ("raw-pyarrow", "raw pyarrow local", "pyarrow.dataset on the live data files, no "
         "deletes", lambda: peers.raw_pyarrow_reader(peers.live_data_files(metadata))),
        ("raw-pyarrow", "raw pyarrow S3", "pyarrow.dataset on the live data files on S3, no "
         "deletes", lambda: raw_pyarrow_s3_reader(lake)),
        ("cli", "CLI local", "meltwater scan <local path> --format parquet --output F",
         lambda: cli_reader(location, work / "cli-local.parquet", env)),
        ("cli", "CLI S3 id", f"meltwater scan {IDENTIFIER} --format parquet --output F",
         lambda: cli_reader(IDENTIFIER, work / "cli-s3.parquet", env)),
    ]
    return [Peer(name, what, make) for key, name, what, make in candidates
            if key not in skip and not ("local" in skip and "local" in name.lower())]


def change_peers(local: dict[str, Any], lake: Lake, skip: list[str]) -> list[Peer]:
    local_parent = parent_of_current(local["metadata_location"])
    s3_parent = parent_of_current(lake.metadata_location, lake.io_properties)
    what = "meltwater.stream.changes(T, from_snapshot_id=parent of the DELETE).read_all()"
    plan_what = "meltwater.stream.plan(T).tasks, cold manifest cache"
    candidates = [
        ("changes", "changes local", what, lambda: meltwater_changes(local["location"],
                                                                     local_parent), None),
        ("changes", "changes S3 id", what, lambda: meltwater_changes(IDENTIFIER, s3_parent),
         None),
        ("changes", "changes S3 loc", what, lambda: meltwater_changes(lake.location,
                                                                      s3_parent), None),
        ("plan", "plan local", plan_what, lambda: meltwater_plan(local["location"]),
         clear_manifest_cache),
        ("plan", "plan S3 id", plan_what, lambda: meltwater_plan(IDENTIFIER),
         clear_manifest_cache),
    ]
    return [Peer(name, what, make, before) for key, name, what, make, before in candidates
            if key not in skip and not ("local" in skip and "local" in name)]


# -- request counts -----------------------------------------------------------------------------
def count_requests(lake: Lake, work: Path, skip: list[str]) -> dict[str, Any]:
    """One run of each S3 reader through the recording proxy: requests, bytes, answer times.
    meltwater's in-process reads are counted cold (empty manifest cache) and then warm (as
    every timed run after the warm-up is); the CLI is a new process, so always cold."""
    from s3_requests import RecordingProxy, summarize

    from meltwater.planner.table.fileio import PyArrowFileIO

    deletes = {f"/{path.removeprefix('s3://')}" for path in delete_file_paths(lake)}
    out: dict[str, Any] = {}
    with RecordingProxy(lake.server.s3_endpoint) as proxy:
        counted = {**lake.catalog_properties, "s3.endpoint": proxy.url}
        os.environ.update(catalog_env(COUNTED, counted))
        io = {**lake.io_properties, "s3.endpoint": proxy.url}
        counted_id = f"{COUNTED}.{NAMESPACE}.{TABLE}"
        runs: list[tuple[str, str, Callable[[], RunFn], bool]] = [
            ("identifier", "meltwater S3 id", lambda: meltwater_scan(counted_id), True),
            ("location", "meltwater S3 loc",
             lambda: meltwater_scan(lake.location, PyArrowFileIO(io)), True),
            ("changes", "changes S3 id",
             lambda: meltwater_changes(counted_id, parent_of_current(lake.metadata_location,
                                                                     io)), True),
            ("pyiceberg", "pyiceberg S3",
             lambda: pyiceberg_s3_reader(counted, io), False),
            ("duckdb", "duckdb S3", lambda: duckdb_s3_reader(lake, proxy.url), False),
            ("raw-pyarrow", "raw pyarrow S3", lambda: raw_pyarrow_s3_reader(lake, proxy.url),
             False),
            ("cli", "CLI S3 id", lambda: cli_reader(counted_id, work / "cli-counted.parquet",
                                                    dict(os.environ)), False),
        ]
        for key, name, make, warm_too in runs:
            if key in skip:
                continue
            print(f"  counting the S3 requests of {name} ...", flush=True)
            try:
                clear_manifest_cache()
                run = make()
                proxy.take()  # set-up (listing the files for raw pyarrow, connecting)
                rows = run()
                record = {"rows": rows, "cold": summarize(proxy.take(), deletes)}
                if warm_too:
                    run()
                    record["warm"] = summarize(proxy.take(), deletes)
            except Exception as error:  # reported; the other readers are still counted
                record = {"error": f"{type(error).__name__}: {error}"[:300]}
                proxy.take()
            out[name] = record
    return out


def delete_file_paths(lake: Lake) -> list[str]:
    tasks = static_table(lake.metadata_location, lake.io_properties).scan().plan_files()
    return sorted({d.file_path for task in tasks for d in task.delete_files})


# -- checks and report -------------------------------------------------------------------------
def same_rows(local: dict[str, Any], lake: Lake) -> dict[str, Any]:
    """Both copies, as Iceberg Java recorded them, and as meltwater reads them: the same
    counts, and the same sums over two columns of the live rows."""
    import pyarrow.compute as pc

    import meltwater.stream

    keys = ("data_files", "data_rows", "position_delete_files", "deleted_rows", "live_rows")
    recorded = {k: (local[k], lake.table.scan[k]) for k in keys}
    sums = {}
    for name, table in (("local", local["location"]), ("s3", IDENTIFIER)):
        rows = meltwater.stream.scan(table, columns=["id", "customer_id"]).read_all()
        sums[name] = {"rows": rows.num_rows, "sum_id": pc.sum(rows["id"]).as_py(),
                      "sum_customer_id": pc.sum(rows["customer_id"]).as_py()}
    return {"iceberg_java": recorded,
            "recorded_equal": all(a == b for a, b in recorded.values()),
            "meltwater": sums, "read_equal": sums["local"] == sums["s3"]}


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


RATIOS = (  # (label, numerator, denominator)
    ("meltwater S3 id / local", "meltwater S3 id", "meltwater local"),
    ("meltwater S3 loc / local", "meltwater S3 loc", "meltwater local"),
    ("meltwater S3 id / pyiceberg S3", "meltwater S3 id", "pyiceberg S3"),
    ("meltwater S3 id / duckdb S3", "meltwater S3 id", "duckdb S3"),
    ("meltwater S3 id / raw pyarrow S3", "meltwater S3 id", "raw pyarrow S3"),
    ("pyiceberg S3 / local", "pyiceberg S3", "pyiceberg local"),
    ("duckdb S3 / local", "duckdb S3", "duckdb local"),
    ("duckdb S3 cached / local", "duckdb S3 cached", "duckdb local"),
    ("raw pyarrow S3 / local", "raw pyarrow S3", "raw pyarrow local"),
    ("CLI S3 id / local", "CLI S3 id", "CLI local"),
    ("changes S3 id / local", "changes S3 id", "changes local"),
    ("changes S3 loc / local", "changes S3 loc", "changes local"),
    ("plan S3 id / local", "plan S3 id", "plan local"),
)


def ratios(results: list[Measurement]) -> dict[str, dict[str, Any]]:
    """Each ratio of medians, and the median of the same ratio taken round by round."""
    by_name = {r.name: r for r in results if r.seconds}
    out = {}
    for label, top, bottom in RATIOS:
        if top not in by_name or bottom not in by_name:
            continue
        a, b = by_name[top], by_name[bottom]
        rounds = [x / y for x, y in zip(a.seconds, b.seconds, strict=False)]
        out[label] = {"of_medians": ratio(a.median, b.median),
                      "round_median": statistics.median(rounds) if rounds else None,
                      "rounds": rounds}
    return out


def expected_rows(name: str, scan: dict[str, Any]) -> int:
    if name.startswith("raw pyarrow"):
        return scan["data_rows"]
    if name.startswith("changes"):
        return scan["deleted_rows"]
    if name.startswith("plan"):
        return scan["data_files"]
    return scan["live_rows"]


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_report(record: dict[str, Any], results: list[Measurement], scan: dict) -> None:
    print(f"\nscan_mor: {scan['data_rows']:,} rows in {scan['data_files']} data files, "
          f"{scan['position_delete_files']} position delete files; {scan['live_rows']:,} "
          f"live rows. S3: SeaweedFS on loopback ({record['upload']['files']} objects, "
          f"{record['upload']['bytes'] / 2**20:.0f} MiB)")
    print(f"{'peer':<20}{'median s':>10}{'min-max s':>14}{'rows':>12}{'Mrows/s':>9}"
          f"{'CPU s':>7}{'weed s':>8}  check")
    for r in results:
        spread = f"{min(r.seconds):.2f}-{max(r.seconds):.2f}" if r.seconds else "-"
        rows = "-" if r.rows is None else f"{r.rows:,}"
        rate = ratio(r.rows, r.median)
        check = record["rows_check"].get(r.name, "-")
        cpu = record["cpu"].get(r.name, {})
        print(f"{r.name:<20}{_fmt(r.median, '.3f'):>10}{spread:>14}{rows:>12}"
              f"{_fmt(rate and rate / 1e6, '.2f'):>9}"
              f"{_fmt(cpu.get('client_cpu_seconds'), '.2f'):>7}"
              f"{_fmt(cpu.get('server_cpu_seconds'), '.2f'):>8}  {check}")
        if r.error:
            print(f"    error: {r.error}")
    print("CPU s: this process and the CLI's, weed s: SeaweedFS's; CPU seconds of a warm run "
          "(median)")
    print("\nratios (of medians; median of the per-round ratios)")
    for label, value in record["ratios"].items():
        print(f"  {label:<34}{_fmt(value['of_medians'], '.2f'):>6}x"
              f"{_fmt(value['round_median'], '.2f'):>7}x")
    same = record["same_rows"]
    print(f"\nboth copies: Iceberg Java's counts "
          f"{'equal' if same['recorded_equal'] else 'DIFFER'} {same['iceberg_java']}; "
          f"meltwater reads {'equal' if same['read_equal'] else 'DIFFER'} {same['meltwater']}")
    counts = record.get("requests") or {}
    if counts:
        print("\nS3 requests per read (recording proxy; cold = empty manifest cache)")
        print(f"{'reader':<20}{'run':>5}{'requests':>10}{'HEAD':>6}{'GET':>6}{'ranged':>8}"
              f"{'MiB':>8}{'HEAD ms':>9}{'GET<=64K ms':>12}")
        for name, rec in counts.items():
            if "error" in rec:
                print(f"{name:<20} error: {rec['error']}")
                continue
            for run in ("cold", "warm"):
                s = rec.get(run)
                if not s:
                    continue
                print(f"{name:<20}{run:>5}{s['requests']:>10}{s['by_method'].get('HEAD', 0):>6}"
                      f"{s['by_method'].get('GET', 0):>6}{s['ranged_gets']:>8}"
                      f"{s['bytes'] / 2**20:>8.1f}{_fmt(s['head_ms_median'], '.2f'):>9}"
                      f"{_fmt(s['small_get_ms_median'], '.2f'):>12}")
                kinds = ", ".join(f"{k} {v['requests']} ({v.get('HEAD', 0)} HEAD)"
                                  for k, v in s["by_kind"].items())
                print(f"{'':<25}{kinds}")


def environment() -> dict[str, Any]:
    import duckdb
    import pyarrow
    import pyiceberg

    return {"python": platform.python_version(), "cpus": os.cpu_count(),
            "machine": platform.machine(), "pyarrow": pyarrow.__version__,
            "pyiceberg": pyiceberg.__version__, "duckdb": duckdb.__version__,
            "seaweedfs": "weed " + _weed_version(), "iceberg_java": "1.10.2 on Spark 3.5.9"}


def _weed_version() -> str:
    from seaweed_server import find_weed

    try:
        result = subprocess.run([str(find_weed()), "version"], capture_output=True, text=True,
                                timeout=30)
    except Exception:  # only for the record
        return "?"
    return (result.stdout.strip().splitlines() or ["?"])[0]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    repeats = 1 if args.quick else args.repeats
    started = time.monotonic()
    sizes = Sizes(args.rows, args.files, args.manifests)
    local = ensure_tables(sizes).scan
    s3_table = ensure_s3_scan_table(sizes)
    print(f"local copy: {local['location']}\nS3 copy: {s3_table.home}", flush=True)
    load_start = os.getloadavg()
    print("starting SeaweedFS and uploading the S3 copy ...", flush=True)
    lake = start_lake(s3_table)
    try:
        print(f"  {lake.uploaded.files} objects, {lake.uploaded.bytes / 2**20:.0f} MiB in "
              f"{lake.uploaded.seconds:.1f}s; registered {NAMESPACE}.{TABLE}", flush=True)
        os.environ.update(lake.server.s3_env())  # meltwater by location: pyarrow.fs
        os.environ.update(catalog_env(CATALOG, lake.catalog_properties))
        with tempfile.TemporaryDirectory(prefix="meltwater-s3bench-") as tmp:
            work = Path(tmp)
            same = same_rows(local, lake)
            requests = {} if "requests" in args.skip else count_requests(lake, work, args.skip)
            cpu = CpuMeter(lake.server.pid)
            print("timing the scans ...", flush=True)
            results = measure_rounds([cpu.wrap(p) for p in scan_peers(local, lake, work,
                                                                       args.skip)], repeats)
            print("timing the change reads and plans ...", flush=True)
            results += measure_rounds([cpu.wrap(p) for p in change_peers(local, lake,
                                                                         args.skip)], repeats)
    finally:
        lake.server.stop()
    rows_check = {}
    for r in results:
        want = expected_rows(r.name, local)
        rows_check[r.name] = ("-" if r.rows is None else
                              "ok" if r.rows == want else f"WRONG: want {want:,}")
    record = {
        "environment": environment(), "repeats": repeats, "warmups": 1,
        "load_average": {"start": load_start, "end": os.getloadavg()},
        "tables": {"local": local, "s3": s3_table.scan},
        "upload": {"files": lake.uploaded.files, "bytes": lake.uploaded.bytes,
                   "seconds": lake.uploaded.seconds},
        "same_rows": same, "rows_check": rows_check,
        "peers": {r.name: r.as_json() for r in results},
        "ratios": ratios(results), "requests": requests, "cpu": cpu.summary(),
    }
    print_report(record, results, local)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2, default=str))
    print(f"\nresults written to {args.out} ({time.monotonic() - started:.0f}s in all; load "
          f"average {load_start[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
