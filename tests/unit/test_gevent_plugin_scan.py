"""gevent's plugin entry points found without importlib.metadata (daemon/gevent_patch.py), checked against it."""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

from nsqd_py.daemon.gevent_patch import gevent_plugins, load_entry_point


def test_finds_what_importlib_metadata_finds() -> None:
    expected: dict[str, list[str]] = {}
    seen: set[str] = set()
    for dist in metadata.distributions():  # importlib.metadata.entry_points(): the first distribution of a name
        name = re.sub(r"[-_.]+", "_", dist.metadata["Name"]).lower()
        if name in seen:
            continue
        seen.add(name)
        for ep in dist.entry_points:
            if ep.group.startswith("gevent.plugins."):
                expected.setdefault(ep.group, []).append(ep.value)
    assert gevent_plugins() == expected
    assert "gevent.monkey:_subscribe_signal_os" in expected["gevent.plugins.monkey.will_patch_all"]  # gevent's own


def _distribution(where: Path, name: str, entry_points: str) -> None:
    info = where / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "entry_points.txt").write_text(entry_points)


def test_reads_plugin_groups_only_and_the_first_distribution_of_a_name(tmp_path: Path) -> None:
    _distribution(tmp_path / "a", "plug_in", "[console_scripts]\nx = m:f\n\n[gevent.plugins.monkey.did_patch_all]\n"
                  "# a comment\nhook = plug.hooks:on_patched [extra]\n")
    _distribution(tmp_path / "b", "Plug_In", "[gevent.plugins.monkey.did_patch_all]\nhook = other:hook\n")
    _distribution(tmp_path / "b", "unrelated", "[console_scripts]\ntool = m:main\n")
    versionless = tmp_path / "b" / "plug.in.egg-info"  # a checkout's egg-info: the same distribution again
    versionless.mkdir()
    (versionless / "entry_points.txt").write_text("[gevent.plugins.monkey.did_patch_all]\nhook = third:hook\n")
    found = gevent_plugins([str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "missing")])
    assert found == {"gevent.plugins.monkey.did_patch_all": ["plug.hooks:on_patched [extra]"]}


def test_load_entry_point() -> None:
    assert load_entry_point("os.path:join") is sys.modules["os"].path.join
    assert load_entry_point("importlib.metadata:EntryPoint.load [extra]") is metadata.EntryPoint.load
