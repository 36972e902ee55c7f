"""Unit tests of the gpubind package that need no launcher: the master address chooser on
made-up interface tables (a test cluster's nodes are one host and share every network, so only
these tables can tell a right choice from a wrong one), NCCL_SOCKET_IFNAME matching, the ctypes
struct against the C header, and errors. Run by tests/python (TestUnit) with Debian's python3:

    PYTHONPATH=python GPUBIND_TEST_INCLUDE=lib /usr/bin/python3 -m pytest tests/python/unit
"""

import ctypes
import os
import subprocess

import pytest

import gpubind
from gpubind import _lib, _netif
from gpubind._netif import Iface, choose_master, ifname_matches, local_ifname


def tbl(*entries: str):
    """tbl("eth0 10.0.0.1/24", ...) -> [Iface]."""
    out = []
    for e in entries:
        name, cidr = e.split()
        addr, plen = cidr.split("/")
        out.append(Iface(name, addr, int(plen)))
    return out


def test_shared_network_not_first_interface():
    # rank 0's first interface (a docker bridge) exists on no other node.
    root = tbl("docker0 172.17.0.1/16", "eth0 10.1.0.5/16", "ib0 192.168.10.5/24")
    others = [tbl("eth0 10.1.7.9/16", "ib0 192.168.10.6/24"), tbl("ens3 10.1.8.1/16", "ib0 192.168.10.7/24")]
    assert choose_master(root, others).addr == "10.1.0.5"


def test_same_subnet_bridge_on_every_node_is_taken_only_if_shared():
    # Every node has docker0 172.17.0.1/16, the same address: "shared" by the rule, and first.
    # NCCL_SOCKET_IFNAME=^docker excludes it from preference; eth0 wins.
    root = tbl("docker0 172.17.0.1/16", "eth0 10.1.0.5/16")
    others = [tbl("docker0 172.17.0.1/16", "eth0 10.1.0.6/16")]
    assert choose_master(root, others, ["^docker"]).addr == "10.1.0.5"


def test_ifname_preference_wins_over_order_and_family():
    root = tbl("eth0 10.1.0.5/16", "ib0 fd00:1::5/64", "ib1 192.168.20.5/24")
    others = [tbl("eth0 10.1.0.6/16", "ib0 fd00:1::6/64", "ib1 192.168.20.6/24")]
    assert choose_master(root, others).addr == "10.1.0.5"  # no preference: order
    assert choose_master(root, others, ["ib"]).addr == "192.168.20.5"  # ib*: IPv4 ib1 first
    assert choose_master(root, others, ["=ib0"]).addr == "fd00:1::5"  # exact, only IPv6 there
    assert choose_master(root, others, ["", "ib1"]).addr == "192.168.20.5"  # GLOO_SOCKET_IFNAME


def test_preference_matching_nothing_shared_falls_back():
    root = tbl("eth0 10.1.0.5/16", "ib0 192.168.10.5/24")
    others = [tbl("eth0 10.1.0.6/16")]  # ib0 missing on node 1
    assert choose_master(root, others, ["ib0"]).addr == "10.1.0.5"


def test_ipv4_before_ipv6():
    root = tbl("eth0 fd00::5/64", "eth0 10.0.0.5/24")
    others = [tbl("eth0 fd00::6/64", "eth0 10.0.0.6/24")]
    assert choose_master(root, others).addr == "10.0.0.5"


def test_ipv6_only():
    root = tbl("eth0 fd00::5/64")
    others = [tbl("eth0 fd00::6/64"), tbl("eth1 fd00::7/64")]
    assert choose_master(root, others).addr == "fd00::5"


def test_network_must_hold_every_node():
    # 10.1.0.0/24 on rank 0's node; node 2 is in 10.1.1.0/24: not shared.
    root = tbl("eth0 10.1.0.5/24", "ib0 192.168.0.5/16")
    others = [tbl("eth0 10.1.0.6/24", "ib0 192.168.3.6/16"), tbl("eth0 10.1.1.7/24", "ib0 192.168.9.7/16")]
    assert choose_master(root, others).addr == "192.168.0.5"


def test_no_shared_network_names_every_node():
    root = tbl("eth0 10.1.0.5/24")
    others = [tbl("eth0 10.2.0.6/24")]
    with pytest.raises(gpubind.Error) as e:
        choose_master(root, others, node_names=["n01", "n02"])
    msg = str(e.value)
    assert "n01 (rank 0): eth0 10.1.0.5/24" in msg and "n02: eth0 10.2.0.6/24" in msg and "MASTER_ADDR" in msg
    assert e.value.code is None


