"""The scale ladder's report (issue 25): ratios against the targets, growth between rungs
and sizes, the printed table and the plot.

A ratio whose numerator ran into its time limit is a lower bound (`>`), one whose
denominator did is an upper bound (`<`); a bound decides a target only when it lies on
the deciding side.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from pathlib import Path
from typing import Any

RSS_LIMIT = 1_000_000_000  # bytes: every meltwater command's peak RSS, at most (1 GB)
SERVICE_MEDIAN = 1.0  # seconds from commit to mirror, median, at most


def _find(entries: Iterable[Any], table: str, kind: str, at: int | None = None) -> Any:
    found = [e for e in entries if e.table == table and e.kind == kind
             and (at is None or e.at == at)]
    return found[0] if found else None


def _seconds(entry: Any) -> tuple[float | None, str]:
    """An entry's median, or its time limit marked as a bound when it did not finish."""
    if entry is None:
        return None, ""
    if entry.median is not None:
        return entry.median, "="
    if entry.did_not_finish is not None:
        return entry.did_not_finish, ">"
    return None, ""


def ratio(a: Any, b: Any) -> dict[str, Any] | None:
    """a's time over b's, with its bound."""
    (x, bx), (y, by) = _seconds(a), _seconds(b)
    if x is None or not y:
        return None
    if bx == ">" and by == ">":
        return None
    bound = ">" if bx == ">" else "<" if by == ">" else "="
    return {"value": x / y, "bound": bound}


def _met(value: dict[str, Any] | None, limit: float) -> bool | None:
    if value is None:
        return None
    x, bound = value["value"], value["bound"]
    if bound == "=":
        return x <= limit
    if bound == ">":
        return False if x > limit else None
    return True if x <= limit else None


def _target(name: str, value: dict[str, Any] | None, limit: float) -> dict[str, Any]:
    return {"name": name, "value": value, "limit": limit, "met": _met(value, limit)}


def _tables(entries: list[Any], shape: str) -> list[str]:
    seen: list[str] = []
    for entry in entries:
        if entry.shape == shape and entry.table not in seen:
            seen.append(entry.table)
    return seen


def _rungs(entries: list[Any], table: str, kind: str) -> list[int]:
    return sorted({e.at for e in entries if e.table == table and e.kind == kind})


