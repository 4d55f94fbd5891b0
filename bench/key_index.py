"""The key index (issue 32): one upsert commit's changes with and without it, whole processes,
against a full scan and a read of the key column of the same table, in one run.

Usage: .venv/bin/python bench/key_index.py [--shape backlog|huge] [--rows 20000000]
       [--commits 50] [--rounds 3]

The table (bench/ladder_tables.py, shape `backlog` or `huge`, Iceberg Java): --rows rows
(100,000 a data file; `huge`: 2,000,000, one row group of 100 pages), then
--commits upserts of 1,000 random keys each (equality deletes on `id` and the new rows).
The commit read is the last upsert. Each round runs, as separate `meltwater` processes of
this checkout (GNU time: wall, CPU, peak RSS):

- `scan` of the whole table and `scan --columns id` (the key column alone: what building
  the index must read);
- `changes` of the commit with `--no-key-index` (finding the replaced rows by reading every
  older file's key column, as before the index);
- the same building the index in an empty directory (cold, persisted), then reading it
  from that directory (warm CLI), with whole before-images and with `--before-images key`;
- one Python process reading the commit twice through the index (the second read is a
  warm reader's, as a stream's or the service's after their first micro-batch).

Every mode's change rows are compared (as multisets) with the unindexed read's. Writes
bench/results/key_index-<shape>-<rows>.json: medians, ratios to the scan, the index's
bytes a row.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
from ladder_processes import run_process
from ladder_tables import Shape, ensure_ladder_table

RESULTS = Path(__file__).resolve().parent / "results"
MELTWATER = Path(sys.executable).parent / "meltwater"

WARM_READER = textwrap.dedent("""
    import json, sys, time
    import meltwater.stream
    location, parent, child, root = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    seconds = []
    for _ in range(3):
        started = time.perf_counter()
        rows = meltwater.stream.changes(location, from_snapshot_id=parent,
                                        to_snapshot_id=child, key_index_dir=root).read_all()
        seconds.append(time.perf_counter() - started)
    print(json.dumps({"seconds": seconds, "rows": rows.num_rows}))
