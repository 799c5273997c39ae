"""Writing a network's json + raw pair: atomically on disk (`save_network`) or in memory
(`dump_pair`)."""

from __future__ import annotations

import os
from typing import Any

from ...errors import NetworkWriteError, XirError
from ...network import Network
from .. import raw as _raw
from ..atomic import temp_beside, unlink_quietly
from .encode import check_json, dumps, network_to_dict


def save_network(net: Network, json_path: str | os.PathLike,
                 raw_path: str | os.PathLike | None = None, *, validate: bool = True) -> None:
    """Write `net` as json + raw (raw next to the json, same stem, `.raw`).

    A failure (or a kill) at any step leaves the old pair or the new pair, never a mix. The
    raw is written first, under a content-addressed name beside the raw (``net.raw.<md5>``);
    the json, which records that md5, is then moved into place: that rename is the commit.
    Last the raw takes its own name. Between the two renames the new json's raw is the
    content-addressed file, which `read_raw` falls back to when the raw beside the json is
    not the one the json records. The network is validated first, since the loader would
    refuse an invalid one.
    """
    json_path = os.fspath(json_path)
    if raw_path is None:
        raw_path = os.path.splitext(json_path)[0] + ".raw"
    raw_path = os.fspath(raw_path)
    if validate:
        net.validate()
    obj = network_to_dict(net)
    check_json(obj)  # fail on unencodable tags before writing anything
    try:
        _write_pair(obj, net, json_path, raw_path)
    except OSError as exc:
        if isinstance(exc, XirError):
            raise
        folder = os.path.dirname(os.path.abspath(json_path))
        raise NetworkWriteError(f"cannot save the network: {exc.strerror or exc} (in folder "
                                f"'{folder}'); the files there are as they were",
                                file=json_path) from exc


def dump_pair(net: Network, *, json_too: bool = True) -> tuple[str, bytes]:
    """(json text, raw bytes) of `net` held in memory: what `save_network` writes, with the
    json's params_bytes/params_md5 those of these raw bytes (also recorded on `net`). With
    `json_too=False` the text is "" (only the raw is made). Validates the network first."""
    import io

    net.validate()
    buf = io.BytesIO()
    size, digest = _raw.write_raw_stream(buf, net.params())
    text = ""
    if json_too:
        obj = network_to_dict(net)
        obj["params_bytes"], obj["params_md5"] = size, digest
        text = dumps(obj)
    net.params_bytes, net.params_md5 = size, digest
    return text, buf.getvalue()


def _write_pair(obj: dict[str, Any], net: Network, json_path: str, raw_path: str) -> None:
    raw_tmp, size, digest = _raw.write_raw_tmp(net.params(), raw_path)
    staged = _raw.staged_raw_path(raw_path, digest)
    json_tmp = None
    committed = False
    try:
        obj["params_bytes"], obj["params_md5"] = size, digest
        try:
            text = dumps(obj).encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates in a name: escape them
            text = dumps(obj, ascii_only=True).encode("ascii")
        os.replace(raw_tmp, staged)
        raw_tmp = None
        fd, json_tmp = temp_beside(json_path)
        with os.fdopen(fd, "wb") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(json_tmp, json_path)
        json_tmp, committed = None, True
        os.replace(staged, raw_path)
    finally:
        for tmp in (raw_tmp, json_tmp):
            if tmp is not None:
                unlink_quietly(tmp)
        if not committed:
            unlink_quietly(staged)
    _raw.remove_stale_staged(raw_path)
    net.params_bytes, net.params_md5 = size, digest