def summarize(entries: list[Any], service: dict[str, Any] | None) -> dict[str, Any]:
    targets, growth = [], []
    backlogs = _tables(entries, "backlog")
    for table in backlogs:
        rungs = _rungs(entries, table, "changes")
        if not rungs:
            continue
        first, top = rungs[0], rungs[-1]
        changes_top = _find(entries, table, "changes", top)
        scan_top = _find(entries, table, "scan", top)
        targets += [
            _target(f"{table}: changes of one commit at backlog {top} / at backlog {first}",
                    ratio(changes_top, _find(entries, table, "changes", first)), 2.0),
            _target(f"{table}: changes of one commit at backlog {top} / scan",
                    ratio(changes_top, scan_top), 0.2),
            _target(f"{table}: changes --net of the last commits / Iceberg Java diff",
                    ratio(_find(entries, table, "net"),
                          _find(entries, table, "iceberg-java-diff")), 0.3),
            _target(f"{table}: scan / raw pyarrow (no deletes)",
                    ratio(scan_top, _find(entries, table, "raw-pyarrow")), 2.0),
            _target(f"{table}: scan / Iceberg Java scan",
                    ratio(scan_top, _find(entries, table, "iceberg-java-scan")), 1.0),
            _target(f"{table}: scan / DuckDB iceberg_scan",
                    ratio(scan_top, _find(entries, table, "duckdb")), 1.0),
        ]
        keyed = _find(entries, table, "changes-key", top)
        if keyed is not None:  # what a sink by key pays (not the target's read)
            growth.append({"what": f"{table}: changes of commit {top} with key "
                                   "before-images / scan", "value": ratio(keyed, scan_top)})
    for small, large in itertools.pairwise(backlogs):
        for kind in ("changes", "scan", "net"):
            top = max(_rungs(entries, small, kind) or [0])
            growth.append({"what": f"{kind} at commit {top}: {large} / {small}",
                           "value": ratio(_find(entries, large, kind, top),
                                          _find(entries, small, kind, top))})
    for table in _tables(entries, "history"):
        rungs = _rungs(entries, table, "net")
        if not rungs:
            continue
        net_top = _find(entries, table, "net", rungs[-1])
        targets += [
            _target(f"{table}: changes --net of {rungs[-1]} commits / of {rungs[0]}",
                    ratio(net_top, _find(entries, table, "net", rungs[0])), 15.0),
            _target(f"{table}: changes --net of {rungs[-1]} commits / scan",
                    ratio(net_top, _find(entries, table, "scan")), 3.0),
        ]
    if service and "latency" in service and service["latency"]:
        median = service["latency"]["median"]
        targets.append({"name": "service: commit -> mirror median latency, s (keeps up)",
                        "value": {"value": median, "bound": "="}, "limit": SERVICE_MEDIAN,
                        "met": median <= SERVICE_MEDIAN and bool(service["keeps_up"])})
    ours = [e for e in entries if e.kind in ("changes", "changes-key", "net", "scan")
            and e.peak_rss is not None]
    over = [f"{e.table} {e.kind} @{e.at}" for e in ours if e.peak_rss > RSS_LIMIT]
    sizes = [e.peak_rss for e in ours]
    served = (service or {}).get("service_peak_rss_bytes", {}).get("meltwater")
    if served is not None:  # the service's own process (its Spark JVM is apart)
        sizes.append(served)
        if served > RSS_LIMIT:
            over.append("service (meltwater serve)")
    peak = max(sizes, default=None)
    targets.append({"name": "peak RSS of every meltwater command, bytes",
                    "value": None if peak is None else {"value": peak, "bound": "="},
                    "limit": RSS_LIMIT, "met": None if peak is None else not over,
                    "over": over})
    return {"targets": targets, "growth": growth}


def _fmt_ratio(value: dict[str, Any] | None, spec: str = ".2f") -> str:
    if value is None:
        return "-"
    prefix = "" if value["bound"] == "=" else value["bound"] + " "
    return f"{prefix}{format(value['value'], spec)}"


def _fmt_seconds(entry: Any) -> str:
    if entry.median is not None:
        return f"{entry.median:.2f}"
    if entry.did_not_finish is not None:
        return f"DNF {entry.did_not_finish:.0f}"
    return "error"


def _check(entry: Any) -> str:
    check = entry.check
    if check is None:
        return "-"
    if check.get("equal"):
        return "equal"
    return "MISMATCH"


def print_report(entries: list[Any], record: dict[str, Any]) -> None:
    print()
    header = (f"{'table':<14}{'what':<20}{'rung':>6}{'median s':>11}{'runs':>5}"
              f"{'x rung 1':>9}{'peak MB':>9}{'rows':>12}  check")
    print(header)
    print("-" * len(header))
    for entry in entries:
        rungs = _rungs(entries, entry.table, entry.kind)
        first = _find(entries, entry.table, entry.kind, rungs[0]) if rungs else None
        growth = ratio(entry, first) if first is not None and first is not entry else None
        runs = len(entry.command.seconds) if entry.command is not None else len(entry.seconds)
        rss = "-" if entry.peak_rss is None else f"{entry.peak_rss / 1e6:.0f}"
        rows = "-" if entry.rows is None else f"{entry.rows:,}"
        print(f"{entry.table:<14}{entry.kind:<20}{entry.at:>6}{_fmt_seconds(entry):>11}"
              f"{runs:>5}{_fmt_ratio(growth):>9}{rss:>9}{rows:>12}  {_check(entry)}")
        if entry.failure:
            print(f"{'':<14}error: {entry.failure}")
    summary = record["summary"]
    print("\ntargets:")
    verdict = {True: "met", False: "NOT met", None: "not decided"}
    for target in summary["targets"]:
        value = target["value"]
        if target["name"].startswith("peak RSS"):
            shown = "-" if value is None else f"{value['value'] / 1e6:.0f} MB"
            limit = f"{target['limit'] / 1e6:.0f} MB"
        else:
            shown, limit = _fmt_ratio(value), f"{target['limit']:g}"
        print(f"  {target['name']}: {shown} (target <= {limit}): {verdict[target['met']]}")
    if summary["growth"]:
        print("growth between sizes:")
        for item in summary["growth"]:
            print(f"  {item['what']}: {_fmt_ratio(item['value'])}x")
    service = record.get("service")
    if service:
        print_service(service)
    gen = record["generation_seconds"]
    print("tables: " + "; ".join(
        f"{label} written in {(g['writer_seconds'] or 0) / 60:.1f} min" for label, g in
        gen.items()))
    env = record["environment"]
    print(f"load average {env['load_average_at_start']:.1f} at the start, "
          f"{env.get('load_average_at_end', 0):.1f} at the end")


