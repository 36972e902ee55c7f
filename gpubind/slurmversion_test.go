package gpubind

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseSlurmdVersion(t *testing.T) {
	for in, want := range map[string]SlurmVersion{
		"slurm 26.05.3\n":     {26, 5, 3},
		"slurm-wlm 22.05.8\n": {22, 5, 8},
		"slurm 24.11.7-1":     {24, 11, 7},
	} {
		got, err := ParseSlurmdVersion(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "slurmd: error: foo", "slurm 26.05", "slurm x.y.z", "munge 0.5.15"} {
		_, err := ParseSlurmdVersion(in)
		assert.Error(t, err, in)
	}
	assert.Equal(t, "26.05.3", SlurmVersion{26, 5, 3}.String())
}

func TestLoadsSpank(t *testing.T) {
	assert.True(t, SlurmVersion{26, 5, 3}.LoadsSpank(SlurmVersion{26, 5, 0}), "micro releases share the SPANK ABI")
	assert.False(t, SlurmVersion{26, 5, 3}.LoadsSpank(SlurmVersion{22, 5, 8}))
	assert.False(t, SlurmVersion{24, 11, 7}.LoadsSpank(SlurmVersion{24, 5, 7}))
}

// A plugin compiled here with SPANK_PLUGIN's plugin_version = SLURM_VERSION_NUMBER carries
// the version of the spank.h it saw; a file that is no Slurm plugin is refused by name.
func TestPluginSlurmVersion(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "p.c")
	so := filepath.Join(dir, "p.so")
	require.NoError(t, os.WriteFile(src, []byte(
		"const unsigned int plugin_version = 0x1a0503;\nconst char plugin_type[] = \"spank\";\n"), 0o644))
	if out, err := exec.Command("cc", "-shared", "-fPIC", "-o", so, src).CombinedOutput(); err != nil {
		t.Skipf("no C compiler: %v %s", err, out)
	}
	v, err := PluginSlurmVersion(so)
	require.NoError(t, err)
	assert.Equal(t, SlurmVersion{26, 5, 3}, v)

	require.NoError(t, os.WriteFile(src, []byte("int x;\n"), 0o644))
	out, err := exec.Command("cc", "-shared", "-fPIC", "-o", so, src).CombinedOutput()
	require.NoError(t, err, string(out))
	_, err = PluginSlurmVersion(so)
	assert.ErrorContains(t, err, "no plugin_version symbol")
	_, err = PluginSlurmVersion(src)
	assert.ErrorContains(t, err, src)
}
