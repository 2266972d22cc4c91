"""Episode records refer to large lesson configs in a table beside the log: one config of many episodes is
written once, and every way of reading the log gives each record its config back."""

import json

import orjson
import pytest

from shepherd.storage import EpisodeReturn, Store
from shepherd.storage import configs as configs_module
from shepherd.storage.configs import INLINE_BYTES, table_path
from shepherd.storage.returns import ReturnLog


@pytest.fixture
def open_log():
    """`ReturnLog` on a path, every one made closed at the test's end (its files are appended to held open)."""
    made = []

    def make(path):
        made.append(ReturnLog(path))
        return made[-1]
    yield make
    for log in made:
        log.close()


def big(n: int, size: int = 5000) -> dict:
    return {"level": n, "map": "x" * size}


def record(n: int, config: dict | None) -> EpisodeReturn:
    return EpisodeReturn(float(n + 1), float(n), 10, "train", lesson="hard" if config else None, config=config)


def every_read(log: ReturnLog) -> list[list]:
    """The configs of the log's records, read each way a reader can (objects, pages, chunks, JSON text)."""
    as_json = log.page_json()
    lazily = log.page_json(lazy=True)
    return [[r.config for r in log.read()],
            [r.config for r in log.page(2).returns],
            [r.config for chunk in log.chunks(64) for r in chunk],
            [r.get("config") for r in orjson.loads(b"[" + b",".join(as_json.pieces) + b"]")],
            [r.get("config") for r in orjson.loads(b"[" + b",".join(list(lazily.pieces)) + b"]")]]


def test_one_large_config_of_many_episodes_is_written_once(open_log, tmp_path):
    log = open_log(tmp_path / "returns.jsonl")
    config = big(1, 16_000)
    for n in range(20):
        log.append(record(n, config))
    log.sync()
    size = log.path.stat().st_size + table_path(log.path).stat().st_size
    assert size < 2 * len(json.dumps(config))  # each record held the config before: 20 times its size
    whole, page, chunks, as_json, lazily = every_read(log)
    assert whole == chunks == as_json == lazily == [config] * 20 and page == [config] * 18


def test_small_configs_stay_in_their_records_and_none_stays_none(open_log, tmp_path):
    log = open_log(tmp_path / "returns.jsonl")
    small = {"length": 3}
    log.append(record(0, small))
    log.append(record(1, None))
    assert not table_path(log.path).exists()
    assert '"config":{"length":3}' in log.path.read_text()
    assert [r.config for r in log.read()] == [small, None]
    assert "config" not in orjson.loads(log.page_json(1).pieces[0])


def test_configs_drawn_anew_each_episode_resolve_past_what_the_table_remembers(open_log, tmp_path, monkeypatch):
    monkeypatch.setattr(configs_module, "REMEMBERED", 4)
    log = open_log(tmp_path / "returns.jsonl")
    configs = [big(n, INLINE_BYTES) for n in range(12)]
    for n, config in enumerate(configs + configs[:3]):
        log.append(record(n, config))
    for reads in every_read(log):
        assert reads in (configs + configs[:3], (configs + configs[:3])[2:])


def test_a_restart_reads_the_old_references_and_a_torn_table_line_is_left_behind(open_log, tmp_path):
    path = tmp_path / "returns.jsonl"
    log = open_log(path)
    log.append(record(0, big(0)))
    log.close()
    with open(table_path(path), "ab") as table:  # a crash in the middle of writing a config's line
        table.write(b'{"level": 9, "map": "xx')
    reopened = open_log(path)
    reopened.append(record(1, big(0)))
    reopened.append(record(2, big(2)))
    assert [r.config for r in reopened.read()] == [big(0), big(0), big(2)]
    assert [r.config for r in open_log(path).read()] == [big(0), big(0), big(2)]


def test_a_reference_to_nothing_reads_as_no_config_not_as_a_lost_record(open_log, tmp_path, caplog):
    path = tmp_path / "returns.jsonl"
    path.write_text('{"time":1,"value":2,"length":3,"phase":"train","config_at":999}\n'
                    '{"time":2,"value":2,"length":3,"phase":"train","config_at":"x"}\n')
    log = open_log(path)
    assert [(r.time, r.config) for r in log.read()] == [(1, None), (2, None)]
    assert len(log.page_json().pieces) == 1 and "refers to no config" in caplog.text


