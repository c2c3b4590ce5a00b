"""The Python simulator API and the `fencepost sim` command."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import fencepost
from fencepost import sim
from fencepost.cli import main

ACCEPTANCE = ["--bytes", "1000000", "--loss", "30%", "--delay", "10ms", "--rate", "50mbit", "--seed", "7", "--json"]


def run_cli(args, capsys):
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_run_returns_a_frozen_result():
    r = sim.run(bytes="200kB", loss="20%", delay="5ms", seed=3)
    assert r.integrity_ok and r.close_ok and r.status == "ok"
    assert r.bytes_delivered == r.bytes_expected == 200_000
    assert r.data_packets_sent >= 200_000 // r.payload_size
    with pytest.raises(Exception):
        r.status = "changed"  # frozen


def test_numbers_are_read_in_natural_units():
    # 0.2 = 20 %, 0.005 s = 5 ms: the same run as the strings.
    a = sim.run(bytes=100_000, loss=0.2, delay=0.005, seed=4)
    b = sim.run(bytes="100kB", loss="20%", delay="5ms", seed=4)
    assert a.as_dict() == b.as_dict()


def test_bad_options_raise_option_error_naming_the_option():
    with pytest.raises(fencepost.OptionError) as e:
        sim.run(loss="140%")
    assert e.value.option == "loss"
    assert "100%" in str(e.value)
    with pytest.raises(fencepost.OptionError) as e:
        sim.run(colour="red")
    assert e.value.option == "colour" and "accepted" in e.value.message
    assert isinstance(e.value, fencepost.FencepostError)


@pytest.mark.parametrize("option, value, says", [("--loss", "-5%", "out of range"), ("--delay", "-5ms", "negative"),
                                                ("--rate", "-1mbit", "negative")])
def test_a_negative_value_gets_the_options_own_error(capsys, option, value, says):
    # argparse took "-5%" for an option and answered "expected one argument".
    code, _, err = run_cli(["sim", option, value], capsys)
    assert code == 2 and option in err and says in err and "expected one argument" not in err, err


def test_acceptance_command_is_reproducible(capsys):
    code1, out1, _ = run_cli(["sim", *ACCEPTANCE], capsys)
    code2, out2, _ = run_cli(["sim", *ACCEPTANCE], capsys)
    assert code1 == code2 == 0
    assert out1 == out2
    report = json.loads(out1)
    assert report["integrity_ok"] is True
    for key in ["bytes_delivered", "payload_size", "duration_s", "goodput_bps", "packets_sent", "data_packets_sent",
                "retransmissions", "acks_sent", "rtt_mean_ms", "rtt_p95_ms", "link_drops"]:
        assert key in report, key


@pytest.mark.parametrize(
    "args, option, hint",
    [
        (["--loss", "140%"], "--loss", "0 to 100%"),
        (["--rate", "fast"], "--rate", "100mbit"),
        (["--trace", "/nonexistent/file.trace"], "--trace", "cannot read"),
        (["--queue", "lots"], "--queue", "100pkt"),
        (["--arq", "sack"], "--arq", "fence, window"),
        (["--delay", "10"], "--delay", "10ms"),
    ],
)
def test_cli_rejects_bad_values_naming_the_option(capsys, args, option, hint):
    code, out, err = run_cli(["sim", *args], capsys)
    assert code == 2
    assert out == ""
    assert f"error: {option}:" in err and hint in err


def test_bad_trace_file_names_the_line(tmp_path, capsys):
    trace = tmp_path / "bad.trace"
    trace.write_text("1\n2\n1\n")
    code, _, err = run_cli(["sim", "--trace", str(trace)], capsys)
    assert code == 2 and "line 3" in err


def test_human_summary(capsys):
    code, out, _ = run_cli(["sim", "--bytes", "50kB", "--loss", "10%", "--seed", "2"], capsys)
    assert code == 0
    assert "integrity OK" in out and "packets sent" in out and "RTT mean" in out


def test_console_script_is_installed():
    exe = Path(sys.executable).parent / "fencepost"
    proc = subprocess.run([str(exe), "sim", "--bytes", "10kB", "--json"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["integrity_ok"] is True


def test_a_long_run_is_interrupted_by_ctrl_c():
    import signal
    import threading
    import time

    timer = threading.Timer(0.3, signal.raise_signal, args=(signal.SIGINT,))
    timer.start()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        sim.run(bytes="20GB", rate="1gbit", delay="1ms")  # tens of seconds of work
    assert time.monotonic() - started < 3


def test_parallel_gives_the_same_result_from_python_and_the_cli(capsys):
    options = dict(bytes="5MB", rate="50mbit", delay="20ms", loss="1%", seed=4)
    one, two = sim.run(**options), sim.run(parallel=True, **options)
    assert one.integrity_ok and one.to_dict() == two.to_dict()
    args = ["sim", "--bytes", "5MB", "--rate", "50mbit", "--delay", "20ms", "--loss", "1%", "--seed", "4", "--json"]
    code, out, _ = run_cli(args, capsys)
    code2, out2, _ = run_cli(args + ["--parallel"], capsys)
    assert code == code2 == 0 and json.loads(out) == json.loads(out2)
    assert json.loads(out)["integrity_ok"] and json.loads(out)["goodput_bps"] == one.goodput_bps
    # The summary says how the run used the two threads, or why it could not.
    _, out, _ = run_cli(args[:-1] + ["--parallel"], capsys)
    assert re.search(r"--parallel: [1-9]\d?% of the simulated time ran on two threads", out), out
    _, out, _ = run_cli(["sim", "--bytes", "1MB", "--delay", "1ms", "--parallel"], capsys)
    assert "--parallel: ran on one thread throughout: a packet can cross between the clients' and the servers' sides in 1.000 ms" in out
    _, out, _ = run_cli(args[:-1], capsys)
    assert "--parallel" not in out
    result, parallelism = sim.run_with_parallelism(parallel=True, **options)
    assert result.to_dict() == one.to_dict() and parallelism["one_thread_because"] is None and 0 < parallelism["apart_s"] < result.end_s
