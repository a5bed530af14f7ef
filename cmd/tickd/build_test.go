package main

import (
	"debug/elf"
	"strings"
	"testing"

	"github.com/tickd/tickd/internal/testkit/tickdtest"
)

// TestStaticBinaryWithZones: the binary built as the README builds it
// (CGO_ENABLED=0) is static (no program interpreter, so no libc needed)
// and carries the zone database, so a timezone works in a container
// without tzdata.
func TestStaticBinaryWithZones(t *testing.T) {
	t.Parallel()
	bin, _ := tickdtest.Binaries(t)
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary has a program interpreter: it is dynamically linked (build with CGO_ENABLED=0)")
		}
	}
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range syms {
		if strings.HasPrefix(s.Name, "time/tzdata.") {
			found = true
			break
		}
	}
	if !found {
		t.Error("the binary does not embed time/tzdata: a timezone fails on a host without tzdata")
	}
}
