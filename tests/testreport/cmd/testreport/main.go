// Command testreport sits between `go test -json` and the reader, for `make test` and CI
// (package testreport):
//
//	go test -json ... | testreport filter [-v] -json FILE   prints what plain go test prints,
//	                                                         keeps the whole stream in FILE
//	testreport skips -allowed LIST RUN=FILE...               lists every skipped test of the
//	                                                         streams and its message; exit 1
//	                                                         when LIST does not allow one
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/gpubind/gpubind/tests/testreport"
)

const module = "github.com/gpubind/gpubind"

func main() {
	err := run(os.Args[1:], os.Stdin, os.Stdout)
	if err == errNotAllowed {
		os.Exit(1)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
}

var errNotAllowed = fmt.Errorf("skips not in the allowed list")

func run(args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: testreport filter [-v] -json FILE | skips -allowed LIST RUN=FILE [RUN=FILE ...]")
	}
	switch args[0] {
	case "filter":
		return filter(args[1:], stdin, stdout)
	case "skips":
		return skips(args[1:], stdout)
	}
	return fmt.Errorf("unknown command %q (filter, skips)", args[0])
}

func filter(args []string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet("filter", flag.ContinueOnError)
	jsonFile := fs.String("json", "", "file to keep the whole go test -json stream in")
	verbose := fs.Bool("v", false, "print every test's output, as go test -v")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *jsonFile == "" || fs.NArg() != 0 {
		return fmt.Errorf("usage: testreport filter [-v] -json FILE")
	}
	f, err := os.Create(*jsonFile)
	if err != nil {
		return err
	}
	raw := bufio.NewWriter(f)
	w := bufio.NewWriter(stdout)
	ferr := testreport.Filter(stdin, flushing{w}, raw, *verbose)
	if err := raw.Flush(); ferr == nil {
		ferr = err
	}
	if err := f.Close(); ferr == nil {
		ferr = err
	}
	if err := w.Flush(); ferr == nil {
		ferr = err
	}
	if ferr != nil {
		// go test may still be writing: drain it, so it is not killed by a broken pipe
		// before it prints its own failure.
		_, _ = io.Copy(io.Discard, stdin)
	}
	return ferr
}

// flushing flushes after every line, so the output of a long run appears as it happens.
type flushing struct{ w *bufio.Writer }

func (f flushing) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if err == nil && len(p) > 0 && p[len(p)-1] == '\n' {
		err = f.w.Flush()
	}
	return n, err
}

func skips(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("skips", flag.ContinueOnError)
	allowedFile := fs.String("allowed", "", "the list of allowed skips (tests/allowed-skips.txt)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *allowedFile == "" {
		return fmt.Errorf("usage: testreport skips -allowed LIST RUN=FILE [RUN=FILE ...]")
	}
	af, err := os.Open(*allowedFile)
	if err != nil {
		return err
	}
	rules, err := testreport.ParseAllowed(af)
	af.Close()
	if err != nil {
		return fmt.Errorf("%s: %v", *allowedFile, err)
	}
	var all []testreport.Skip
	for _, a := range fs.Args() {
		name, file, ok := strings.Cut(a, "=")
		if !ok {
			return fmt.Errorf("%q: want RUN=FILE", a)
		}
		f, err := os.Open(file)
		if err != nil {
			return err
		}
		s, err := testreport.Skips(name, f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %v", file, err)
		}
		all = append(all, s...)
	}
	testreport.SortSkips(all)
	by, unused := testreport.Allowed(module, all, rules)
	bad := 0
	for i, s := range all {
		rel := strings.TrimPrefix(strings.TrimPrefix(s.Package, module), "/")
		if rel == "" {
			rel = "."
		}
		line := fmt.Sprintf("[%s] %s %s: %s", s.Run, rel, s.Test, s.Message)
		if r := by[i]; r != nil {
			fmt.Fprintf(stdout, "allowed      %s\n             (%s:%d: %s)\n", line, *allowedFile, r.Line, r.Why)
		} else {
			bad++
			fmt.Fprintf(stdout, "NOT ALLOWED  %s\n", line)
		}
	}
	for _, r := range unused {
		fmt.Fprintf(stdout, "unused rule  %s:%d: %s %s (no such skip in this run)\n", *allowedFile, r.Line, r.Package, r.Test)
	}
	fmt.Fprintf(stdout, "skipped tests: %d, allowed: %d, not allowed: %d\n", len(all), len(all)-bad, bad)
	if bad > 0 {
		return errNotAllowed
	}
	return nil
}
