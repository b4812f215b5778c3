"""Real multi-process jobs for the tests: a free port for the coordinator, processes run to the end."""

from __future__ import annotations

import socket
import subprocess


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_processes(commands: list[list[str]], env: dict[str, str], timeout: float = 180) -> list[str]:
    """Starts every command at once; each one's stdout once all exited 0 (else its stderr fails the test).
    Every process is killed, also when the test fails."""
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for cmd in commands]
    outputs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            assert p.returncode == 0, err[-3000:]
            outputs.append(out)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return outputs
