// Package structure checks the shape of the C front end (issue 35): calls between its files
// point one way only, so that each file can be read without the ones it is called by.
package structure

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// frontendObjects builds the plugin's objects (the front end's Makefile, into a temporary
// directory) and returns them by file name relative to the build's object directory.
func frontendObjects(t *testing.T) map[string]string {
	t.Helper()
	root := repoRoot(t)
	build := t.TempDir()
	cmd := exec.Command("make", "-s", "-C", filepath.Join(root, "spank", "frontend"), "BUILD="+build)
	if prefix := os.Getenv("SLURM_PREFIX"); prefix != "" {
		cmd.Args = append(cmd.Args, "SLURM_PREFIX="+prefix)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	objdir := filepath.Join(build, "frontend-obj")
	objs := map[string]string{}
	err := filepath.Walk(objdir, func(p string, info os.FileInfo, err error) error {
		if err == nil && strings.HasSuffix(p, ".o") {
			rel, _ := filepath.Rel(objdir, p)
			objs[strings.TrimSuffix(rel, ".o")] = p
		}
		return err
	})
	if err != nil || len(objs) < 10 {
		t.Fatalf("objects in %s: %d, %v", objdir, len(objs), err)
	}
	return objs
}

// symbols: what nm says each object defines (functions when funcsOnly) and references.
func symbols(t *testing.T, objs map[string]string, funcsOnly bool) (defs map[string]string, refs map[string][]string) {
	t.Helper()
	defs = map[string]string{}
	refs = map[string][]string{}
	for name, path := range objs {
		out, err := exec.Command("nm", path).Output()
		if err != nil {
			t.Fatalf("nm %s: %v", path, err)
		}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) == 3 && (f[1] == "T" || !funcsOnly && strings.Contains("DBR", f[1])):
				defs[f[2]] = name
			case len(f) == 2 && f[0] == "U":
				refs[name] = append(refs[name], f[1])
			}
		}
	}
	return defs, refs
}

// TestNoCallCircles: no file of the front end calls a function of a file that calls back into
// it, directly or through others (every strongly connected part of the file graph is one file).
func TestNoCallCircles(t *testing.T) {
	objs := frontendObjects(t)
	defs, refs := symbols(t, objs, true)
	edges := map[string]map[string][]string{}
	for from, syms := range refs {
		for _, s := range syms {
			if to, ok := defs[s]; ok && to != from {
				if edges[from] == nil {
					edges[from] = map[string][]string{}
				}
				edges[from][to] = append(edges[from][to], s)
			}
		}
	}
	for _, cycle := range cycles(objs, edges) {
		var why []string
		for _, a := range cycle {
			for _, b := range cycle {
				if syms := edges[a][b]; syms != nil {
					sort.Strings(syms)
					why = append(why, a+" -> "+b+" ("+strings.Join(syms, ", ")+")")
				}
			}
		}
		t.Errorf("call circle between %s: %s", strings.Join(cycle, ", "), strings.Join(why, "; "))
	}
	// The cgroup layer calls nothing of the front end outside cgroup/ but the rule's helpers
	// (rule/NAME: the repository's rule/*.c, which the front end's Makefile builds into the
	// rule/ folder of its object directory).
	for from, tos := range edges {
		if !strings.HasPrefix(from, "cgroup/") {
			continue
		}
		for to, syms := range tos {
			if !strings.HasPrefix(to, "cgroup/") && !strings.HasPrefix(to, "rule/") {
				t.Errorf("the cgroup layer's %s calls %s: %v", from, to, syms)
			}
		}
	}
}

// cycles: the strongly connected parts with more than one file (Tarjan).
func cycles(nodes map[string]string, edges map[string]map[string][]string) [][]string {
	index, low := map[string]int{}, map[string]int{}
	on := map[string]bool{}
	var stack []string
	var out [][]string
	n := 0
	var visit func(v string)
	visit = func(v string) {
		index[v], low[v] = n, n
		n++
		stack = append(stack, v)
		on[v] = true
		for w := range edges[v] {
			if _, seen := index[w]; !seen {
				visit(w)
				low[v] = min(low[v], low[w])
			} else if on[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] == index[v] {
			var part []string
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				on[w] = false
				part = append(part, w)
				if w == v {
					break
				}
			}
			if len(part) > 1 {
				sort.Strings(part)
				out = append(out, part)
			}
		}
	}
	var names []string
	for v := range nodes {
		names = append(names, v)
	}
	sort.Strings(names)
	for _, v := range names {
		if _, seen := index[v]; !seen {
			visit(v)
		}
	}
	return out
}

// TestNoMutableExternGlobals: state of the front end has one owner, the file that holds it;
// others go through its functions (issue 35: gb_conf and the option state were extern and
// written from anywhere). A global object the linker can see must be read-only after
// relocation (.rodata, .data.rel.ro): tables of constants, the exported launcher path.
func TestNoMutableExternGlobals(t *testing.T) {
	for name, path := range frontendObjects(t) {
		out, err := exec.Command("objdump", "-t", path).Output()
		if err != nil {
			t.Fatalf("objdump -t %s: %v", path, err)
		}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			// "0000000000000000 g     O .bss	0000000000000004 gb_opt_set"
			f := strings.Fields(sc.Text())
			if len(f) < 6 || f[1] != "g" || f[2] != "O" {
				continue
			}
			section, sym := f[3], f[len(f)-1]
			if !strings.HasPrefix(section, ".rodata") && !strings.HasPrefix(section, ".data.rel.ro") {
				t.Errorf("%s: global %s is writable (section %s): make it static and give its file the functions others need", name, sym, section)
			}
		}
	}
}

// TestNoCFileOver1000Lines: a C file holds one job (issue 35: rule/table.c had grown to 1,835
// lines holding the parser, the rule and the output). Every tracked .c file stays under 1,000
// lines; past that, split it by job.
func TestNoCFileOver1000Lines(t *testing.T) {
	root := repoRoot(t)
	out, err := exec.Command("git", "-C", root, "ls-files", "*.c").Output()
	if err != nil {
		t.Skipf("git ls-files: %v (not a git checkout)", err)
	}
	files := strings.Fields(string(out))
	if len(files) < 20 {
		t.Fatalf("git ls-files *.c found %d files", len(files))
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		if n := bytes.Count(b, []byte("\n")); n >= 1000 {
			t.Errorf("%s has %d lines: split it by job", f, n)
		}
	}
}
