package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gpubind/gpubind/tests/fixtures"
	"github.com/gpubind/gpubind/tests/tabletext"
)

// FuzzParseRequest: any request text gives a request or an error, never a panic; and
// handle on any request (topology from a fixture snapshot) always writes a
// well-formed table.
func FuzzParseRequest(f *testing.F) {
	f.Add("option=closest\nlocal_tasks=2\nglobal_ids=0,1\nenv.SLURM_STEP_GPUS=0,1\nuid=1000\ngid=1000\n")
	f.Add("local_tasks=1\nmode=optional\nforce=nic\nnever=isolate\n")
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = parseRequest(s)
		var buf bytes.Buffer
		// Pin the source to a fixture snapshot so the fuzzer never touches the host.
		req := "source=snapshot\nsnapshot=" + fixtures.Snapshot("dgxh100") + "\n" + strings.NewReplacer("source=", "x=", "snapshot=", "y=", "uid=", "u=", "gid=", "g=").Replace(s)
		_ = handle(req, &buf)
		if _, err := tabletext.Parse(&buf); err != nil {
			t.Fatalf("Run wrote a bad table for %q: %v\n%s", s, err, buf.String())
		}
	})
}
