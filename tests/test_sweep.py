"""Sweeps: grids, trials, output folder, resume, Ctrl-C, experiment files."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import fencepost
from fencepost.cli import main
from fencepost.sweep import Experiment, ExperimentError, load_experiment, run_sweep, split_values, summarize_values, t95

FENCEPOST = str(Path(sys.executable).parent / "fencepost")


def test_sweep_returns_one_row_per_run_and_a_summary(tmp_path):
    df = fencepost.sweep({"loss": ["10%", "30%"], "arq": ["window", "fence"]}, trials=3,
                         fixed={"workload": "echo", "messages": 40, "delay": "1ms"}, workers=1, out=tmp_path)
    assert len(df) == 12
    assert set(df["loss"]) == {"10%", "30%"} and set(df["arq"]) == {"window", "fence"}
    assert sorted(df["seed"].unique()) == [1, 2, 3], "each trial has its own seed"
    assert df["integrity_ok"].all()
    summary = df.attrs["summary"]
    assert len(summary) == 4
    row = summary[(summary["loss"] == "30%") & (summary["arq"] == "fence")].iloc[0]
    runs = df[(df["loss"] == "30%") & (df["arq"] == "fence")]["packets_sent"]
    assert row["packets_sent_mean"] == pytest.approx(runs.mean())
    assert row["packets_sent_std"] == pytest.approx(runs.std(ddof=1))
    assert row["packets_sent_ci95"] == pytest.approx(t95(2) * runs.std(ddof=1) / 3 ** 0.5)
    for name in ["runs.jsonl", "runs.csv", "summary.csv", "summary.json", "experiment.toml"]:
        assert (tmp_path / name).exists(), name
    again, _ = load_experiment(tmp_path / "experiment.toml")
    assert again.grid == {"loss": ["10%", "30%"], "arq": ["window", "fence"]} and again.trials == 3


def test_rerun_into_the_same_folder_runs_nothing_new(tmp_path):
    experiment = Experiment(grid={"loss": ["0%", "20%"]}, fixed={"bytes": "30kB"}, trials=2)
    first = run_sweep(experiment, out=tmp_path, workers=1, progress=False)
    assert (first.ran, first.skipped) == (4, 0)
    second = run_sweep(experiment, out=tmp_path, workers=1, progress=False)
    assert (second.ran, second.skipped) == (0, 4)
    assert [r["packets_sent"] for r in second.rows] == [r["packets_sent"] for r in first.rows]
    lines = (tmp_path / "runs.jsonl").read_text().splitlines()
    assert len(lines) == 4
    # A bigger experiment in the same folder only runs what is new.
    bigger = Experiment(grid={"loss": ["0%", "20%", "40%"]}, fixed={"bytes": "30kB"}, trials=2)
    third = run_sweep(bigger, out=tmp_path, workers=1, progress=False)
    assert (third.ran, third.skipped) == (2, 4)


def test_parallel_workers_give_the_same_results(tmp_path):
    experiment = Experiment(grid={"loss": ["10%", "40%"], "arq": ["window", "fence"]}, fixed={"bytes": "50kB"}, trials=2)
    one = run_sweep(experiment, workers=1, progress=False)
    two = run_sweep(experiment, workers=2, progress=False)
    strip = lambda rows: [{k: v for k, v in r.items()} for r in rows]
    assert strip(one.rows) == strip(two.rows), "runs are deterministic whatever the worker count"


def write(tmp_path, text):
    path = tmp_path / "exp.toml"
    path.write_text(text)
    return path


def test_experiment_file_with_an_unknown_key_fails_naming_it(tmp_path):
    path = write(tmp_path, 'trails = 5\n[grid]\nloss = ["10%"]\n')
    with pytest.raises(ExperimentError) as e:
        load_experiment(path)
    assert "'trails'" in str(e.value) and "accepted: name, description, trials" in str(e.value)


@pytest.mark.parametrize(
    "text, needle",
    [
        ('[grid]\nloss = ["10%", "140%"]\n', "grid.loss"),
        ('[grid]\nloss = ["10%"]\n[fixed]\ncolour = "red"\n', "fixed.colour: unknown option; accepted:"),
        ('[grid]\narq = ["fence", "sack"]\n', "accepted: fence, window"),
        ('trials = 0\n[grid]\nloss = ["10%"]\n', "trials must be a whole number, at least 1"),
        ('[grid]\nloss = "10%"\n', "grid.loss must be a non-empty list"),
        ('[grid]\nloss = ["10%"]\n[fixed]\nseed = 3\n', "set by the sweep"),
    ],
)
def test_bad_experiment_files_fail_before_any_run(tmp_path, capsys, text, needle):
    path = write(tmp_path, text)
    out = tmp_path / "out"
    code = main(["sweep", str(path), "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and needle in err, err
    assert not (out / "runs.jsonl").exists() or (out / "runs.jsonl").read_text() == ""


def test_cli_lists_and_experiment_files(tmp_path, capsys):
    out = tmp_path / "cli"
    code = main(["sweep", "--loss", "10%,30%", "--workload", "echo", "--messages", "30", "--trials", "2", "--out", str(out), "--quiet"])
    assert code == 0, capsys.readouterr().err
    assert len((out / "runs.jsonl").read_text().splitlines()) == 4
    path = write(tmp_path, 'name = "x"\ntrials = 2\n[grid]\narq = ["window", "fence"]\n[fixed]\nbytes = "20kB"\nloss = "20%"\n')
    code = main(["sweep", str(path), "--out", str(tmp_path / "file"), "--quiet"])
    assert code == 0
    summary = json.loads((tmp_path / "file" / "summary.json").read_text())
    assert {s["arq"] for s in summary} == {"window", "fence"} and all(s["n"] == 2 for s in summary)


def test_values_with_parameters_survive_list_splitting():
    assert split_values("10%,20%") == ["10%", "20%"]
    assert split_values("gilbert:p=1%,r=30%,bernoulli") == ["gilbert:p=1%,r=30%", "bernoulli"]
    assert split_values("none:window=64,pacing=on,tahoe") == ["none:window=64,pacing=on", "tahoe"]


def test_summary_statistics():
    mean, std, ci = summarize_values([1.0, 2.0, 3.0, 4.0, 5.0])
    assert (mean, round(std, 6), round(ci, 4)) == (3.0, round(2.5 ** 0.5, 6), round(2.776 * 2.5 ** 0.5 / 5 ** 0.5, 4))
    assert summarize_values([7.0])[0] == 7.0


def test_ctrl_c_keeps_finished_rows_and_a_rerun_finishes(tmp_path):
    out = tmp_path / "interrupted"
    args = [FENCEPOST, "sweep", "--bytes", "300MB", "--loss", "1%,2%,3%,4%,5%,6%", "--trials", "2", "--workers", "2", "--out", str(out), "--quiet"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    runs = out / "runs.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not runs.exists() or len(runs.read_text().splitlines()) < 2):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    done = len(runs.read_text().splitlines())
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert 2 <= done < 12, f"{done} runs finished before Ctrl-C"
    rerun = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert f"{12 - done} runs done now, {done} already" in rerun.stdout
    assert len(runs.read_text().splitlines()) == 12


def test_parallel_sweep_works_from_a_script_on_stdin():
    # Worker processes must not need to re-import __main__ (there is none here).
    script = "import fencepost\ndf = fencepost.sweep({'loss': ['10%', '20%']}, trials=2, fixed={'bytes': '20kB'}, workers=2)\nprint(len(df))\n"
    out = subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "4"


def test_many_flow_runs_carry_each_flows_figures():
    experiment = Experiment(grid={"cc": [["tahoe", "cubic"]]}, fixed={"flows": 2, "rate": "10mbit", "delay": "10ms", "time": "3s"}, trials=2)
    outcome = run_sweep(experiment, progress=False)
    for row in outcome.rows:
        shares = [row["flow1_goodput_bps"], row["flow2_goodput_bps"]]
        assert all(s > 0 for s in shares), row
        # Jain's index from the per-flow columns is the run's own.
        jain = sum(shares) ** 2 / (2 * sum(s * s for s in shares))
        assert abs(jain - row["jain_index"]) < 1e-9, (jain, row["jain_index"])
        assert row["flow1_goodput_bps"] == row["goodput_bps"], "the top-level figures are the first flow's"
    summary = outcome.summary[0]
    assert summary["cc"] == "tahoe;cubic"
    mean = sum(r["flow2_goodput_bps"] for r in outcome.rows) / 2
    assert abs(summary["flow2_goodput_bps_mean"] - mean) < 1e-6
    # One-flow runs have no per-flow columns.
    single = run_sweep(Experiment(grid={"loss": ["1%"]}, fixed={"bytes": "50kB"}, trials=1), progress=False)
    assert not any(k.startswith("flow1_") for k in single.rows[0])


def test_progress_is_a_tqdm_bar_in_a_terminal_and_timed_lines_in_a_log():
    import io

    from fencepost.sweep import Progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    term = Terminal()
    bar = Progress(4, "runs", stream=term)
    for _ in range(4):
        bar.advance()
    bar.close()
    assert bar.bar is not None and "4/4" in term.getvalue() and "runs: 100%" in term.getvalue()

    log = io.StringIO()
    lines = Progress(4, "runs", stream=log)
    for _ in range(4):
        lines.advance()
    lines.close()
    # The first run's line, then the last's (the 5 s spacing holds the rest back).
    written = log.getvalue().splitlines()
    assert lines.bar is None and len(written) == 2
    assert written[0].startswith("[#######") and " 1/4 runs " in written[0]
    assert written[1].startswith("[" + "#" * 28 + "] 4/4 runs 100%")

    quiet = Terminal()
    off = Progress(4, "runs", stream=quiet, enabled=False)
    off.advance()
    off.close()
    assert quiet.getvalue() == ""


def test_conditions_with_units_get_numeric_columns(tmp_path):
    from fencepost.sweep import numeric_value, sweep

    assert numeric_value("loss", "10%") == 0.1 and numeric_value("rate", "20mbit") == 20e6
    assert numeric_value("delay", "20ms") == 0.02 and numeric_value("bytes", "1MB") == 1e6
    assert numeric_value("cc", "cubic") is None and numeric_value("loss-model", "gilbert:p=1%,r=10%") is None
    df = sweep({"loss": ["20%", "5%"], "cc": ["cubic"]}, trials=1, fixed={"bytes": "50kB", "rate": "10mbit"}, out=tmp_path, progress=False)
    summary = df.attrs["summary"]
    assert list(summary.columns[:3]) == ["loss", "cc", "loss_value"]
    assert sorted(summary["loss_value"]) == [0.05, 0.2]
    assert "loss_value" in (tmp_path / "summary.csv").read_text().splitlines()[0]
