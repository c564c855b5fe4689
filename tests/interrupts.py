"""Running a program whose response to Ctrl-C a test checks.

A process started in the background by a shell without job control (``cmd &`` in a script,
some CI runners) starts with SIGINT ignored, and its children inherit that: Python then
installs no KeyboardInterrupt handler, and a test's SIGINT would do nothing. The programs
under test are run here as a terminal runs a foreground command, with SIGINT at its default.
"""
import os
import signal
import subprocess


def _sigint_at_default():
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(command, **kwargs) -> subprocess.Popen:
    """``subprocess.Popen(command, **kwargs)`` with SIGINT at its default in the child."""
    return subprocess.Popen(command, preexec_fn=_sigint_at_default, **kwargs)


def stop_tree(process: subprocess.Popen, children=()) -> None:
    """Kills a process and the given child pids if they are still running (cleanup after a
    failed check, so that a stuck program does not keep a core busy for the tests after it)."""
    for pid in list(children) + [process.pid]:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    process.wait()
