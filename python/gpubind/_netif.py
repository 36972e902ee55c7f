"""This node's network interfaces, and the choice of the address every rank reaches rank 0 at.

Why not gethostbyname(gethostname()): Debian (and Ubuntu) map the host name to 127.0.1.1 in
/etc/hosts, an address the other nodes cannot reach. Instead every node tells the others its
up, non-loopback, non-link-local addresses (an allgather through the helper), and rank 0's
address is taken on a network that every node has an address in. The choice is a pure
function of those tables (choose_master), unit-tested on made-up tables: on a test cluster all
nodes are one host and share every network, so a cluster test cannot tell a right choice
from a wrong one.
"""

import ctypes
import ctypes.util
import dataclasses
import ipaddress
import os
import socket
from typing import Dict, List, Optional, Sequence, Tuple

from ._lib import Error

IFF_UP = 0x1
IFF_LOOPBACK = 0x8


@dataclasses.dataclass(frozen=True)
class Iface:
    """One address of one interface: name ("eth0"), address ("10.1.2.3"), prefix length."""

    name: str
    addr: str
    prefixlen: int

    @property
    def version(self) -> int:
        return ipaddress.ip_address(self.addr).version

    @property
    def network(self) -> "ipaddress.IPv4Network | ipaddress.IPv6Network":
        return ipaddress.ip_interface(f"{self.addr}/{self.prefixlen}").network

    def to_list(self) -> list:
        return [self.name, self.addr, self.prefixlen]

    @staticmethod
    def from_list(v: Sequence) -> "Iface":
        return Iface(str(v[0]), str(v[1]), int(v[2]))


class _Sockaddr(ctypes.Structure):
    _fields_ = [("sa_family", ctypes.c_ushort), ("sa_data", ctypes.c_ubyte * 14)]


class _Ifaddrs(ctypes.Structure):
    pass


_Ifaddrs._fields_ = [
    ("ifa_next", ctypes.POINTER(_Ifaddrs)),
    ("ifa_name", ctypes.c_char_p),
    ("ifa_flags", ctypes.c_uint),
    ("ifa_addr", ctypes.POINTER(_Sockaddr)),
    ("ifa_netmask", ctypes.POINTER(_Sockaddr)),
    ("ifa_ifu", ctypes.POINTER(_Sockaddr)),
    ("ifa_data", ctypes.c_void_p),
]


def _sockaddr_ip(p: "ctypes._Pointer[_Sockaddr]") -> Optional[bytes]:
    """The raw address bytes of an AF_INET/AF_INET6 sockaddr, else None."""
    if not p:
        return None
    fam = p.contents.sa_family
    base = ctypes.addressof(p.contents)
    if fam == socket.AF_INET:  # sockaddr_in: family, port, 4 bytes
        return ctypes.string_at(base + 4, 4)
    if fam == socket.AF_INET6:  # sockaddr_in6: family, port, flowinfo, 16 bytes
        return ctypes.string_at(base + 8, 16)
    return None


