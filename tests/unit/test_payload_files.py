"""KV payload files in /dev/shm never outlive a cancelled request: an aborted prefill's
file (written by a step that was already running) and a cancelled fetch's (written by a
thread the cancel does not stop)."""

import asyncio
import os
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from app.kv import object_store
from app.kv.payload import SAVE_PATH


class SlowArray(np.ndarray):
    """A payload whose write takes a while (a big KV on a busy host)."""

    def tofile(self, fid, *args, **kwargs):  # type: ignore[override]
        time.sleep(0.3)
        return np.asarray(self).tofile(fid, *args, **kwargs)


async def _ref(data):
    return data


async def test_a_cancelled_fetch_leaves_no_file(tmp_path: Path):
    path = str(tmp_path / f"{object_store.PREFIX}1-decode-x")
    data = np.arange(1 << 16, dtype=np.uint8).view(SlowArray)
    task = asyncio.ensure_future(object_store.materialize(_ref(data), path))
    await asyncio.sleep(0.05)  # the thread is writing
    task.cancel()
    object_store.remove(path)  # the caller's clean-up runs before the thread is done
    await asyncio.sleep(0.6)  # the write (0.3 s) is done by now on an idle host
    deadline = time.monotonic() + 10  # and on a busy one, in its own time
    while os.listdir(tmp_path) and time.monotonic() < deadline:  # noqa: ASYNC110 (a file, no event)
        await asyncio.sleep(0.05)
    assert os.listdir(tmp_path) == []


async def test_a_fetch_that_completes_leaves_the_file_for_the_engine(tmp_path: Path):
    path = str(tmp_path / f"{object_store.PREFIX}1-decode-y")
    data = np.arange(100, dtype=np.uint8)
    nbytes, _ = await object_store.materialize(_ref(data), path)
    with open(path, "rb") as f:  # noqa: ASYNC230 (a test's one small read)
        assert nbytes == 100 and f.read() == data.tobytes()


def test_an_aborted_prefill_s_payload_is_removed_by_the_connector(tmp_path: Path, monkeypatch):
    from vllm.v1.request import RequestStatus

    from app.kv.object_store_connector import SplitserveObjectStoreConnector

    monkeypatch.setattr(object_store, "payload_dir", lambda: tmp_path)
    path = tmp_path / f"{object_store.PREFIX}1-prefill-z"
    path.write_bytes(b"kv")  # written by the step that ran while the abort was sent
    connector = SplitserveObjectStoreConnector.__new__(SplitserveObjectStoreConnector)
    connector._saves, connector._loads, connector._confirmed_loads = {}, {}, {}

    def finish(status):
        request = SimpleNamespace(
            request_id="r", status=status, kv_transfer_params={SAVE_PATH: str(path)}
        )
        return connector.request_finished(request, [])  # type: ignore[arg-type]

    finish(RequestStatus.FINISHED_LENGTH_CAPPED)  # a prefill that ended normally
    assert path.exists()  # kept: the replica publishes it
    finish(RequestStatus.FINISHED_ABORTED)
    assert not path.exists()


def _connector():
    from app.kv.object_store_connector import SplitserveObjectStoreConnector

    connector = SplitserveObjectStoreConnector.__new__(SplitserveObjectStoreConnector)
    connector._saves, connector._loads, connector._confirmed_loads = {}, {}, {}
    return connector


def test_paths_that_name_no_payload_file_are_never_read_written_or_removed(
    tmp_path: Path, monkeypatch
):
    from vllm.v1.request import RequestStatus

    from app.kv.payload import LOAD_PATH, NUM_TOKENS

    shm = tmp_path / "shm"
    shm.mkdir()
    monkeypatch.setattr(object_store, "payload_dir", lambda: shm)
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    outside = [
        str(victim),
        str(shm / ".." / "victim"),
        str(shm / "not-a-payload"),
        str(tmp_path / f"{object_store.PREFIX}elsewhere"),
    ]
    connector = _connector()
    for path in outside:
        request = SimpleNamespace(
            request_id="r",
            prompt_token_ids=[1, 2, 3, 4],
            kv_transfer_params={LOAD_PATH: path, NUM_TOKENS: 4, SAVE_PATH: path},
            status=RequestStatus.FINISHED_ABORTED,
        )
        assert connector.get_num_new_matched_tokens(request, 0) == (0, False)  # type: ignore[arg-type]
        connector.request_finished(request, [])  # type: ignore[arg-type]
    assert connector._loads == {} and connector._saves == {}
    assert victim.read_bytes() == b"precious"
    inside = str(shm / f"{object_store.PREFIX}1-decode-x")
    assert object_store.payload_path(inside) == inside


async def test_payload_files_are_readable_by_their_user_only(tmp_path: Path):
    path = str(tmp_path / f"{object_store.PREFIX}1-decode-m")
    await object_store.materialize(_ref(np.arange(10, dtype=np.uint8)), path)
    assert os.stat(path).st_mode & 0o777 == 0o600
