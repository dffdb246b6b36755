"""The command line as a process, run as a user runs it: refusals in one line without a
traceback, a closed pipe, Ctrl-C at any moment of a training job (`info | explain` in-process:
tests/test_cli.py).

They run once, in the default suite: they do not depend on fairscale, so the fairscale sessions
(noxfile.py's FAIRSCALE_TESTS) leave them out.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest


def test_explain_bad_options_is_a_usage_error_with_the_grammar_message() -> None:
    proc = subprocess.run([sys.executable, "-m", "shardcompat", "explain", "zero_dp3"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "did you mean 'zero_dp_3'" in proc.stderr


def _shardcompat(*argv: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shardcompat", *argv], capture_output="stdout" not in kwargs,
                          text=True, timeout=120, **kwargs)  # type: ignore[call-overload,no-any-return]


@pytest.mark.parametrize(("argv", "message"), [
    (["--lr", "nan"], "--lr must be a finite number >= 0, got nan"),
    (["--collective-timeout", "-1"], "--collective-timeout must be a positive number of seconds, got -1.0"),
    (["--sharded_ddp", "zero_dp_1 bucket_cap_mb=1e308"], "bad value '1e308' for bucket_cap_mb="),
])
def test_train_refuses_bad_numbers_in_one_line_without_a_traceback(argv: list[str], message: str) -> None:
    done = _shardcompat("train", *argv)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert message in done.stderr.strip().splitlines()[-1]


def test_explain_into_a_closed_pipe_ends_quietly() -> None:
    read, write = os.pipe()
    os.close(read)  # as `| head -1` does once it has its line
    try:
        done = _shardcompat("explain", "zero_dp_3", stdout=write, stderr=-1)
    finally:
        os.close(write)
    assert done.returncode == 141 and "Traceback" not in done.stderr, done.stderr


TRAIN_FOREVER = [sys.executable, "-m", "shardcompat", "train", "--model", "mlp", "--steps", "100000"]


def _session(leader: int) -> list[str]:
    """The command lines of the processes in ``leader``'s session (the job and every process it started)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as file:
                fields = file.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/cmdline", "rb") as file:
                command = file.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # it has just ended
        if int(fields[3]) == leader and fields[0] != "Z":
            found.append(command)
    return found


def _start_at_a_terminal(command: list[str]) -> subprocess.Popen[str]:
    """``command`` as a shell starts a foreground job: in its own process group, with Ctrl-C's
    default action.  A job started in the background of a non-interactive shell (``nohup ... &``,
    as CI runners may start the suite) inherits SIGINT *ignored*, and Python keeps it ignored in
    the job and every rank: the Ctrl-C tests then wait for a job that never saw it."""
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _interrupt(proc: subprocess.Popen[str]) -> str:
    """Ctrl-C as a terminal sends it (SIGINT to the whole foreground group); the job's stderr."""
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    return err


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ctrl_c_during_train_exits_130_without_a_traceback() -> None:
    proc = _start_at_a_terminal(TRAIN_FOREVER)
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:  # however long startup takes: the first step's line says the ranks train
        seen.append(line)
        if "] step 1/100000 loss" in line:
            break
    else:
        proc.wait()
        pytest.fail(f"exit {proc.returncode} before the first step:\n{''.join(seen)}")
    err = "".join(seen) + _interrupt(proc)
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == "shardcompat train: interrupted", err


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="watches the job's processes in /proc")
@pytest.mark.parametrize("moment", ["the forkserver imports torch", "the ranks start"])
def test_ctrl_c_during_train_startup_exits_130_without_a_traceback(moment: str) -> None:
    """Ctrl-C the moment the forkserver exists (it imports torch then), or the ranks do (they set up
    the group and the model), found by watching the job's processes, not by sleeping."""
    wanted = 1 if moment == "the forkserver imports torch" else 3  # the forkserver, then it and 2 ranks
    proc = _start_at_a_terminal(TRAIN_FOREVER)
    try:
        while sum("multiprocessing.forkserver" in c for c in _session(proc.pid)) < wanted:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.005)  # a look at /proc, not a wait for the job
        err = _interrupt(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and "Traceback" not in err and "terminate called" not in err, err
