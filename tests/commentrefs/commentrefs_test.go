// Package commentrefs checks that comments which name code still name something that exists:
// a qualified name of one of this module's packages, and a name after the word "see" that
// looks like code, which must be a symbol of the comment's package or of the module. Renames and deletions otherwise
// leave comments pointing at nothing. It also checks that no function outside tests grows
// past maxFuncLines.
package commentrefs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// symbols holds the names a package declares: top-level names, and Type.Method and
// Type.Field for its types.
type symbols map[string]bool

type goFile struct {
	path string
	pkg  string // package name, without an external test package's _test suffix
	file *ast.File
}

func moduleRoot(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// parseModule parses every Go file of the module (all build tags), skipping build outputs
// and hidden directories.
func parseModule(t *testing.T, root string) (*token.FileSet, []goFile) {
	fset := token.NewFileSet()
	var files []goFile
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "build" || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		files = append(files, goFile{path: path, pkg: strings.TrimSuffix(f.Name.Name, "_test"), file: f})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return fset, files
}

func declared(files []goFile) (byDir map[string]symbols, byPkg map[string]symbols, all symbols) {
	byDir, byPkg, all = map[string]symbols{}, map[string]symbols{}, symbols{}
	add := func(f goFile, name string) {
		dir := filepath.Dir(f.path)
		if byDir[dir] == nil {
			byDir[dir] = symbols{}
		}
		if byPkg[f.pkg] == nil {
			byPkg[f.pkg] = symbols{}
		}
		byDir[dir][name], byPkg[f.pkg][name], all[name] = true, true, true
	}
	for _, f := range files {
		for _, decl := range f.file.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Recv != nil && len(d.Recv.List) == 1 {
					add(f, receiverType(d.Recv.List[0].Type)+"."+d.Name.Name)
				}
				add(f, d.Name.Name)
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						add(f, s.Name.Name)
						if st, ok := s.Type.(*ast.StructType); ok {
							for _, field := range st.Fields.List {
								for _, n := range field.Names {
									add(f, s.Name.Name+"."+n.Name)
								}
							}
						}
						if it, ok := s.Type.(*ast.InterfaceType); ok {
							for _, m := range it.Methods.List {
								for _, n := range m.Names {
									add(f, s.Name.Name+"."+n.Name)
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							add(f, n.Name)
						}
					}
				}
			}
		}
	}
	return byDir, byPkg, all
}

func receiverType(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return receiverType(x.X)
	case *ast.IndexExpr:
		return receiverType(x.X)
	case *ast.IndexListExpr:
		return receiverType(x.X)
	case *ast.Ident:
		return x.Name
	}
	return ""
}

var (
	qualified = regexp.MustCompile(`\b([a-z][a-z0-9]*)\.([A-Z][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?)`)
	seeRef    = regexp.MustCompile(`\bsee ([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?)(\(\))?`)
)

// looksLikeCode says whether a word after "see" must be a symbol: it has an upper-case
// letter after its first, an underscore, a dot, or call parentheses. Plain words ("see the",
// "see it") are prose.
func looksLikeCode(word string, parens bool) bool {
	if parens || strings.ContainsAny(word, "._") {
		return true
	}
	for i, r := range word {
		if i > 0 && unicode.IsUpper(r) {
			return true
		}
	}
	return unicode.IsUpper(rune(word[0])) && len(word) > 1 && !isSentenceWord(word)
}

// isSentenceWord covers capitalised prose after "see" at the start of a sentence.
func isSentenceWord(word string) bool {
	switch word {
	case "The", "This", "That", "Below", "Above", "README", "DESIGN", "Slurm", "NCCL", "CUDA", "PMIx", "NVML":
		return true
	}
	return false
}

func TestCommentsNameExistingSymbols(t *testing.T) {
	root := moduleRoot(t)
	fset, files := parseModule(t, root)
	byDir, byPkg, all := declared(files)
	// Only this module's packages are checked when qualified: nvml's or os's names are
	// other people's.
	modulePkgs := map[string]bool{}
	for pkg := range byPkg {
		if pkg != "main" {
			modulePkgs[pkg] = true
		}
	}
	var bad []string
	for _, f := range files {
		own := byDir[filepath.Dir(f.path)]
		for _, group := range f.file.Comments {
			text := group.Text()
			pos := fset.Position(group.Pos())
			where := strings.TrimPrefix(pos.Filename, root+"/") + ":" + strconv.Itoa(pos.Line)
			for _, m := range qualified.FindAllStringSubmatch(text, -1) {
				if pkg, name := m[1], m[2]; modulePkgs[pkg] && !resolves(byPkg[pkg], name) {
					bad = append(bad, where+": "+m[0]+": package "+pkg+" declares no "+firstPart(name))
				}
			}
			for _, m := range seeRef.FindAllStringSubmatch(text, -1) {
				word := m[1]
				if !looksLikeCode(word, m[2] != "") || resolves(own, word) || resolves(all, word) ||
					modulePkgs[firstPart(word)] || isFile(root, word) {
					continue // qualified names were checked above
				}
				bad = append(bad, where+": \""+m[0]+"\" names no symbol of package "+f.pkg+" or of the module")
			}
		}
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Error(b)
	}
}

// resolves says whether syms declares name, or for Type.Member at least the type (members
// promoted from embedded fields are not listed).
func resolves(syms symbols, name string) bool {
	return syms[name] || syms[firstPart(name)]
}

func firstPart(name string) string {
	if i := strings.IndexByte(name, '.'); i >= 0 {
		return name[:i]
	}
	return name
}

// isFile accepts a reference to a file of the module, at its top or one folder down
// (PROTOCOL.md, architecture.md).
func isFile(root, word string) bool {
	if _, err := os.Stat(filepath.Join(root, word)); err == nil {
		return true
	}
	matches, _ := filepath.Glob(filepath.Join(root, "*", word))
	return len(matches) > 0
}

// maxFuncLines is the longest a function of the module may be, outside tests (the test
// files and the tests/ tree): from its "func" line to its closing brace.
const maxFuncLines = 120

// No function outside tests is longer than maxFuncLines: a long function is split into
// named pieces.
func TestNoLongFunctions(t *testing.T) {
	root := moduleRoot(t)
	fset, files := parseModule(t, root)
	testsDir := filepath.Join(root, "tests") + string(filepath.Separator)
	for _, f := range files {
		if strings.HasSuffix(f.path, "_test.go") || strings.HasPrefix(f.path, testsDir) {
			continue
		}
		for _, d := range f.file.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			start, end := fset.Position(fd.Pos()), fset.Position(fd.End())
			if n := end.Line - start.Line + 1; n > maxFuncLines {
				rel, _ := filepath.Rel(root, f.path)
				t.Errorf("%s:%d: %s is %d lines, more than %d", rel, start.Line, fd.Name.Name, n, maxFuncLines)
			}
		}
	}
}