""")


FIGURE = Path(__file__).resolve().parent / "figures" / "key-index-by-size.png"
SERIES = (("scan", "scan"), ("plain", "changes, no index"),
          ("cold", "changes, building the index"), ("warm", "changes, persisted index"),
          ("key_images", "changes, persisted index, key images"))


def plot(shape: str, path: Path = FIGURE) -> list[int]:
    """Seconds against table rows (log-log) of every mode this bench has results for at
    the shape's sizes, and of bench/pages.py's DV commit where it ran; the sizes drawn."""
    try:
        import matplotlib
    except ImportError:
        print("no plot: matplotlib is in the bench extra (pip install -e '.[bench]')")
        return []
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    found = [json.loads(p.read_text()) for p in RESULTS.glob(f"key_index-{shape}-*.json")]
    found.sort(key=lambda r: r["rows"])
    figure, axis = plt.subplots(figsize=(8, 5))
    for series, (name, label) in enumerate(SERIES):
        xs = [r["rows"] for r in found]
        ys = [statistics.median(run["seconds"] for run in r["runs"][name]) for r in found]
        axis.plot(xs, ys, "--" if name == "scan" else "-", marker="o", color=f"C{series}",
                  label=label)
    warm = [(r["rows"], min(r["warm_reader_seconds"][1:])) for r in found]
    axis.plot(*zip(*warm, strict=True), "-", marker="s", color=f"C{len(SERIES)}",
              label="changes, warm reader (in process)")
    dv = sorted((json.loads(p.read_text()) for p in RESULTS.glob("pages-*.json")),
                key=lambda r: r["rows"])
    if dv:
        xs = [r["rows"] for r in dv]
        ys = [statistics.median(run["seconds"] for run in r["pairs"][0]["runs"]["current"])
              for r in dv]
        axis.plot(xs, ys, "-", marker="D", color="black",
                  label="DV commit of ~1 row in 200,000 (bench/pages.py)")
    axis.set_xscale("log")
    axis.set_yscale("log")
    axis.set_xlabel("table rows")
    axis.set_ylabel("seconds (whole process; warm reader: in process)")
    axis.set_title("one upsert commit of 1,000 keys against table size")
    axis.grid(alpha=0.3, which="both")
    axis.legend(fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return [r["rows"] for r in found]


def _rows(path: Path) -> list[str]:
    return sorted(json.dumps(r, sort_keys=True, default=str)
                  for r in pq.read_table(path).drop_columns(["_commit_timestamp"]).to_pylist())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=["backlog", "huge"], default="backlog",
                        help="backlog: 100,000-row files; huge: 2,000,000-row files (Iceberg "
                             "Java's default row groups and pages)")
    parser.add_argument("--rows", type=int, default=20_000_000)
    parser.add_argument("--commits", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--plot-only", action="store_true",
                        help="draw bench/figures/key-index-by-size.png from the results there "
                             "are, and run nothing")
    args = parser.parse_args(argv)
    if args.plot_only:
        print(f"plotted {plot(args.shape)} rows to {FIGURE}")
        return 0
    table = ensure_ladder_table(Shape(args.shape, args.rows, args.commits, 1000))
    parent = table.snapshot(args.commits - 1)["snapshot_id"]
    child = table.snapshot(args.commits)["snapshot_id"]
    runs: dict[str, list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="meltwater-key-index-bench-") as work_dir:
        work = Path(work_dir)
        index = work / "index"
        out = {name: work / f"{name}.parquet" for name in
               ("scan", "keys", "plain", "cold", "warm", "key_images")}
        commit = ["changes", table.location, "--from-snapshot", str(parent),
                  "--to-snapshot", str(child), "--format", "parquet"]
        commands = {
            "scan": ["scan", table.location, "--format", "parquet", "--output", str(out["scan"])],
            "keys": ["scan", table.location, "--columns", "id", "--format", "parquet",
                     "--output", str(out["keys"])],
            "plain": [*commit, "--no-key-index", "--output", str(out["plain"])],
            "cold": [*commit, "--key-index-dir", str(index), "--output", str(out["cold"])],
            "warm": [*commit, "--key-index-dir", str(index), "--output", str(out["warm"])],
            "key_images": [*commit, "--key-index-dir", str(index), "--before-images", "key",
                           "--output", str(out["key_images"])],
        }
        for round_ in range(args.rounds):
            for name, command in commands.items():
                if name == "cold":
                    shutil.rmtree(index, ignore_errors=True)
                run = run_process([str(MELTWATER), *command], timeout=1800)
                if run.exit_code != 0:
                    raise SystemExit(f"{name} failed: {run.stderr_tail}")
                runs.setdefault(name, []).append({"seconds": run.seconds,
                                                  "cpu_seconds": run.cpu_seconds,
                                                  "rss_bytes": run.max_rss_bytes})
                print(f"round {round_ + 1} {name:<11} {run.seconds:7.2f} s  CPU "
                      f"{run.cpu_seconds:6.2f} s  {run.max_rss_bytes / 2**20:5.0f} MiB")
        expected = _rows(out["plain"])
        for name in ("cold", "warm"):
            if _rows(out[name]) != expected:
                raise SystemExit(f"the {name} read's change rows differ from the unindexed")
        index_bytes = sum(p.stat().st_size for p in index.rglob("*") if p.is_file())
        warm = json.loads(subprocess.run(
            [sys.executable, "-c", WARM_READER, table.location, str(parent), str(child),
             str(index)], check=True, capture_output=True, text=True).stdout)
    if warm["rows"] != len(expected):
        raise SystemExit("the warm reader's change rows differ in number")

    def median(name: str, key: str = "seconds") -> float:
        return statistics.median(r[key] for r in runs[name])

    scan = median("scan")
    reader = min(warm["seconds"][1:])
    lines = [f"table: {args.rows:,} rows, {table.record['data_files']} data files, "
             f"{args.commits} upserts of 1,000 keys; the last one's {len(expected):,} change "
             f"rows, equal in every mode",
             f"{'scan':<34}{scan:7.2f} s  1.000x"]
    for name, label in (("keys", "scan of the key column"),
                        ("plain", "changes, no index"),
                        ("cold", "changes, building the index"),
                        ("warm", "changes, persisted index (CLI)"),
                        ("key_images", "  the same, key before-images")):
        lines.append(f"{label:<34}{median(name):7.2f} s  {median(name) / scan:.3f}x  CPU "
                     f"{median(name, 'cpu_seconds'):.2f} s  "
                     f"{median(name, 'rss_bytes') / 2**20:.0f} MiB")
    lines.append(f"{'changes, warm reader (in process)':<34}{reader:7.2f} s  "
                 f"{reader / scan:.3f}x")
    lines.append(f"index: {index_bytes / 2**20:.0f} MiB on disk, "
                 f"{index_bytes / table.record['data_rows']:.1f} bytes a row; building it "
                 f"costs {(median('cold') - median('plain')) / median('keys'):.2f}x a read of "
                 "the key column more than the unindexed read")
    print("\n".join(lines))
    RESULTS.mkdir(exist_ok=True)
    result = RESULTS / f"key_index-{args.shape}-{args.rows}.json"
    result.write_text(json.dumps({"shape": args.shape, "rows": args.rows, "commits": args.commits,
                                   "rounds": args.rounds, "runs": runs,
                                   "warm_reader_seconds": warm["seconds"],
                                   "index_bytes": index_bytes, "summary": lines}, indent=1))
    print(f"plotted {plot(args.shape)} rows to {FIGURE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