def local_table(include_loopback: bool = False) -> List[Iface]:
    """This node's addresses (getifaddrs): interfaces that are up, without link-local ones,
    and without loopback ones unless asked."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.getifaddrs.argtypes = [ctypes.POINTER(ctypes.POINTER(_Ifaddrs))]
    libc.freeifaddrs.argtypes = [ctypes.POINTER(_Ifaddrs)]
    head = ctypes.POINTER(_Ifaddrs)()
    if libc.getifaddrs(ctypes.byref(head)) != 0:
        e = ctypes.get_errno()
        raise Error("getifaddrs", f"cannot list this node's network interfaces: {os.strerror(e)}")
    out: List[Iface] = []
    try:
        p = head
        while p:
            ifa = p.contents
            p = ifa.ifa_next
            if not ifa.ifa_flags & IFF_UP:
                continue
            raw = _sockaddr_ip(ifa.ifa_addr)
            mask = _sockaddr_ip(ifa.ifa_netmask)
            if raw is None:
                continue
            ip = ipaddress.ip_address(raw)
            if ip.is_link_local or ip.is_unspecified:
                continue
            if (ifa.ifa_flags & IFF_LOOPBACK or ip.is_loopback) and not include_loopback:
                continue
            plen = bin(int.from_bytes(mask, "big")).count("1") if mask else ip.max_prefixlen
            out.append(Iface(ifa.ifa_name.decode(errors="replace"), str(ip), plen))
    finally:
        libc.freeifaddrs(head)
    return out


def loopback_name(table: Optional[Sequence[Iface]] = None) -> str:
    """The name of the interface holding 127.0.0.1 ("lo" on Linux)."""
    for i in table if table is not None else local_table(include_loopback=True):
        if i.addr == "127.0.0.1":
            return i.name
    return "lo"


def ifname_matches(name: str, spec: str) -> bool:
    """Whether an interface name passes an NCCL_SOCKET_IFNAME-style spec: comma-separated
    prefixes ("eth,ib"), exact names after "=" ("=eth0"), everything but the listed ones after
    "^" ("^docker,lo"; "^=" for exact exclusions)."""
    spec = spec.strip()
    if not spec:
        return True
    neg = spec.startswith("^")
    if neg:
        spec = spec[1:]
    exact = spec.startswith("=")
    if exact:
        spec = spec[1:]
    names = [s for s in (x.strip() for x in spec.split(",")) if s]
    hit = any(name == s if exact else name.startswith(s) for s in names)
    return not hit if neg else hit


def choose_master(root_table: Sequence[Iface], node_tables: Sequence[Sequence[Iface]],
                  specs: Sequence[str] = (), node_names: Sequence[str] = ()) -> Iface:
    """Rank 0's address that every node can reach it at.

    root_table: rank 0's node's addresses (loopback and link-local already left out);
    node_tables: every other node's. A candidate is an address of rank 0's on a network
    (address/prefix) in which every other node has an address. Among them, those on
    interfaces that match one of specs (the NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME values
    set) come first, then IPv4 before IPv6, then rank 0's interface order.

    Raises:
        Error: no network is shared by every node (the message lists each node's addresses).
    """
    specs = [s for s in specs if s]
    ranked: List[Tuple[Tuple[int, int, int], Iface]] = []
    for idx, cand in enumerate(root_table):
        net = cand.network
        if all(any(o.version == cand.version and ipaddress.ip_address(o.addr) in net for o in t)
               for t in node_tables):
            pref = 0 if any(ifname_matches(cand.name, s) for s in specs) else 1
            ranked.append(((pref, 0 if cand.version == 4 else 1, idx), cand))
    if ranked:
        return min(ranked, key=lambda x: x[0])[1]

    def show(t: Sequence[Iface]) -> str:
        return ", ".join(f"{i.name} {i.addr}/{i.prefixlen}" for i in t) or "none"

    names = list(node_names) + [f"node {k + 1}" for k in range(len(node_names), len(node_tables) + 1)]
    lines = [f"{names[0]} (rank 0): {show(root_table)}"]
    lines += [f"{names[k + 1]}: {show(t)}" for k, t in enumerate(node_tables)]
    raise Error("master address", "no network of rank 0's node is shared by every node of the job, so "
                "the other nodes cannot reach rank 0; non-loopback addresses per node: " + "; ".join(lines) +
                "; set MASTER_ADDR to an address of rank 0's node that every node reaches")


def local_ifname(table: Sequence[Iface], master: str) -> Optional[str]:
    """The name of this node's interface on the master address's network (the one whose
    network holds it, the longest prefix first), or None."""
    ip = ipaddress.ip_address(master)
    best: Optional[Iface] = None
    for i in table:
        if i.version == ip.version and (i.addr == master or ip in i.network):
            if best is None or i.prefixlen > best.prefixlen:
                best = i
    return best.name if best else None


def tables_by_node(records: Sequence[Dict]) -> Dict[int, Dict]:
    """The first record of each node among the allgathered ones (ranks that sent no table, i.e.
    not their node's lowest rank, send {"node": id} only)."""
    by: Dict[int, Dict] = {}
    for rec in records:
        if "table" in rec and rec["node"] not in by:
            by[rec["node"]] = rec
    return by
