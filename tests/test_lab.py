"""The lab on real namespaces: the emulator's fidelity, runs of every transport
with both impairment methods, and clean-up after a run is killed. Needs root
(CI runs as root) and iproute2, iptables, iperf3 and ping (`make lab-deps`)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from fencepost import _core, lab

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root (network namespaces, packet sockets)")


def _need(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    # Missing tools are a failure, not a skip: `make test` installs them.
    assert not missing, f"lab tools missing: {missing} (run `make lab-deps` as root)"


def _our_namespaces(lab_id_prefix: str) -> list[str]:
    return [n for n in lab.namespaces() if n.startswith(lab_id_prefix)]


def _stop_json(p: lab.Process) -> dict:
    p.stop(grace=10)
    lines = p.json_lines()
    assert lines, p.errors()
    return lines[-1]


def test_the_lab_says_it_needs_root(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(lab.LabError, match="needs root"):
        lab.Lab("line")


def test_bad_lab_options_name_the_option():
    with pytest.raises(lab.OptionError, match="--topology"):
        lab.parse_topology("star:3")
    with pytest.raises(lab.OptionError, match="tcp:cubic"):
        lab.parse_transport("quic")
    with pytest.raises(lab.OptionError, match="2 transports for 3 flows"):
        lab.parse_transport("tcp:cubic&fencepost", 3)
    with pytest.raises(lab.OptionError, match="--transport.*--cc"):
        lab.parse_transport("fencepost+cc=warp")
    with pytest.raises(lab.OptionError, match="iptables cannot emulate delay"):
        lab.check_iptables_link(lab.describe_link([("delay", "10ms")]))
    with pytest.raises(lab.OptionError, match="--loss"):
        lab.split_options({"loss": "140%"}, "emulator")


def test_ping_crosses_the_emulator_in_twice_its_delay():
    _need("ping")
    delay_ms = 5.0
    with lab.Lab("line") as L:
        emu = L.impair_link([("delay", f"{delay_ms}ms")], seed=3)
        out = subprocess.run(["ip", "netns", "exec", L.ns("client"), "ping", "-n", "-c", "300", "-i", "0.01", "10.0.2.1"],
                             capture_output=True, text=True, timeout=60)
        report = _stop_json(emu)
    rtts = sorted(float(tok.split("=")[1]) for line in out.stdout.splitlines() for tok in line.split() if tok.startswith("time="))
    assert len(rtts) == 300, out.stdout[-500:]
    p01, p50, p90 = rtts[3], rtts[len(rtts) // 2], rtts[int(0.90 * len(rtts)) - 1]
    # The acceptance figure (±0.2 ms at p99) is measured by bench/lab_fidelity.py on a quiet
    # machine. A test shares the cores with whatever else runs: one CI run saw 4 pings of 300
    # over 11.7 ms, another 20 at 11.0-11.5 ms (the ping and emulator threads woken late), so
    # the tail checked here is p90, and the bulk (p50) must be precise. On 2026-12-02, evening,
    # on an idle host in a slow spell, p90 was 11.3-11.6 ms in 2 runs of 3 (p50 within bound):
    # the p90 bound allows 2 ms of late wake-ups, still far below a delay applied twice.
    # On failure, the emulator's own timing too (how late it sent frames after their due time,
    # and how long they waited in its socket before it read them), so that a host that woke
    # it late shows apart from a delay applied wrongly.
    timing = {d: {k: report[d].get(k) for k in ("lateness_p99_us", "lateness_max_us", "read_delay_p99_us")} for d in ("up", "down")}
    assert 2 * delay_ms <= p01 + 0.05, (rtts[:5], timing)
    assert p50 <= 2 * delay_ms + 0.3, (rtts[len(rtts) // 2 - 2:len(rtts) // 2 + 3], timing)
    assert p90 <= 2 * delay_ms + 2.0, (rtts[-40:], timing)
    assert report["up"]["stats"]["delivered"] == 300 and report["down"]["stats"]["delivered"] == 300


def test_bernoulli_loss_and_a_trace_are_what_the_receiver_sees():
    _need("iperf3")
    # A trace with a one-second period, so any five whole seconds hold five periods.
    trace_text = _core.generate_trace("poisson", 20_000_000, 1000, 7)
    opportunities = len(trace_text.split())
    with lab.Lab("line") as L:
        trace_path = f"/tmp/{L.id}.trace"
        with open(trace_path, "w") as f:
            f.write(trace_text)
        try:
            # 1. Loss: 100k datagrams at 10 %, counted by iperf3's receiver from its sequence numbers.
            server = L.spawn("server", ["iperf3", "-s", "-1", "-J", "-B", "10.0.2.1"], label="iperf3 server")
            server.wait_for(lambda p: p.popen.poll() is None, 5, "starting")
            time.sleep(0.3)
            emu = L.impair_link([("delay", "1ms"), ("loss-up", "10%"), ("loss-down", "0")], seed=11)
            client = subprocess.run(["ip", "netns", "exec", L.ns("client"), "iperf3", "-c", "10.0.2.1", "-u", "-b", "40M", "-l", "172",
                                     "-k", "100000", "-w", "4M", "-J"], capture_output=True, text=True, timeout=120)
            assert client.returncode == 0, client.stdout[-800:]
            server.finish(30)
            report = _stop_json(emu)
            received = json.loads("\n".join(server.stdout))["end"]["sum"]
            measured = received["lost_packets"] / received["packets"]
            # The receiver counts up to the highest sequence number it saw: the last lost ones
            # have no later packet to reveal them, and it stops counting when the client's
            # control connection says the test is over, while the emulator may still hold the
            # last milliseconds' datagrams on a busy host (157 of them, 5 ms at this rate, in
            # one run under CI's load; 100 was the bound before).
            assert received["packets"] >= 99_000, received
            assert abs(measured - 0.10) <= 0.01, measured
            up = report["up"]["stats"]
            assert abs(up["lost"] / up["offered"] - 0.10) <= 0.01

            # 2. A trace: flooded at 30 Mbit/s, the receiver gets the trace's capacity.
            server = L.spawn("server", ["iperf3", "-s", "-1", "-J", "-B", "10.0.2.1"], label="iperf3 server")
            time.sleep(0.3)
            emu = L.impair_link([("delay", "1ms"), ("trace-up", trace_path), ("queue-up", "200pkt"), ("delay-down", "1ms")], seed=12)
            client = subprocess.run(["ip", "netns", "exec", L.ns("client"), "iperf3", "-c", "10.0.2.1", "-u", "-b", "30M", "-l", "1472",
                                     "-t", "8", "-J"], capture_output=True, text=True, timeout=60)
            assert client.returncode == 0, client.stdout[-800:]
            server.finish(30)
            _stop_json(emu)
            intervals = json.loads("\n".join(server.stdout))["intervals"]
            # Seconds 2 to 6: the queue is full throughout; IP bytes are payload plus 28 bytes of headers.
            window = [i["sum"] for i in intervals[2:7]]
            ip_bytes = sum(s["bytes"] + s["packets"] * 28 for s in window)
            capacity = 5 * opportunities * 1504
            assert abs(ip_bytes / capacity - 1) <= 0.02, (ip_bytes, capacity)
        finally:
            os.unlink(trace_path)


def test_corrupted_packets_are_discarded_by_the_receiving_kernel():
    _need("iperf3")
    with lab.Lab("line") as L:
        server = L.spawn("server", ["iperf3", "-s", "-1", "-J", "-B", "10.0.2.1"], label="iperf3 server")
        time.sleep(0.3)
        emu = L.impair_link([("delay", "1ms"), ("corrupt-up", "10%")], seed=5)
        full_buffer_before = L.udp_receive_drops()
        client = subprocess.run(["ip", "netns", "exec", L.ns("client"), "iperf3", "-c", "10.0.2.1", "-u", "-b", "20M", "-l", "500",
                                 "-k", "20000", "-J"], capture_output=True, text=True, timeout=60)
        assert client.returncode == 0, client.stdout[-800:]
        server.finish(30)
        report = _stop_json(emu)
        # Datagrams the server's kernel dropped for a full socket buffer (a busy host: the
        # iperf3 server descheduled) are lost to iperf3 as well, but not to the checksum.
        full_buffer = L.udp_receive_drops() - full_buffer_before
    received = json.loads("\n".join(server.stdout))["end"]["sum"]
    up = report["up"]["stats"]
    # The emulator flipped a bit in a tenth of the packets it handed on; the server's checksums threw those away.
    assert abs(up["corrupted"] / up["delivered"] - 0.10) < 0.015, up
    assert abs((received["lost_packets"] - full_buffer) / received["packets"] - 0.10) < 0.015, (received, full_buffer)


@pytest.mark.parametrize("impair", ["emulator", "iptables"])
def test_every_transport_crosses_a_lossy_lab_link(impair):
    _need("iptables")
    link = {"loss": "10%", "rate": "50mbit"}
    if impair == "emulator":
        link["delay"] = "5ms"
    rows, summary = lab.lab_sweep({}, {**link, "bytes": "2MB", "messages": "200"}, ["fencepost", "tcp:cubic", "echo", "fencepost+profile=seed+arq=window"],
                                  trials=1, impair=impair, progress=False)
    by = {r["transport"]: r for r in rows}
    for name, row in by.items():
        assert row["status"] == "ok" and row["integrity_ok"], (name, row["error"])
    # The seed article's picture: at 10 % loss the fence keeps the link busy and TCP does not.
    assert by["fencepost"]["goodput_bps"] > 12e6  # 2 MB: most of it is the start-up
    assert by["tcp:cubic"]["goodput_bps"] < by["fencepost"]["goodput_bps"] / 5
    assert by["tcp:cubic"]["flows"][0]["tcp_samples"] and by["tcp:cubic"]["retransmissions"] > 0
    assert by["echo"]["messages"] == 200
    if impair == "emulator":
        loss = by["fencepost"]["link_up_lost"] / by["fencepost"]["link_up_offered"]
        assert 0.08 < loss < 0.12
    assert summary and all(s["n"] == 1 for s in summary)


def test_a_run_past_its_timeout_is_a_failed_row_that_says_so():
    # Kernel TCP cannot move 50 MB through 50 % loss in 3 s: the run is stopped at its bound
    # and the row says why, instead of waiting ten minutes and reporting a mute failure.
    started = time.monotonic()
    rows, _ = lab.lab_sweep({}, {"loss": "50%", "rate": "50mbit", "delay": "5ms", "bytes": "50MB"}, ["tcp:cubic"], trials=1,
                            progress=False, timeout=3.0)
    (row,) = rows
    assert row["status"] == "failed" and not row["integrity_ok"]
    assert "not finished within the run's limit of 3 s" in row["error"], row["error"]
    # Stopped at the bound, not after the server's wait for an account that cannot come.
    assert time.monotonic() - started < 30


def test_the_emulator_log_draws_throughput_and_queueing_delay(tmp_path):
    import statistics

    from fencepost import plot

    # A log directory not there yet is made (it failed the run before).
    logs = tmp_path / "logs" / "emulator"
    rows, _ = lab.lab_sweep({}, {"rate": "20mbit", "delay": "5ms", "queue": "60kB", "time": "3s"}, ["tcp:cubic"], trials=1,
                            progress=False, log_dir=str(logs))
    assert rows[0]["status"] == "ok", rows[0]["error"]
    (log,) = logs.glob("*.log")
    marks = {line.split()[2] for line in log.read_text().splitlines() if not line.startswith("#")}
    assert {"+", ">", "-"} <= marks
    fig = plot.emulator_log(log, "up", 0.1, capacity_bps=20e6)
    top, bottom = fig.axes
    delivered = list(top.lines[1].get_ydata())
    # CUBIC keeps a 20 Mbit/s link busy once it has started: the middle second is at the rate.
    middle = delivered[len(delivered) // 3: 2 * len(delivered) // 3]
    assert 18 <= statistics.median(middle) <= 20.5, middle
    assert max(bottom.lines[0].get_ydata()) > 1.0  # the 60 kB queue filled (24 ms at 20 Mbit/s)
    plot.save(fig, tmp_path / "emulator")
    assert (tmp_path / "emulator.png").exists()


def test_a_trace_starts_with_the_run_as_in_the_simulator(tmp_path):
    # A trace's slots went by unused while the emulator waited for the run to start, so its
    # phase was the setup's length behind the simulator's (the ATT LTE trace's first packet
    # waited 150 ms for the slot the simulator gives it at 48 ms). This trace has a slot at
    # 1 ms, 50 from 300 ms and one at 400 ms (its period): the run's first packet, at 0,
    # leaves at 1 ms, as in the simulator; with that slot gone it waited for 300 ms.
    trace = tmp_path / "late.trace"
    trace.write_text("".join(f"{ms}\n" for ms in [1, *range(300, 350), 400]))
    logs = tmp_path / "logs"
    rows, _ = lab.lab_sweep({}, {"trace": str(trace), "delay": "5ms", "bytes": "20kB"}, ["fencepost"], trials=1,
                            progress=False, log_dir=str(logs))
    assert rows[0]["status"] == "ok", rows[0]["error"]
    (log,) = logs.glob("*.log")
    up = [line.split() for line in log.read_text().splitlines() if not line.startswith("#") and line.split()[1] == "up"]
    first_id = up[0][4]
    assert up[0][2] == "+" and up[0][0] == "0", up[0]
    departed = next(int(e[0]) for e in up if e[2] == ">" and e[4] == first_id)
    assert departed == 1000, f"the first packet left at {departed} µs"


def test_two_flows_share_a_dumbbell():
    # 20 Mbit/s, not more: this machine's hypervisor takes its CPUs away now and then (up to
    # 40 % steal) and the emulator then leaves frames tens of milliseconds late. At 40 Mbit/s
    # such a run kept 80 % of the link (a CI run: 31.8 of 40); at 20 Mbit/s, with the
    # emulator stopped for 30 ms of every 330, runs kept 91-96 %.
    rate = 20e6
    rows, _ = lab.lab_sweep({}, {"rate": "20mbit", "delay": "5ms", "queue": "100kB", "time": "6s"}, ["fencepost&tcp:cubic"],
                            trials=1, topology="dumbbell:2", progress=False)
    row = rows[0]
    assert row["status"] == "ok", row["error"]
    flows = row["flows"]
    assert [f["transport"] for f in flows] == ["fencepost", "tcp:cubic"]
    total = sum(f["goodput_bps"] for f in flows)
    # On failure, the emulator's own account too: whether it kept time (its lateness and
    # warning) and what its queue did, so a busy host shows apart from the flows' sharing.
    account = {k: row.get(k) for k in ("warning", "host_cpu_stolen_share", "link_up_lateness_p99_us", "link_down_lateness_p99_us", "link_up_queue_delay_p95_ms", "link_drops")}
    assert 0 <= row["host_cpu_stolen_share"] <= 1, account
    assert 0.8 * rate < total <= rate * 1.02, (total, [f["goodput_bps"] for f in flows], account)
    assert row["flow2_goodput_bps"] == flows[1]["goodput_bps"] and 0 < row["jain_index"] <= 1


def _processes_in(names: list[str]) -> set[int]:
    pids = set()
    for name in names:
        out = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True).stdout
        pids |= {int(p) for p in out.split()}
    return pids


def _alive(pids: set[int]) -> set[int]:
    # A zombie has exited; only its parent's bookkeeping is left.
    alive = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            continue
        if state != "Z":
            alive.add(pid)
    return alive


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_a_killed_lab_run_leaves_nothing_behind(how, tmp_path):
    links_before = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout.count("\n")
    run = subprocess.Popen([sys.executable, "-m", "fencepost.cli", "lab", "run", "--time", "30s", "--rate", "20mbit", "--quiet",
                            "--transport", "tcp:cubic"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    prefix = f"{lab.PREFIX}{run.pid:x}"
    try:
        deadline = time.monotonic() + 30
        # Mid-way: the namespaces are up and the emulator, the sink and the sender are running.
        while time.monotonic() < deadline and len(_processes_in(_our_namespaces(prefix))) < 3:
            time.sleep(0.2)
        time.sleep(2)
        inside = _processes_in(_our_namespaces(prefix))
        assert len(inside) >= 3, run.stderr.read1(4000) if run.poll() is not None else f"processes in the lab: {inside}"
        run.send_signal(signal.SIGTERM if how == "SIGTERM" else signal.SIGKILL)
        run.wait(timeout=30)
        if how == "SIGKILL":
            # Its processes die with it; its namespaces wait for `lab clean`.
            time.sleep(0.5)
            done = subprocess.run([sys.executable, "-m", "fencepost.cli", "lab", "clean"], capture_output=True, text=True, timeout=60)
            assert done.returncode == 0 and prefix in done.stdout, done.stdout + done.stderr
        else:
            assert run.returncode == 130
        assert _our_namespaces(prefix) == []
        time.sleep(0.2)
        assert _alive(inside) == set()
        assert subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout.count("\n") == links_before
    finally:
        if run.poll() is None:
            run.kill()
        lab.clean()


def test_duplication_rescues_kernel_tcp_from_random_loss(tmp_path, monkeypatch):
    """The duplication paper's point, on namespaces: at 0.1 ms and 5 % loss, kernel
    CUBIC with every packet duplicated (each copy lost on its own) keeps far more
    goodput than without; without loss, the copies cost capacity. The demo's part
    (h1, lab) runs the full grid; this runs its corners."""
    _need("ip")
    from fencepost import demo_lab, demo_redundancy
    from fencepost.demo import Report

    monkeypatch.setattr(demo_redundancy, "DUP_DELAYS", {"100us": "0.1 ms"})
    monkeypatch.setattr(demo_redundancy, "DUP_LOSSES", ["0%", "5%"])
    monkeypatch.setattr(demo_redundancy, "DUP_SHARES", ["0%", "100%"])
    report = Report(tmp_path)
    summary = demo_lab.duplication_lab(report, trials=1, progress=False)["summary"]
    goodput = {(r["loss"], r["dup-up"]): r["goodput_bps_mean"] for r in summary}
    assert all(r["failed"] == 0 for r in summary), summary
    assert goodput[("5%", "100%")] > 3 * goodput[("5%", "0%")], goodput
    assert goodput[("0%", "100%")] < 0.7 * goodput[("0%", "0%")], goodput
    assert (tmp_path / "plots" / "lab-duplication-100us.png").exists()


class _Ended:
    """A lab process that has ended, with what it printed."""

    def __init__(self, document=None, lines=(), errors="(nothing on stderr)"):
        self.document, self.lines, self.errs = document, list(lines), errors

    def json_document(self):
        return self.document

    def json_lines(self):
        return list(self.lines)

    def errors(self):
        return self.errs


def test_a_sender_that_gave_up_is_reported_with_its_reason_not_as_a_silent_server():
    # A timed sender on a fading uplink whose flush stalled: the server was still waiting
    # for the rest when the lab stopped it, so it printed only its endpoint counters.
    reason = "the flush stalled: after 20.0 s of our writing, nothing more was delivered for 10.0 s"
    client = _Ended(document={"end": {"fencepost": {"complete": False, "incomplete_reason": reason}}})
    server = _Ended(lines=[{"endpoint": {"datagrams_received": 5627}}], errors="fencepost serve: stopped")
    f = lab._flow_result(0, lab.FlowTransport("fencepost"), client, server, lab.Workload(seconds=20.0), 0)
    assert f["status"] == "failed" and f["integrity_ok"] is False
    assert f["error"].startswith("incomplete: " + reason), f["error"]
    # A sender that did not say it gave up: the server's silence is the news.
    done = _Ended(document={"end": {"fencepost": {"complete": True, "incomplete_reason": None}}})
    f = lab._flow_result(0, lab.FlowTransport("fencepost"), done, server, lab.Workload(seconds=20.0), 0)
    assert f["status"] == "failed" and f["error"].startswith("server reported no connection: fencepost serve: stopped"), f["error"]
