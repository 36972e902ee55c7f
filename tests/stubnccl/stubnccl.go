// Package stubnccl builds the stand-ins libnccl.so.2 and librccl.so.1 (csrc/stubnccl.c) for
// CPU-only tests.
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
func Build(dir string) (string, error) { return build(dir, "libnccl.so.2") }

// BuildRCCL compiles the RCCL stand-in into dir/librccl.so.1 and returns that path: its IDs
// begin with "RCCL" (RCCLPrefix) and its ncclGetVersion says 22203 unless STUBNCCL_VERSION
// is set.
func BuildRCCL(dir string) (string, error) { return build(dir, "librccl.so.1", "-DSTUB_RCCL") }

// RCCLPrefix is how the hex form of an ID made by the RCCL stand-in begins ("RCCL").
const RCCLPrefix = "5243434c"

func build(dir, soname string, flags ...string) (string, error) {
	out := filepath.Join(dir, soname)
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	args := append([]string{"-Wall", "-Wextra", "-Werror", "-O2", "-shared", "-fPIC"}, flags...)
	cmd := exec.Command(cc, append(args, "-Wl,-soname,"+soname, "-o", out, source())...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("stubnccl: %s: %v\n%s", cmd, err, b)
	}
	return out, nil
}
