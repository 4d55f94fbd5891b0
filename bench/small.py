"""Small commits stay small (issue 32): a small change read and `meltwater --version`, whole
processes, this checkout against an older one, in paired runs.

Usage: .venv/bin/python bench/small.py [--reference 07e46e8] [--rounds 21]

The table is the change benchmark's 1x table (bench/tables.py `ensure_change_table`:
5,000,000 rows in 150 data files, then a merge-on-read UPDATE of 0.1% of them, written by
Iceberg Java 1.10.2), and the read is its UPDATE's changes, `meltwater changes T
--from-snapshot PARENT --to-snapshot UPDATE`: 5,000 UPDATE_BEFORE + 5,000 UPDATE_AFTER rows.

Two checkouts, one environment, the one a user gets from `pip install meltwater`: a venv
of meltwater's dependencies without extras (so no pandas and no numpy; made once per
pyproject.toml, `$MELTWATER_CACHE/bench-small-env-<hash>/`). Each checkout is installed
apart, not editable, into a directory of its own (`pip install --no-deps --target`): the
reference commit once (`git archive`, `$MELTWATER_CACHE/bench-small-ref-<commit>/`), this
checkout's working tree afresh each run. Both run with that venv's interpreter and their
directory on PYTHONPATH, as the console script runs (`meltwater.cli.entry`), so the two
differ only in meltwater's own code.

Each command runs as a user runs it, a whole process: `changes` writing JSON lines to
stdout (to /dev/null), `changes` writing a Parquet file (`--output`), and `--version`. Each
pair (this checkout's and the reference's) runs back to back, the order swapping every
round, after one untimed warm-up each; the figures are medians of wall time, CPU time (user
+ system) and peak RSS, and the median of the per-round ratios. Before timing, both
checkouts' rows are compared (JSON lines and Parquet, as multisets); a difference fails the
run. Writes bench/results/small.json.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from ladder_processes import CHILD_ENV, run_process
from tables import ChangeSizes, ensure_change_table
from writer_env import cache_root

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results" / "small.json"
REFERENCE = "07e46e8"  # the commit issue 32 measured the small read against
VERSION_CPU_TARGET = 0.1  # seconds of CPU for `meltwater --version`
SMALL_RATIO_TARGET = 1.0  # this checkout's change read / the reference's, at most


@dataclass
class Pair:
    """One command, run by both checkouts."""

    name: str
    argv: list[str]  # after the console script
    output: Path | None = None  # the file it writes (`--output`), if any
    runs: dict[str, list[dict[str, float]]] = field(
        default_factory=lambda: {"current": [], "reference": []})

    def median(self, side: str, key: str) -> float:
        return statistics.median(run[key] for run in self.runs[side])

    def ratios(self, key: str) -> list[float]:
        return [c[key] / r[key] for c, r in zip(self.runs["current"], self.runs["reference"],
                                                 strict=True) if r[key] > 0]


def _pip(python: Path, *args: str) -> None:
    subprocess.run([str(python), "-m", "pip", "install", "-q",
                    "--disable-pip-version-check", *args], check=True)


def user_environment(log: Any) -> Path:
    """A venv of what `pip install meltwater` brings (its dependencies, no extras: no
    pandas, no numpy), meltwater itself left out; its python. Made once per dependency
    list (pyproject.toml's), and shared by both checkouts."""
    pyproject = (REPO / "pyproject.toml").read_text()
    key = hashlib.sha256(pyproject.encode()).hexdigest()[:12]
    home = cache_root() / f"bench-small-env-{key}"
    python = home / "bin" / "python"
    done = home / "installed"  # written last: a venv's scripts name its path, so it is
    if done.exists():          # made where it stays, and a half-made one is made again
        return python
    log(f"making {home}: meltwater's dependencies as a user installs them (once) ...")
    shutil.rmtree(home, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(home)], check=True)
    _pip(python, str(REPO))  # resolves and installs the dependencies ...
    subprocess.run([str(python), "-m", "pip", "uninstall", "-q", "-y", "meltwater"],
                   check=True)  # ... and meltwater goes: each checkout brings its own
    done.write_text(pyproject)
    return python


