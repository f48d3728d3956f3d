"""What the container image test needs on this kind of machine (issue 43; README "Deploy"):
podman with runc, and a base image with python3 when no registry can be reached.

* `podman`, `runc` and `mmdebstrap` come from Debian's packages (installed when missing, one install at a time).
* The base is built once with `mmdebstrap` from the Debian mirror (minbase with python3, its venv
  module and CA certificates: about 20 s), cached as a tarball under
  `~/.cache/mcp-tasks-proxy/container/` and imported into podman's store when absent there.
* This machine's own needs stay here, never in the image: runc as the runtime (named: Debian's
  podman may have crun beside it and prefer it), and the container's ulimits pinned below the
  host's hard limits (runc cannot set podman's defaults inside this machine's own container:
  "error setting rlimits").
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from proxy.bench.packages import ensure_package

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("MCP_TASKS_PROXY_CACHE", Path.home() / ".cache" / "mcp-tasks-proxy")) / "container"
BASE = "localhost/mcp-tasks-proxy-base:bookworm"
IMAGE = "localhost/mcp-tasks-proxy:test"
MIRROR = "http://deb.debian.org/debian"
LIMITS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096"]
"""The container's ulimits on this machine (see the module docstring)."""
PODMAN = ["podman", "--runtime", "runc"]
"""podman with runc named: where Debian's podman pulled in crun too, podman picks crun, which cannot
start a container here ("cgroups in hybrid mode not supported")."""


def _run(argv: list[str], timeout_s: float = 600) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])} ... exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return done.stdout


def ensure_tools() -> None:
    """podman, runc and mmdebstrap, from Debian's packages when one is missing (`ensure_package`:
    serialised with the other tests' installs)."""
    for program in ("podman", "runc", "mmdebstrap"):
        ensure_package(program, program)


def ensure_base() -> str:
    """The base image in podman's store: imported from the cached tarball, made first if needed."""
    if subprocess.run([*PODMAN, "image", "exists", BASE], check=False).returncode == 0:
        return BASE
    tarball = CACHE / "bookworm-python3.tar"
    if not tarball.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        partial = tarball.with_name("bookworm-python3.partial.tar")
        _run(
            [
                "mmdebstrap",
                "--variant=minbase",
                "--include=python3,python3-venv,ca-certificates",
                "bookworm",
                str(partial),
                MIRROR,
            ]
        )
        partial.rename(tarball)
    _run([*PODMAN, "import", str(tarball), BASE])
    return BASE


def build_image() -> str:
    """The project's image (`Containerfile`) on the local base, nothing pulled; the host's CA bundle
    is given to the build as the secret the Containerfile reads, when there is one."""
    ensure_tools()
    base = ensure_base()
    secret = []
    for bundle in (Path("/etc/ssl/certs/ca-certificates.crt"), Path("/etc/pki/tls/certs/ca-bundle.crt")):
        if bundle.exists():
            secret = ["--secret", f"id=ca_bundle,src={bundle}"]
            break
    _run(
        [
            *PODMAN,
            "build",
            "--pull=never",
            "--format",
            "docker",
            "--network",
            "host",
            *LIMITS,
            *secret,
            "--build-arg",
            f"BASE={base}",
            "-t",
            IMAGE,
            str(ROOT),
        ]
    )
    return IMAGE
