// Package testreport reads the event stream of `go test -json` for `make test` and CI:
//
//   - Filter prints what a plain `go test` prints (the package lines ok / FAIL / ?, and the
//     output of failed tests), so `make test` reads as before while the whole stream, with
//     every skipped test and its message, is kept in a file.
//   - Skips lists the skipped tests of such files with their messages, and Allowed matches
//     them against the checked-in list of skips CI accepts (tests/allowed-skips.txt).
//
// Why: a test that skips because a tool is missing passes silently; CI must see each skip and
// refuse the ones nobody decided to accept (tests/allowed-skips.txt says how to add one).
package testreport

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json's TestEvent).
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output and build-fail events
	Test       string
	Output     string
}

// testKey names a test within a run of go test.
type testKey struct{ pkg, test string }

// Filter copies the JSON stream from r to raw (when not nil) and writes to w what `go test`
// without -json prints: package output (ok, FAIL, build errors, a test binary's own prints)
// and the whole output of every failed test. With verbose, it writes every test's output, as
// `go test -v` does. It fails only on a line that is not a JSON event or on a write error.
func Filter(r io.Reader, w, raw io.Writer, verbose bool) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	// Output of tests still running, by package, in arrival order; printed when a test of
	// the package fails or the package ends with tests that never ended (a panic, a timeout).
	type line struct {
		test, text string
	}
	pending := map[string][]line{}
	ended := map[testKey]string{} // the test's last action: pass, fail or skip
	failed := false
	for sc.Scan() {
		b := sc.Bytes()
		if raw != nil {
			if _, err := raw.Write(append(b, '\n')); err != nil {
				return err
			}
		}
		var e event
		if err := json.Unmarshal(b, &e); err != nil {
			return fmt.Errorf("not a go test -json event: %q: %v", b, err)
		}
		switch {
		case e.Action == "build-output":
			if _, err := io.WriteString(w, e.Output); err != nil {
				return err
			}
		case e.Test == "" && e.Action == "output":
			// A plain go test prints no PASS line before "ok".
			if e.Output == "PASS\n" && !verbose {
				continue
			}
			if _, err := io.WriteString(w, e.Output); err != nil {
				return err
			}
		case e.Test != "" && e.Action == "output":
			if verbose {
				if _, err := io.WriteString(w, e.Output); err != nil {
					return err
				}
				continue
			}
			if isFramingLine(e.Output) {
				continue
			}
			pending[e.Package] = append(pending[e.Package], line{e.Test, e.Output})
		case e.Test != "" && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip"):
			ended[testKey{e.Package, e.Test}] = e.Action
			if strings.Contains(e.Test, "/") {
				// A subtest's lines stay until its top-level test ends: a failed
				// subtest fails its parent, which prints the lines of its failed
				// subtests (not those of the passed or skipped ones, as go test).
				continue
			}
			var keep []line
			for _, l := range pending[e.Package] {
				if l.test == e.Test || strings.HasPrefix(l.test, e.Test+"/") {
					if a := ended[testKey{e.Package, l.test}]; e.Action == "fail" && (a == "fail" || a == "") {
						if _, err := io.WriteString(w, l.text); err != nil {
							return err
						}
					}
					continue
				}
				keep = append(keep, l)
			}
			pending[e.Package] = keep
		case e.Test == "" && (e.Action == "pass" || e.Action == "fail" || e.Action == "build-fail"):
			failed = failed || e.Action != "pass"
			// Lines of tests that never ended: the binary died under them.
			for _, l := range pending[e.Package] {
				if ended[testKey{e.Package, l.test}] == "" {
					if _, err := io.WriteString(w, l.text); err != nil {
						return err
					}
				}
			}
			delete(pending, e.Package)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	// go test's last line when a package failed.
	if failed {
		_, err := io.WriteString(w, "FAIL\n")
		return err
	}
	return nil
}

// isFramingLine tells the lines go test -v adds around a test's own output.
func isFramingLine(s string) bool {
	for _, p := range []string{"=== RUN ", "=== PAUSE ", "=== CONT ", "=== NAME "} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// Skip is one skipped test of one run of go test.
type Skip struct {
	Run     string // the run it came from (the Slurm of the matrix: "system", "24.11.7")
	Package string // import path
	Test    string // full name, subtests included
	Message string // what t.Skip said, one line, without the file:line prefix
}

func (s Skip) String() string {
	return fmt.Sprintf("[%s] %s %s: %s", s.Run, s.Package, s.Test, s.Message)
}

// logLine is a t.Log or t.Skip line in -json output: "    file_test.go:49: message".
var logLine = regexp.MustCompile(`^\s+[^\s:]+\.go:\d+: (.*)$`)

// Skips reads a go test -json stream and returns its skipped tests in stream order. The
// message of a skip is its test's last file:line block, continuation lines joined by a space.
// A package without tests ("no test files") is no skip.
func Skips(run string, r io.Reader) ([]Skip, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	out := map[testKey][]string{}
	var skips []Skip
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("not a go test -json event: %q: %v", sc.Bytes(), err)
		}
		if e.Test == "" {
			continue
		}
		k := testKey{e.Package, e.Test}
		switch e.Action {
		case "output":
			out[k] = append(out[k], e.Output)
		case "skip":
			skips = append(skips, Skip{Run: run, Package: e.Package, Test: e.Test, Message: skipMessage(out[k])})
			delete(out, k)
		case "pass", "fail":
			delete(out, k)
		}
	}
	return skips, sc.Err()
}

