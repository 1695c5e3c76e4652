"""The server's options have one spelling (issue 11): the fields of ``ServeOptions``, read from
``adaspark serve``'s ``key=value`` words and from ``python -m adaspark.serving.main``'s flags with
the same checks, and written back as flags that parse to the same options."""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path

import pytest

from adaspark.cli import cmd_serve
from adaspark.config import ConfigError
from adaspark.serving.main import (
    MainArgs,
    ServeOptions,
    main,
    main_argv,
    parse_main_args,
)

#: A value other than the default for every field, and how it is written as a ``key=value`` word.
OTHER = {
    "host": ("0.0.0.0", "0.0.0.0"),
    "port": (0, "0"),
    "store": (Path("/tmp/some store/-x"), "/tmp/some store/-x"),
    "chat_template": (Path("t.jinja"), "t.jinja"),
    "busy_wait_s": (2.5, "2.5"),
    "warmup": (False, "false"),
    "round_log": (Path("rounds"), "rounds"),
    "trace_log": (Path("trace"), "trace"),
    "tool_fallback": ("none", "none"),
    "max_concurrent": (4, "4"),
    "max_queue": (0, "0"),
}


def test_every_field_has_a_non_default_value_here():
    assert sorted(OTHER) == sorted(f.name for f in fields(ServeOptions))
    for f in fields(ServeOptions):
        assert OTHER[f.name][0] != f.default, f.name
        assert f.metadata.get("help"), f"{f.name} has no help line"


def test_defaults_round_trip():
    assert ServeOptions().to_argv() == []
    assert ServeOptions.from_argv([]) == ServeOptions()
    assert ServeOptions.from_overrides({}) == ServeOptions()


@pytest.mark.parametrize("name", sorted(OTHER))
def test_each_field_round_trips(name):
    value, word = OTHER[name]
    opts = replace(ServeOptions(), **{name: value})
    argv = opts.to_argv()
    assert len(argv) == 1, argv  # only the field that differs from its default
    assert ServeOptions.from_argv(argv) == opts
    assert getattr(ServeOptions.from_argv(argv), name) == value
    assert ServeOptions.from_overrides({name: word}) == opts


def test_all_fields_at_once_round_trip():
    opts = ServeOptions(**{k: v for k, (v, _) in OTHER.items()})
    assert ServeOptions.from_argv(opts.to_argv()) == opts
    assert ServeOptions.from_overrides({k: w for k, (_, w) in OTHER.items()}) == opts


def test_flags_read_as_documented():
    opts = ServeOptions.from_argv(["--port", "9", "--no-warmup", "--chat-template", "a.jinja",
                                   "--busy-wait-s=1", "--tool-fallback", "none"])
    assert opts == ServeOptions(port=9, warmup=False, chat_template=Path("a.jinja"),
                                busy_wait_s=1.0, tool_fallback="none")
    assert ServeOptions.from_argv(["--warmup"]).warmup is True
    assert ServeOptions.from_overrides({"warmup": "FALSE", "store": ""}) == ServeOptions(
        warmup=False)


BAD = [
    ("port", "abc", "an integer from 0 to 65535"),
    ("port", "70000", "an integer from 0 to 65535"),
    ("port", "1.5", "an integer from 0 to 65535"),
    ("busy_wait_s", "-1", "a number (finite) >= 0"),
    ("busy_wait_s", "soon", "a number (finite) >= 0"),
    ("warmup", "maybe", "true or false"),
    ("tool_fallback", "xml", "one of 'generic', 'none'"),
]


@pytest.mark.parametrize(("key", "text", "allowed"), BAD)
def test_a_bad_value_names_key_value_and_what_is_allowed(key, text, allowed):
    with pytest.raises(ConfigError, match="is not allowed") as e:
        ServeOptions.from_overrides({key: text})
    assert f"{key}=" in str(e.value) and text in str(e.value) and allowed in str(e.value)
    if key == "warmup":
        flag = ["--warmup=" + text]  # a bool flag takes no value
        with pytest.raises(ConfigError, match="ignored explicit argument"):
            ServeOptions.from_argv(flag)
        return
    with pytest.raises(ConfigError) as e:
        ServeOptions.from_argv([f"--{key.replace('_', '-')}", text])
    assert f"{key}=" in str(e.value) and text in str(e.value) and allowed in str(e.value)


def test_an_empty_host_is_refused_from_both_entry_points():
    with pytest.raises(ConfigError, match="host= is empty"):
        ServeOptions.from_overrides({"host": ""})
    with pytest.raises(ConfigError, match="host= is empty"):
        ServeOptions.from_argv(["--host="])


def test_options_are_checked_when_made():
    with pytest.raises(ConfigError, match="port=-1 is not allowed"):
        ServeOptions(port=-1)
    with pytest.raises(ConfigError, match="store='x' is not allowed: store must be a path"):
        ServeOptions(store="x")  # type: ignore[arg-type]


def test_an_unknown_key_lists_the_known_ones():
    with pytest.raises(ConfigError, match="unknown server option") as e:
        ServeOptions.from_overrides({"prot": "1"})
    assert "prot" in str(e.value)
    assert all(f.name in str(e.value) for f in fields(ServeOptions))
    with pytest.raises(ConfigError, match="unknown argument") as e:
        ServeOptions.from_argv(["--prot", "1"])
    assert "--prot" in str(e.value) and "--port" in str(e.value) and "--no-warmup" in str(e.value)


def test_serve_refuses_a_bad_option_before_composing():
    with pytest.raises(ConfigError, match="busy_wait_s=-1"):
        cmd_serve(["arm=ar", "busy_wait_s=-1"])


def test_main_arguments_round_trip():
    for exact in (True, False, None):
        for opts in (ServeOptions(), ServeOptions(**{k: v for k, (v, _) in OTHER.items()})):
            args = MainArgs(Path("p.yaml"), "adaspark@2", exact, opts)
            assert parse_main_args(main_argv(args)) == args


def test_main_refuses_bad_arguments_with_exit_code_2(capsys):
    assert main(["--params", "p.yaml", "--arm", "ar", "--port=abc"]) == 2
    assert "port='abc' is not allowed" in capsys.readouterr().err
    assert main(["--arm", "ar"]) == 2
    assert "--params" in capsys.readouterr().err
    assert main(["--params", "p.yaml", "--arm", "ar", "--exact", "--fast"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err
    assert main(["--params", "p.yaml", "--arm", "ar", "--nope"]) == 2
    assert "unknown argument(s) --nope" in capsys.readouterr().err
