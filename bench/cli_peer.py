"""One peer of the CLI output benchmark, run as a whole process by bench/cli_output.py.

Usage: python bench/cli_peer.py PEER FORMAT OUTPUT SOURCE

PEER is raw-pyarrow (SOURCE: a JSON file listing the data files; deletes NOT applied),
pyiceberg (SOURCE: the metadata file) or duckdb (SOURCE: the metadata file). FORMAT is
parquet, csv or jsonl. Each peer imports what it uses after start-up, as a script of its
own would, so interpreter start and imports are part of the time, as they are for
`meltwater scan`. Writes OUTPUT and prints nothing.

What each writes, with its library's defaults:
- raw-pyarrow and pyiceberg: `pq.write_table(table, OUTPUT)` (Snappy, dictionary pages, row
  groups of 1Mi rows), `pyarrow.csv.write_csv(table, OUTPUT)`; for JSON lines, which
  pyarrow cannot write, `json.dumps` of each row of `table.to_pylist()` (the standard
  library way).
- duckdb: `COPY (SELECT * FROM iceberg_scan(m)) TO OUTPUT` with FORMAT parquet, csv (with a
  header) or json (one object per line), offline, the avro and iceberg extensions loaded
  from the duckdb-extension-* wheels as bench/peers.py does.
"""

from __future__ import annotations

import json
import sys


def write_arrow(table, fmt: str, output: str) -> None:
    """A pyarrow table in FORMAT, the way a plain pyarrow script would write it."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, output)
    elif fmt == "csv":
        import pyarrow.csv as pacsv

        pacsv.write_csv(table, output)
    else:
        with open(output, "w", encoding="utf-8") as out:
            for batch in table.to_batches():
                for row in batch.to_pylist():
                    out.write(json.dumps(row, default=str) + "\n")


def raw_pyarrow(fmt: str, output: str, paths_file: str) -> None:
    import pyarrow.dataset as ds

    with open(paths_file) as source:
        paths = json.load(source)
    write_arrow(ds.dataset(paths, format="parquet").to_table(), fmt, output)


def pyiceberg(fmt: str, output: str, metadata: str) -> None:
    from pyiceberg.table import StaticTable

    write_arrow(StaticTable.from_metadata(metadata).scan().to_arrow(), fmt, output)


def duckdb_connection():
    """bench/peers.py's offline connection, without importing the harness's modules."""
    import importlib.util
    from pathlib import Path

    import duckdb

    con = duckdb.connect(config={"allow_unsigned_extensions": "true",
                                 "autoinstall_known_extensions": "false",
                                 "autoload_known_extensions": "false"})
    for package in ("duckdb_extension_avro", "duckdb_extension_iceberg"):
        spec = importlib.util.find_spec(package)
        root = Path(next(iter(spec.submodule_search_locations)))
        con.execute(f"LOAD '{sorted(root.rglob('*.duckdb_extension'))[-1]}'")
    return con


def duckdb(fmt: str, output: str, metadata: str) -> None:
    options = {"parquet": "FORMAT parquet", "csv": "FORMAT csv, HEADER",
               "jsonl": "FORMAT json"}[fmt]
    duckdb_connection().execute(
        f"COPY (SELECT * FROM iceberg_scan('{metadata}')) TO '{output}' ({options})")


PEERS = {"raw-pyarrow": raw_pyarrow, "pyiceberg": pyiceberg, "duckdb": duckdb}

if __name__ == "__main__":
    peer, fmt, output, source = sys.argv[1:5]
    PEERS[peer](fmt, output, source)
