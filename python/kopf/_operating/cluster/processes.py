"""The control plane's processes: started in sessions of their own (they outlive the command
that started them, or are tied to the process that started them), recorded by pid files in the
state folder, waited for until ready, and stopped (TERM, then KILL) in the reverse order.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import warnings
from collections.abc import Callable, Collection
from pathlib import Path


class ProcessError(Exception):
    """A component cannot start or is in the way; the message says what to do."""


def pid_file(home: Path, name: str) -> Path:
    return home / "pids" / f"{name}.pid"


def recorded_pid(home: Path, name: str) -> int | None:
    """The pid that was recorded, if that process still runs the same program (pids get reused)."""
    try:
        pid = int(pid_file(home, name).read_text().strip())
        exe = os.readlink(f"/proc/{pid}/exe")
    except (OSError, ValueError):
        return None
    return pid if Path(exe.removesuffix(" (deleted)")).name == name else None


def exited(pid: int) -> bool:
    """Gone, or a zombie. Not judged by /proc/PID/exe: an exiting process loses that link
    before it closes its files, and its listening sockets would still hold the ports."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


def stop(home: Path, names: Collection[str]) -> list[str]:
    """Stop the recorded processes, the last started first; what was stopped."""
    stopped = []
    for name in reversed(list(names)):
        pid = recorded_pid(home, name)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 15
            while not exited(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if not exited(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                while not exited(pid):
                    time.sleep(0.1)
            stopped.append(f"{name} (pid {pid})")
        pid_file(home, name).unlink(missing_ok=True)
    return stopped


def port_owner(port: int) -> str:
    """Best effort: which program listens on the port, for the error message."""
    if shutil.which("ss"):
        out = subprocess.run(["ss", "-Hltnp", f"sport = :{port}"], capture_output=True, text=True,
                             check=False).stdout
        match = re.search(r'users:\(\("([^"]+)",pid=(\d+)', out)
        if match:
            return f" by {match.group(1)} (pid {match.group(2)})"
    return ""


def is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As the servers themselves do: connections of a previous run in TIME-WAIT are no
        # obstacle, only a listening socket is.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def check_free(ports: dict[str, int]) -> None:
    for role, port in ports.items():
        if not is_free(port):
            raise ProcessError(f"Port {port} (for {role}) is already in use{port_owner(port)}: stop that "
                               f"program, or choose another port.")


def spawn(home: Path, name: str, program: Path, args: list[str], *, tied: bool = False) -> int:
    """Start it in a session of its own (a terminal's Ctrl-C is not its); ``tied``: it gets
    SIGTERM from the kernel when the thread that started it ends, even by SIGKILL (util-linux's
    ``setpriv --pdeathsig``, exec'ing the program in the same process)."""
    command = [str(program), *args]
    setpriv = shutil.which("setpriv") if tied else None
    if tied and setpriv is None:
        warnings.warn(f"setpriv (util-linux) is not on PATH: {name} may outlive this process if it is "
                      f"killed; stop it with `kill $(cat {pid_file(home, name)})`.", UserWarning, stacklevel=3)
    if setpriv is not None:
        command = [setpriv, "--pdeathsig", "TERM", "--", *command]
    log = open(home / "logs" / f"{name}.log", "ab")
    process = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True, cwd=home,
    )
    log.close()
    if setpriv is not None:
        # Recorded once it is the program (pid files name programs, and setpriv execs it).
        deadline = time.monotonic() + 5
        while process.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                if Path(os.readlink(f"/proc/{process.pid}/exe")).name == program.name:
                    break
            time.sleep(0.01)
    pid_file(home, name).write_text(f"{process.pid}\n")
    return process.pid


def wait_until(home: Path, name: str, check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if recorded_pid(home, name) is None:
            tail = (home / "logs" / f"{name}.log").read_text(errors="replace").splitlines()[-15:]
            raise ProcessError(f"{name} exited while starting; the end of its log:\n  " + "\n  ".join(tail))
        if check():
            return
        time.sleep(0.1)
    raise ProcessError(f"{name} did not become ready in {timeout:.0f}s; see {home / 'logs' / f'{name}.log'}")
