"""One option registry and unit parser for every command; many flows, scenario
files and link events from the CLI and the Python API."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import fencepost
from fencepost import _core, sim
from fencepost.cli import main
from fencepost.events import read_events

ROOT = Path(__file__).resolve().parent.parent
FENCEPOST = str(Path(sys.executable).parent / "fencepost")
DUMBBELL = ["sim", "--topology", "dumbbell:2", "--cc", "tahoe", "--rate", "20mbit", "--delay", "10ms", "--time", "60s", "--json"]


def native_error(command, option, value, **others):
    """The (option, message) the native checker raises for one value, or None if it is accepted."""
    try:
        _core.check_options(command, [(option, value), *others.items()])
    except ValueError as exc:
        return tuple(exc.args)
    return None


@pytest.mark.parametrize("value", ["10mb", "1.5GB", "64KiB", "2e6", "1h", "lots", "-5", "10 parsecs", ""])
def test_sim_and_send_parse_sizes_the_same_way(value):
    sim_error, send_error = native_error("sim", "bytes", value), native_error("send", "bytes", value)
    assert sim_error == send_error
    if value in ("10mb", "1.5GB", "64KiB", "2e6"):
        assert sim_error is None
    else:
        assert sim_error[0] == "bytes" and "is not a size" in sim_error[1] or "negative" in sim_error[1]


@pytest.mark.parametrize("value", ["1h", "90min", "0.5s", "250us", "10", "soon", "-1s"])
def test_durations_are_one_notation_everywhere(value):
    # The run bound of `sim`, the sending time of `send` and of `sim`, the interval of `send`:
    # the same strings are accepted, or refused with the same words.
    errors = [native_error("sim", "timeout", value), native_error("send", "time", value),
              native_error("sim", "time", value), native_error("send", "interval", value, bytes="1MB")]
    messages = {e and e[1] for e in errors}
    assert len(messages) == 1, errors
    assert (messages == {None}) == (value in ("1h", "90min", "0.5s", "250us"))


def test_the_cli_gives_the_same_error_text_for_sim_and_send(capsys):
    assert main(["sim", "--bytes", "10mb"]) == 0, "decimal sizes in any case"
    capsys.readouterr()
    assert main(["sim", "--bytes", "lots"]) == 2
    sim_error = capsys.readouterr().err.split("error: ", 1)[1]
    assert main(["send", "127.0.0.1:9", "--bytes", "lots"]) == 2
    send_error = capsys.readouterr().err.split("error: ", 1)[1]
    assert sim_error == send_error
    assert sim_error.startswith("--bytes: \"lots\" is not a size")


def test_options_belong_to_their_commands(capsys):
    assert main(["send", "127.0.0.1:9", "--bytes", "1MB", "--connect-timeout", "never"]) == 2
    assert "--connect-timeout:" in capsys.readouterr().err
    with pytest.raises(ValueError) as e:
        _core.check_options("send", [("loss", "1%")])
    assert e.value.args[0] == "loss" and "not an option of `fencepost send`" in e.value.args[1]


def test_help_is_generated_and_readable():
    for command in ["sim", "sweep", "send", "serve", "echo-bench"]:
        out = subprocess.run([FENCEPOST, command, "--help"], capture_output=True, text=True, timeout=60).stdout
        assert "%%" not in out, command
    out = subprocess.run([FENCEPOST, "sim", "--help"], capture_output=True, text=True, timeout=60).stdout
    for flag in ["--topology", "--flows", "--scenario", "--event", "--start", "--rate-up", "--trace-down", "--time"]:
        assert flag in out, flag
    assert "10%" in out


def test_the_dumbbell_acceptance_command():
    runs = [subprocess.run([FENCEPOST, *DUMBBELL], capture_output=True, text=True, timeout=300) for _ in range(2)]
    assert runs[0].returncode == 0, runs[0].stderr
    assert runs[0].stdout == runs[1].stdout, "two runs give identical JSON"
    r = json.loads(runs[0].stdout)
    assert len(r["flows"]) == 2 and all(f["integrity_ok"] for f in r["flows"])
    assert r["jain_index"] >= 0.9
    bottleneck = next(l for l in r["links"] if l["link"] == "bottleneck" and l["direction"] == "up")
    assert bottleneck["utilisation"] >= 0.8
    assert r["topology"] == "dumbbell:2"


def test_per_flow_values_from_python_and_the_result_classes():
    r = sim.run(flows=2, cc=["tahoe", "none:window=20"], start=[0, 0.5], bytes="300kB", rate="10mbit", seed=2)
    assert r.integrity_ok and len(r.flows) == 2
    assert isinstance(r.flows[0], fencepost.FlowResult) and isinstance(r.links[0], fencepost.LinkResult)
    assert r.flows[0].cc.startswith("tahoe") and r.flows[1].cc.startswith("none:window=20")
    assert r.flows[1].start_s == 0.5
    assert r.goodput_bps == r.flows[0].goodput_bps, "the top of the result is the first flow"
    assert "jain_index" in r.as_dict() and "flows" not in r.as_dict()
    assert sim.SimResult.from_dict(r.to_dict()) == r
    with pytest.raises(fencepost.OptionError) as e:
        sim.run(flows=2, cc=["tahoe", "none", "tahoe"])
    assert e.value.option == "cc" and "3 times for 2 flow(s)" in e.value.message


def test_the_shipped_scenario_file_runs_and_reports_per_flow(capsys):
    scenario = ROOT / "examples" / "scenarios" / "three-flows.toml"
    assert main(["sim", "--scenario", str(scenario)]) == 0
    out = capsys.readouterr().out
    assert "3 flow(s)" in out and "blackout for 2.000 s" in out
    r = sim.run(scenario=str(scenario), seed=3)
    assert [f.start_s for f in r.flows] == [0.0, 1.0, 2.0]
    assert r.flows[0].rtt_mean_ms < r.flows[2].rtt_mean_ms, "longer access link, longer round trip"
    core = [l for l in r.links if l.link == "core"]
    assert all(l.blackout_dropped > 0 for l in core) and core[0].events
    with pytest.raises(fencepost.OptionError) as e:
        sim.run(scenario=str(scenario), loss="1%")
    assert e.value.option == "loss"


def test_a_blackout_from_the_command_line(capsys):
    code = main(["sim", "--bytes", "20MB", "--rate", "10mbit", "--event", "8s:blackout:10s", "--json"])
    r = json.loads(capsys.readouterr().out)
    assert code == 0 and r["status"] == "ok"
    assert r["links"][0]["events"] == ["at 8.000 s: blackout for 10.000 s"]
    assert r["link_up"]["blackout_dropped"] > 0
    assert r["duration_s"] > 18


def test_event_logs_name_the_flow(tmp_path):
    path = tmp_path / "two.sqlog"
    sim.run(events=str(path), flows=2, bytes="50kB", rate="5mbit", seed=1)
    df = read_events(path)
    assert set(df[df["side"] == "client"]["flow"]) == {1, 2}
    links = df[df["side"].isin(["link-up", "link-down"])]
    assert links.empty or "link" in links.columns


def test_a_sweep_of_one_condition_and_per_flow_values(tmp_path, capsys):
    code = main(["sweep", "--out", str(tmp_path / "one"), "--trials", "2", "--bytes", "30kB", "--workers", "1", "--quiet"])
    assert code == 0, capsys.readouterr().err
    summary = json.loads((tmp_path / "one" / "summary.json").read_text())
    assert len(summary) == 1 and summary[0]["n"] == 2 and summary[0]["failed"] == 0
    df = fencepost.sweep({"loss": ["0%", "10%"]}, trials=1, fixed={"flows": 2, "cc": ["tahoe", "none"], "bytes": "40kB"}, workers=1)
    assert df["integrity_ok"].all() and len(df) == 2


def test_plots_draw_one_flow_of_many(tmp_path):
    from fencepost import plot

    path = tmp_path / "two.sqlog"
    sim.run(events=str(path), flows=2, cc="tahoe", bytes="200kB", rate="5mbit", seed=1)
    df = read_events(path)
    fig = plot.congestion_window(df, flow=2)
    lines = fig.axes[0].get_lines()
    second = df[(df["flow"] == 2) & (df["side"] == "client") & (df["name"] == "recovery:metrics_updated")]
    assert len(lines[0].get_xdata()) == len(second), "only flow 2's window"


def test_a_lab_run_of_several_flows_prints_each_flow_and_their_share(capsys):
    # The table's row carries the first flow's figures; a run of several flows prints each
    # flow under it, and Jain's index, as `fencepost sim` does (it printed flow 1 alone).
    from fencepost._lab_cli import _print_rows

    row = {"transport": "fencepost", "trial": 0, "status": "ok", "goodput_bps": 8e6, "packets_sent": 100, "retransmissions": 3,
           "rtt_mean_ms": 41.5, "jain_index": 0.9, "flow1_goodput_bps": 8e6, "flow1_retransmissions": 3, "flow1_rtt_mean_ms": 41.5,
           "flow2_goodput_bps": 4e6, "flow2_retransmissions": 7, "flow2_rtt_mean_ms": None}
    _print_rows([row, {**{k: v for k, v in row.items() if not k.startswith("flow") and k != "jain_index"}, "trial": 1}])
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == "    flow 1: 8.00 Mbit/s, 3 retransmissions, RTT 41.50 ms"
    assert lines[3] == "    flow 2: 4.00 Mbit/s, 7 retransmissions, RTT -"
    assert lines[4] == "    Jain's fairness index over the 2 flows' goodputs: 0.900"
    # A run of one flow is its row alone.
    assert len(lines) == 6 and lines[5].startswith("fencepost")


def test_a_lab_run_whose_emulator_ran_late_says_so(capsys):
    # Frames milliseconds late mean the host kept the emulator from running (its spinning
    # once got it throttled for 50 ms a second): the row says its figures are not the link's.
    from fencepost._lab_cli import _print_rows
    from fencepost.lab import emulator_warning

    on_time = {"up": {"lateness_p99_us": 45}, "down": {"lateness_p99_us": 1000}}
    assert emulator_warning(on_time) is None
    late = {"up": {"lateness_p99_us": 45}, "down": {"lateness_p99_us": 24320}}
    warning = emulator_warning(late)
    assert warning is not None and "24.3 ms late" in warning
    row = {"transport": "fencepost", "trial": 0, "status": "ok", "goodput_bps": 8e6, "warning": warning}
    _print_rows([row])
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == f"    warning: {warning}"
    # On a virtual machine the hypervisor's share of the CPU time is named when it matters.
    assert "the hypervisor took 31% of this machine's CPU time" in emulator_warning(late, 0.31)
    assert "hypervisor" not in emulator_warning(late, 0.01) and "hypervisor" not in emulator_warning(late, None)
    assert emulator_warning(on_time, 0.5) is None


def test_the_hypervisors_share_of_the_cpu_time_is_read_from_proc_stat(tmp_path):
    from fencepost.lab import cpu_times, stolen_share

    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text("cpu  100 0 50 800 10 0 10 30 5 0\ncpu0 50 0 25 400 5 0 5 15 0 0\n")
    assert cpu_times(str(stat)) == (1000, 30)
    stat.write_text("cpu  300 0 150 1000 10 0 10 330 5 0\n")
    assert cpu_times(str(stat)) == (1800, 330)
    assert stolen_share((1000, 30), (1800, 330)) == 300 / 800
    # No time passed, or no reading: no share rather than a division by zero or a guess.
    assert stolen_share((1000, 30), (1000, 30)) is None and stolen_share(None, (1800, 330)) is None
    stat.write_text("intr 1 2 3\n")
    assert cpu_times(str(stat)) is None and cpu_times(str(tmp_path / "missing")) is None
    # This machine's own reading (Linux has one).
    here = cpu_times()
    assert here is not None and 0 <= here[1] <= here[0]
