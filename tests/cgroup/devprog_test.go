package cgroup

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/devprog/*.golden from the current builder")

// devprogList builds csrc/devprog_list.c with the program builder (cgroup/v2_prog.c) alone:
// no kernel and no root, so the golden test runs everywhere `make test` does.
func devprogList(t *testing.T) string {
	t.Helper()
	root := repoRoot(t)
	fe := filepath.Join(root, "spank", "frontend", "cgroup")
	bin := filepath.Join(t.TempDir(), "devprog_list")
	args := []string{"-Wall", "-Wextra", "-Werror", "-O2", "-std=gnu11", "-D_GNU_SOURCE", "-I", fe,
		filepath.Join(root, "tests", "cgroup", "csrc", "devprog_list.c"),
		filepath.Join(fe, "v2_prog.c"), "-o", bin}
	if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return bin
}

// TestDevProgGolden compares the listing of every device program the plugin loads on
// cgroup v2, and the minors map entries for a few device sets, with the files in
// testdata/devprog. A change to the program shows there as a diff, reviewable without a
// kernel; `go test ./tests/cgroup -run DevProgGolden -update` rewrites them. Whether the
// kernel accepts the program and enforces it is tested by the TestV2* tests (root).
func TestDevProgGolden(t *testing.T) {
	bin := devprogList(t)
	cases := []struct {
		golden string
		args   []string
	}{
		// The task program as the plugin builds it: NVIDIA major 195, GPU minors 0-253;
		// map fds 10 (minors) and 11 (tail) stand for the ones prepare creates.
		{"task.golden", []string{"task", "195", "253", "10", "11"}},
		// The tail-call target where no program was in force.
		{"allow_all.golden", []string{"allow"}},
		// What apply writes into the minors map, per allowed set.
		{"minors_none.golden", []string{"minors", "253"}},
		{"minors_gpu0.golden", []string{"minors", "253", "0"}},
		{"minors_gpu1_3_7.golden", []string{"minors", "253", "7,1,3"}},
		// 254 (nvidia-modeset) and 255 (nvidiactl) are no GPUs: never in the map.
		{"minors_edge.golden", []string{"minors", "253", "252,253,254,255"}},
		// AMD (isolate on render and card nodes): the same builder on DRM major 226,
		// minors 0-255; the listing differs from task.golden in those two numbers only.
		{"task_amd.golden", []string{"task", "226", "255", "10", "11"}},
		{"minors_amd_edge.golden", []string{"minors", "255", "0,128,254,255,256"}},
	}
	for _, c := range cases {
		t.Run(strings.TrimSuffix(c.golden, ".golden"), func(t *testing.T) {
			got, err := exec.Command(bin, c.args...).Output()
			if err != nil {
				t.Fatalf("devprog_list %s: %v", strings.Join(c.args, " "), err)
			}
			path := filepath.Join("testdata", "devprog", c.golden)
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("devprog_list %s differs from %s (-update rewrites it after review):\n--- want\n%s--- got\n%s",
					strings.Join(c.args, " "), path, want, got)
			}
		})
	}
}
