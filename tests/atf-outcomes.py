#!/usr/bin/env python3
"""Outcomes of Slurm's ATF passes (tests/atf.sh), from pytest's JUnit XML files.

  atf-outcomes.py outcomes PASS.xml            one line per test id: id, outcome, message
  atf-outcomes.py differ NAME=FILE...          the ids whose outcome differs between the
                                               outcome files (or which one of them lacks)
  atf-outcomes.py table NAME=FILE...           id and outcome in each file, for the ids of
                                               stdin
  atf-outcomes.py skips NAME=FILE...           skip messages and how many tests each skipped,
                                               per pass

A test id is pytest's node id (tests/test_116_1.py::test_x[param]). Its outcome is passed,
failed, error (in setup), skipped or xfailed, with "+teardown-error" when its teardown failed too
(pytest writes a second testcase element for a test whose call and teardown both failed:
the two are merged here).
"""
import sys
import xml.etree.ElementTree as ET


def test_id(case):
    cls = case.get("classname", "")
    name = case.get("name", "")
    # classname "tests.test_116_1" is the file tests/test_116_1.py; a class inside a file
    # adds its name after the module's.
    parts = cls.split(".")
    for i in range(len(parts), 0, -1):
        if parts[i - 1].startswith("test_"):
            path = "/".join(parts[:i]) + ".py"
            rest = parts[i:]
            return "::".join([path] + rest + [name])
    return cls + "::" + name


def one_line(s, limit=160):
    s = " ".join((s or "").split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def outcomes(xml_file):
    """{id: (outcome, message)} of one JUnit file."""
    res = {}
    for case in ET.parse(xml_file).getroot().iter("testcase"):
        tid = test_id(case)
        base, teardown, msg = "passed", False, ""
        for child in case:
            m = child.get("message", "")
            if child.tag == "skipped":
                # An expected failure (pytest.mark.xfail) is written as a skip.
                base = "xfailed" if child.get("type") == "pytest.xfail" else "skipped"
                msg = m
            elif child.tag == "failure":
                base, msg = "failed", m
            elif child.tag == "error":
                if m.startswith("failed on teardown"):
                    teardown = True
                    msg = msg or m
                else:
                    base, msg = "error", m
        prev = res.get(tid)
        if prev is not None:
            # The second element of a test that failed in call and in teardown.
            pbase, pteardown, pmsg = prev
            if base == "passed" and teardown:
                base = pbase
            teardown = teardown or pteardown
            msg = pmsg or msg
        res[tid] = (base, teardown, msg)
    return {k: (b + ("+teardown-error" if t else ""), m) for k, (b, t, m) in res.items()}


def read_outcome_file(path):
    res = {}
    with open(path) as f:
        for line in f:
            tid, outcome, msg = (line.rstrip("\n").split("\t") + ["", ""])[:3]
            res[tid] = (outcome, msg)
    return res


def named_files(args):
    out = []
    for a in args:
        name, _, path = a.partition("=")
        if not path:
            sys.exit(f"atf-outcomes.py: {a!r}: want NAME=FILE")
        out.append((name, read_outcome_file(path)))
    return out


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    cmd, args = argv[1], argv[2:]
    if cmd == "outcomes":
        for tid, (o, m) in sorted(outcomes(args[0]).items()):
            print(f"{tid}\t{o}\t{one_line(m)}")
    elif cmd == "differ":
        files = named_files(args)
        ids = sorted(set().union(*[f.keys() for _, f in files]))
        for tid in ids:
            got = {f.get(tid, ("(not run)", ""))[0] for _, f in files}
            if len(got) > 1:
                print(tid)
    elif cmd == "table":
        files = named_files(args)
        for tid in (l.strip() for l in sys.stdin if l.strip()):
            cols = [f"{n}={f.get(tid, ('(not run)', ''))[0]}" for n, f in files]
            print(f"{tid}  " + "  ".join(cols))
    elif cmd == "skips":
        for name, f in named_files(args):
            counts = {}
            for o, m in f.values():
                if o.startswith("skipped"):
                    counts[m] = counts.get(m, 0) + 1
            print(f"{name}: {sum(counts.values())} skipped")
            for m, c in sorted(counts.items(), key=lambda x: (-x[1], x[0])):
                print(f"  {c:4d}  {m}")
    else:
        sys.exit(f"atf-outcomes.py: unknown command {cmd!r}\n{__doc__}")


if __name__ == "__main__":
    main(sys.argv)
