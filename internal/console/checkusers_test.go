package console

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/tickd/tickd/config"
)

// TestCheckUsers: the [web] users are read as the console reads them at
// start (CheckUsers, which tickd check and tickd run call), each mistake
// said with the config's file, line and key; config.Parse itself reads no
// users' file (a config is data).
func TestCheckUsers(t *testing.T) {
	dir := t.TempDir()
	hash := func(cost int) string {
		h, err := bcrypt.GenerateFromPassword([]byte("pw"), cost)
		if err != nil {
			t.Fatal(err)
		}
		return string(h)
	}
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", "ops:"+hash(bcrypt.MinCost)+"\nalice:"+hash(bcrypt.MinCost)+"\n")
	md5 := write("md5", "ops:$apr1$hGv1Y0Ej$0Vf8yqZQ4XqfIq1bF7L3f/\n")
	mixed := write("mixed", "ops:"+hash(bcrypt.MinCost)+"\nalice:"+hash(bcrypt.MinCost+1)+"\n")
	web := func(file string, admins string) string {
		return fmt.Sprintf("[web]\nlisten = \"127.0.0.1:8080\"\nhtpasswd_file = %q\nadmins = %s\n", file, admins) + "[[tasks]]\nname = \"a\"\nevery = \"1m\"\ncommand = [\"true\"]\n"
	}
	for _, c := range []struct{ name, toml, want string }{
		{"a missing file", web(filepath.Join(dir, "none"), `["ops"]`), "cfg.toml:3: web.htpasswd_file: open " + filepath.Join(dir, "none") + ": no such file or directory"},
		{"an MD5 entry", web(md5, `["ops"]`), "cfg.toml:3: web.htpasswd_file: " + md5 + `:1: user "ops": not a bcrypt hash (make it with htpasswd -B -C 10)`},
		{"hashes of two costs", web(mixed, `["ops"]`), "cfg.toml:3: web.htpasswd_file: " + mixed + ": the hashes have different bcrypt costs (cost 4: ops; cost 5: alice)"},
		{"an admin who is no user", web(good, `["ops", "bob"]`), `cfg.toml:4: web.admins: "bob" is not a user of ` + good},
	} {
		cfg, err := config.Parse("cfg.toml", []byte(c.toml))
		if err != nil {
			t.Fatalf("%s: config.Parse: %v (it reads no users' file)", c.name, err)
		}
		if err := CheckUsers(cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.name, err, c.want)
		}
	}
	cfg, err := config.Parse("cfg.toml", []byte(web(good, `["ops"]`)))
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckUsers(cfg); err != nil {
		t.Errorf("good users refused: %v", err)
	}
}
