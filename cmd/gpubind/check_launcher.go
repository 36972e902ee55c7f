package main

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

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

// trustFile is the plugin's check (spank/frontend/trust.c): a regular file owned by root and
// not writable by group or others, in a directory of the same kind.
func trustFile(what, path string) error {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return fmt.Errorf("%s %s: %v", what, path, unwrapPathError(err))
	}
	one := func(p, which string) error {
		st, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("%s%s %s: %v", which, what, path, unwrapPathError(err))
		}
		if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Uid != 0 {
			return fmt.Errorf("%s%s %s is owned by uid %d, not root", which, what, path, sys.Uid)
		}
		if st.Mode().Perm()&0o022 != 0 {
			return fmt.Errorf("%s%s %s is writable by group or others (mode %04o)", which, what, path, st.Mode().Perm())
		}
		return nil
	}
	if st, err := os.Stat(real); err == nil && !st.Mode().IsRegular() {
		return fmt.Errorf("%s %s is not a regular file", what, path)
	}
	if err := one(real, ""); err != nil {
		return err
	}
	if err := one(filepath.Dir(real), "the directory "+filepath.Dir(real)+" of "); err != nil {
		return err
	}
	// A symbolic link: whoever may replace it chooses the file too.
	return one(filepath.Dir(path), "the directory "+filepath.Dir(path)+" of ")
}
