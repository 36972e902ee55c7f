package gpubind

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Version is gpubind's version; `make` sets it from the Makefile's VERSION.
var Version = "0.2.0-dev"

// SlurmVersion is a Slurm release number, such as 26.05.3.
type SlurmVersion struct{ Major, Minor, Micro int }

func (v SlurmVersion) String() string { return fmt.Sprintf("%d.%02d.%d", v.Major, v.Minor, v.Micro) }

// LoadsSpank reports whether a slurmd of version v loads a SPANK plugin built against
// plugin's headers. Slurm compares major and minor only for SPANK plugins, and every other
// plugin type in full (src/common/plugin.c, plugin_peek/plugin_load_from_file).
func (v SlurmVersion) LoadsSpank(plugin SlurmVersion) bool {
	return v.Major == plugin.Major && v.Minor == plugin.Minor
}

// slurmVersionNumber decodes SLURM_VERSION_NUMBER: 0xMMmmuu (major, minor, micro).
func slurmVersionNumber(n uint32) SlurmVersion {
	return SlurmVersion{Major: int(n>>16) & 0xff, Minor: int(n>>8) & 0xff, Micro: int(n) & 0xff}
}

// SlurmPlugin is what a Slurm plugin says of itself: the symbols Slurm checks when it loads it.
type SlurmPlugin struct {
	Version SlurmVersion // plugin_version: SLURM_VERSION_NUMBER of the headers it was built with
	Type    string       // plugin_type: "spank" for a SPANK plugin
	// Launcher is gpubind's built-in launcher path (gpubind_launcher_path), "" in another
	// plugin or one built before the launcher.
	Launcher string
}

// ReadSlurmPlugin reads plugin_version and plugin_type from a plugin's dynamic symbols.
func ReadSlurmPlugin(path string) (SlurmPlugin, error) {
	var p SlurmPlugin
	f, err := elf.Open(path)
	if err != nil {
		return p, fmt.Errorf("plugin %s: %w", path, err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		return p, fmt.Errorf("plugin %s: read its dynamic symbols: %w", path, err)
	}
	found := false
	for _, s := range syms {
		switch s.Name {
		case "plugin_version":
			var b []byte
			if b, err = symbolBytes(f, s, 4); err == nil {
				p.Version, found = slurmVersionNumber(f.ByteOrder.Uint32(b)), true
			}
		case "plugin_type":
			var b []byte
			if b, err = symbolBytes(f, s, s.Size); err == nil {
				p.Type = string(bytes.TrimRight(b, "\x00"))
			}
		case "gpubind_launcher_path":
			var b []byte
			if b, err = symbolBytes(f, s, s.Size); err == nil {
				p.Launcher = string(bytes.TrimRight(b, "\x00"))
			}
		}
		if err != nil {
			return p, fmt.Errorf("plugin %s: %s: %w", path, s.Name, err)
		}
	}
	if !found {
		return p, fmt.Errorf("plugin %s: no plugin_version symbol: not a Slurm plugin", path)
	}
	return p, nil
}

// PluginSlurmVersion reads the Slurm version a SPANK plugin was built for from its
// plugin_version symbol, the number Slurm itself checks when it loads the plugin.
func PluginSlurmVersion(path string) (SlurmVersion, error) {
	p, err := ReadSlurmPlugin(path)
	return p.Version, err
}

// symbolBytes reads n bytes at a symbol's address from the section holding it.
func symbolBytes(f *elf.File, s elf.Symbol, n uint64) ([]byte, error) {
	for _, sec := range f.Sections {
		if sec.Type == elf.SHT_NOBITS || s.Value < sec.Addr || s.Value+n > sec.Addr+sec.Size {
			continue
		}
		b := make([]byte, n)
		if _, err := sec.ReadAt(b, int64(s.Value-sec.Addr)); err != nil {
			return nil, err
		}
		return b, nil
	}
	return nil, errors.New("not in any section of the file")
}

// ParseSlurmdVersion parses the output of `slurmd -V`: "slurm 26.05.3", or on Debian
// "slurm-wlm 22.05.8". A suffix after the micro number ("-1", "rc1") is ignored.
func ParseSlurmdVersion(out string) (SlurmVersion, error) {
	bad := fmt.Errorf("`slurmd -V` printed %q: expected \"slurm MAJOR.MINOR.MICRO\"", strings.TrimSpace(out))
	name, ver, ok := strings.Cut(strings.TrimSpace(out), " ")
	if !ok || (name != "slurm" && name != "slurm-wlm") {
		return SlurmVersion{}, bad
	}
	parts := strings.SplitN(strings.Fields(ver)[0], ".", 3)
	if len(parts) != 3 {
		return SlurmVersion{}, bad
	}
	micro := parts[2]
	if i := strings.IndexFunc(micro, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		micro = micro[:i]
	}
	var v SlurmVersion
	var errs [3]error
	v.Major, errs[0] = strconv.Atoi(parts[0])
	v.Minor, errs[1] = strconv.Atoi(parts[1])
	v.Micro, errs[2] = strconv.Atoi(micro)
	for _, err := range errs {
		if err != nil {
			return SlurmVersion{}, bad
		}
	}
	return v, nil
}
