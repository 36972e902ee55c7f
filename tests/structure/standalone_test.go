package structure

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// outsidePath matches a path into the development machine's folders beside the checkout: the
// source tarballs and notes there are not part of the repository, and users do not have them.
var outsidePath = regexp.MustCompile(`\.\./shared\b|/wor[k]/`)

// TestRepositoryStandsOnItsOwn: no tracked file's code or docs points into folders outside the
// repository. Two kinds of file are exempt: .ci/run, which runs on the CI machine and finds the
// tarballs where that machine keeps them, and the logs of recorded runs (*.log), which quote
// the paths the run had.
func TestRepositoryStandsOnItsOwn(t *testing.T) {
	root := repoRoot(t)
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Skipf("not a git checkout (%v): nothing to check", err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if name == ".ci/run" || strings.HasSuffix(name, ".log") || strings.HasPrefix(name, "tests/fuzz/corpus/") {
			continue
		}
		path := filepath.Join(root, name)
		info, err := os.Lstat(path)
		if errors.Is(err, fs.ErrNotExist) || err == nil && !info.Mode().IsRegular() {
			continue // deleted in the working tree; or a symbolic link of a sysfs fixture
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range bytes.Split(data, []byte("\n")) {
			if outsidePath.Match(line) {
				t.Errorf("%s:%d points outside the repository: %s", name, i+1, strings.TrimSpace(string(line)))
			}
		}
	}
}