def print_service(service: dict[str, Any]) -> None:
    if "error" in service:
        print(f"service: error: {service['error']}")
        return
    latency = service["latency"] or {}
    check = service.get("check") or {}
    print(f"service: {service['mirrored']}/{service['commits']} upserts mirrored, commit -> "
          f"mirror median {latency.get('median', float('nan')):.2f} s, p95 "
          f"{latency.get('p95', float('nan')):.2f} s, max {latency.get('max', float('nan')):.2f}"
          f" s; keeps up: {service['keeps_up']}; bootstrap {service['bootstrap_seconds']:.0f}"
          f" s; CPU {service['service_cpu_seconds_per_commit']:.1f} s a commit; peak RSS "
          + ", ".join(f"{k} {v / 1e6:.0f} MB" for k, v in
                      service["service_peak_rss_bytes"].items())
          + f"; mirror equals Iceberg Java's read: {check.get('equal')}")


def mismatches(entries: list[Any], service: dict[str, Any] | None) -> list[str]:
    out = [f"{e.table} {e.kind} @{e.at}: {e.check}" for e in entries
           if e.check is not None and not e.check.get("equal")]
    if service and service.get("check") and not service["check"].get("equal"):
        out.append(f"service mirror: {service['check']}")
    return out


def plot(entries: list[Any], path: Path) -> None:
    """Seconds against the backlog (one commit's changes and the scan at each rung, per
    table size) and against the commits of a `--net` range; a command that did not finish
    is drawn at its time limit with an upward triangle."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    for axis, shape, kinds, xlabel in (
            (left, "backlog", ("changes", "scan", "raw-pyarrow", "iceberg-java-scan"),
             "equality delete files (upsert commits)"),
            (right, "history", ("net", "scan"), "commits in the --net range")):
        series = 0
        for table in _tables(entries, shape):
            for kind in kinds:
                points = sorted((e.at, *_seconds(e)) for e in entries
                                if e.table == table and e.kind == kind)
                points = [p for p in points if p[1] is not None]
                if not points:
                    continue
                name = {"changes": "changes of one commit", "scan": "scan",
                        "net": "changes --net", "raw-pyarrow": "raw pyarrow, no deletes",
                        "iceberg-java-scan": "Iceberg Java scan (warm JVM)"}[kind]
                style = "--" if kind == "scan" else "-"
                xs = [p[0] for p in points]
                ys = [p[1] for p in points]
                if len(points) == 1:
                    axis.axhline(ys[0], linestyle=":", color=f"C{series}",
                                 label=f"{table}: {name} (last commit)")
                    series += 1
                    continue
                line, = axis.plot(xs, ys, style, marker="o", color=f"C{series}",
                                  label=f"{table}: {name}")
                series += 1
                dnf = [(p[0], p[1]) for p in points if p[2] == ">"]
                if dnf:
                    axis.plot(*zip(*dnf, strict=True), "^", color=line.get_color(),
                              markersize=10)
        axis.set_xlabel(xlabel)
        axis.set_ylabel("seconds (whole process)")
        axis.set_title(f"{shape}: cost against {'backlog' if shape == 'backlog' else 'commits'}")
        axis.grid(alpha=0.3)
        if axis.get_legend_handles_labels()[0]:
            axis.legend(fontsize=8)
    figure.suptitle("meltwater scale ladder, whole processes (a triangle: did not finish, "
                    "drawn at its time limit)")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
