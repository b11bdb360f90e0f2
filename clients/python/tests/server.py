"""A real `onejob serve` for the tests and for generating the models: on a
fresh SQLite file, or on a fresh database of a throwaway Postgres cluster
(`PostgresCluster`, started once from the local server binaries, as the
postgres user when run as root). The binary is ONEJOB_BIN, or else this
repository's debug build, which `cargo build` brings up to date first."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[3]


def binary() -> str:
    """ONEJOB_BIN, or this repository's debug build, built or brought up to date."""
    given = os.environ.get("ONEJOB_BIN")
    if given:
        return given
    subprocess.run(["cargo", "build", "--quiet", "--bin", "onejob"], cwd=ROOT, check=True)
    return str(ROOT / "target" / "debug" / "onejob")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class Server:
    """A running server: its `url`, and a `token` of owner `alice`."""

    url: str
    token: str
    process: subprocess.Popen[bytes]
    dir: Path
    log: Path

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def _as_postgres(command: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


def _postgres_bin() -> Path:
    try:
        found = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True).stdout.strip()
        if (Path(found) / "initdb").exists():
            return Path(found)
    except (OSError, subprocess.CalledProcessError):
        pass
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name))
    if not versions:
        raise RuntimeError("no PostgreSQL server binaries (initdb) found")
    return versions[-1]


@dataclass
class PostgresCluster:
    """A throwaway cluster listening on a Unix socket in its own directory."""

    dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="onejob-py-pg-")))

    def start(self) -> None:
        bin = _postgres_bin()
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
        data = self.dir / "data"
        subprocess.run(_as_postgres([str(bin / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"]), check=True, capture_output=True)
        options = f"-c listen_addresses='' -c unix_socket_directories={self.dir} -c fsync=off -c max_connections=200"
        subprocess.run(
            _as_postgres([str(bin / "pg_ctl"), "-D", str(data), "-l", str(self.dir / "postgres.log"), "-w", "-o", options, "start"]),
            check=True,
            capture_output=True,
        )

    def stop(self) -> None:
        bin = _postgres_bin()
        subprocess.run(_as_postgres([str(bin / "pg_ctl"), "-D", str(self.dir / "data"), "-m", "immediate", "stop"]), capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)

    def fresh_database(self) -> str:
        """The URL of a new, empty database."""
        name = "py_" + uuid.uuid4().hex[:12]
        bin = _postgres_bin()
        subprocess.run(_as_postgres([str(bin / "createdb"), "-h", str(self.dir), "-U", "postgres", name]), check=True, capture_output=True)
        return f"postgres://postgres@localhost/{name}?host={self.dir}"


def start_server(database: str | None = None, edit: Callable[[str], str] = lambda text: text) -> Server:
    """Starts a server on `database` (a URL; a fresh SQLite file when None),
    its default configuration's text changed by `edit`."""
    bin = binary()
    dir = Path(tempfile.mkdtemp(prefix="onejob-py-"))
    config = dir / "onejob.toml"
    config.write_text(edit(subprocess.run([bin, "config", "print-default"], capture_output=True, text=True, check=True).stdout))
    env = {**os.environ, "DATABASE_URL": database or f"sqlite://{dir / 'onejob.db'}", "RUST_LOG": "warn"}
    # Run where its files go (`onejob-files`, kept outputs), not in the tests' folder.
    subprocess.run([bin, "migrate", "--config", str(config)], env=env, cwd=dir, check=True, capture_output=True)
    created = subprocess.run(
        [bin, "keys", "create", "--owner", "alice", "--config", str(config)], env=env, cwd=dir, capture_output=True, text=True, check=True
    )
    token = created.stdout.strip().splitlines()[-1]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = dir / "serve.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [bin, "serve", "--config", str(config), "--no-migrate"],
            env={**env, "ONEJOB_LISTEN": f"127.0.0.1:{port}"},
            cwd=dir,
            stdout=subprocess.DEVNULL,
            stderr=sink,
        )
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{url}/readyz", timeout=1).is_success:
                break
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline or process.poll() is not None:
            process.kill()
            raise RuntimeError(f"onejob serve did not become ready:\n{log.read_text()}")
        time.sleep(0.1)
    return Server(url, token, process, dir, log)
