"""A model's answer cannot drive the user's terminal (issue 35, item 5 of "what broke").

The answer carries an OSC 0 window title, an OSC 52 clipboard write and an erase-line (``ESC[2K``). In a
real terminal (a pty, via pexpect) ``agentrt run`` (the live view) and ``agentrt chat`` (the REPL) show them
as visible escapes; piped, ``agentrt run`` prints them escaped too; ``--json`` keeps the raw text. The
scripted backend answers: what is tested is the printing, not the model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest

from agentrt.app.terminal import printable

AGENTRT = str(Path(sys.executable).parent / "agentrt")
TITLE, CLIPBOARD, ERASE = "\x1b]0;PWNED-TITLE\x07", "\x1b]52;c;UFdORUQ=\x07", "\x1b[2KERASED"
ANSWER = f"Paris{TITLE} is{CLIPBOARD} the capital.{ERASE} \x9b31mred\rdone"
RAW = (TITLE, CLIPBOARD, ERASE, "\x9b31m")
SHOWN = ("\\x1b]0;PWNED-TITLE\\x07", "\\x1b]52;c;UFdORUQ=\\x07", "\\x1b[2KERASED", "\\x9b31mred")


def test_printable_escapes_every_control_but_newline_and_tab():
    text = "a\tb\nc" + "".join(map(chr, [*range(0x20), 0x7F, *range(0x80, 0xA0)]))
    out = printable(text)
    assert out.startswith("a\tb\nc\\0\\x01") and "\\x1b" in out and "\\x9f" in out
    assert not any(ord(c) < 0x20 and c not in "\n\t" or 0x7F <= ord(c) < 0xA0 for c in out)
    assert printable("Ünïcode — ok ✓") == "Ünïcode — ok ✓"


def _env(home: Path) -> dict[str, str]:
    return {**os.environ, "AGENTRT_HOME": str(home), "TERM": "xterm-256color", "COLUMNS": "160"}


def test_run_piped_prints_the_answer_escaped_and_json_keeps_it_raw(agentrt_home):
    argv = [AGENTRT, "run", "--policy", f"scripted:{ANSWER}", "--route", "direct", "capital of France?"]
    shown = subprocess.run(argv, env=_env(agentrt_home), capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert not any(raw in shown.stdout for raw in RAW) and "\x1b" not in shown.stdout
    assert all(escaped in shown.stdout for escaped in SHOWN)
    raw = subprocess.run([*argv, "--json"], env=_env(agentrt_home), capture_output=True, text=True, timeout=300)
    answer = json.loads(raw.stdout)["answer"]
    assert all(code in answer for code in RAW)  # the exact text, for programs


def _spawn(args: list[str], home: Path, log: Path) -> pexpect.spawn:
    child = pexpect.spawn(AGENTRT, args, env=_env(home), encoding="utf-8", timeout=300, dimensions=(40, 160))
    child.logfile_read = open(log, "w")
    return child


@pytest.mark.slow
def test_run_live_in_a_terminal_shows_the_escapes(agentrt_home, tmp_path):
    log = tmp_path / "run.log"
    child = _spawn(["run", "--policy", f"scripted:{ANSWER}", "--route", "direct", "capital of France?"],
                   agentrt_home, log)
    child.expect(pexpect.EOF)
    child.close()
    child.logfile_read.close()
    screen = log.read_text()
    assert "Paris" in screen and child.exitstatus == 0, screen[-2000:]
    assert not any(raw in screen for raw in RAW)
    assert all(escaped in screen for escaped in SHOWN[:3])


@pytest.mark.slow
def test_chat_in_a_terminal_shows_the_escapes(agentrt_home, tmp_path):
    log = tmp_path / "chat.log"
    child = _spawn(["chat", "--policy", f"scripted:{ANSWER}", "--route", "direct"], agentrt_home, log)
    try:
        child.expect_exact("you> ")
        child.sendline("What is the capital of France?")
        child.expect(r"status=\w+ trajectory=")
        child.expect_exact("you> ")
        child.sendline("/memory")  # the conversation's answers are shown again
        child.expect_exact("capital of France")
        child.expect_exact("you> ")
        child.sendline("/exit")
        child.expect(pexpect.EOF)
    finally:
        child.close()
        child.logfile_read.close()
    screen = log.read_text()
    assert not any(raw in screen for raw in RAW), screen[-3000:]
    assert "\\x1b]0;PWNED-TITLE" in screen and "\\x1b]52;c;UFdORUQ=" in screen and "\\x1b[2KERASED" in screen
