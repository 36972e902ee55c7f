#!/usr/bin/env python3
"""Compare `gpubind snapshot` output with what the driver itself reports.

  compare.py SNAPSHOT.json [SNAPSHOT.json ...]

Ground truth per GPU: `nvidia-smi --query-gpu=index,pci.bus_id,uuid` (bus id, UUID),
/proc/driver/nvidia/gpus/*/information (minor, UUID), and sysfs numa_node and
local_cpulist of the PCI device. Prints one PASS/FAIL line per fact; exits 1 on any FAIL.
"""
import glob
import json
import subprocess
import sys


def norm_bus(b):
    # NVML: 00000000:3B:00.0, sysfs/procfs: 0000:3b:00.0
    dom, rest = b.strip().lower().split(":", 1)
    return "%04x:%s" % (int(dom, 16), rest)


def cpus(spec):
    out = set()
    for part in spec.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def truth():
    gpus = {}
    smi = subprocess.run(["nvidia-smi", "--query-gpu=index,pci.bus_id,uuid",
                          "--format=csv,noheader"], capture_output=True, text=True, check=True)
    for line in smi.stdout.splitlines():
        idx, bus, uuid = [f.strip() for f in line.split(",")]
        gpus[norm_bus(bus)] = {"index": int(idx), "uuid": uuid}
    for info in glob.glob("/proc/driver/nvidia/gpus/*/information"):
        fields = {}
        for line in open(info):
            k, _, v = line.partition(":")
            fields[k.strip()] = v.strip()
        bus = norm_bus(fields["Bus Location"])
        g = gpus.setdefault(bus, {})
        g["minor"] = int(fields["Device Minor"])
        g["proc_uuid"] = fields.get("GPU UUID", "")
        dev = "/sys/bus/pci/devices/" + bus
        g["numa"] = int(open(dev + "/numa_node").read())
        g["cpus"] = cpus(open(dev + "/local_cpulist").read())
    return gpus


def main(paths):
    want = truth()
    bad = 0

    def check(what, ok, detail):
        nonlocal bad
        bad += not ok
        print("%s: %s (%s)" % ("PASS" if ok else "FAIL", what, detail))

    for path in paths:
        snap = json.load(open(path))
        got = {g["pci_bus_id"]: g for g in snap["gpus"]}
        check("%s: GPU count" % path, len(got) == len(want), "%d vs driver %d" % (len(got), len(want)))
        for bus, w in sorted(want.items()):
            g = got.get(bus)
            if g is None:
                check("%s: GPU %s present" % (path, bus), False, "missing")
                continue
            pre = "%s: GPU %s" % (path, bus)
            check(pre + " index", g["index"] == w["index"], "%s vs nvidia-smi %s" % (g["index"], w["index"]))
            check(pre + " uuid", g["uuid"] == w["uuid"] == w["proc_uuid"],
                  "%s vs nvidia-smi %s, /proc %s" % (g["uuid"], w["uuid"], w["proc_uuid"]))
            check(pre + " minor", g["minor"] == w["minor"], "%s vs /proc %s" % (g["minor"], w["minor"]))
            check(pre + " numa", g["numa"] == w["numa"], "%s vs sysfs numa_node %s" % (g["numa"], w["numa"]))
            check(pre + " cpus", cpus(g["cpus"]) == w["cpus"],
                  "%s vs sysfs local_cpulist (%d cpus)" % (g["cpus"], len(w["cpus"])))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
