package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpubind/gpubind/tests/fixtures"
	"github.com/gpubind/gpubind/tests/tabletext"
)

// TestDropPrivileges runs the engine in a child process (the drop is for good) with
// uid/gid 65534. The cache is written as root. A root-only gres.conf (as a root:slurm 0640
// one is to the job's user) is read as root when the admin names it (gres_conf=, or next
// to slurmstepd's own slurm_conf) and as the user when it comes from the job's
// SLURM_CONF, where the plan must fail with a permission error: that proves the order.
func TestDropPrivileges(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to drop privileges")
	}
	if os.Getenv("GPUBIND_DROP_CHILD") == "1" {
		return
	}
	dir := t.TempDir()
	// nobody must be able to reach the open file: t.TempDir's parent is 0700.
	os.Chmod(filepath.Dir(dir), 0o755)
	os.Chmod(dir, 0o755)
	secret := filepath.Join(dir, "gres.conf")
	if err := os.WriteFile(secret, []byte("AutoDetect=nvml\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "slurm.conf") // gres.conf next to it is the secret one
	if err := os.WriteFile(conf, []byte("TaskPlugin=task/affinity\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(dir, "open-gres.conf")
	if err := os.WriteFile(open, []byte("AutoDetect=nvml\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(dir, "cache")
	base := "source=sysfs\nroot=" + fixtures.Root("vm1") + "\ncache_dir=" + cache + "\nlocal_tasks=1\nuid=65534\ngid=65534\nenv.SLURM_STEP_GPUS=0\n"
	for _, c := range []struct {
		req, want string
	}{
		{"gres_conf=" + secret, "status ok"},
		{"gres_conf=" + open, "status ok"},
		{"slurm_conf=" + conf, "status ok"},
		{"env.SLURM_CONF=" + conf, "permission denied"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestDropChild$")
		cmd.Env = append(os.Environ(), "GPUBIND_DROP_CHILD=1", "GPUBIND_DROP_REQ="+base+c.req+"\n")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), c.want) || !strings.Contains(string(out), "euid=65534 egid=65534 groups=0") {
			t.Errorf("child with %s: %v\n%s", c.req, err, out)
		}
	}
	files, _ := filepath.Glob(filepath.Join(cache, "topo-*.json"))
	if len(files) != 1 {
		t.Fatalf("cache not written as root: %v", files)
	}
}

// TestDropChild is the child half of TestDropPrivileges.
func TestDropChild(t *testing.T) {
	if os.Getenv("GPUBIND_DROP_CHILD") != "1" {
		t.Skip("child of TestDropPrivileges")
	}
	var buf bytes.Buffer
	_ = handle(os.Getenv("GPUBIND_DROP_REQ"), &buf)
	groups, _ := os.Getgroups()
	tab, err := tabletext.Parse(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("euid=%d egid=%d groups=%d status %s %q", os.Geteuid(), os.Getegid(), len(groups), tab.Status, tab.Messages)
	os.Stdout.WriteString(buf.String())
	fmt.Printf("euid=%d egid=%d groups=%d\n", os.Geteuid(), os.Getegid(), len(groups))
	if os.Geteuid() != 65534 || os.Getegid() != 65534 || len(groups) != 0 {
		t.Fatalf("not dropped: euid=%d egid=%d groups=%v", os.Geteuid(), os.Getegid(), groups)
	}
}
