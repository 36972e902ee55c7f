package structure

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/gpubind/gpubind"

// keptExported are exported package-level names that no other package names, kept exported
// on purpose. A type other packages hold values of (a field's, a result's type) stays
// exported with its documentation, and so do the values of such a type and the members of a
// set of constants that other packages use.
var keptExported = map[string]string{
	"gpubind.FabricNotSupported": "one of the fabric states; tests/fixtures and tests/plugin use the others",
	"gpubind.BackendSnapshot":    "one of the backend names; cmd/gpubind uses the others",
	"gpubind.ModeEnforce":        "a value of gpubind.Mode (ParseMode), which spank/engine uses",
	"gpubind.NumberingAuto":      "a value of gpubind.Numbering, which cmd/gpubind uses",
	"gpubind.Link":               "the result of Topology.GPULink and NICLink",
	"gpubind.LinkClass":          "the type of Link.Class",
	"gpubind.ClassSelf":          "a value of LinkClass",
	"gpubind.ClassNV":            "a value of LinkClass",
	"gpubind.ClassPIX":           "a value of LinkClass",
	"gpubind.ClassPXB":           "a value of LinkClass",
	"gpubind.ClassPHB":           "a value of LinkClass",
	"gpubind.ClassNODE":          "a value of LinkClass",
	"gpubind.ClassSYS":           "a value of LinkClass",
	"gpubind.IMEX":               "the result of DiscoverIMEX",
	"gpubind.IMEXChannel":        "the type of IMEX.Channels",
	"gpubind.Option":             "the result of ParseOption",
	"gpubind.Flags":              "the type of Option.Flags and Table.Flags",
	"gpubind.ConfFormat":         "the type of ReadConf's format argument",
	"gpubind.SlurmPlugin":        "the result of ReadSlurmPlugin",
	"ncclid.Group":               "the result of Exchanger.Group",
	"ncclid.Direct":              "a value of ncclid.Mode, which lib uses",
	"ncclid.Fenced":              "a value of ncclid.Mode, which lib uses",
	"ncclid.Auto":                "a value of ncclid.Mode, which lib uses",
	"pmixkv.Mem":                 "the result of MemJob.Rank, which ncclid's tests use",
	"tests/fixtures.Fixture":     "the result of fixtures.All and Get",
	"tests/testreport.Rule":      "the result of ParseAllowed",
}

// TestExportedNamesUsedOutside: every exported package-level name (func, type, var, const)
// of a non-main package is named by another package of the module, or is listed in
// keptExported with the reason. A name only its own package (its tests included) uses is
// unexported or deleted. Package-level names can only be named from outside as
// IMPORT.Name, so reading the source (no type checking) finds every use.
func TestExportedNamesUsedOutside(t *testing.T) {
	root := repoRoot(t)
	fset := token.NewFileSet()
	defined := map[string]string{} // "pkg.Name" -> position
	used := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); p != root && (n == "build" || n == "testdata" || strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(p))
		pkg := filepath.ToSlash(rel)
		if !strings.HasSuffix(p, "_test.go") && f.Name.Name != "main" {
			for _, name := range exportedDecls(f) {
				defined[pkg+"."+name.Name] = fset.Position(name.Pos()).String()
			}
		}
		imports := map[string]string{} // local name -> package (relative to the module)
		for _, imp := range f.Imports {
			ip, _ := strconv.Unquote(imp.Path.Value)
			if ip != module && !strings.HasPrefix(ip, module+"/") {
				continue
			}
			local := path.Base(ip)
			if imp.Name != nil {
				local = imp.Name.Name
			}
			if local == "." {
				t.Errorf("%s: dot import of %s: this test cannot see what it names", fset.Position(imp.Pos()), ip)
			}
			imports[local] = strings.TrimPrefix(strings.TrimPrefix(ip, module), "/")
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if x, ok := sel.X.(*ast.Ident); ok {
					if ipkg, ok := imports[x.Name]; ok && ipkg != pkg {
						used[ipkg+"."+sel.Sel.Name] = true
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(defined) < 100 {
		t.Fatalf("found only %d exported names under %s", len(defined), root)
	}
	var unused []string
	for name, pos := range defined {
		if !used[name] && keptExported[name] == "" {
			unused = append(unused, pos+": "+name)
		}
	}
	sort.Strings(unused)
	for _, u := range unused {
		t.Errorf("%s is exported but no other package names it: unexport it, delete it, or list it in keptExported with the reason", u)
	}
	for name := range keptExported {
		if defined[name] == "" {
			t.Errorf("keptExported lists %s, which is not an exported name of the module any more", name)
		} else if used[name] {
			t.Errorf("keptExported lists %s, which another package names now: drop it from the list", name)
		}
	}
}

// exportedDecls returns the exported package-level names a file declares (methods and
// struct fields are not package-level: callers reach them through values).
func exportedDecls(f *ast.File) []*ast.Ident {
	var names []*ast.Ident
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil && d.Name.IsExported() {
				names = append(names, d.Name)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						names = append(names, s.Name)
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() {
							names = append(names, n)
						}
					}
				}
			}
		}
	}
	return names
}
