package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakePlugin compiles a shared object whose plugin_version is what SPANK_PLUGIN writes for
// Slurm 26.05.3, and fakeSlurmd a slurmd that prints version.
func fakePlugin(t *testing.T) string {
	dir := t.TempDir()
	src, so := filepath.Join(dir, "p.c"), filepath.Join(dir, "spank_gpubind.so")
	require.NoError(t, os.WriteFile(src, []byte("const unsigned int plugin_version = 0x1a0503;\n"), 0o644))
	if out, err := exec.Command("cc", "-shared", "-fPIC", "-o", so, src).CombinedOutput(); err != nil {
		t.Skipf("no C compiler: %v %s", err, out)
	}
	return so
}

func fakeSlurmd(t *testing.T, version string) string {
	p := filepath.Join(t.TempDir(), "slurmd")
	require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\necho '"+version+"'\n"), 0o755))
	return p
}

func TestVersionRefusesAnotherSlurm(t *testing.T) {
	plugin := fakePlugin(t)
	var out, errOut bytes.Buffer

	rc := run([]string{"version", "--plugin", plugin, "--slurmd", fakeSlurmd(t, "slurm 26.05.9")}, &out, &errOut)
	assert.Equal(t, 0, rc, errOut.String())
	assert.Contains(t, out.String(), "built for Slurm 26.05 (headers 26.05.3)")
	assert.Contains(t, out.String(), "Slurm 26.05.9 loads it")

	out.Reset()
	errOut.Reset()
	slurmd := fakeSlurmd(t, "slurm-wlm 22.05.8")
	rc = run([]string{"--version", "--plugin", plugin, "--slurmd", slurmd}, &out, &errOut)
	assert.Equal(t, 1, rc)
	assert.Contains(t, errOut.String(), "built against Slurm 26.05.3 but "+slurmd+" is Slurm 22.05.8")

	errOut.Reset()
	rc = run([]string{"version", "--plugin", plugin, "--slurmd", fakeSlurmd(t, "garbage")}, &out, &errOut)
	assert.Equal(t, 1, rc)
	assert.Contains(t, errOut.String(), `printed "garbage"`)

	errOut.Reset()
	rc = run([]string{"version", "--plugin", filepath.Join(t.TempDir(), "none.so")}, &out, &errOut)
	assert.Equal(t, 1, rc)
	assert.Contains(t, errOut.String(), "none.so")

	rc = run([]string{"version", "extra"}, &out, &errOut)
	assert.Equal(t, 2, rc)
}
