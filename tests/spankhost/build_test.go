package spankhost

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gpubind/gpubind/tests/testbuild"
)

// Build products shared by all tests of the package.
var (
	buildOnce sync.Once
	buildErr  error
	bin       struct {
		dir, plugin, host, goEngine string
		engines                     map[string]string
	}
)

func repoRoot() string { return testbuild.RepoRoot() }

// build compiles the plugin (through its own Makefile), the host, the C test
// engines and the Go test engine into one temporary directory.
func build(t testing.TB) {
	t.Helper()
	buildOnce.Do(func() {
		root := repoRoot()
		dir, err := os.MkdirTemp("", "spankhost-")
		if err != nil {
			buildErr = err
			return
		}
		bin.dir = dir
		bin.plugin = filepath.Join(dir, "spank_gpubind.so")
		bin.host = filepath.Join(dir, "spankhost")
		bin.goEngine = filepath.Join(dir, "goengine.so")
		bin.engines = map[string]string{}
		steps := [][]string{
			testbuild.FrontendMake(dir),
			{"gcc", "-Wall", "-Wextra", "-Werror", "-O2", "-rdynamic", "-o", bin.host,
				filepath.Join(root, "tests/spankhost/csrc/host.c"), "-ldl", "-lpthread"},
		}
		for _, m := range []string{"table", "crash", "hang", "garbage", "truncated", "huge", "linger", "frozen"} {
			so := filepath.Join(dir, "engine_"+m+".so")
			bin.engines[m] = so
			steps = append(steps, []string{"gcc", "-Wall", "-Wextra", "-Werror", "-O2", "-shared", "-fPIC",
				"-DMODE_" + strings.ToUpper(m), "-o", so, filepath.Join(root, "tests/spankhost/csrc/testengine.c")})
		}
		steps = append(steps, []string{"go", "build", "-buildmode=c-shared", "-o", bin.goEngine, "./tests/spankhost/goengine"},
			[]string{"go", "build", "-o", filepath.Join(dir, "gpubind"), "./cmd/gpubind"},
			// The real engine, next to the plugin: found there by default.
			[]string{"go", "build", "-buildmode=c-shared", "-o", filepath.Join(dir, "gpubind_engine.so"), "./spank/engine"})
		buildErr = testbuild.Run(root, steps...)
	})
	if buildErr != nil {
		t.Fatalf("build: %v", buildErr)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if bin.dir != "" {
		os.RemoveAll(bin.dir)
	}
	os.Exit(code)
}
