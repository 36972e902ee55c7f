package packaging

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpubind/gpubind/tests/testbuild"
)

// manPages are the pages in man/, by file name, with the name their .TH line gives.
var manPages = map[string]string{
	"gpubind.1":       "GPUBIND 1",
	"spank-gpubind.8": `SPANK\-GPUBIND 8`,
	"gpuhelper.3":     "GPUHELPER 3",
}

// manWarnings renders a page as man(1) does and returns what groff warns about.
func manWarnings(t *testing.T, page string) string {
	t.Helper()
	if _, err := exec.LookPath("man"); err != nil {
		t.Skip("man not installed (make deps installs man-db and groff-base)")
	}
	cmd := exec.Command("man", "--warnings", "-l", "-Tutf8", page)
	cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8", "MANWIDTH=80")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("man -l %s: %v\n%s", page, err, stderr.String())
	}
	if len(bytes.TrimSpace(out)) == 0 {
		t.Fatalf("man -l %s rendered nothing", page)
	}
	return stderr.String()
}

func TestManPagesHaveNoWarnings(t *testing.T) {
	for name, th := range manPages {
		t.Run(name, func(t *testing.T) {
			page := filepath.Join(testbuild.RepoRoot(), "man", name)
			b, err := os.ReadFile(page)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(string(b), ".TH "+th+" ") {
				t.Errorf("%s does not start with .TH %s", page, th)
			}
			if w := manWarnings(t, page); w != "" {
				t.Errorf("man --warnings %s:\n%s", page, w)
			}
		})
	}
}

// The check above sees groff's warnings: a page with an unknown macro must produce one.
func TestManWarningsAreSeen(t *testing.T) {
	page := filepath.Join(t.TempDir(), "broken.1")
	if err := os.WriteFile(page, []byte(".TH BROKEN 1\n.SH NAME\nbroken \\- test\n.BOGUS\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if w := manWarnings(t, page); !strings.Contains(w, "BOGUS") {
		t.Errorf("no warning about the unknown macro .BOGUS: %q", w)
	}
}
