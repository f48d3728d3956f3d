"""Configuration: the example file documents every setting, and errors name the key."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from proxy.config import ConfigError, Settings, Upstream, load
from proxy.rollout.settings import Rollout

ROOT = Path(__file__).resolve().parents[2]


def test_example_config_loads_to_the_defaults():
    settings = load(ROOT / "config.example.toml")
    assert settings == Settings(upstream=[Upstream(name="main", url="http://127.0.0.1:3000/mcp")])


ROLLOUT_KEYS = {field.alias or name for name, field in Rollout.model_fields.items()}
"""The keys of the `[rollout]` table (`from`, not `from_`)."""


def test_example_config_names_every_setting():
    text = (ROOT / "config.example.toml").read_text()
    keys = set(re.findall(r"^#? ?([a-z0-9_]+) = ", text, re.MULTILINE))
    assert keys == set(Settings.model_fields) - {"upstream", "rollout"} | set(Upstream.model_fields) | ROLLOUT_KEYS
    assert "\n# [rollout]\n" in text


def test_configuration_reference_names_every_setting():
    doc = (ROOT / "docs" / "configuration.md").read_text()
    missing = [k for k in [*Settings.model_fields, *Upstream.model_fields, *ROLLOUT_KEYS] if f"`{k}`" not in doc]
    assert missing == []


def test_cli_overrides_win_over_the_file(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('listen = "127.0.0.1:9000"\n[[upstream]]\nurl = "http://127.0.0.1:1/mcp"\n')
    settings = load(path, {"listen": "127.0.0.1:0", "upstream": [{"url": "http://127.0.0.1:2/mcp"}]})
    assert (settings.listen, settings.upstream[0].url) == ("127.0.0.1:0", "http://127.0.0.1:2/mcp")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("lisen = 1\n", "unknown key 'lisen' (did you mean 'listen'?)"),
        ("reconect_wait_ms = 10\n", "unknown key 'reconect_wait_ms' (did you mean 'reconnect_wait_ms'?)"),
        ("colour = 1\n", "unknown key 'colour'"),
        ("hold_after_ms = 500\n", "unknown key 'hold_after_ms' (it is a key of each backend: put it in an [[upstream]] table)"),
        (
            'forward_headers = ["X-Trace", "x-mcp-tasks-proxy-caller"]\n',
            "forward_headers: Value error, x-mcp-tasks-proxy-caller: headers named X-Mcp-Tasks-Proxy-* are the proxy's own and "
            "are never forwarded from a client (got ['X-Trace', 'x-mcp-tasks-proxy-caller'])",
        ),
        (
            'forward_headers = [" X-Trace"]\n',
            "forward_headers: Value error, ' X-Trace' is not a header name (letters, digits and !#$%&'*+-.^_`|~ only, no "
            "spaces) (got [' X-Trace'])",
        ),
        (
            'identity_header = "X-Mcp-Tasks-Proxy-Caller"\n',
            "identity_header: Value error, headers named X-Mcp-Tasks-Proxy-* are the proxy's own, not a caller's identity "
            "(got 'X-Mcp-Tasks-Proxy-Caller')",
        ),
        (
            'identity_header = "X-User:"\n',
            "identity_header: Value error, 'X-User:' is not a header name (letters, digits and !#$%&'*+-.^_`|~ only, no "
            "spaces) (got 'X-User:')",
        ),
        (
            '[[upstream]]\nurl = "http://x"\nheaders = { X-Env = "a\\r\\nX-Other: b" }\n',
            "upstream.0.headers: Value error, the value of X-Env holds a line break or NUL (got a value of type dict, not shown)",
        ),
        (
            '[[upstream]]\nurl = "http://x"\nprobe_headers = { "Bad Name" = "v" }\n',
            "upstream.0.probe_headers: Value error, 'Bad Name' is not a header name (letters, digits and !#$%&'*+-.^_`|~ only, "
            "no spaces) (got a value of type dict, not shown)",
        ),
        ('[[upstream]]\nurl = "http://x"\nnmae = "a"\n', "upstream.0: unknown key 'nmae' (did you mean 'name'?)"),
        ('listen = "nohost"\n', "listen: Value error, must be HOST:PORT, e.g. 127.0.0.1:8080 (got 'nohost')"),
        ('v1_session_scope = "all"\n', "v1_session_scope: Input should be 'principal' or 'task' (got 'all')"),
        ('[[upstream]]\nurl = "ftp://x"\n', "upstream.0.url: Value error, must be an http:// or https:// URL (got 'ftp://x')"),
        ("task_ttl_ms = -1\n", "task_ttl_ms: Input should be greater than or equal to 0 (got -1)"),
        (
            '[[upstream]]\ncommand = ["x"]\nmax_processes = 2\nmax_processes_per_principal = 3\n',
            "upstream.0: Value error, max_processes_per_principal (3) cannot be more than max_processes (2)",
        ),
        ("max_body_bytes = \n", "not valid TOML"),
        (
            '[[upstream]]\nurl = "http://x"\nheaders = { Authorization = "Bearer s3cret" }\n',
            "upstream.0.headers: Value error, must not hold Authorization: it would be sent for clients that have no credentials "
            "of their own (a client's request carries its own); give the probe's credentials as probe_headers "
            '(docs/configuration.md "Servers behind OAuth") (got a value of type dict, not shown)',
        ),
        (
            '[[upstream]]\ncommand = ["srv"]\nprobe_headers = { Authorization = "Bearer s3cret" }\n',
            "upstream.0.probe_headers: Value error, are for a backend with a url; a stdio server takes its credentials from env "
            "(got a value of type dict, not shown)",
        ),
        (
            'resource_backend = "b"\n[[upstream]]\nname = "a"\nurl = "http://x"\n',
            "resource_backend: Value error, names no configured backend (backends: a) (got 'b')",
        ),
        (
            'public_url = "mcp.example.com/mcp"\n',
            "public_url: Value error, must be the http:// or https:// URL clients reach the MCP endpoint at, without query or "
            "fragment (got 'mcp.example.com/mcp')",
        ),
    ],
)
def test_configuration_errors_name_the_key(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load(path)
    assert message in str(caught.value)
    assert str(path) in str(caught.value)


def test_a_misspelt_key_is_named_with_the_key_it_probably_means(tmp_path):
    path = tmp_path / "typo.toml"
    path.write_text("reconect_wait_ms = 10\n")
    with pytest.raises(ConfigError) as caught:
        load(path)
    assert str(caught.value) == f"{path}: unknown key 'reconect_wait_ms' (did you mean 'reconnect_wait_ms'?)"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'status_token = "s3cret-tok"\n',
            "status_token: String should have at least 16 characters (got a string of 10 characters, not shown)",
        ),
        ("status_token = 12345\n", "status_token: Input should be a valid string (got a value of type int, not shown)"),
        (
            '[[upstream]]\nurl = "http://x"\nheaders = { Authorization = 7 }\n',
            "upstream.0.headers.Authorization: Input should be a valid string (got a value of type int, not shown)",
        ),
        (
            '[[upstream]]\ncommand = ["srv"]\nenv = "API_KEY=s3cret-tok"\n',
            "upstream.0.env: Input should be a valid dictionary (got a string of 18 characters, not shown)",
        ),
    ],
)
def test_errors_about_a_secret_never_repeat_its_value(tmp_path, text, message):
    """Issue 20 item 17: a status_token that is too short was echoed in the start-up error."""
    path = tmp_path / "secret.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load(path)
    assert str(caught.value) == f"{path}: {message}"
    assert "s3cret-tok" not in str(caught.value) and "12345" not in str(caught.value)


def test_the_default_state_dir_is_the_environment_s_else_local_state():
    from proxy.config import default_state_dir

    assert default_state_dir({}) == "~/.local/state/mcp-tasks-proxy"
    assert default_state_dir({"MCP_TASKS_PROXY_STATE_DIR": ""}) == "~/.local/state/mcp-tasks-proxy"
    assert default_state_dir({"MCP_TASKS_PROXY_STATE_DIR": "/srv/proxy-state"}) == "/srv/proxy-state"


def test_every_test_has_a_default_state_dir_of_its_own(own_default_state_dir):
    """Issue 20 item 19: a test leaving `state_dir` unset used `~/.local/state/mcp-tasks-proxy`,
    shared with any proxy running on the machine (tests/conftest.py `own_default_state_dir`)."""
    settings = load(None, {"upstream": [{"url": "http://127.0.0.1:1/mcp"}]})
    assert settings.state_dir == str(own_default_state_dir)
    assert Path(settings.state_dir).expanduser() != Path("~/.local/state/mcp-tasks-proxy").expanduser()


def test_replicas_refuse_an_auto_created_key(tmp_path):
    from proxy.keys import load_master_key, new_key_text

    settings = load(None, {"replicas": 2, "state_dir": str(tmp_path), "upstream": [{"url": "http://127.0.0.1:1/mcp"}]})
    with pytest.raises(ConfigError) as caught:
        load_master_key(settings, {})
    assert str(caught.value).startswith("replicas: 2 replicas must share one sealing key")
    assert not (tmp_path / "key").exists()
    key, source = load_master_key(settings, {"MCP_TASKS_PROXY_KEY": new_key_text()})
    assert (len(key), source) == (64, "environment")


def test_a_credential_in_a_refused_setting_is_never_echoed(tmp_path):
    """An error about `headers` or `probe_headers` does not quote their values (they hold tokens)."""
    path = tmp_path / "secret.toml"
    path.write_text('[[upstream]]\nurl = "http://x"\nheaders = { Authorization = "Bearer s3cret" }\n')
    with pytest.raises(ConfigError) as caught:
        load(path)
    assert "s3cret" not in str(caught.value)


def test_the_default_processes_per_principal_is_cut_to_max_processes():
    settings = load(None, {"upstream": [{"command": ["x"], "max_processes": 1}]})
    assert (settings.upstream[0].max_processes_per_principal, settings.upstream[0].principal_processes) == (2, 1)


def test_a_check_across_backends_never_repeats_their_secrets(tmp_path):
    """A refusal that names the whole `[[upstream]]` list (here: no backend takes new work) shows it
    with `headers`, `probe_headers` and `env` values, a URL's password and its query replaced."""
    path = tmp_path / "fleet.toml"
    path.write_text(
        '[[upstream]]\nname = "a"\nweight = 0\nurl = "http://bob:UrlPw456@127.0.0.1:1/mcp?api_key=QueryKey789"\n'
        'headers = { X-Api-Key = "HeaderSecret1" }\nprobe_headers = { Authorization = "Bearer ProbeSecret2" }\n'
        '[[upstream]]\nname = "b"\ndrain = true\ncommand = ["srv"]\nenv = { TOKEN = "EnvSecret4" }\n'
    )
    with pytest.raises(ConfigError) as caught:
        load(path)
    assert str(caught.value) == (
        f"{path}: upstream: Value error, at least one backend must take new work (weight above 0 and drain = false) (got "
        "[{'name': 'a', 'weight': 0, 'url': 'http://bob:***@127.0.0.1:1/mcp?***', 'headers': '***', 'probe_headers': '***'}, "
        "{'name': 'b', 'drain': True, 'command': ['srv'], 'env': '***'}])"
    )


