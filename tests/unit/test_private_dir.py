"""Private socket directories: mode 0700, named after their process, and those of a
process that is gone removed when the next is made."""

import os
import stat
import subprocess
import sys

from app.private_dir import private_dir, sweep


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_directory_is_private_and_named_after_its_process():
    made = private_dir("unit-test")
    try:
        assert os.path.basename(made).startswith(f"splitserve-unit-test-{os.getpid()}-")
        assert stat.S_IMODE(os.stat(made).st_mode) == 0o700
    finally:
        os.rmdir(made)


def test_only_the_directories_of_processes_that_are_gone_are_swept(tmp_path):
    gone = tmp_path / f"splitserve-streams-{_dead_pid()}-abc"
    alive = tmp_path / f"splitserve-streams-{os.getpid()}-def"
    unnamed = tmp_path / "splitserve-streams-xyz"  # made before directories had pids
    other_kind = tmp_path / f"splitserve-kv-events-{_dead_pid()}-ghi"
    for path in (gone, alive, unnamed, other_kind):
        path.mkdir()
    (gone / "chunks").write_text("")  # a socket file left inside
    assert sweep("streams", str(tmp_path)) == [str(gone)]
    assert not gone.exists()
    assert alive.exists() and unnamed.exists() and other_kind.exists()
