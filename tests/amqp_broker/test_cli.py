"""``amqp-broker`` as a user runs it: the installed console script in a subprocess, configured by
a TOML file and the command line; bad input gets one line and an exit status, no traceback."""

from __future__ import annotations

import signal
import socket
import subprocess
from typing import TYPE_CHECKING

import attrs
import pytest

import amqp_blocking
from amqp_broker import BrokerOptions, load_config, main
from amqp_broker._cli import LIMITS, parse_args
from amqp_sansio import ProtocolVersion
from amqp_sansio.client import NotAllowed
from tests.tools.support import TIMEOUT, assert_no_traceback, run_tool, script

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

_CONFIG = """\
port = 0
vhosts = ["staging"]
verbose = true

[users]
app = "secret"
ops = "ops"

[[permissions]]
user = "app"
vhost = "staging"

[limits]
channel_max = 9
consumer_timeout = 60
max_connections = false

[limits.vhost_max_connections]
staging = 5
"""


@pytest.fixture
def started(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[subprocess.Popen[str]]:
    """amqp-broker with the arguments of the test's parameter, until the test ends."""
    args: list[str] = request.param
    (tmp_path / "broker.toml").write_text(_CONFIG, encoding="utf-8")
    process = subprocess.Popen(
        [script("amqp-broker"), *args], stderr=subprocess.PIPE, text=True, cwd=tmp_path
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=TIMEOUT)
        assert process.stderr is not None
        process.stderr.close()


def _port(process: subprocess.Popen[str]) -> int:
    assert process.stderr is not None
    line = process.stderr.readline()
    assert line.startswith("amqp_broker listening on 127.0.0.1:"), line
    return int(line.rsplit(":", 1)[1])


@pytest.mark.parametrize(
    "started", [["--config", "broker.toml", "--channel-max", "7"]], indirect=True
)
def test_a_config_file_under_the_command_line(started: subprocess.Popen[str]) -> None:
    port = _port(started)
    with amqp_blocking.connect(f"amqp://app:secret@127.0.0.1:{port}/staging") as conn:
        assert conn.channel_max == 7  # the command line beats the file's 9
        with conn.channel() as ch:
            assert ch.queue_declare("", exclusive=True).queue
    with pytest.raises(NotAllowed, match="access to vhost '/' refused for user 'app'"):
        amqp_blocking.connect(f"amqp://app:secret@127.0.0.1:{port}/").close()
    with amqp_blocking.connect(f"amqp://ops:ops@127.0.0.1:{port}/"):
        pass  # not named by a permission: everything everywhere
    started.send_signal(signal.SIGTERM)
    assert started.wait(timeout=TIMEOUT) == 0
    assert started.stderr is not None
    rest = started.stderr.read()
    assert "amqp_broker stopping (SIGTERM)" in rest
    assert "Traceback" not in rest


def test_the_config_file_becomes_options(tmp_path: Path) -> None:
    path = tmp_path / "broker.toml"
    path.write_text(_CONFIG + '[tls]\nport = 5671\ncert = "c.pem"\nkey = "k.pem"\n', "utf-8")
    settings = load_config(path)
    assert settings["channel_max"] == 9
    assert settings["consumer_timeout"] == 60.0
    assert settings["max_connections"] is None
    assert settings["vhost_max_connections"] == [("staging", 5)]
    assert settings["permissions"] == [["app", "staging", ".*", ".*", ".*"]]
    assert settings["tls_cert"] == str(tmp_path / "c.pem")  # relative to the file
    path.write_text('protocols = ["0-9", "0-8"]\nheader_0_9 = "0-9"\n', "utf-8")
    options = parse_args(["--config", str(path)]).options
    assert options.protocols == (ProtocolVersion.AMQP_0_9, ProtocolVersion.AMQP_0_8)
    assert options.header_0_9 is ProtocolVersion.AMQP_0_9
    # what connection.start says: the file, then the command line over it
    path.write_text('server_product = "Rabbit"\nserver_version = "3.13.7"\n', "utf-8")
    options = parse_args(["--config", str(path)]).options
    assert (options.server_product, options.server_version) == ("Rabbit", "3.13.7")
    options = parse_args(["--config", str(path), "--server-version", "4.0.5"]).options
    assert (options.server_product, options.server_version) == ("Rabbit", "4.0.5")
    defaults = parse_args([]).options
    assert (defaults.server_product, defaults.server_version) == ("RabbitMQ", "3.10.8")


def test_help_names_every_option() -> None:
    result = run_tool("amqp-broker", "--help")
    assert result.returncode == 0
    for limit in LIMITS:
        assert limit.flag in result.stdout
    assert {limit.name for limit in LIMITS} | {
        "vhost_max_connections",
        "protocols",
        "header_0_9",
        "server_product",
        "server_version",
    } == {field.name for field in attrs.fields(BrokerOptions)}
    for key in (
        "--config",
        "--tls-port",
        "--protocols",
        "--header-0-9",
        "--server-product",
        "--server-version",
        "[limits]",
        "protocols =",
        "server_version =",
    ):
        assert key in result.stdout


@pytest.mark.parametrize(
    ("config", "args", "message"),
    [
        (None, ["--config", "missing.toml"], "cannot read missing.toml: No such file"),
        ("port = ", [], "broker.toml is not valid TOML: "),
        ("ports = 1", [], "the top level: unknown key 'ports' (known: data_dir, header_0_9, host,"),
        ('port = "1"', [], "port must be an integer, not a string"),
        ('[limits]\nchannel_max = "9"', [], "limits.channel_max must be an integer, not a"),
        ("[limits]\nchannel_max = false", [], "limits.channel_max must be an integer, not a"),
        ("[limits]\nchannel = 1", [], "limits: unknown key 'channel' (known: channel_max,"),
        ("[limits]\nchannel_max = 70000", [], "channel_max must be 1..65535, not 70000"),
        ("[[permissions]]\nuser = 'guest'", [], "permissions entry 1 needs 'vhost'"),
        ("[users]\nx = 1", [], "users.x must be a string (the password)"),
        ('protocols = ["1.0"]', [], "the broker serves '0-9-1', '0-9', '0-8', '0-10', not '1.0'"),
        ("[tls]\nport = 5671", [], "--tls-port (or tls.port) needs --tls-cert and --tls-key"),
        ("server_version = 3", [], "server_version must be a string, not an integer"),
        ("", ["--server-product", ""], "server_product must be a non-empty string, not ''"),
        ("", ["--channel-max", "many"], "argument --channel-max: expected an integer, got"),
        ("", ["--channel-max", "none"], "argument --channel-max: expected an integer, got"),
        ("", ["--user", "nopassword"], "expected NAME:PASSWORD, got 'nopassword'"),
    ],
)
def test_bad_configuration(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    config: str | None,
    args: list[str],
    message: str,
) -> None:
    # In-process (the parsing is the command's; test_a_bad_file_in_a_subprocess runs one case
    # through the installed script).
    monkeypatch.chdir(tmp_path)
    if config is not None:
        (tmp_path / "broker.toml").write_text(config, encoding="utf-8")
        args = ["--config", "broker.toml", *args]
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code == 2
    [line] = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert line.startswith("amqp-broker: error: ")
    assert message in line
    if config is not None and not args[2:] and not message.startswith(("channel_max", "--tls")):
        # errors in the file name it; the last two are checks of the merged settings
        assert line.startswith("amqp-broker: error: broker.toml")


def test_a_bad_file_in_a_subprocess(tmp_path: Path) -> None:
    (tmp_path / "broker.toml").write_text("[limits]\nchannel_max = 'x'\n", encoding="utf-8")
    result = run_tool("amqp-broker", "--config", "broker.toml", cwd=tmp_path)
    assert_no_traceback(result)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        "amqp-broker: error: broker.toml: limits.channel_max must be an integer, not a string"
    )


def test_a_port_in_use_and_a_missing_certificate(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_tool("amqp-broker", "--port", str(port))
    assert_no_traceback(result)
    assert result.returncode == 1
    assert f"amqp-broker: error: cannot listen on 127.0.0.1:{port}: " in result.stderr
    assert "in use" in result.stderr
    result = run_tool(
        "amqp-broker",
        "--port",
        "0",
        "--tls-port",
        "0",
        "--tls-cert",
        "c.pem",
        "--tls-key",
        "k.pem",
        cwd=tmp_path,
    )
    assert_no_traceback(result)
    assert result.returncode == 1
    assert "amqp-broker: error: cannot load the TLS certificate c.pem and key k.pem: " in (
        result.stderr
    )