def test_files_that_are_no_configuration_are_refused_without_a_traceback_or_a_hang(tmp_path):
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"state_dir = 1\n\xff\xfe\x00garbage")
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)  # opened without blocking, and refused: it would hang the reader
    big = tmp_path / "big.toml"
    big.write_text("# " + "x" * (1024 * 1024) + "\n")
    refusals = []
    for path in (binary, fifo, tmp_path, big):
        with pytest.raises(ConfigError) as caught:
            load(path)
        refusals.append(str(caught.value))
    assert refusals == [
        f"{binary}: not UTF-8 text (byte 14)",
        f"{fifo}: cannot read: not a regular file",
        f"{tmp_path}: cannot read: not a regular file",
        f"{big}: larger than 1048576 bytes: not a configuration file",
    ]


NO_HOST = (
    "must be the http:// or https:// URL clients reach the MCP endpoint at, without query or fragment, with a host and, "
    "if any, a port from 1 to 65535 (no user or password)"
)


@pytest.mark.parametrize(
    ("public_url", "refusal"),
    [
        (
            "https://h/mc\r\nX-Evil: 1\r\np",
            "must not hold spaces or control characters (it goes into WWW-Authenticate headers) "
            "(got 'https://h/mc\\r\\nX-Evil: 1\\r\\np')",
        ),
        ("http://", f"{NO_HOST} (got 'http://')"),
        ("https://h:99999/mcp", f"{NO_HOST} (got 'https://h:99999/mcp')"),
        ("https://u:p@h/mcp", f"{NO_HOST} (got 'https://u:***@h/mcp')"),  # a password in it is never repeated
    ],
    ids=["control characters", "no host", "port out of range", "a password"],
)
def test_a_public_url_that_cannot_name_the_resource_is_refused(public_url, refusal):
    with pytest.raises(ConfigError) as caught:
        load(None, {"public_url": public_url})
    assert str(caught.value) == f"configuration: public_url: Value error, {refusal}"


def test_a_public_url_with_a_host_and_port_is_taken():
    assert [load(None, {"public_url": url}).public_url for url in ("https://h:443/mcp", "https://[::1]:8443/mcp")] == [
        "https://h:443/mcp",
        "https://[::1]:8443/mcp",
    ]
