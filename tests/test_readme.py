"""Every command in README.md runs, as written, from a folder of its own.

Shell commands come from the README's ```console/```sh blocks (after a `$ ` or, for
root, `# ` prompt in console blocks); the Python blocks run in one namespace. The few
that cannot run here as written are listed in NOT_HERE with the reason, and the test
fails if the README gains a command it neither runs nor lists.
"""

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent

# Commands (by how they start) that are not run here, and why.
NOT_HERE = {
    "make demo": "the CI run itself builds and tests everything; tests/test_demo.py runs the demo",
    "make test": "the CI run itself",
    "dask scheduler": "starts a cluster on named machines; tests/test_distributed.py runs a sweep through a local scheduler and two workers",
    "fencepost sweep --loss 1%,5%,10%,20% --cc cubic,bbr,tolerant --trials 20 --scheduler tcp://HOST:8786": "HOST is a placeholder for a cluster",
}


def blocks(text: str):
    """(language, lines) of every fenced block."""
    for match in re.finditer(r"^```(\w*)\n(.*?)^```", text, flags=re.S | re.M):
        yield match.group(1), match.group(2).splitlines()


def shell_commands(text: str) -> list:
    out = []
    for lang, lines in blocks(text):
        if lang not in ("console", "sh", "bash", ""):
            continue
        joined, pending = [], ""
        for line in lines:
            if lang == "console":
                if line.startswith(("$ ", "# ")):
                    line = line[2:]
                elif not pending:
                    continue  # output
            elif not pending and (not line.strip() or line.lstrip().startswith("#")):
                continue
            line = pending + line.strip()
            if line.endswith("\\"):
                pending = line[:-1] + " "
                continue
            pending = ""
            joined.append(line)
        for command in joined:
            command = re.sub(r"\s+#\s.*$", "", command).strip()  # a trailing comment
            if command.startswith(("fencepost ", "make ", "dask ")):
                out.append(command)
    return out


def not_here(command: str):
    return next((why for prefix, why in NOT_HERE.items() if command.startswith(prefix)), None)


def run(command: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    argv = shlex.split(command)
    argv[0] = str(BIN / "fencepost")
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def test_every_readme_command_runs(tmp_path):
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = shell_commands(text)
    assert len(commands) >= 20, f"found only {len(commands)} commands: the README's blocks changed shape"
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    # The experiment file the README shows beside `fencepost sweep experiment.toml`.
    toml = next("\n".join(lines) for lang, lines in blocks(text) if lang == "toml" and any(l.startswith("[grid]") for l in lines))
    (tmp_path / "experiment.toml").write_text(toml + "\n", encoding="utf-8")
    is_root = os.geteuid() == 0
    ran, skipped = [], []
    server = None
    try:
        for command in commands:
            why = not_here(command)
            if why:
                skipped.append((command, why))
                continue
            if command.startswith("fencepost lab") and not is_root:
                skipped.append((command, "needs root"))
                continue
            if command.startswith("fencepost serve"):
                # The README's pair: the server stays up for the `send` that follows.
                argv = shlex.split(command)
                argv[0] = str(BIN / "fencepost")
                server = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                first = server.stdout.readline()
                assert "listening on" in first, f"{command}: {first}{server.stderr.read()}"
                ran.append(command)
                continue
            began = time.monotonic()
            out = run(command, tmp_path)
            print(f"{time.monotonic() - began:6.1f} s  {command}")
            assert out.returncode == 0, f"README command failed: {command}\n{out.stdout[-1500:]}\n{out.stderr[-1500:]}"
            if command.startswith("fencepost send"):
                assert "SHA-256 match" in out.stdout, out.stdout
            ran.append(command)
    finally:
        if server is not None:
            server.send_signal(signal.SIGINT)
            server.communicate(timeout=20)
    assert len(ran) >= 15, ran
    print(f"ran {len(ran)} README commands; not here: {skipped}")


def test_the_readme_python_runs(tmp_path, monkeypatch):
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    python = [lines for lang, lines in blocks(text) if lang == "python"]
    assert len(python) >= 4
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    namespace: dict = {}
    runnable = [b for b in python if not any("await " in l or "listener.accept()" in l for l in b)]
    # The socket API's block serves and connects to a peer that is not here (and awaits
    # outside a coroutine): tests/test_net.py runs the same calls against a live server.
    assert len(runnable) == len(python) - 1
    for lines in runnable:
        exec(compile("\n".join(lines), "README.md", "exec"), namespace)  # noqa: S102 - the README's own code
    assert namespace["r"].integrity_ok
    assert (tmp_path / "run.sqlog").exists()