def install_checkout(source: Path, target: Path) -> None:
    """meltwater from `source` into `target` alone (`pip install --target`, not
    editable), to be put on PYTHONPATH beside the user environment."""
    shutil.rmtree(target, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    "--no-deps", "--target", str(target), str(source)], check=True,
                   stdout=subprocess.DEVNULL)


def reference_checkout(commit: str, log: Any) -> Path:
    """The reference commit's meltwater, installed into a directory of its own (once per
    commit); the directory for PYTHONPATH."""
    sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", commit], check=True,
                         capture_output=True, text=True).stdout.strip()
    home = cache_root() / f"bench-small-ref-{sha[:12]}"
    done = home / "installed"
    if done.exists():
        return home / "site"
    log(f"installing meltwater at {sha[:12]} into {home} (once) ...")
    shutil.rmtree(home, ignore_errors=True)
    source = home / "src"
    source.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", sha],
                             check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(source, filter="data")
    install_checkout(source, home / "site")
    done.write_text(sha + "\n")
    return home / "site"


def console_script(python: Path, site: Path) -> list[str]:
    """What the console script runs, by this interpreter with meltwater from `site`
    (`env` sets PYTHONPATH for the process alone)."""
    return ["env", f"PYTHONPATH={site}", str(python), "-c",
            "import sys; sys.argv[0] = 'meltwater'; "
            "from meltwater.cli.entry import main; sys.exit(main())"]


def _rows_of_jsonl(text: str) -> list[str]:
    return sorted(text.splitlines())


def _rows_of_parquet(path: Path) -> list[str]:
    table = pq.read_table(path)
    return sorted(json.dumps(row, sort_keys=True, default=str) for row in table.to_pylist())


def check_same_rows(scripts: dict[str, list[str]], pair_jsonl: Pair, pair_parquet: Pair,
                    work: Path) -> int:
    """Both checkouts' rows, JSON lines and Parquet, compared as multisets; the row count."""
    jsonl = {}
    parquet = {}
    for side, script in scripts.items():
        out = subprocess.run([*script, *pair_jsonl.argv], capture_output=True, text=True,
                             check=True, env=CHILD_ENV)
        jsonl[side] = _rows_of_jsonl(out.stdout)
        target = work / f"{side}.parquet"
        argv = [a if a != str(pair_parquet.output) else str(target) for a in pair_parquet.argv]
        subprocess.run([*script, *argv], capture_output=True, check=True, env=CHILD_ENV)
        parquet[side] = _rows_of_parquet(target)
    if jsonl["current"] != jsonl["reference"]:
        raise SystemExit("the checkouts' JSON lines differ")
    if parquet["current"] != parquet["reference"]:
        raise SystemExit("the checkouts' Parquet rows differ")
    if len(jsonl["current"]) != len(parquet["current"]):
        raise SystemExit("JSON lines and Parquet hold different row counts")
    return len(jsonl["current"])


def run_pairs(pairs: list[Pair], scripts: dict[str, list[str]], rounds: int, log: Any,
              ) -> None:
    """A warm-up of each, then `rounds` rounds; in each, every pair runs both checkouts
    back to back, which first swapping every round."""
    sides = ["current", "reference"]
    for pair in pairs:
        for side in sides:
            _timed(pair, scripts[side])
    for round_ in range(rounds):
        order = sides if round_ % 2 == 0 else sides[::-1]
        for pair in pairs:
            for side in order:
                pair.runs[side].append(_timed(pair, scripts[side]))
        if round_ % 5 == 4:
            log(f"  {round_ + 1} of {rounds} rounds")