def test_deleting_a_curve_deletes_its_table_and_the_next_one_starts_afresh(tmp_path):
    store = Store(tmp_path / "data")
    try:
        user = store.ensure_user("alice")
        agent = store.add_agent(user.id, "thermostat", "PPO", [[2], 0, 40], 3, {})
        for n in range(3):
            store.append_return(agent.id, record(n, big(7)))
        table = table_path(store.agent_folder(agent.id) / "returns.jsonl")
        assert table.exists() and (table.stat().st_mode & 0o777) == 0o600
        store.clear_returns(agent.id)
        assert not table.exists()
        store.append_return(agent.id, record(5, big(8)))
        assert [r.config for r in store.returns(agent.id)] == [big(8)]
        assert table.read_text().count('"level"') == 1
    finally:
        store.close()


@pytest.mark.parametrize("config", [{"n": 2 ** 70, "pad": "y" * INLINE_BYTES}])
def test_a_config_orjson_cannot_write_is_kept_inline(open_log, tmp_path, config):
    log = open_log(tmp_path / "returns.jsonl")
    log.append(record(0, config))
    assert [r.config for r in log.read()] == [config]


def test_pieces_and_chunks_are_bounded_as_text_though_the_lines_are_short(open_log, tmp_path, monkeypatch):
    """A short line may stand for a 5 kB config: a piece of a streamed read (JSON or CSV) is about SCAN_BYTES
    of what is sent, not of the file (the file of 200 records is one 8 kB block)."""
    from shepherd.storage import returns as returns_module
    monkeypatch.setattr(returns_module, "SCAN_BYTES", 20_000)
    log = open_log(tmp_path / "returns.jsonl")
    for n in range(200):
        log.append(record(n, big(1)))
    assert log.path.stat().st_size < 20_000
    pieces = list(log.page_json(lazy=True).pieces)
    assert len(pieces) >= 40 and all(len(piece) < 20_000 + 5_200 for piece in pieces)
    assert sum(len(orjson.loads(b"[" + piece + b"]")) for piece in pieces) == 200
    chunks = list(log.chunks(20_000))
    assert len(chunks) >= 40 and all(len(chunk) <= 4 for chunk in chunks)
    assert [r.time for chunk in chunks for r in chunk] == [float(n + 1) for n in range(200)]


def test_a_read_overlapping_a_curve_delete_gives_each_record_its_own_config(open_log, tmp_path):
    """A read of the log keeps the log it opened when the curve is deleted meanwhile; it resolved configs by the
    table's name, which the next large config of the new curve had begun anew: the old records came with the new
    table's configs (or none, "no config at"), until the table is opened with the log (`ConfigTable.view`)."""
    log = open_log(tmp_path / "returns.jsonl")
    log.append(record(0, big(0)))
    log.append(record(1, big(1)))
    lazily = log.page_json(lazy=True)  # a streamed reply: the files open, nothing read yet
    chunks = log.chunks(chunk_bytes=1)
    first = next(chunks)  # a CSV export, one record read
    log.clear()  # the curve deleted meanwhile
    log.append(record(7, big(7)))  # the new curve's first config: at the old table's first offset
    log.append(record(8, big(8)))
    assert [item["config"]["level"] for text in lazily.pieces for item in orjson.loads(b"[" + text + b"]")] == [0, 1]
    assert [r.config["level"] for r in first + [r for part in chunks for r in part]] == [0, 1]
    assert [r.config["level"] for r in log.read()] == [7, 8]  # the new curve's, its own


@pytest.mark.parametrize("how", ["page", "chunks"])
def test_a_read_whose_config_table_cannot_be_opened_leaves_no_log_open(open_log, tmp_path, monkeypatch, how):
    """The log is opened first, then its table (`ReturnLog._reading`): a table that cannot be opened (EMFILE)
    refuses the read, and the log's file is closed, not held for as long as the error lives."""
    import os

    log = open_log(tmp_path / "returns.jsonl")
    log.append(record(0, big(0)))
    real_open = open

    def no_file_left(path, *args, **kwargs):
        if str(path).endswith(".configs"):
            raise OSError(24, "Too many open files")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(configs_module, "open", no_file_left, raising=False)
    with pytest.raises(OSError) as refused:
        log.page() if how == "page" else next(log.chunks())
    appending = log._handle.fileno()  # the log's own append handle, open all along
    readers = [fd for fd in os.listdir("/proc/self/fd")
               if int(fd) != appending and os.path.realpath(f"/proc/self/fd/{fd}") == str(log.path)]
    assert refused.value.errno == 24 and readers == []
