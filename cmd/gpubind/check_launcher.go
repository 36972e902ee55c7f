package main

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpubind/gpubind/gpubind"
)

// builtLauncher is where `make install` puts gpubind-launcher ($(LIBEXECDIR)/gpubind), set at
// build time; the plugin's own built-in path (its gpubind_launcher_path symbol) comes first.
var builtLauncher = ""

// checkLauncher: the program the plugin starts in slurmstepd to plan a step. Its path is
// the plugstack's launcher=, else the one built into the plugin. It must be an executable
// ELF program and, like the engine library and a snapshot= file, root-owned and writable
// only by root, in a directory of the same kind: slurmstepd refuses anything else.
func (c *checker) checkLauncher() {
	l := ""
	if v, ok := c.args["launcher"]; ok {
		l = v
	} else if p, err := gpubind.ReadSlurmPlugin(c.plugin); err == nil && p.Launcher != "" {
		l = p.Launcher
	} else if builtLauncher != "" {
		l = builtLauncher
	} else {
		l = "/usr/local/libexec/gpubind/gpubind-launcher"
	}
	path := c.under(l)
	f, err := elf.Open(path)
	if err != nil {
		c.add("launcher", statusFail, "launcher %s: %v (make install puts it in $(LIBEXECDIR)/gpubind, the packages in /usr/libexec/gpubind; plugstack launcher=PATH names another)", path, unwrapPathError(err))
		return
	}
	typ := f.Type
	f.Close()
	if st, err := os.Stat(path); err == nil && (typ != elf.ET_EXEC && typ != elf.ET_DYN || st.Mode()&0o111 == 0) {
		c.add("launcher", statusFail, "launcher %s is not an executable program (ELF type %v, mode %04o)", path, typ, st.Mode().Perm())
		return
	}
	var bad []string
	if err := trustFile("launcher", path); err != nil {
		bad = append(bad, err.Error())
	}
	eng := filepath.Join(filepath.Dir(c.plugin), "gpubind_engine.so")
	if v, ok := c.args["engine"]; ok {
		eng = c.under(v)
	}
	if _, err := os.Stat(eng); err == nil {
		if err := trustFile("engine", eng); err != nil {
			bad = append(bad, err.Error())
		}
	}
	if v, ok := c.args["snapshot"]; ok {
		if err := trustFile("snapshot", c.under(v)); err != nil {
			bad = append(bad, err.Error())
		}
	}
	if len(bad) > 0 {
		c.add("launcher", statusFail, "%s: slurmstepd refuses to run or read it", strings.Join(bad, "; "))
		return
	}
	c.add("launcher", statusOK, "%s (root-owned, writable only by root, as are the engine and its directories)", path)
}

func unwrapPathError(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

// trustFile is the plugin's check (spank/frontend/trust.c), the same walk: every directory
// from / to the file, symbolic links followed (at most 40), must be root's and not writable
// by group or others, except a sticky directory (/tmp) where the entry in it is root's; the
// file must be a regular file, root's, not writable by group or others. The error names the
// component that fails.
func trustFile(what, path string) error {
	if !filepath.IsAbs(path) {
		return fmt.Errorf("%s %s is not an absolute path", what, path)
	}
	trusted := func(st *unix.Stat_t) bool { return st.Uid == 0 || int(st.Uid) == os.Geteuid() }
	check := func(name string, st *unix.Stat_t, openToOthers bool, parent string) error {
		if openToOthers && !trusted(st) {
			return fmt.Errorf("%s is owned by uid %d in %s, a directory others can write", name, st.Uid, parent)
		}
		if !trusted(st) {
			return fmt.Errorf("%s is owned by uid %d, not root", name, st.Uid)
		}
		if st.Mode&0o022 == 0 || (st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Mode&unix.S_ISVTX != 0) {
			return nil
		}
		return fmt.Errorf("%s is writable by group or others (mode %04o)", name, st.Mode&0o7777)
	}
	dirName := func(d string) string { return "the directory " + d + " of " + what + " " + path }
	var st unix.Stat_t
	if err := unix.Stat("/", &st); err != nil {
		return fmt.Errorf("%s %s: /: %v", what, path, err)
	}
	if err := check(dirName("/"), &st, false, ""); err != nil {
		return err
	}
	at, open := []string{}, st.Mode&0o022 != 0
	rest := strings.Split(strings.TrimPrefix(path, "/"), "/")
	for links := 0; len(rest) > 0; {
		comp := rest[0]
		rest = rest[1:]
		if comp == "" || comp == "." {
			continue
		}
		parent := "/" + strings.Join(at, "/")
		if comp == ".." {
			if len(at) > 0 {
				at = at[:len(at)-1]
			}
			var pst unix.Stat_t
			open = unix.Stat("/"+strings.Join(at, "/"), &pst) == nil && pst.Mode&0o022 != 0
			continue
		}
		full := filepath.Join(parent, comp)
		if err := unix.Lstat(full, &st); err != nil {
			return fmt.Errorf("%s %s: %v (at %s)", what, path, err, full)
		}
		last := true
		for _, r := range rest {
			if r != "" {
				last = false
			}
		}
		switch {
		case st.Mode&unix.S_IFMT == unix.S_IFLNK:
			if open && !trusted(&st) {
				return fmt.Errorf("the symbolic link %s on the way to %s %s is owned by uid %d in a directory others can write", full, what, path, st.Uid)
			}
			if links++; links > 40 {
				return fmt.Errorf("%s %s: too many levels of symbolic links (at %s)", what, path, full)
			}
			target, err := os.Readlink(full)
			if err != nil {
				return fmt.Errorf("%s %s: %v (at %s)", what, path, unwrapPathError(err), full)
			}
			if strings.HasPrefix(target, "/") {
				at, open = nil, false
				var rst unix.Stat_t
				if unix.Stat("/", &rst) == nil {
					open = rst.Mode&0o022 != 0
				}
			}
			rest = append(strings.Split(target, "/"), rest...)
		case !last:
			if st.Mode&unix.S_IFMT != unix.S_IFDIR {
				return fmt.Errorf("%s %s: not a directory (at %s)", what, path, full)
			}
			if err := check(dirName(full), &st, open, parent); err != nil {
				return err
			}
			at, open = append(at, comp), st.Mode&0o022 != 0
		default:
			if st.Mode&unix.S_IFMT != unix.S_IFREG {
				return fmt.Errorf("%s %s is not a regular file", what, path)
			}
			return check(what+" "+path, &st, open, parent)
		}
	}
	return fmt.Errorf("%s %s is not a regular file", what, path)
}
