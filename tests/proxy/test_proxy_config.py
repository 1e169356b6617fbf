"""Proxy settings: flags > CACHEWARDEN_* environment > file > defaults; bad input is exit 2, one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from cachewarden.proxy.cli import proxy as server_cmd
from cachewarden.proxy.engine.errors import ConfigError
from cachewarden.proxy.server.config import NamedUpstream, Settings, load_settings


def test_defaults() -> None:
    s = load_settings([], env={})
    assert s == Settings()
    assert (s.host, s.port, s.mode, s.max_body_bytes) == ("127.0.0.1", 8787, "observe", 32 * 2**20)
    assert (s.openai_upstream, s.anthropic_upstream) == (
        "https://api.openai.com",
        "https://api.anthropic.com",
    )


def test_precedence_flags_over_env_over_file(tmp_path: Path) -> None:
    config = tmp_path / "proxy.yaml"
    config.write_text(
        "port: 9001\nmode: canonicalize\nopenai-upstream: http://file:1\nmax_body_bytes: 1MiB\n"
        "upstreams:\n  vllm: {url: 'http://vllm:8000/', tokenizer: /tok.json}\n  sglang: http://sg:30000\n"
    )
    env = {
        "CACHEWARDEN_PORT": "9002",
        "CACHEWARDEN_OPENAI_UPSTREAM": "http://env:2",
        "CACHEWARDEN_CONFIG": str(config),
    }
    s = load_settings(["--port", "9003"], env=env)
    assert s.port == 9003  # flag
    assert s.openai_upstream == "http://env:2"  # env over file
    assert s.mode == "canonicalize" and s.max_body_bytes == 2**20  # file over defaults
    assert s.upstreams == {
        "vllm": NamedUpstream("vllm", "http://vllm:8000", "/tok.json"),
        "sglang": NamedUpstream("sglang", "http://sg:30000"),
    }
    assert load_settings(["--config", str(config)], env={}).port == 9001


def test_toml_file_and_every_flag(tmp_path: Path) -> None:
    config = tmp_path / "proxy.toml"
    config.write_text('[proxy]\ntenant_header = "X-Tenant"\nupstream_timeout = 30\n')
    argv = [
        "--config", str(config), "--host", "0.0.0.0", "--mode", "optimize", "--anthropic-upstream", "http://a",
        "--max-body-bytes", "1000", "--access-log", "-", "--capture", "c.jsonl", "--models", "m.yaml",
        "--prices", "p.yaml", "--key-salt", "s", "--connect-timeout", "2.5",
    ]  # fmt: skip
    s = load_settings(argv, env={})
    assert s.tenant_header == "x-tenant" and s.upstream_timeout == 30.0 and s.connect_timeout == 2.5
    assert (s.host, s.mode, s.anthropic_upstream, s.max_body_bytes) == (
        "0.0.0.0",
        "optimize",
        "http://a",
        1000,
    )
    assert (s.access_log, s.capture, s.models, s.prices, s.key_salt) == (
        "-",
        "c.jsonl",
        "m.yaml",
        "p.yaml",
        "s",
    )


@pytest.mark.parametrize(
    ("argv", "env", "file", "message"),
    [
        (["--port", "x"], {}, None, "--port: expected an integer"),
        ([], {"CACHEWARDEN_PORT": "70000"}, None, "CACHEWARDEN_PORT: expected a port number"),
        (["--openai-upstream", "api.openai.com"], {}, None, "expected an http(s) URL"),
        (["--max-body-bytes", "-1"], {}, None, "expected a byte count"),
        (["--upstream-timeout", "0"], {}, None, "must be positive"),
        (["--mode", "fast"], {}, None, "invalid choice"),
        (["--nope"], {}, None, "unrecognized arguments"),
        ([], {}, "colour: blue\n", "unknown setting 'colour'"),
        ([], {}, "port: [1\n", "not valid YAML"),
        ([], {}, "- 1\n", "expected a mapping"),
        ([], {}, "upstreams: {v1: http://x}\n", "upstreams.v1"),
        ([], {}, "upstreams: {vllm: {url: http://x, tokens: 1}}\n", "unknown keys"),
        (["--analysis-processes=maybe"], {}, None, "--analysis-processes: expected true or false"),
        # Worker processes asked for where they cannot work: refused, not quietly turned into threads.
        (
            ["--analysis-processes", "--mode", "canonicalize"],
            {},
            None,
            "cannot be used here: --mode canonicalize",
        ),
        (["--otel"], {"CACHEWARDEN_ANALYSIS_PROCESSES": "true"}, None, "cannot be used here: --otel"),
        ([], {}, "analysis-processes: true\nanthropic-diagnostics: true\n", "here: --anthropic-diagnostics"),
    ],
)
def test_bad_configuration_is_one_line_and_exit_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    env: dict[str, str],
    file: str | None,
    message: str,
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    if file is not None:
        path = tmp_path / "bad.yaml"
        path.write_text(file)
        argv = [*argv, "--config", str(path)]
    assert server_cmd.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("cachewarden proxy: error: ") and err.count("\n") == 1
    assert message in err


def test_missing_files_are_config_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert server_cmd.main(["--config", str(tmp_path / "none.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert server_cmd.main(["--models", str(tmp_path / "none.yaml")]) == 2
    assert "--models" in capsys.readouterr().err
    assert server_cmd.main(["--access-log", str(tmp_path / "no" / "dir.log")]) == 2
    assert "cannot open" in capsys.readouterr().err


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert server_cmd.main(["--help"]) == 0
    out = capsys.readouterr().out
    for flag in (
        "--openai-upstream",
        "--anthropic-upstream",
        "--tenant-header",
        "--capture",
        "--max-body-bytes",
    ):
        assert flag in out


def test_config_error_is_the_project_error() -> None:
    with pytest.raises(ConfigError):
        load_settings(["--port", "-5"], env={})


def test_analysis_processes_is_one_setting_with_an_unset_default(tmp_path: Path) -> None:
    config = tmp_path / "proxy.yaml"
    config.write_text("analysis-processes: false\n")
    assert load_settings([], env={}).analysis_processes is None
    assert load_settings(["--analysis-processes"], env={}).analysis_processes is True
    assert load_settings(["--analysis-processes=false"], env={}).analysis_processes is False
    assert load_settings(["--analysis-processes", "off", "--port", "1"], env={}).analysis_processes is False
    assert load_settings([], env={"CACHEWARDEN_ANALYSIS_PROCESSES": "no"}).analysis_processes is False
    assert load_settings(["--config", str(config)], env={}).analysis_processes is False
    env = {"CACHEWARDEN_ANALYSIS_PROCESSES": "false"}
    assert load_settings(["--analysis-processes", "--config", str(config)], env=env).analysis_processes


@pytest.mark.parametrize(
    ("settings", "processes", "line"),
    [
        (Settings(), True, "analysis: in 2 worker processes, off the forwarding process"),
        (Settings(analysis_processes=True, analysis_workers=1), True, "analysis: in 1 worker process,"),
        (
            Settings(analysis_processes=False),
            False,
            "on 2 threads of the forwarding process (--analysis-processes=false)",
        ),
        (Settings(mode="canonicalize"), False, "(--mode canonicalize rewrites requests"),
        (
            Settings(mode="optimize", analysis_workers=1),
            False,
            "on 1 thread of the forwarding process (--mode optimize",
        ),
        (Settings(anthropic_diagnostics=True), False, "(--anthropic-diagnostics rewrites requests"),
        (Settings(otel=True), False, "(--otel spans carry the analysis)"),
    ],
)
def test_analysis_runs_in_worker_processes_wherever_they_can(
    settings: Settings, processes: bool, line: str
) -> None:
    """Observe mode's default is worker processes; modes whose forwarding reads the analysis' state
    keep threads by themselves, and say so in the one line the proxy logs about it."""
    assert server_cmd.uses_processes(settings) is processes
    assert line in server_cmd.analysis_line(settings)
    if not settings.otel:  # (the OTel extra may be absent)
        app = server_cmd.build(settings)  # not started: no process, no thread yet
        assert (app.state.proxy.workers is not None) is processes
