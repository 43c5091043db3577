"""Where a member's use is read (adapters/node/cgroup_paths.py) and reading it
(adapters/telemetry/usage.py): cgroup v1, v2 and hybrid hosts, the /proc tree, and the faults
(a group removed mid-read, a pid reused, counters going back)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from adapters.node.cgroup_paths import cgroup_dirs, hierarchies, usage_source_of
from adapters.telemetry.usage import (
    MIB,
    ProcessTable,
    UsageReader,
    cgroup_cpu_seconds,
    cgroup_memory_bytes,
    parse_stat,
)
from domain.telemetry import UsageSource

HYBRID = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
V1_COMBINED = """\
25 24 0:22 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct
26 24 0:23 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory
"""
V2 = "29 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev - cgroup2 cgroup2 rw,nsdelegate\n"


def test_a_hybrid_host_names_the_v1_cpuacct_and_memory_groups() -> None:
    own = "9:name=systemd:/\n4:memory:/docker/abc\n2:cpuacct:/docker/abc\n1:cpu:/docker/abc\n0::/\n"
    assert cgroup_dirs(own, hierarchies(HYBRID)) == (
        "/sys/fs/cgroup/cpuacct/docker/abc",
        "/sys/fs/cgroup/memory/docker/abc",
    )


def test_a_combined_v1_controller_mount_is_found() -> None:
    own = "5:memory:/docker/x\n3:cpu,cpuacct:/docker/x\n"
    assert cgroup_dirs(own, hierarchies(V1_COMBINED)) == (
        "/sys/fs/cgroup/cpu,cpuacct/docker/x",
        "/sys/fs/cgroup/memory/docker/x",
    )


def test_a_v2_host_names_its_one_group() -> None:
    own = "0::/system.slice/docker-abc.scope\n"
    assert cgroup_dirs(own, hierarchies(V2)) == ("/sys/fs/cgroup/system.slice/docker-abc.scope",)


def test_the_root_group_is_nobody_s_own() -> None:
    assert cgroup_dirs("0::/\n", hierarchies(V2)) == ()
    assert cgroup_dirs("4:memory:/\n2:cpuacct:/\n0::/\n", hierarchies(HYBRID)) == ()


def test_a_group_outside_a_bind_mounted_hierarchy_is_not_named() -> None:
    bind = "30 23 0:26 /kubepods /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
    mounts = hierarchies(bind)
    assert cgroup_dirs("0::/kubepods/pod1/c1\n", mounts) == ("/sys/fs/cgroup/pod1/c1",)
    assert cgroup_dirs("0::/system.slice/other\n", mounts) == ()
    assert cgroup_dirs("0::/kubepods/../etc\n", mounts) == ()


def test_escaped_mount_points_and_garbage_lines() -> None:
    text = "1 2 0:1 / /mnt/with\\040space rw - cgroup2 cgroup2 rw\nnonsense\n\n"
    assert cgroup_dirs("0::/g\nbroken line\n", hierarchies(text)) == ("/mnt/with space/g",)


def test_this_process_is_measured_where_the_kernel_says() -> None:
    found = usage_source_of(os.getpid())
    assert found is not None and found.pid == os.getpid()
    assert all(os.path.isdir(d) for d in found.cgroups)
    assert usage_source_of(2**22 + 12345) is None  # no such process


def test_stat_lines_with_parentheses_in_the_name() -> None:
    fields = " ".join(str(n) for n in range(4, 31))  # each field holds its number (man 5 proc)
    st = parse_stat(f"42 (a) b (c)) S {fields}")
    assert st is not None
    assert (st.ppid, st.cpu_ticks, st.start, st.rss_pages) == (4, 14 + 15 + 16 + 17, 22, 24)
    assert parse_stat("42 (short) S 1 2") is None
    assert parse_stat("no parenthesis") is None


def _v2_group(path: Path, usec: int, current: int, inactive: int) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "cpu.stat").write_text(f"usage_usec {usec}\nuser_usec 1\nsystem_usec 2\n")
    (path / "memory.current").write_text(f"{current}\n")
    (path / "memory.stat").write_text(f"anon 5\nfile 9\ninactive_file {inactive}\n")


def test_cgroup_v2_cores_and_memory_without_droppable_cache(tmp_path: Path) -> None:
    group = tmp_path / "g"
    _v2_group(group, 1_000_000, 600 * MIB, 100 * MIB)
    reader = UsageReader(UsageSource(None, (str(group),)))
    table = ProcessTable(tmp_path / "no-proc")
    assert reader.read(10.0, table) == (None, 500.0)  # the first read has no CPU delta
    _v2_group(group, 4_000_000, 600 * MIB, 100 * MIB)
    assert reader.read(12.0, table) == (1.5, 500.0)  # 3 s of CPU in 2 s: 1.5 cores


def test_cgroup_v1_cpuacct_and_memory_directories(tmp_path: Path) -> None:
    cpu, mem = tmp_path / "cpuacct", tmp_path / "memory"
    cpu.mkdir()
    mem.mkdir()
    (cpu / "cpuacct.usage").write_text("2000000000\n")
    (mem / "memory.usage_in_bytes").write_text(f"{300 * MIB}\n")
    (mem / "memory.stat").write_text(f"cache 1\ntotal_inactive_file {44 * MIB}\n")
    assert cgroup_cpu_seconds(str(cpu)) == 2.0 and cgroup_cpu_seconds(str(mem)) is None
    assert cgroup_memory_bytes(str(mem)) == 256 * MIB and cgroup_memory_bytes(str(cpu)) is None


def test_a_group_that_vanishes_or_goes_back_gives_no_point(tmp_path: Path) -> None:
    group = tmp_path / "g"
    _v2_group(group, 5_000_000, MIB, 0)
    reader = UsageReader(UsageSource(None, (str(group),)))
    table = ProcessTable(tmp_path / "no-proc")
    reader.read(1.0, table)
    _v2_group(group, 1_000_000, MIB, 0)  # a new group under the same name: counter restarted
    assert reader.read(2.0, table)[0] is None
    shutil.rmtree(group)
    assert reader.read(3.0, table) == (None, None)
    (group).mkdir()
    (group / "cpu.stat").write_text("garbage")
    (group / "memory.current").write_text("not a number")
    assert reader.read(4.0, table) == (None, None)


def test_the_process_tree_of_a_real_child(tmp_path: Path) -> None:
    """No cgroup of its own: the pid's tree through /proc, grandchildren included."""
    code = (
        "import subprocess, sys, time; "
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        "print(c.pid, flush=True); time.sleep(60)"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        grandchild = int(parent.stdout.readline())
        reader = UsageReader(UsageSource(parent.pid, ()))
        table = ProcessTable()
        assert {s.start for s in table.tree(parent.pid)} >= {table.stats()[grandchild].start}
        assert len(list(table.tree(parent.pid))) == 2
        cores, memory = reader.read(1.0, table)
        assert cores is None and memory is not None and memory > 1  # two Pythons' RSS
        cores, _ = reader.read(2.0, ProcessTable())
        assert cores is not None and cores >= 0
    finally:
        parent.kill()
        parent.wait()
        if parent.stdout is not None:  # close the pipe, or a ResourceWarning when collected
            parent.stdout.close()
        os.kill(grandchild, 9)


def _proc(root: Path, pid: int, ppid: int, start: int, ticks: int = 100) -> None:
    fields = ["S", str(ppid)] + ["0"] * 9 + [str(ticks), "0", "0", "0"] + ["0"] * 4
    fields += [str(start), "0", "10"] + ["0"] * 5
    (root / str(pid)).mkdir(parents=True, exist_ok=True)
    (root / str(pid) / "stat").write_text(f"{pid} (train) " + " ".join(fields))


def test_a_reused_pid_reads_as_nothing(tmp_path: Path) -> None:
    _proc(tmp_path, 300, 1, start=1000)
    reader = UsageReader(UsageSource(300, ()))
    assert reader.read(1.0, ProcessTable(tmp_path))[1] is not None
    _proc(tmp_path, 300, 1, start=2000)  # the member's process ended, another got its pid
    assert reader.read(2.0, ProcessTable(tmp_path)) == (None, None)
    _proc(tmp_path, 300, 1, start=1000)
    assert reader.read(3.0, ProcessTable(tmp_path)) == (None, None)  # for good


def test_a_process_that_forks_away_leaves_the_tree(tmp_path: Path) -> None:
    _proc(tmp_path, 300, 1, start=10, ticks=100)
    _proc(tmp_path, 301, 300, start=11, ticks=500)
    reader = UsageReader(UsageSource(300, ()))
    reader.read(1.0, ProcessTable(tmp_path))
    _proc(tmp_path, 301, 1, start=11, ticks=900)  # re-parented to init: no longer the member's
    cores, _ = reader.read(2.0, ProcessTable(tmp_path))
    assert cores is None  # the tree's time went back: no point rather than a negative one


@pytest.mark.parametrize("text", ["", "x", "1 (a) S"])
def test_unparseable_stat_files_are_skipped(tmp_path: Path, text: str) -> None:
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "stat").write_text(text)
    assert ProcessTable(tmp_path).stats() == {}
