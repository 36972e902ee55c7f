package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The step environment keys the engine receives are named in spank/PROTOCOL.md
// section 1 (the reference); the front end's request_env (request.c) sends exactly
// those, and the engine's envKeys reads exactly those.
func TestEnvKeysNamedOnce(t *testing.T) {
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	// PROTOCOL.md: the row "| `env.NAME` | ... : `A`, `B`, ... (...) |".
	row := regexp.MustCompile("(?m)^\\| `env\\.NAME` \\|[^:\n]*:([^(\n]*)").FindStringSubmatch(read("../PROTOCOL.md"))
	if row == nil {
		t.Fatal("PROTOCOL.md has no env.NAME row")
	}
	var doc []string
	for _, m := range regexp.MustCompile("`([A-Z_]+)`").FindAllStringSubmatch(row[1], -1) {
		doc = append(doc, m[1])
	}
	// request.c: request_env[] = { "A", GB_ENV_OPTION, ... }; macros from gpubind.h.
	list := regexp.MustCompile(`request_env\[\] = \{([^}]*)\}`).FindStringSubmatch(read("../frontend/request.c"))
	if list == nil {
		t.Fatal("request.c has no request_env list")
	}
	header := read("../frontend/gpubind.h")
	var c []string
	for _, item := range strings.Split(list[1], ",") {
		item = strings.TrimSpace(item)
		switch {
		case item == "":
		case strings.HasPrefix(item, `"`):
			c = append(c, strings.Trim(item, `"`))
		default:
			m := regexp.MustCompile(`#define ` + item + ` "([^"]*)"`).FindStringSubmatch(header)
			if m == nil {
				t.Fatalf("request_env: %s is not a string macro of gpubind.h", item)
			}
			c = append(c, m[1])
		}
	}
	var goKeys []string
	for k := range envKeys {
		goKeys = append(goKeys, k)
	}
	slices.Sort(goKeys)
	sorted := slices.Clone(doc)
	slices.Sort(sorted)
	if len(doc) == 0 || !slices.Equal(doc, c) || !slices.Equal(sorted, goKeys) {
		t.Errorf("env keys disagree:\nPROTOCOL.md %v\nrequest.c   %v\nengine.go   %v", doc, c, goKeys)
	}
}

// The front end's plan cache key (spank/frontend/plancache.c) globs the same MIG files,
// in the same order, as the engine's topology cache key (migCaps, migGlobs): a MIG
// repartition must invalidate both.
func TestMIGGlobsAgree(t *testing.T) {
	b, err := os.ReadFile("../frontend/plancache.c")
	if err != nil {
		t.Fatal(err)
	}
	var c []string
	for _, m := range regexp.MustCompile(`"%s`+regexp.QuoteMeta(migCaps)+`/([^"]*)"`).FindAllStringSubmatch(string(b), -1) {
		c = append(c, m[1])
	}
	if !slices.Equal(c, migGlobs) {
		t.Errorf("plancache.c globs %s/%v, the engine %s/%v", migCaps, c, migCaps, migGlobs)
	}
}
