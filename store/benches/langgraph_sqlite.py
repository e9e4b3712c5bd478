#!/usr/bin/env python3
"""LangGraph's SQLite checkpointer saving one step, for comparison with
`SqliteStore::commit` of one journal entry (benches/journal.rs).

One `SqliteSaver.put` of a ~300-byte checkpoint (the serialized checkpoint
plus its metadata) per sample, on a file, p50 over 2000 saves after a
warm-up. `SqliteSaver` sets `journal_mode=WAL` itself but not
`synchronous`, so a save is as durable as the SQLite library's compile-time
default makes it: the script prints what that is and measures
- `default`: the saver as it comes;
- `full`: with `PRAGMA synchronous=FULL` set on its connection (durable
  across power loss, like nexo's store);
- `normal`: with `PRAGMA synchronous=NORMAL` (what a build defaulting to
  NORMAL in WAL mode gives: a power loss may drop the latest saves).

Set up (once):

    python3 -m venv /work/venv-langgraph
    /work/venv-langgraph/bin/pip install langgraph-checkpoint-sqlite

Run right after the Rust benchmark, so both see the same machine state:

    cargo bench -p nexo-store --bench journal -- --p50
    /work/venv-langgraph/bin/python store/benches/langgraph_sqlite.py --nexo-append-p50-us 130

`--nexo-append-p50-us` is the `journal append` p50 the Rust run printed;
with it the script prints the ratios.
"""

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from langgraph.checkpoint.base import LATEST_VERSION, Checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.sqlite import SqliteSaver

TARGET_BYTES = 300


def checkpoint(step: int, payload: str) -> Checkpoint:
    return Checkpoint(
        v=LATEST_VERSION,
        id=str(uuid6(clock_seq=step)),
        ts=datetime.now(timezone.utc).isoformat(),
        channel_values={"messages": payload},
        channel_versions={"messages": step},
        versions_seen={},
        pending_sends=[],
        updated_channels=None,
    )


def step_bytes(saver: SqliteSaver, payload: str) -> int:
    """The size of what one put stores: the serialized checkpoint and metadata."""
    _, blob = saver.serde.dumps_typed(checkpoint(1, payload))
    return len(blob) + len(b'{"source": "loop", "step": 1}')


def measure(path: Path, mode: str, samples: int, warmup: int) -> tuple[list[float], int, int]:
    conn = sqlite3.connect(str(path), check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    if mode != "default":
        conn.execute(f"PRAGMA synchronous={mode.upper()}")
    synchronous = conn.execute("PRAGMA synchronous").fetchone()[0]
    journal_mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    assert journal_mode == "wal", journal_mode

    payload = "x"
    while step_bytes(saver, payload) < TARGET_BYTES:
        payload += "x"
    size = step_bytes(saver, payload)

    config = {"configurable": {"thread_id": "bench", "checkpoint_ns": ""}}
    times = []
    for step in range(warmup + samples):
        cp = checkpoint(step, payload)
        metadata = {"source": "loop", "step": step}
        start = time.perf_counter_ns()
        config = saver.put(config, cp, metadata, {"messages": step})
        elapsed = time.perf_counter_ns() - start
        if step >= warmup:
            times.append(elapsed / 1000.0)
    conn.close()
    return times, synchronous, size


def pct(sorted_times: list[float], p: float) -> float:
    return sorted_times[round((len(sorted_times) - 1) * p)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--modes", default="default,full,normal")
    parser.add_argument("--nexo-append-p50-us", type=float, help="the Rust run's journal append p50, in µs")
    args = parser.parse_args()

    print(f"python {sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}")
    names = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in args.modes.split(","):
            path = Path(tmp) / f"langgraph-{mode}.sqlite"
            times, synchronous, size = measure(path, mode, args.samples, args.warmup)
            times.sort()
            p50 = pct(times, 0.5)
            line = (
                f"  SqliteSaver.put [{mode:<7} synchronous={names.get(synchronous, synchronous)}] "
                f"{size} bytes: p50 {p50:7.1f}µs  p90 {pct(times, 0.9):7.1f}µs  p99 {pct(times, 0.99):7.1f}µs  "
                f"mean {statistics.fmean(times):7.1f}µs"
            )
            if args.nexo_append_p50_us:
                line += f"  ({p50 / args.nexo_append_p50_us:.2f}× nexo's journal append p50)"
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
