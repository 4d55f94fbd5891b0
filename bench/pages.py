"""Rows read by page (issue 32): one deletion-vector commit's changes, whole processes, this
checkout against one that reads whole row groups, in paired runs.

Usage: .venv/bin/python bench/pages.py [--rows 20000000] [--deleted 100]
       [--reference 6863339] [--rounds 7]

The table (bench/ladder_tables.py, shape `dv`, Iceberg Java 1.10.2 with its default
writer settings): --rows rows in id order, 2,000,000 rows a data file (one row group of 100
pages of 20,000 rows), format v3, then one merge-on-read `DELETE` of about --deleted rows
hashed over every file: deletion vectors. Its changes are those rows, and each sits in one
page of each column, so a reader that reads pages decodes --deleted pages a column at most
where a whole-row-group reader decodes the table.

The density is the point: 100 rows in 20M touch about 10% of the pages, as 1,000 random
rows do in 200M (the issue's huge rung, not generated here: 2 cores, minutes matter).

Measured as bench/small.py measures (its user environment, both checkouts installed apart,
paired rounds, medians, GNU time): `meltwater changes T --from-snapshot PARENT
--to-snapshot DELETE --format parquet --output F`, and this checkout's `meltwater scan T
--format parquet --output F` for the ratio to a full read. Both checkouts' change rows are
compared first (as multisets), and their count against Iceberg Java's live row counts.
Writes bench/results/pages-<rows>.json, which bench/key_index.py's figure draws against
table size.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow.parquet as pq
from ladder_tables import Shape, ensure_ladder_table
from small import (
    REPO,
    Pair,
    console_script,
    install_checkout,
    reference_checkout,
    run_pairs,
    user_environment,
)

RESULTS = Path(__file__).resolve().parent / "results"
REFERENCE = "6863339"  # main before page reads: whole row groups for rows named by position
TARGET = 0.05  # one DV commit's changes / a full scan, at most (the issue's, at 200M rows)


def _rows(path: Path) -> list[str]:
    return sorted(json.dumps(r, sort_keys=True, default=str)
                  for r in pq.read_table(path).to_pylist())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=20_000_000)
    parser.add_argument("--deleted", type=int, default=100)
    parser.add_argument("--reference", default=REFERENCE)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    log = print
    table = ensure_ladder_table(Shape("dv", args.rows, keys=args.deleted), log)
    before, after = table.snapshot(0), table.snapshot(1)
    expected = table.live_rows(0) - table.live_rows(1)
    python = user_environment(log)
    reference = reference_checkout(args.reference, log)
    with tempfile.TemporaryDirectory(prefix="meltwater-pages-") as work_dir:
        work = Path(work_dir)
        install_checkout(REPO, work / "current")
        scripts = {"current": console_script(python, work / "current"),
                   "reference": console_script(python, reference)}
        changes = work / "changes.parquet"
        argv_changes = ["changes", table.location, "--from-snapshot",
                        str(before["snapshot_id"]), "--to-snapshot", str(after["snapshot_id"]),
                        "--format", "parquet", "--output", str(changes)]
        found = {}
        for side, script in scripts.items():
            subprocess.run([*script, *argv_changes], check=True, capture_output=True)
            found[side] = _rows(changes)
        if found["current"] != found["reference"]:
            raise SystemExit("the checkouts' change rows differ")
        if len(found["current"]) != expected:
            raise SystemExit(f"{len(found['current'])} change rows, but Iceberg Java's live "
                             f"row count fell by {expected}")
        log(f"both checkouts return the same {expected:,} DELETE rows")
        scan_out = work / "scan.parquet"
        pairs = [Pair("changes of the DV commit", argv_changes, output=changes),
                 Pair("scan", ["scan", table.location, "--format", "parquet", "--output",
                               str(scan_out)], output=scan_out)]
        run_pairs(pairs, scripts, args.rounds, log)
    change, scan = pairs
    now = change.median("current", "seconds")
    then = change.median("reference", "seconds")
    full = scan.median("current", "seconds")
    lines = [
        f"table: {args.rows:,} rows, {table.record['data_files']} data files; the DELETE "
        f"of {expected:,} rows as deletion vectors",
        f"changes, by page (now):        {now:7.3f} s  CPU "
        f"{change.median('current', 'cpu_seconds'):.3f} s  "
        f"{change.median('current', 'rss_bytes') / 2**20:.0f} MiB",
        f"changes, whole row groups ({args.reference}): {then:7.3f} s  CPU "
        f"{change.median('reference', 'cpu_seconds'):.3f} s  "
        f"{change.median('reference', 'rss_bytes') / 2**20:.0f} MiB",
        f"scan (now): {full:.3f} s; ({args.reference}): "
        f"{scan.median('reference', 'seconds'):.3f} s",
        f"now / then: {statistics.median(change.ratios('seconds')):.2f}x; changes / scan: "
        f"{now / full:.3f}x now, {then / full:.3f}x then (target <= {TARGET}x at 200M rows)",
    ]
    print("\n".join(lines))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"pages-{args.rows}.json").write_text(json.dumps({
        "rows": args.rows, "deleted": expected, "reference": args.reference,
        "rounds": args.rounds, "pairs": [{"name": p.name, "argv": p.argv, "runs": p.runs}
                                         for p in pairs], "summary": lines}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
