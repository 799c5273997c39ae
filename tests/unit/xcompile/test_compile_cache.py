"""The compile cache's folders (`xcompile.cache.cache_dir`): today's stamp's folder, the same
compile's folders of other stamps removed once they are stale, everything else left alone."""

from __future__ import annotations

import os
import time

from xcompile import cache


def test_other_stamps_of_the_same_compile_go(tmp_path, monkeypatch):
    monkeypatch.setattr(cache, "source_stamp", lambda: "0123456789")
    root = tmp_path / "cache"
    names = ["net_zg330_aaaaaaaaaa", "net_zg330_bbbbbbbbbb", "net_zg330_0123456789",
             "net_zg330_ccccccccc", "net_640_zg330_aaaaaaaaaa", "other_aaaaaaaaaa",
             "net_zg330_dddddddddd"]
    for n in names:
        (root / n).mkdir(parents=True)
        (root / n / "net.json").write_text("{}")
    old = time.time() - 2 * cache.STALE_S
    for n in names[:-1]:
        os.utime(root / n, (old, old))
    got = cache.cache_dir("net_zg330", str(root))
    assert got == str(root / "net_zg330_0123456789")
    # the stale other stamps go; a recent one (another process's, maybe) stays, as do
    # today's, a name that is not a stamp and other compiles
    assert sorted(os.listdir(root)) == sorted(
        ["net_zg330_0123456789", "net_zg330_ccccccccc", "net_640_zg330_aaaaaaaaaa",
         "other_aaaaaaaaaa", "net_zg330_dddddddddd"])


def test_a_missing_root_is_no_error(tmp_path, monkeypatch):
    monkeypatch.setattr(cache, "source_stamp", lambda: "0123456789")
    assert cache.cache_dir("x", str(tmp_path / "none")).endswith("x_0123456789")
