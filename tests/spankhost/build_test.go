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
		dir, plugin, host    string
		goEngine, goLauncher string            // the Go test engine: library, program
		goDropLauncher       string            // the Go test engine started as the real launcher (tag gpubind_test_launcher)
		swapper              string            // csrc/swapper.c
		launchers            map[string]string // csrc/testengine.c by mode, as programs
		dlopenLib            string            // a small C library to dlopen
	}
)

func repoRoot() string { return testbuild.RepoRoot() }

// build compiles the plugin (through its own Makefile, its default launcher
// the real one in the same directory), the real launcher and engine, the host,
// the C test launchers and the Go test engine into one temporary directory.
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
		bin.goLauncher = filepath.Join(dir, "goengine")
		bin.dlopenLib = filepath.Join(dir, "dlopen_target.so")
		bin.goDropLauncher = filepath.Join(dir, "goengine_drop")
		bin.swapper = filepath.Join(dir, "swapper")
		bin.launchers = map[string]string{}
		testengine := filepath.Join(root, "tests/spankhost/csrc/testengine.c")
		cc := func(args ...string) []string {
			return append([]string{"gcc", "-Wall", "-Wextra", "-Werror", "-O2"}, args...)
		}
		// The sanitizer build (testbuild.Sanitize): the host is built with ASan and UBSan, so
		// the runtime comes first and the plugin's sanitizer build loads into it as into
		// slurmstepd. The launchers stay plain programs: the plugin starts them with its own
		// environment (no ASAN_OPTIONS), and launcher_crash must die by its signal.
		host := append(cc("-rdynamic"), testbuild.SanitizeCFlags()...)
		steps := [][]string{
			testbuild.FrontendMake(dir),
			append(host, "-o", bin.host, filepath.Join(root, "tests/spankhost/csrc/host.c"), "-ldl", "-lpthread"),
			cc("-shared", "-fPIC", "-DMODE_TABLE", "-o", bin.dlopenLib, testengine),
			cc("-o", bin.swapper, filepath.Join(root, "tests/spankhost/csrc/swapper.c")),
		}
		for _, m := range []string{"table", "crash", "hang", "garbage", "truncated", "huge", "linger", "frozen", "probe"} {
			exe := filepath.Join(dir, "launcher_"+m)
			bin.launchers[m] = exe
			steps = append(steps, cc("-DGB_TEST_LAUNCHER", "-DMODE_"+strings.ToUpper(m), "-o", exe, testengine,
				filepath.Join(root, "spank/engine/launcher.c")))
		}
		steps = append(steps, []string{"go", "build", "-buildmode=c-shared", "-o", bin.goEngine, "./tests/spankhost/goengine"},
			[]string{"go", "build", "-o", bin.goLauncher, "./tests/spankhost/goengine"},
			[]string{"go", "build", "-tags", "gpubind_test_launcher", "-o", bin.goDropLauncher, "./tests/spankhost/goengine"},
			[]string{"go", "build", "-o", filepath.Join(dir, "gpubind"), "./cmd/gpubind"},
			// The real engine next to the plugin (srun's check and help load it from there)
			// and the real launcher, the plugin's default (testbuild.FrontendMake).
			[]string{"go", "build", "-buildmode=c-shared", "-o", filepath.Join(dir, "gpubind_engine.so"), "./spank/engine"},
			testbuild.LauncherBuild(dir))
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