// skipMessage finds the message of a skipped test in its output lines.
func skipMessage(lines []string) string {
	var msg []string
	for _, l := range strings.Split(strings.Join(lines, ""), "\n") {
		if l == "" || isFramingLine(l) || strings.HasPrefix(strings.TrimSpace(l), "--- SKIP: ") {
			continue
		}
		if m := logLine.FindStringSubmatch(l); m != nil {
			msg = []string{m[1]}
		} else if msg != nil {
			msg = append(msg, strings.TrimSpace(l))
		}
	}
	if msg == nil {
		return "(no message)"
	}
	return strings.Join(msg, " ")
}

// Rule is one accepted skip of the allowed list.
type Rule struct {
	Line    int            // line number in the list
	Package string         // import path, or its end after a "/" ("tests/cgroup")
	Test    *regexp.Regexp // the whole test name
	Message *regexp.Regexp // the whole skip message
	Why     string         // why CI accepts it
}

// ParseAllowed reads the allowed-skips list: one rule a line,
//
//	package | test | message | why
//
// package is an import path or its end ("tests/cgroup", "." for the module's root); test and
// message are Go regular expressions that must match the whole test name and the whole skip
// message; why says why this skip is accepted and must not be empty. Fields are separated by
// " | ". Blank lines and lines starting with # are comments.
func ParseAllowed(r io.Reader) ([]Rule, error) {
	sc := bufio.NewScanner(r)
	var rules []Rule
	for n := 1; sc.Scan(); n++ {
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		f := strings.Split(s, " | ")
		if len(f) != 4 {
			return nil, fmt.Errorf("line %d: want 4 fields 'package | test | message | why', found %d: %q", n, len(f), s)
		}
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		if f[0] == "" || f[3] == "" {
			return nil, fmt.Errorf("line %d: empty package or why: %q", n, s)
		}
		test, err := regexp.Compile(`^(?:` + f[1] + `)$`)
		if err != nil {
			return nil, fmt.Errorf("line %d: test pattern: %v", n, err)
		}
		msg, err := regexp.Compile(`^(?:` + f[2] + `)$`)
		if err != nil {
			return nil, fmt.Errorf("line %d: message pattern: %v", n, err)
		}
		rules = append(rules, Rule{Line: n, Package: f[0], Test: test, Message: msg, Why: f[3]})
	}
	return rules, sc.Err()
}

// matchesPackage tells whether an import path is the rule's package.
func (r Rule) matchesPackage(module, pkg string) bool {
	if r.Package == "." {
		return pkg == module
	}
	return pkg == r.Package || strings.HasSuffix(pkg, "/"+r.Package)
}

// Allowed returns, for each skip, the first rule that accepts it (nil: none), and the rules
// no skip used. module is the module path, the package of the rule ".".
func Allowed(module string, skips []Skip, rules []Rule) (by []*Rule, unused []Rule) {
	used := make([]bool, len(rules))
	by = make([]*Rule, len(skips))
	for i, s := range skips {
		for j := range rules {
			r := &rules[j]
			if r.matchesPackage(module, s.Package) && r.Test.MatchString(s.Test) && r.Message.MatchString(s.Message) {
				by[i], used[j] = r, true
				break
			}
		}
	}
	for j, u := range used {
		if !u {
			unused = append(unused, rules[j])
		}
	}
	return by, unused
}

// SortSkips orders skips by package, test and run, for a stable report.
func SortSkips(s []Skip) {
	sort.SliceStable(s, func(i, j int) bool {
		a, b := s[i], s[j]
		if a.Package != b.Package {
			return a.Package < b.Package
		}
		if a.Test != b.Test {
			return a.Test < b.Test
		}
		return a.Run < b.Run
	})
}
