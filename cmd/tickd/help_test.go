package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHelpGolden holds every command's -h to testdata/help/COMMAND.txt, so
// that a change to a command's flags or words is seen in review (an
// internal type's name once leaked into check's -from help). Run with
// TICKD_UPDATE_GOLDEN=1 to write the files anew.
func TestHelpGolden(t *testing.T) {
	t.Parallel()
	for _, cmd := range commands {
		t.Run(cmd, func(t *testing.T) {
			var out, errs strings.Builder
			code := run(context.Background(), []string{cmd, "-h"}, &out, &errs)
			if code != 0 || errs.Len() > 0 {
				t.Fatalf("%s -h: exit %d, stderr %q", cmd, code, errs.String())
			}
			got := out.String()
			for _, leak := range []string{"report.", "scheduler.", "lease.", `(default "`} {
				if strings.Contains(got, leak) && !(leak == `(default "` && strings.Contains(got, `(default "/etc/tickd/config.toml")`) && strings.Count(got, `(default "`) == 1) {
					t.Errorf("%s -h says %q:\n%s", cmd, leak, got)
				}
			}
			path := filepath.Join("testdata", "help", cmd+".txt")
			if os.Getenv("TICKD_UPDATE_GOLDEN") != "" {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (TICKD_UPDATE_GOLDEN=1 writes it)", err)
			}
			if got != string(want) {
				t.Errorf("%s -h changed (TICKD_UPDATE_GOLDEN=1 to accept):\n--- got\n%s\n--- want\n%s", cmd, got, want)
			}
		})
	}
}
