// Package stubnccl builds the stand-in libnccl.so.2 (csrc/stubnccl.c) for CPU-only tests.
package stubnccl

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

// source returns the path of the stub's C source (in a subdirectory, so Go does not try to
// compile it into this package).
func source() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "csrc", "stubnccl.c")
}

// Build compiles the stub into dir/libnccl.so.2 and returns that path.
func Build(dir string) (string, error) {
	out := filepath.Join(dir, "libnccl.so.2")
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	cmd := exec.Command(cc, "-Wall", "-Wextra", "-Werror", "-O2", "-shared", "-fPIC",
		"-Wl,-soname,libnccl.so.2", "-o", out, source())
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("stubnccl: %s: %v\n%s", cmd, err, b)
	}
	return out, nil
}
