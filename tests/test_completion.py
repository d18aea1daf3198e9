"""`servewatch completion bash|zsh|fish`: shtab's script of the very parser the command line is read with
(issue 45). The bash script is checked by bash itself: it parses, and completing a word gives the command."""

from __future__ import annotations

import argparse
import shutil
import subprocess

import pytest

from servewatch.cli import build_parser, main


def _command_names() -> list[str]:
    root = build_parser()
    subparsers = next(a for a in root._actions if isinstance(a, argparse._SubParsersAction))
    return list(subparsers.choices)


def _script(shell: str, capsys) -> str:
    assert main(["completion", shell]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_the_script_names_every_command(shell, capsys):
    text = _script(shell, capsys)
    names = _command_names()
    assert len(names) >= 21 and "completion" in names and "requests" in names
    missing = [name for name in names if name not in text]
    assert not missing, f"the {shell} script lacks {missing}"
    assert "--goodput" in text                       # a subcommand's flag, not only the command names


def test_bash_accepts_the_script_and_it_completes_a_command_and_a_flag(tmp_path, capsys):
    bash = shutil.which("bash")
    assert bash, "bash is not installed"
    path = tmp_path / "servewatch.bash"
    path.write_text(_script("bash", capsys))
    checked = subprocess.run([bash, "-n", str(path)], capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stderr
    completing = (f"source {path}\n"
                  "COMP_WORDS=(servewatch req); COMP_CWORD=1; _shtab_servewatch; echo \"${COMPREPLY[*]}\"\n"
                  "COMP_WORDS=(servewatch requests --goo); COMP_CWORD=2; _shtab_servewatch; echo \"${COMPREPLY[*]}\"\n"
                  "complete -p servewatch\n")
    done = subprocess.run([bash, "--norc", "--noprofile", "-c", completing], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:2] == ["requests", "--goodput"]
    assert "_shtab_servewatch servewatch" in done.stdout


def test_an_unknown_shell_is_one_line_and_exit_2(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["completion", "tcsh"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and len(err.strip().splitlines()) == 1 and "invalid choice: 'tcsh'" in err


def test_the_documented_install_lines_are_the_commands_and_the_bash_one_installs_the_script(tmp_path, capsys):
    import os
    import sys
    from pathlib import Path

    from servewatch.commands.completion import INSTALL

    page = (Path(__file__).parents[1] / "docs" / "site" / "completion.md").read_text(encoding="utf-8")
    assert [shell for shell, line in INSTALL.items() if f"```\n{line}\n```" not in page] == []
    env = {**os.environ, "HOME": str(tmp_path), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for shell in ("bash", "zsh", "zsh"):                              # zsh twice: ~/.zshrc is added to once
        done = subprocess.run(["bash", "-c", INSTALL[shell]], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
    installed = tmp_path / ".local" / "share" / "bash-completion" / "completions" / "servewatch"
    assert installed.read_text() == _script("bash", capsys)
    assert (tmp_path / ".zfunc" / "_servewatch").read_text().startswith("#compdef servewatch")
    assert (tmp_path / ".zshrc").read_text().count("fpath=(~/.zfunc $fpath)") == 1
