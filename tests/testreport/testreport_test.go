package testreport

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// A module with every kind of outcome go test can report: pass, skip (after a log line, with
// a two-line message, in a subtest), a failing subtest, a test that panics, a package without
// tests and one that does not build.
var fixture = map[string]string{
	"go.mod": "module example.com/m\n\ngo 1.26\n",
	"a/a_test.go": `package a

import "testing"

func TestPass(t *testing.T) { t.Log("passing log line") }

func TestSkipAfterLog(t *testing.T) {
	t.Log("a log line before the skip")
	t.Skip("needs a GPU (none here)")
}

func TestSkipTwoLines(t *testing.T) { t.Skipf("first line\nsecond line %d", 2) }

func TestSub(t *testing.T) {
	t.Run("skipped", func(t *testing.T) { t.Skip("sub skip") })
	t.Run("failed", func(t *testing.T) { t.Log("context of the failure"); t.Error("sub failure") })
	t.Run("passed", func(t *testing.T) { t.Log("passing subtest log") })
}
`,
	"b/b_test.go": `package b

import "testing"

func TestOther(t *testing.T) { t.Log("quiet") }

func TestPanics(t *testing.T) {
	t.Log("last words")
	panic("boom")
}
`,
	"c/c.go": "package c\n",
	"d/d.go": "package d\n\nfunc f() { undefinedName() }\n",
	"d/d_test.go": `package d

import "testing"

func TestD(t *testing.T) {}
`,
}

// goTest runs go test on the fixture module and returns its output (stdout and stderr).
func goTest(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"test", "-count=1"}, append(args, "./...")...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("go test: %v\n%s", err, out)
	}
	return string(out)
}

func writeFixture(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range fixture {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

var elapsed = regexp.MustCompile(`\t[0-9.]+s$|\([0-9.]+s\)`)

// summaryLines are a go test output's package lines (ok, FAIL, ?), without times.
func summaryLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "ok ") || strings.HasPrefix(l, "FAIL\t") || strings.HasPrefix(l, "?   ") || l == "FAIL" {
			out = append(out, elapsed.ReplaceAllString(l, ""))
		}
	}
	// Packages run in parallel: their order varies from run to run.
	sort.Strings(out)
	return out
}

// The filtered -json run prints what a plain run prints: the same package lines, every
// failed test's messages and the panic, and none of the passing or skipped tests' output.
// The raw file holds the whole stream, skips included.
func TestFilterAgainstPlainGoTest(t *testing.T) {
	dir := writeFixture(t)
	plain := goTest(t, dir)
	var filtered, raw bytes.Buffer
	if err := Filter(strings.NewReader(goTest(t, dir, "-json")), &filtered, &raw, false); err != nil {
		t.Fatal(err)
	}
	got := filtered.String()
	if !strings.HasSuffix(plain, "\nFAIL\n") || !strings.HasSuffix(got, "\nFAIL\n") {
		t.Errorf("plain and filtered output must both end with go test's closing FAIL line:\nplain:\n%s\nfiltered:\n%s", plain, got)
	}
	if p, f := strings.Join(summaryLines(plain), "\n"), strings.Join(summaryLines(got), "\n"); p != f {
		t.Errorf("package lines differ\nplain go test:\n%s\nfiltered -json:\n%s", p, f)
	}
	for _, want := range []string{"context of the failure", "sub failure", "--- FAIL: TestSub/failed", "--- FAIL: TestSub ",
		"last words", "panic: boom", "undefinedName", "FAIL\texample.com/m/d [build failed]"} {
		if !strings.Contains(plain, want) {
			t.Fatalf("the fixture's plain go test output lacks %q:\n%s", want, plain)
		}
		if !strings.Contains(got, want) {
			t.Errorf("filtered output lacks %q:\n%s", want, got)
		}
	}
	for _, absent := range []string{"passing log line", "a log line before the skip", "needs a GPU", "sub skip",
		"passing subtest log", "quiet", "=== RUN", "PASS\n", "--- SKIP", "--- PASS"} {
		if strings.Contains(got, absent) {
			t.Errorf("filtered output has %q, which plain go test does not print:\n%s", absent, got)
		}
	}
	if !strings.Contains(raw.String(), `"Action":"skip"`) || !strings.Contains(raw.String(), "needs a GPU") {
		t.Errorf("the raw stream lacks the skips:\n%s", raw.String())
	}

	// -v prints everything, as go test -v does.
	var verbose bytes.Buffer
	if err := Filter(strings.NewReader(raw.String()), &verbose, nil, true); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"passing log line", "needs a GPU", "=== RUN   TestPass", "sub failure"} {
		if !strings.Contains(verbose.String(), want) {
			t.Errorf("-v output lacks %q:\n%s", want, verbose.String())
		}
	}

	skips, err := Skips("system", strings.NewReader(raw.String()))
	if err != nil {
		t.Fatal(err)
	}
	var gotSkips []string
	for _, s := range skips {
		gotSkips = append(gotSkips, s.String())
	}
	wantSkips := []string{
		"[system] example.com/m/a TestSkipAfterLog: needs a GPU (none here)",
		"[system] example.com/m/a TestSkipTwoLines: first line second line 2",
		"[system] example.com/m/a TestSub/skipped: sub skip",
	}
	if strings.Join(gotSkips, "\n") != strings.Join(wantSkips, "\n") {
		t.Errorf("skips:\n%s\nwant:\n%s", strings.Join(gotSkips, "\n"), strings.Join(wantSkips, "\n"))
	}
}