def test_node_without_addresses():
    with pytest.raises(gpubind.Error):
        choose_master(tbl("eth0 10.1.0.5/24"), [[]])


def test_local_ifname_longest_prefix():
    table = tbl("eth0 10.1.0.6/16", "vlan5 10.1.5.6/24", "ib0 192.168.10.6/24")
    assert local_ifname(table, "10.1.5.1") == "vlan5"
    assert local_ifname(table, "10.1.9.1") == "eth0"
    assert local_ifname(table, "192.168.10.5") == "ib0"
    assert local_ifname(table, "172.16.0.1") is None
    assert local_ifname(tbl("eth0 fd00::6/64"), "fd00::5") == "eth0"


@pytest.mark.parametrize("name,spec,want", [
    ("eth0", "eth", True), ("eth0", "ib", False), ("ib0", "eth,ib", True),
    ("eth0", "=eth", False), ("eth", "=eth", True), ("docker0", "^docker", False),
    ("eth0", "^docker,lo", True), ("lo", "^docker,lo", False), ("eth0", "^=eth", True),
    ("eth0", "", True),
])
def test_ifname_matches(name, spec, want):
    assert ifname_matches(name, spec) is want


def test_tables_by_node_first_record_wins():
    recs = [{"node": 0, "table": [["eth0", "10.0.0.1", 24]]}, {"node": 0}, {"node": 1, "table": [["eth0", "10.0.0.2", 24]]},
            {"node": 1, "table": [["x", "1.1.1.1", 8]]}]
    by = _netif.tables_by_node(recs)
    assert sorted(by) == [0, 1] and by[1]["table"][0][0] == "eth0"


def test_local_table_has_no_loopback_or_link_local():
    for i in _netif.local_table():
        assert not i.addr.startswith("127.") and i.addr != "::1" and not i.addr.startswith("fe80")
    assert any(i.addr == "127.0.0.1" for i in _netif.local_table(include_loopback=True))
    assert _netif.loopback_name() == "lo"


def test_struct_matches_header(tmp_path):
    """The ctypes gpuhelper_info_t has the C struct's size and offsets."""
    inc = os.environ.get("GPUBIND_TEST_INCLUDE") or os.path.join(os.path.dirname(__file__), "../../../lib")
    fields = [f[0] for f in _lib.InfoStruct._fields_]
    src = tmp_path / "off.c"
    src.write_text('#include <stdio.h>\n#include <stddef.h>\n#include "gpuhelper.h"\nint main(void){\n'
                   + "".join(f'printf("{f} %zu\\n", offsetof(gpuhelper_info_t, {f}));\n' for f in fields)
                   + 'printf("sizeof %zu\\n", sizeof(gpuhelper_info_t)); return 0; }\n')
    exe = tmp_path / "off"
    subprocess.run(["cc", "-I", inc, "-o", str(exe), str(src)], check=True)
    got = dict(line.split() for line in subprocess.run([str(exe)], check=True, capture_output=True,
                                                       text=True).stdout.splitlines())
    for f in fields:
        assert int(got[f]) == getattr(_lib.InfoStruct, f).offset, f
    assert int(got["sizeof"]) == ctypes.sizeof(_lib.InfoStruct)


def test_missing_library(monkeypatch):
    monkeypatch.setenv("GPUBIND_LIBGPUHELPER", "/nonexistent/libgpuhelper.so.1")
    monkeypatch.setattr(_lib, "_lib", None)
    with pytest.raises(gpubind.Error) as e:
        _lib.load()
    assert e.value.code is None and "/nonexistent/libgpuhelper.so.1" in str(e.value)


def test_calls_before_init():
    for fn, args in ((gpubind.barrier, ()), (gpubind.bcast, (b"x",)), (gpubind.allgather, (b"x",)),
                     (gpubind.nccl_id, ())):
        with pytest.raises(gpubind.Error, match="init"):
            fn(*args)


def test_error_carries_code_and_message():
    e = _lib.Error("gpuhelper_init", "rank 0's data did not arrive", -4, "GPUHELPER_ETIMEOUT: ...")
    assert e.code == -4 and e.name == "GPUHELPER_ETIMEOUT" and "rank 0's data" in str(e)
