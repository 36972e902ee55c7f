package gpubind

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Slurm's configuration files, read once the way a node reads them: ReadConf follows Include
// lines for every format, and LoadNodeConf takes from slurm.conf, cgroup.conf and gres.conf
// what the plan depends on. The engine (on the node), `gpubind plan --slurm-conf` and
// `gpubind check` all call these, so they cannot disagree.

// ConfFormat says how a configuration file includes others.
type ConfFormat int

const (
	// ConfSlurm is slurm.conf, cgroup.conf and gres.conf (Slurm's own parser): "Include FILE"
	// in any case, one path; a pattern (*, ?, [) that matches nothing includes nothing, a
	// plain path that does not exist is an error.
	ConfSlurm ConfFormat = iota
	// ConfPlugstack is plugstack.conf (SPANK's parser): "include PATTERN..." in lower case;
	// what matches nothing includes nothing.
	ConfPlugstack
)

// maxConfBytes bounds each configuration file read.
const maxConfBytes = 4 << 20

// maxIncludeDepth bounds nested Include lines (a file that includes itself).
const maxIncludeDepth = 8

// ConfLine is one line of a configuration file that has words, without its comment, with
// the file and line number it came from.
type ConfLine struct {
	File   string // "" for text that came from no file (parseGresConf)
	Line   int
	Fields []string
}

// where names the line in messages: "FILE line N", or "gres.conf line N" and the like for
// text without a file.
func (l ConfLine) where(what string) string {
	if l.File == "" {
		return fmt.Sprintf("%s line %d", what, l.Line)
	}
	return fmt.Sprintf("%s line %d", l.File, l.Line)
}

// ReadConf returns the lines of the configuration file path, with the lines of the files
// its Include lines name standing where the Include line was, as Slurm reads them.
// Relative include paths are relative to the including file's directory; absolute ones go
// through under (nil: as they are; `gpubind check --root` maps them into the checked tree).
func ReadConf(path string, format ConfFormat, under func(string) string) ([]ConfLine, error) {
	var out []ConfLine
	return out, readConf(&out, path, format, under, 0)
}

func readConf(out *[]ConfLine, path string, format ConfFormat, under func(string) string, depth int) error {
	if depth > maxIncludeDepth {
		return fmt.Errorf("%s: Include nested more than %d deep", path, maxIncludeDepth)
	}
	b, err := readSmallFile(path, maxConfBytes)
	if err != nil {
		return err
	}
	for i, line := range strings.Split(string(b), "\n") {
		l := ConfLine{File: path, Line: i + 1, Fields: confFields(line)}
		if len(l.Fields) == 0 {
			continue
		}
		pats, isInclude, err := includePatterns(l, format)
		if err != nil {
			return err
		}
		if !isInclude {
			*out = append(*out, l)
			continue
		}
		for _, pat := range pats {
			files, err := includedFiles(path, pat, format, under)
			if err == nil {
				for _, f := range files {
					if err = readConf(out, f, format, under, depth+1); err != nil {
						break
					}
				}
			}
			if err != nil {
				return fmt.Errorf("%s: %s %s: %w", l.where(""), l.Fields[0], pat, err)
			}
		}
	}
	return nil
}

// confFields splits a line into words, without its comment.
func confFields(line string) []string {
	if i := strings.IndexByte(line, '#'); i >= 0 {
		line = line[:i]
	}
	return strings.Fields(line)
}

// includePatterns: whether l is an Include line of format, and the paths it names.
func includePatterns(l ConfLine, format ConfFormat) ([]string, bool, error) {
	if format == ConfPlugstack {
		return l.Fields[1:], l.Fields[0] == "include", nil
	}
	if !strings.EqualFold(l.Fields[0], "include") {
		return nil, false, nil
	}
	if len(l.Fields) != 2 {
		return nil, true, fmt.Errorf("%s: want \"Include FILE\"", l.where(""))
	}
	return l.Fields[1:], true, nil
}

// includedFiles: the files an include pattern of the file from names.
func includedFiles(from, pat string, format ConfFormat, under func(string) string) ([]string, error) {
	if !filepath.IsAbs(pat) {
		pat = filepath.Join(filepath.Dir(from), pat)
	} else if under != nil {
		pat = under(pat)
	}
	if format == ConfSlurm && !strings.ContainsAny(pat, "*?[") {
		return []string{pat}, nil // a plain missing file: the read names it
	}
	return filepath.Glob(pat)
}

// confValues returns the values of key (any case) in KEY=VALUE words, in file order.
func confValues(lines []ConfLine, key string) []string {
	var out []string
	for _, l := range lines {
		for _, w := range l.Fields {
			if k, v, ok := strings.Cut(w, "="); ok && strings.EqualFold(k, key) {
				out = append(out, v)
			}
		}
	}
	return out
}