def _timed(pair: Pair, script: list[str]) -> dict[str, float]:
    if pair.output is not None:
        pair.output.unlink(missing_ok=True)
    result = run_process([*script, *pair.argv], timeout=300)
    if result.exit_code != 0:
        raise SystemExit(f"{' '.join(script)} {' '.join(pair.argv)}: exit {result.exit_code}: "
                         f"{result.stderr_tail}")
    return {"seconds": result.seconds, "cpu_seconds": result.cpu_seconds,
            "rss_bytes": float(result.max_rss_bytes)}


def report(pairs: list[Pair], reference: str) -> tuple[list[str], bool]:
    """Lines of the table, and whether the targets hold."""
    lines = [f"{'command':<26} {'wall s':>15} {'CPU s':>15} {'peak RSS MiB':>14} "
             f"{'wall ratio':>10} {'CPU ratio':>9}",
             f"{'':<26} {'now / ' + reference:>15} {'now / ' + reference:>15}"]
    held = True
    for pair in pairs:
        wall = statistics.median(pair.ratios("seconds"))
        cpu = statistics.median(pair.ratios("cpu_seconds"))
        now = {key: pair.median("current", key) for key in pair.runs["current"][0]}
        then = {key: pair.median("reference", key) for key in pair.runs["reference"][0]}
        lines.append(
            f"{pair.name:<26} {now['seconds']:>7.3f}/{then['seconds']:<7.3f} "
            f"{now['cpu_seconds']:>7.3f}/{then['cpu_seconds']:<7.3f} "
            f"{now['rss_bytes'] / 2**20:>6.0f}/{then['rss_bytes'] / 2**20:<7.0f} "
            f"{wall:>10.2f} {cpu:>9.2f}")
        if pair.name.startswith("changes") and wall > SMALL_RATIO_TARGET:
            held = False
    version = next(p for p in pairs if p.name == "--version")
    version_cpu = version.median("current", "cpu_seconds")
    lines.append(f"target: a small change read no slower than at {reference} (wall ratio "
                 f"<= {SMALL_RATIO_TARGET}); --version <= {VERSION_CPU_TARGET} s of CPU "
                 f"(now {version_cpu:.3f} s)")
    return lines, held and version_cpu <= VERSION_CPU_TARGET


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", default=REFERENCE,
                        help=f"the commit to compare with (default {REFERENCE})")
    parser.add_argument("--rounds", type=int, default=21, help="timed rounds (default 21)")
    args = parser.parse_args(argv)
    log = print
    _, table = ensure_change_table(ChangeSizes(5_000_000, 150, 5_000), log)
    python = user_environment(log)
    reference = reference_checkout(args.reference, log)
    commit = ["changes", table["location"], "--from-snapshot", str(table["parent_snapshot_id"]),
              "--to-snapshot", str(table["update_snapshot_id"])]
    with tempfile.TemporaryDirectory(prefix="meltwater-small-") as work_dir:
        work = Path(work_dir)
        install_checkout(REPO, work / "current")  # this checkout's files as they are now
        scripts = {"current": console_script(python, work / "current"),
                   "reference": console_script(python, reference)}
        out = work / "changes.parquet"
        pairs = [Pair("changes --format jsonl", [*commit, "--format", "jsonl"]),
                 Pair("changes --format parquet", [*commit, "--format", "parquet",
                                                   "--output", str(out)], output=out),
                 Pair("--version", ["--version"])]
        rows = check_same_rows(scripts, pairs[0], pairs[1], work)
        log(f"both checkouts return the same {rows:,} change rows")
        run_pairs(pairs, scripts, args.rounds, log)
    lines, held = report(pairs, args.reference)
    print("\n".join(lines))
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({
        "reference": args.reference, "rounds": args.rounds, "rows": rows,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "pairs": [{"name": p.name, "argv": p.argv, "runs": p.runs} for p in pairs],
        "targets_held": held}, indent=1))
    return 0 if held else 1


if __name__ == "__main__":
    sys.exit(main())
