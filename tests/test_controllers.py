"""Congestion controllers written in Python: in the simulator, in sweeps, over loopback."""

import sys
from pathlib import Path

import pytest

import fencepost
from fencepost import _core, sim
from fencepost.cli import main

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
import controllers  # noqa: E402  (examples/controllers.py)


@pytest.mark.parametrize("loss", ["0%", "1%", "5%", "30%"])
def test_the_ported_tahoe_matches_the_built_in_one(loss):
    options = dict(rate="20mbit", delay="20ms", loss=loss, time="10s", queue="100pkt", seed=4)
    ported = sim.run(cc=controllers.Tahoe, **options)
    built_in = sim.run(cc="tahoe:pacing=off", **options)
    assert ported.integrity_ok and built_in.integrity_ok
    assert ported.goodput_bps == pytest.approx(built_in.goodput_bps, rel=0.05)
    assert ported.cc == "python:controllers.Tahoe"


def test_the_notebook_strategies_from_the_command_line(capsys):
    file = str(ROOT / "examples" / "controllers.py")
    assert main(["sim", "--cc", f"python:{file}:NotebookTahoe", "--rate", "2640kbit", "--delay", "88ms",
                 "--queue", "26400", "--time", "10s", "--json"]) == 0
    assert '"cc": "python:' in capsys.readouterr().out
    assert main(["sim", "--cc", f"python:{file}:Missing"]) == 2
    err = capsys.readouterr().err
    assert "no Controller subclass named 'Missing'" in err and "NotebookTahoe" in err


def test_an_instance_is_copied_for_each_flow_and_a_sweep_takes_a_class():
    fixed = controllers.FixedWindow(5)
    r = sim.run(flows=2, cc=fixed, bytes="200kB", rate="10mbit", delay="10ms")
    assert r.integrity_ok and fixed.window == 5
    df = fencepost.sweep({"loss": ["1%", "5%"]}, trials=2, fixed={"cc": controllers.Tahoe, "bytes": "200kB"}, workers=2)
    assert df["integrity_ok"].all() and set(df["cc"]) == {"python:controllers.Tahoe"}


def test_a_controller_is_acked_every_other_packet_unless_it_says_it_can_do_with_fewer():
    class Fixed(fencepost.Controller):
        window = 64

    class Found(fencepost.Controller):
        window = 64
        wants_every_ack = False

    def data_packets_per_ack(cc):
        report = sim.run(cc=cc, bytes="5MB", rate="20mbit", delay="20ms", seed=1)
        assert report.integrity_ok
        return report.data_packets_sent / report.peer_acks_sent

    # One ack per two packets (the default profile's ack_every) by default; with 64 packets
    # in flight, an eighth of them, 8, for a controller that does without every ack.
    assert data_packets_per_ack(Fixed) < 2.5
    assert data_packets_per_ack(Found) > 5


def test_a_controller_that_raises_fails_the_run_with_its_traceback():
    class Broken(fencepost.Controller):
        def on_ack(self, ack):
            raise ZeroDivisionError("window over zero")

    with pytest.raises(fencepost.ControllerError) as e:
        sim.run(cc=Broken, bytes="100kB")
    assert "window over zero" in str(e.value) and "on_ack" in str(e.value)

    class NoWindow(fencepost.Controller):
        def on_ack(self, ack):
            self.window = float("nan")

    with pytest.raises(fencepost.ControllerError, match="not a number of packets"):
        sim.run(cc=NoWindow, bytes="100kB")


def test_a_python_controller_over_loopback():
    server = _core.Server.start("127.0.0.1", 0, False, [])
    try:
        host, port = server.local_addr()
        payload = bytes(range(256)) * 8_000
        with fencepost.connect((host, port), cc=controllers.Tahoe, timeout=10) as s:
            s.sendall(payload)
            s.shutdown_write()
            receipt = b""
            while True:
                chunk = s.recv(100)
                if not chunk:
                    break
                receipt += chunk
        assert int.from_bytes(receipt[:8], "big") == len(payload)
        import hashlib
        assert receipt[8:] == hashlib.sha256(payload).digest()
    finally:
        server.shutdown()