// ConfValue is the value Slurm uses for a key given more than once: the last one ("" none).
func ConfValue(lines []ConfLine, key string) string {
	v := confValues(lines, key)
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

// SlurmSettings are the slurm.conf and cgroup.conf settings the plan depends on.
type SlurmSettings struct {
	// TaskCgroup: TaskPlugin names task/cgroup ("cgroup" in any of its plugins).
	TaskCgroup bool
	// ConstrainDevices: cgroup.conf says ConstrainDevices=yes (false where unreadable).
	ConstrainDevices bool
}

// ReadSlurmSettings reads slurm.conf (and the files it includes) and cgroup.conf, which
// Slurm looks for next to slurm.conf (cgroupConf "": there).
func ReadSlurmSettings(slurmConf, cgroupConf string, under func(string) string) (*SlurmSettings, []ConfLine, error) {
	lines, err := ReadConf(slurmConf, ConfSlurm, under)
	if err != nil {
		return nil, nil, err
	}
	s := &SlurmSettings{TaskCgroup: strings.Contains(ConfValue(lines, "taskplugin"), "cgroup")}
	if cgroupConf == "" {
		cgroupConf = filepath.Join(filepath.Dir(slurmConf), "cgroup.conf")
	}
	if cc, err := ReadConf(cgroupConf, ConfSlurm, under); err == nil {
		s.ConstrainDevices = strings.EqualFold(ConfValue(cc, "constraindevices"), "yes")
	}
	return s, lines, nil
}

// Numbering is how tasks number their GPUs under these settings: relative when task/cgroup
// constrains devices, global otherwise.
func (s *SlurmSettings) Numbering() Numbering {
	if s.TaskCgroup && s.ConstrainDevices {
		return NumberingRelative
	}
	return NumberingGlobal
}

// defaultGresConf is where the engine looks for gres.conf when neither the plugin's
// gres_conf= nor SLURM_CONF says: Debian's configuration directory.
const defaultGresConf = "/etc/slurm/gres.conf"

// DefaultCacheDir holds the engine's per-boot discovery cache and the front end's plan
// cache (plugstack cache_dir=); /run is a tmpfs, emptied at boot. The C front end's
// GB_DEFAULT_CACHE_DIR is the same path.
const DefaultCacheDir = "/run/gpubind"

// GresConfPath is the gres.conf the engine reads: the plugin's gres_conf= argument when
// given, else gres.conf next to the step's slurm.conf, else defaultGresConf.
func GresConfPath(gresConfArg, slurmConf string) string {
	switch {
	case gresConfArg != "":
		return gresConfArg
	case slurmConf != "":
		return filepath.Join(filepath.Dir(slurmConf), "gres.conf")
	}
	return defaultGresConf
}

// NodeConf is what a node's Slurm configuration gives the plan.
type NodeConf struct {
	Numbering Numbering // NumberingAuto where slurm.conf is unknown or unreadable
	Gres      *GresConf // nil: no gres.conf (GRES indices in PCI order, assumed)
	GresFrom  string    // the gres.conf read
	// SlurmGres: slurm.conf gives this node a Gres=gpu (Slurm manages its GPUs).
	SlurmGres bool
	// Read lists every configuration file the plan depends on, included ones too, and
	// cgroup.conf and gres.conf where they could appear later: the plugin's plan cache
	// trusts an entry only while none of them changed.
	Read []string
}

// addRead appends the files lines came from to nc.Read, each once.
func (nc *NodeConf) addRead(paths ...string) {
	for _, p := range paths {
		if p != "" && !slices.Contains(nc.Read, p) {
			nc.Read = append(nc.Read, p)
		}
	}
}

func linesFiles(lines []ConfLine) []string {
	var out []string
	for _, l := range lines {
		if l.File != "" && (len(out) == 0 || out[len(out)-1] != l.File) {
			out = append(out, l.File)
		}
	}
	return out
}

// LoadNodeConf reads the configuration as the plugin's engine does on a node. slurmConf is
// the step's SLURM_CONF ("" unknown: numbering auto); gresConf the plugin's gres_conf=
// argument ("": gres.conf next to slurm.conf, else defaultGresConf, each only if it
// exists); node the node's name for gres.conf NodeName= ("": the short host name).
func LoadNodeConf(slurmConf, gresConf, node string) (*NodeConf, error) {
	nc := &NodeConf{Numbering: NumberingAuto}
	path := GresConfPath(gresConf, slurmConf)
	if slurmConf != "" {
		nc.addRead(slurmConf, filepath.Join(filepath.Dir(slurmConf), "cgroup.conf"))
		if node == "" {
			node = shortHostname()
		}
		if s, lines, err := ReadSlurmSettings(slurmConf, "", nil); err == nil {
			nc.Numbering = s.Numbering()
			nc.SlurmGres = nodeHasGPUGres(lines, node)
			nc.addRead(linesFiles(lines)...)
		}
	}
	if node == "" {
		node = shortHostname()
	}
	nc.addRead(path)
	if _, err := os.Stat(path); err != nil && gresConf == "" {
		return nc, nil
	}
	lines, err := ReadConf(path, ConfSlurm, nil)
	if err != nil {
		return nil, fmt.Errorf("gres.conf: %w", err)
	}
	gc, err := ParseGresLines(lines, node)
	if err != nil {
		return nil, err
	}
	nc.addRead(linesFiles(lines)...)
	nc.Gres, nc.GresFrom = gc, path
	return nc, nil
}

// nodeHasGPUGres says whether slurm.conf's NodeName= lines give node a gpu GRES (Gres=gpu,
// Gres=gpu:h100:8, ...), NodeName=DEFAULT lines included.
func nodeHasGPUGres(lines []ConfLine, node string) bool {
	has := false
	for _, l := range lines {
		if len(l.Fields) == 0 {
			continue
		}
		k, names, ok := strings.Cut(l.Fields[0], "=")
		if !ok || !strings.EqualFold(k, "nodename") {
			continue
		}
		if !strings.EqualFold(names, "default") {
			hosts, err := expandHostlist(names)
			if err != nil || !slices.Contains(hosts, node) {
				continue
			}
		}
		for _, f := range l.Fields[1:] {
			if k, v, ok := strings.Cut(f, "="); ok && strings.EqualFold(k, "gres") {
				has = false
				for _, g := range strings.Split(v, ",") {
					name, _, _ := strings.Cut(g, ":")
					if strings.EqualFold(name, "gpu") {
						has = true
					}
				}
			}
		}
	}
	return has
}

// shortHostname is this host's name up to the first dot: Slurm's usual node name.
func shortHostname() string {
	h, _ := os.Hostname()
	short, _, _ := strings.Cut(h, ".")
	return short
}
