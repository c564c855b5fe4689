"""cube_jax.files: a file others read while it is written is always whole."""
import doctest
import json
import threading

import pytest

import cube_jax.files
from cube_jax.files import write_atomic


def test_the_module_examples_hold():
    assert doctest.testmod(cube_jax.files).failed == 0


def test_a_reader_never_sees_part_of_a_file(tmp_path):
    path = tmp_path / "metrics.json"
    write_atomic(path, json.dumps({"n": -1, "pad": "x" * 200_000}))
    done = threading.Event()
    seen = []

    def read():
        while not done.is_set():
            seen.append(json.loads(path.read_text())["n"])  # raises on a partial file

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for n in range(100):
            write_atomic(path, json.dumps({"n": n, "pad": "x" * 200_000}))
    finally:
        done.set()
        reader.join()
    assert seen and json.loads(path.read_text())["n"] == 99
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]


def test_a_failed_write_keeps_the_old_file_and_leaves_nothing_behind(tmp_path, monkeypatch):
    path = tmp_path / "sub" / "model.json"
    write_atomic(path, "old\n")
    path.chmod(0o600)

    def fail(*args):
        raise OSError("disk full")

    with monkeypatch.context() as patched:
        patched.setattr(cube_jax.files.os, "replace", fail)
        with pytest.raises(OSError, match="disk full"):
            write_atomic(path, "new\n")
    assert path.read_text() == "old\n"
    assert [p.name for p in path.parent.iterdir()] == ["model.json"]
    write_atomic(path, b"new\n")
    assert path.read_bytes() == b"new\n" and path.stat().st_mode & 0o777 == 0o600
