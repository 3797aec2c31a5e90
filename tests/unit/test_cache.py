"""Compiler cache selection: pure planning, version/stat parsing, and lookups with an empty PATH."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rocm_build.building import cachestats, compilercache
from rocm_build.common.errors import ConfigError, ToolMissing

CCACHE_475 = """ccache version 4.7.5
Features: file-storage http-storage redis+unix-storage redis-storage

Copyright (C) 2002-2007 Andrew Tridgell
"""
CCACHE_46 = "ccache version 4.6.3\nFeatures: file-storage http-storage redis-storage\n"
CCACHE_43 = "ccache version 4.3\n"
CCACHE_NO_REDIS = "ccache version 4.9.1\nFeatures: file-storage http-storage\n"

PROG = Path("/opt/tools/bin/ccache")
SCCACHE = Path("/opt/tools/bin/sccache")


def ccache_info(text: str = CCACHE_475) -> compilercache.ToolInfo:
    return compilercache.parse_ccache_version(text)


def test_parse_ccache_version_reads_version_and_backends() -> None:
    info = ccache_info()
    assert info.version == (4, 7, 5)
    assert "redis-storage" in info.features
    assert "http-storage" in info.features


def test_parse_versions_reject_other_output() -> None:
    with pytest.raises(ToolMissing, match="ccache version"):
        compilercache.parse_ccache_version("gcc (Debian 12.2.0-14) 12.2.0")
    with pytest.raises(ToolMissing, match="sccache version"):
        compilercache.parse_sccache_version("something else")
    assert compilercache.parse_sccache_version("sccache 0.4.0-pre.6\n").version == (0, 4, 0)
    assert compilercache.parse_sccache_version("sccache 0.10.0").version == (0, 10, 0)


def test_ccache_local_only_sets_launchers_and_cross_folder_settings(tmp_path: Path) -> None:
    c = compilercache.plan_cache(
        "ccache", PROG, ccache_info(), "", tmp_path / "cc", base_dir=tmp_path
    )
    assert c.kind == "ccache"
    assert c.enabled
    assert c.program == PROG
    for var in compilercache.LAUNCHER_VARS:
        assert c.env[var] == str(PROG)
    assert c.env["CCACHE_DIR"] == str(tmp_path / "cc")
    assert c.env["CCACHE_BASEDIR"] == str(tmp_path)
    assert c.env["CCACHE_NOHASHDIR"] == "1"
    assert c.env["CCACHE_COMPILERCHECK"] == "content"
    assert "time_macros" in c.env["CCACHE_SLOPPINESS"]
    assert "CCACHE_REMOTE_STORAGE" not in c.env
    assert "local only" in c.describe()


def test_ccache_without_cache_dir_leaves_the_users_default() -> None:
    c = compilercache.plan_cache("ccache", PROG, ccache_info(), "")
    assert "CCACHE_DIR" not in c.env
    assert "CCACHE_BASEDIR" not in c.env


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:6379",
        "redis://:secret@cache.example:6379/2",
        "http://cache.example:8080/ccache|layout=bazel",
        "file:/mnt/shared/ccache",
        "redis+unix:/run/redis.sock",
        "redis://a.example redis://b.example|read-only",
    ],
)
def test_ccache_remote_storage_from_url(url: str) -> None:
    c = compilercache.plan_cache("ccache", PROG, ccache_info(), url)
    assert c.env["CCACHE_REMOTE_STORAGE"] == url
    assert c.url == url


def test_ccache_before_47_calls_it_secondary_storage() -> None:
    c = compilercache.plan_cache("ccache", PROG, ccache_info(CCACHE_46), "redis://h:1")
    assert c.env["CCACHE_SECONDARY_STORAGE"] == "redis://h:1"
    assert "CCACHE_REMOTE_STORAGE" not in c.env
    # The inode cache exists since 4.5.
    assert c.env["CCACHE_INODECACHE"] == "1"


def test_ccache_too_old_for_remote_storage() -> None:
    info = ccache_info(CCACHE_43)
    assert "CCACHE_INODECACHE" not in compilercache.plan_cache("ccache", PROG, info, "").env
    with pytest.raises(ConfigError, match=r"4\.4 or newer"):
        compilercache.plan_cache("ccache", PROG, info, "redis://h:1")


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("s3://bucket/prefix", "pass --cache sccache"),
        ("gs://bucket", "pass --cache sccache"),
        ("https://cache.example/ccache", "pass --cache sccache"),
        ("ftp://cache.example/", "cannot use 'ftp'"),
        ("cache.example:6379", "cannot use"),
        ("redis://", "has no host"),
    ],
)
def test_ccache_rejects_urls_it_cannot_use(url: str, reason: str) -> None:
    with pytest.raises(ConfigError, match=reason):
        compilercache.plan_cache("ccache", PROG, ccache_info(), url)


def test_ccache_backends_come_from_its_feature_list() -> None:
    with pytest.raises(ConfigError, match="supports file://, http://"):
        compilercache.plan_cache("ccache", PROG, ccache_info(CCACHE_NO_REDIS), "redis://h:1")


def test_passwords_are_masked_in_messages_and_descriptions() -> None:
    with pytest.raises(ConfigError) as err:
        compilercache.plan_cache("ccache", PROG, ccache_info(), "redis://user:hunter2@")
    assert "hunter2" not in str(err.value)
    c = compilercache.plan_cache("ccache", PROG, ccache_info(), "redis://:hunter2@h:6379")
    assert "hunter2" not in c.describe()
    assert "***" in c.display_url
    assert "hunter2" not in f"{c} {c!r}"
    assert "CCACHE_REMOTE_STORAGE" in repr(c)
    assert c.env["CCACHE_REMOTE_STORAGE"] == "redis://:hunter2@h:6379"  # the build gets it all
    sc = compilercache.plan_cache(
        "sccache", SCCACHE, compilercache.ToolInfo((0, 10)), "redis://u:hunter2@h:1"
    )
    assert "hunter2" not in repr(sc)


def test_sccache_redis_by_version() -> None:
    old = compilercache.plan_cache(
        "sccache", SCCACHE, compilercache.ToolInfo((0, 4, 0)), "redis://h:6379"
    )
    assert old.env["SCCACHE_REDIS"] == "redis://h:6379"
    assert old.env["SCCACHE_IDLE_TIMEOUT"] == "0"
    new = compilercache.plan_cache(
        "sccache", SCCACHE, compilercache.ToolInfo((0, 10, 0)), "rediss://h:6380"
    )
    assert new.env["SCCACHE_REDIS_ENDPOINT"] == "rediss://h:6380"
    assert "SCCACHE_REDIS" not in new.env
    for var in compilercache.LAUNCHER_VARS:
        assert new.env[var] == str(SCCACHE)


def test_sccache_s3_with_endpoint_region_and_prefix(tmp_path: Path) -> None:
    url = "s3://wheels-cache/rocm/2.9?endpoint=http://minio.local:9000&region=eu-1"
    c = compilercache.plan_cache(
        "sccache", SCCACHE, compilercache.ToolInfo((0, 8, 1)), url, tmp_path
    )
    assert c.env["SCCACHE_BUCKET"] == "wheels-cache"
    assert c.env["SCCACHE_S3_KEY_PREFIX"] == "rocm/2.9"
    assert c.env["SCCACHE_ENDPOINT"] == "minio.local:9000"
    assert c.env["SCCACHE_S3_USE_SSL"] == "false"
    assert c.env["SCCACHE_REGION"] == "eu-1"
    assert c.env["SCCACHE_DIR"] == str(tmp_path)


def test_sccache_gcs_and_webdav() -> None:
    info = compilercache.ToolInfo((0, 8, 0))
    gcs = compilercache.plan_cache("sccache", SCCACHE, info, "gs://bucket/prefix")
    assert gcs.env["SCCACHE_GCS_BUCKET"] == "bucket"
    assert gcs.env["SCCACHE_GCS_KEY_PREFIX"] == "prefix"
    assert gcs.env["SCCACHE_GCS_RW_MODE"] == "READ_WRITE"
    dav = compilercache.plan_cache("sccache", SCCACHE, info, "https://cache.example/dav")
    assert dav.env["SCCACHE_WEBDAV_ENDPOINT"] == "https://cache.example/dav"


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("file:/mnt/cache", "cannot use 'file'"),
        ("redis://a redis://b", "one remote storage"),
        ("s3:///prefix", "needs a bucket"),
        ("gs://", "needs a bucket"),
        ("redis://", "has no host"),
    ],
)
def test_sccache_rejects_urls_it_cannot_use(url: str, reason: str) -> None:
    with pytest.raises(ConfigError, match=reason):
        compilercache.plan_cache("sccache", SCCACHE, compilercache.ToolInfo((0, 8, 0)), url)


def test_none_and_unknown_kinds() -> None:
    none = compilercache.plan_cache("none", None, None)
    assert not none.enabled
    assert dict(none.env) == {}
    assert none.describe() == "no compiler cache"
    with pytest.raises(ConfigError, match="drop --cache none"):
        compilercache.plan_cache("none", None, None, "redis://h:1")
    with pytest.raises(ConfigError, match="unknown compiler cache 'distcc'"):
        compilercache.plan_cache("distcc", None, None)


def test_cache_env_is_read_only() -> None:
    c = compilercache.plan_cache("ccache", PROG, ccache_info(), "")
    with pytest.raises(TypeError):
        c.env["CCACHE_DIR"] = "/elsewhere"  # type: ignore[index]


def test_resolve_with_nothing_installed(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path)}  # an empty folder: no ccache, no sccache
    assert compilercache.resolve_cache("auto", "", env).kind == "none"
    assert compilercache.resolve_cache("none", "", env).kind == "none"
    with pytest.raises(ToolMissing, match=r"'ccache' was not found on PATH: install it"):
        compilercache.resolve_cache("ccache", "", env)
    with pytest.raises(ToolMissing, match="sccache"):
        compilercache.resolve_cache("sccache", "redis://h:1", env)
    with pytest.raises(ToolMissing, match="--cache-url needs ccache or sccache"):
        compilercache.resolve_cache("auto", "redis://h:1", env)
    with pytest.raises(ConfigError, match="unknown compiler cache 'icecc'"):
        compilercache.resolve_cache("icecc", "", env)


def test_errors_carry_their_exit_codes(tmp_path: Path) -> None:
    with pytest.raises(ToolMissing) as missing:
        compilercache.resolve_cache("ccache", "", {"PATH": str(tmp_path)})
    assert missing.value.exit_code == 3
    with pytest.raises(ConfigError) as bad:
        compilercache.plan_cache("ccache", PROG, ccache_info(), "s3://b")
    assert bad.value.exit_code == 2


CCACHE_PRINT_STATS = "\n".join(
    [
        "cache_miss\t2",
        "direct_cache_hit\t3",
        "preprocessed_cache_hit\t1",
        "local_storage_hit\t1",
        "local_storage_miss\t5",
        "remote_storage_hit\t3",
        "remote_storage_miss\t2",
        "remote_storage_error\t0",
        "called_for_link\t4",
        "stats_updated_timestamp\t1700000000",
    ]
)


def test_parse_ccache_stats() -> None:
    stats = cachestats.parse_ccache_stats(CCACHE_PRINT_STATS)
    assert stats["hits"] == 4
    assert stats["misses"] == 2
    assert stats["remote_hits"] == 3
    assert stats["remote_misses"] == 2
    assert stats["local_hits"] == 1
    assert stats["uncacheable"] == 4


def test_parse_ccache_stats_of_older_secondary_storage_names() -> None:
    stats = cachestats.parse_ccache_stats("secondary_storage_hit\t7\nsecondary_storage_miss\t1\n")
    assert stats["remote_hits"] == 7
    assert stats["remote_misses"] == 1


def test_parse_sccache_stats() -> None:
    text = json.dumps(
        {
            "stats": {
                "compile_requests": 9,
                "requests_not_cacheable": 1,
                "cache_hits": {"counts": {"C/C++": 5, "CUDA": 1, "HIP": 3}, "adv_counts": {}},
                "cache_misses": {"counts": {"C/C++": 2}},
                "cache_errors": {"counts": {}},
            }
        }
    )
    stats = cachestats.parse_sccache_stats(text)
    assert stats == {
        "hits": 9,
        "misses": 2,
        "errors": 0,
        "requests": 9,
        "uncacheable": 1,
        "hip_hits": 3,
        "hip_misses": 0,
    }
    with pytest.raises(ToolMissing, match="not JSON"):
        cachestats.parse_sccache_stats("Compile requests 9")


def test_stats_of_no_cache_are_empty() -> None:
    none = compilercache.CompilerCache("none")
    assert cachestats.cache_stats(none, {}) == {}
    cachestats.zero_stats(none, {})  # nothing to reset, and no process is started


CCACHE_414 = (
    "ccache version 4.14.2\nFeatures: avx2 crsh-storage file-storage http-storage "
    "redis+unix-storage redis-storage remote-storage\n"
)


def test_ccache_storage_helpers_add_schemes() -> None:
    info = ccache_info(CCACHE_414)
    with pytest.raises(ConfigError, match="ccache-storage-https"):
        compilercache.plan_cache("ccache", PROG, info, "https://cache.example/cc")
    helped = compilercache.ToolInfo(info.version, info.features, frozenset({"https"}))
    c = compilercache.plan_cache("ccache", PROG, helped, "https://cache.example/cc")
    assert c.env["CCACHE_REMOTE_STORAGE"] == "https://cache.example/cc"


def test_mask_url_for_showing_environments() -> None:
    assert (
        compilercache.mask_url("redis://:pw@h:1 http://u:pw2@h/x")
        == "redis://:***@h:1 http://u:***@h/x"
    )
    assert compilercache.mask_url("redis://h:6379") == "redis://h:6379"


def test_sccache_strips_the_base_folder(tmp_path: Path) -> None:
    """Like ccache's base_dir: sccache hashes paths under it relative to it, so a checkout in
    another folder hits the same entries."""
    info = compilercache.ToolInfo((0, 16, 0))
    c = compilercache.plan_cache("sccache", SCCACHE, info, "", tmp_path, base_dir=tmp_path / "s")
    assert c.env["SCCACHE_BASEDIRS"] == str(tmp_path / "s")
    assert "SCCACHE_BASEDIRS" not in compilercache.plan_cache("sccache", SCCACHE, info).env
