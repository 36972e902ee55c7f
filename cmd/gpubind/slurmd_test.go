package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// With several slurmd on the host (multiple-slurmd mode, a test cluster beside the site's),
// check reports the one started with the checked slurm.conf and node, wherever it sits in
// /proc's order.
func TestRunningSlurmdPrefersTheCheckedNode(t *testing.T) {
	proc := t.TempDir()
	fake := func(pid, exe string, args ...string) {
		d := filepath.Join(proc, pid)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "comm"), []byte("slurmd\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "cmdline"), []byte(strings.Join(args, "\x00")+"\x00"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(exe, filepath.Join(d, "exe")); err != nil {
			t.Fatal(err)
		}
	}
	fake("100", "/opt/slurm-26.05/sbin/slurmd", "slurmd", "-D", "-f", "/tmp/other/slurm.conf", "-N", "node1")
	fake("200", "/usr/sbin/slurmd", "slurmd", "-D", "-f", "/tmp/mine/slurm.conf", "-N", "node2")
	fake("300", "/usr/sbin/slurmd", "slurmd", "-D", "-f", "/tmp/mine/slurm.conf", "-N", "node1")

	if pid, exe := runningSlurmd(proc, "/tmp/mine/slurm.conf", "node1"); pid != 300 || exe != "/usr/sbin/slurmd" {
		t.Errorf("got pid %d %s, want 300 /usr/sbin/slurmd", pid, exe)
	}
	if pid, _ := runningSlurmd(proc, "/tmp/mine/slurm.conf", "node9"); pid != 200 && pid != 300 {
		t.Errorf("got pid %d, want a slurmd of /tmp/mine/slurm.conf", pid)
	}
	if pid, _ := runningSlurmd(proc, "/etc/slurm/slurm.conf", ""); pid == 0 {
		t.Error("no slurmd matches: want any running one, got none")
	}
}
