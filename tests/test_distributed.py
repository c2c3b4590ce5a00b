"""Sweeps on other executors: any concurrent.futures executor from Python, and a
Dask cluster (a scheduler and two worker processes, started here) from the CLI,
giving the same summary as the local pool for the same seeds."""

from __future__ import annotations

import concurrent.futures
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from fencepost.sweep import sweep

GRID = ["--loss", "5%,20%", "--bytes", "150kB", "--delay", "5ms", "--trials", "3"]
FENCEPOST = [sys.executable, "-m", "fencepost.cli"]
DASK = str(Path(sys.executable).parent / "dask")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_any_executor_gives_the_local_pools_rows():
    grid = {"loss": ["5%", "20%"]}
    fixed = {"bytes": "100kB", "delay": "5ms"}
    local = sweep(grid, trials=2, fixed=fixed, workers=2)
    with concurrent.futures.ProcessPoolExecutor(2) as pool:
        remote = sweep(grid, trials=2, fixed=fixed, executor=pool)
    assert list(local["duration_s"]) == list(remote["duration_s"])
    assert local.attrs["summary"].equals(remote.attrs["summary"])


@pytest.fixture
def dask_cluster(tmp_path):
    pytest.importorskip("distributed", reason="dask.distributed is in requirements-dev.txt; make test installs it")
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    logs = []
    procs = []

    def start(*args: str) -> None:
        log = open(tmp_path / f"dask-{len(procs)}.log", "w")
        logs.append(log)
        procs.append(subprocess.Popen([DASK, *args], stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path))

    try:
        start("scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard")
        for _ in range(2):
            start("worker", address, "--nworkers", "1", "--nthreads", "1", "--no-dashboard", "--no-nanny")
        from distributed import Client

        with Client(address, timeout=30) as client:
            client.wait_for_workers(2, timeout=60)
            assert len(client.scheduler_info()["workers"]) == 2
        yield address
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        for log in logs:
            log.close()


def test_a_sweep_on_a_dask_cluster_matches_the_local_pool(dask_cluster, tmp_path):
    local = subprocess.run([*FENCEPOST, "sweep", *GRID, "--workers", "2", "--quiet", "--out", str(tmp_path / "local")],
                           capture_output=True, text=True, timeout=300)
    assert local.returncode == 0, local.stderr
    remote = subprocess.run([*FENCEPOST, "sweep", *GRID, "--scheduler", dask_cluster, "--quiet", "--out", str(tmp_path / "dask")],
                            capture_output=True, text=True, timeout=300)
    assert remote.returncode == 0, remote.stderr
    assert "6 runs done now" in remote.stdout
    from distributed import Client

    with Client(dask_cluster, timeout=30) as client:
        executed = client.run(lambda dask_worker: dask_worker.state.executed_count)
    assert sum(executed.values()) >= 6 and all(n > 0 for n in executed.values()), f"runs per worker: {executed}"
    assert (tmp_path / "dask" / "summary.csv").read_text() == (tmp_path / "local" / "summary.csv").read_text()
    # Resumed: nothing left to run.
    again = subprocess.run([*FENCEPOST, "sweep", *GRID, "--scheduler", dask_cluster, "--quiet", "--out", str(tmp_path / "dask")],
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "0 runs done now, 6 already" in again.stdout, again.stdout + again.stderr


def test_an_unreachable_scheduler_is_a_clear_error(tmp_path):
    pytest.importorskip("distributed")
    done = subprocess.run([*FENCEPOST, "sweep", *GRID, "--scheduler", f"tcp://127.0.0.1:{_free_port()}", "--quiet", "--out", str(tmp_path / "x")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--scheduler" in done.stderr and "Traceback" not in done.stderr, done.stderr