func TestFilterRejectsText(t *testing.T) {
	var out bytes.Buffer
	if err := Filter(strings.NewReader("ok  \texample.com/m\t0.1s\n"), &out, nil, false); err == nil {
		t.Error("plain text accepted as a go test -json stream")
	}
}

const allowed = `# comment

tests/cgroup | TestV1/.* | no cgroup v1 \S+ hierarchy mounted here | cgroup v2-only host
. | TestRoot | needs root | the module's root package
tests/helper | TestBench | GPUHELPER_BENCH_DIR not set.* | a measurement, run by bench/
tests/unused | TestNever | never | matches nothing
`

func TestAllowed(t *testing.T) {
	rules, err := ParseAllowed(strings.NewReader(allowed))
	if err != nil {
		t.Fatal(err)
	}
	const m = "github.com/gpubind/gpubind"
	skips := []Skip{
		{Run: "system", Package: m + "/tests/cgroup", Test: "TestV1/freezer", Message: "no cgroup v1 freezer hierarchy mounted here"},
		{Run: "system", Package: m, Test: "TestRoot", Message: "needs root"},
		{Run: "system", Package: m + "/tests/helper", Test: "TestBench", Message: "GPUHELPER_BENCH_DIR not set (see bench/)"},
		// Not allowed: the message differs, only a prefix matches, another package, a test
		// whose name only starts like an allowed one.
		{Run: "system", Package: m + "/tests/cgroup", Test: "TestV1/freezer", Message: "cmake not installed"},
		{Run: "system", Package: m, Test: "TestRoot", Message: "needs root, and more"},
		{Run: "system", Package: m + "/tests/othercgroup", Test: "TestV1/x", Message: "no cgroup v1 x hierarchy mounted here"},
		{Run: "system", Package: m + "/tests/x/tests/cgroup2", Test: "TestV1/x", Message: "no cgroup v1 x hierarchy mounted here"},
		{Run: "system", Package: m + "/tests/helper", Test: "TestBenchmarkX", Message: "GPUHELPER_BENCH_DIR not set"},
		{Run: "system", Package: m + "/sub", Test: "TestRoot", Message: "needs root"},
	}
	by, unused := Allowed(m, skips, rules)
	for i, s := range skips {
		if want := i < 3; (by[i] != nil) != want {
			t.Errorf("%v: allowed=%v, want %v", s, by[i] != nil, want)
		}
	}
	if len(unused) != 1 || unused[0].Package != "tests/unused" || unused[0].Line != 6 {
		t.Errorf("unused rules: %+v", unused)
	}
}

func TestParseAllowedErrors(t *testing.T) {
	for _, bad := range []string{
		"tests/x | TestA | msg",                  // 3 fields
		"tests/x | TestA | msg | ",               // no why
		" | TestA | msg | why",                   // no package
		"tests/x | Test( | msg | why",            // bad test pattern
		"tests/x | TestA | msg[ | why",           // bad message pattern
		"tests/x | TestA | msg | why | more | x", // too many
	} {
		if _, err := ParseAllowed(strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("%q: err %v, want an error naming line 1", bad, err)
		}
	}
}
