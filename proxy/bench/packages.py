"""Debian packages the benchmark and the tests run (nginx, redis-server, valgrind): found on the
PATH, else installed with apt-get when this runs as root, each step bounded in time. Installs
are serialised across processes (tests run in several pytest workers) by a lock file in the
project's cache directory, and a caller that waited finds the program its predecessor installed."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from collections.abc import Callable

from proxy.demo.peers import cache_root

APT_TIMEOUT_S = 600.0


class PackageUnavailable(RuntimeError):
    """A program is missing and its package cannot be installed; the message says why."""


def run_bounded(argv: list[str], timeout_s: float) -> tuple[bool, str]:
    """Run `argv` without input for at most `timeout_s` seconds: (succeeded, the last 3 lines of its output)."""
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=timeout_s, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"}, check=False)
    except subprocess.TimeoutExpired:
        return False, f"{' '.join(argv)} timed out after {timeout_s:.0f} s"
    except OSError as exc:
        return False, f"{' '.join(argv)}: {exc.strerror}"
    tail = " | ".join(done.stdout.strip().splitlines()[-3:])
    return done.returncode == 0, tail


def find_program(program: str) -> str | None:
    """`program` on the PATH or in the system directories root's PATH may lack (/usr/sbin, ...)."""
    return shutil.which(program) or next(
        (path for d in ("/usr/sbin", "/usr/local/sbin", "/usr/bin") if os.path.exists(path := os.path.join(d, program))), None)


def ensure_package(program: str, package: str, log: Callable[[str], None] = lambda _m: None,
                   error: type[Exception] = PackageUnavailable) -> str:
    """The path of `program`, installing Debian's `package` with apt-get when it is missing (once
    more after `apt-get update` when the first install fails). Raises `error` (a `PackageUnavailable`
    unless given) when it is missing and cannot be installed: not root, no apt-get, the install
    failed or timed out."""
    found = find_program(program)
    if found:
        return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise error(f"{program} is not installed and this is not root with apt-get (run `apt-get install -y {package}`)")
    lock = cache_root() / "apt.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)  # released when the file closes
        return find_program(program) or _install(program, package, log, error)


def _install(program: str, package: str, log: Callable[[str], None], error: type[Exception]) -> str:
    log(f"installing {package} (apt-get install -y {package})")
    ok, tail = run_bounded(["apt-get", "install", "-y", "-q", package], APT_TIMEOUT_S)
    if not ok:
        log(f"apt-get install {package} failed; running apt-get update once and trying again")
        run_bounded(["apt-get", "update", "-q"], APT_TIMEOUT_S)
        ok, tail = run_bounded(["apt-get", "install", "-y", "-q", package], APT_TIMEOUT_S)
    found = find_program(program)
    if not ok or not found:
        raise error(f"apt-get install {package} failed: {tail}")
    return found
