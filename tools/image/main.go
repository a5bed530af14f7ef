// Command image writes tickd's container image as an OCI archive (what
// `podman load -i` and `skopeo copy oci-archive:` read), with no container
// engine and no base image to pull: one layer holding the static binary,
// the example config, an account table naming the non-root user, a /tmp
// and, when the build host has them, the CA certificates rediss:// needs.
// One image per architecture, in one index. packaging/build runs it:
//
//	go -C tools run ./image -version V -revision R -config config.example.toml \
//	    -out dist/tickd-image.tar amd64=/path/to/tickd arm64=/path/to/tickd
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's user: not root, and no account of the host's (65532 is the
// "nonroot" of distroless images, which operators' policies often expect).
const (
	uid = 65532
	gid = 65532
)

// caBundle is where Debian keeps the CA certificates; Go reads it there.
const caBundle = "etc/ssl/certs/ca-certificates.crt"

type build struct {
	version, revision string
	created           time.Time
	config            []byte
	ca                []byte // nil when the build host has none
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fl := flag.NewFlagSet("image", flag.ContinueOnError)
	version := fl.String("version", "", "the image's version (a label, and its tag)")
	revision := fl.String("revision", "", "the git commit it was built from")
	cfgPath := fl.String("config", "", "the config baked in at /etc/tickd/config.toml")
	out := fl.String("out", "", "the OCI archive to write")
	created := fl.String("created", "", "its creation time, RFC 3339 (default: now)")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if *version == "" || *cfgPath == "" || *out == "" || fl.NArg() == 0 {
		return errors.New("usage: image -version V -revision R -config FILE -out FILE ARCH=BINARY [ARCH=BINARY]")
	}
	b := build{version: *version, revision: *revision, created: time.Now().UTC().Truncate(time.Second)}
	if *created != "" {
		t, err := time.Parse(time.RFC3339, *created)
		if err != nil {
			return fmt.Errorf("-created: %w", err)
		}
		b.created = t.UTC()
	}
	var err error
	if b.config, err = os.ReadFile(*cfgPath); err != nil {
		return err
	}
	if b.ca, err = os.ReadFile("/" + caBundle); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, a := range fl.Args() {
		arch, bin, ok := strings.Cut(a, "=")
		if !ok {
			return fmt.Errorf("%q: want ARCH=BINARY", a)
		}
		img, err := b.image(arch, bin)
		if err != nil {
			return fmt.Errorf("%s: %w", arch, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}}})
	}
	return writeArchive(*out, idx, "tickd:"+tag(b.version))
}

// tag is version as an image tag may spell it (letters, digits, _ . -).
func tag(version string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-' {
			return r
		}
		return '-'
	}, version)
}

// image is the image for one architecture.
func (b build) image(arch, bin string) (v1.Image, error) {
	tickd, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	data, err := b.layer(tickd)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	if img, err = mutate.AppendLayers(img, layer); err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Created = v1.Time{Time: b.created}
	cf.Config = v1.Config{
		Entrypoint: []string{"tickd"},
		Cmd:        []string{"run", "-config", "/etc/tickd/config.toml"},
		Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
		User:       fmt.Sprintf("%d:%d", uid, gid),
		WorkingDir: "/",
		StopSignal: "SIGTERM",
		Labels:     b.labels(),
	}
	return mutate.ConfigFile(img, cf)
}

// labels are the OCI annotations' keys, as image labels.
func (b build) labels() map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       "tickd",
		"org.opencontainers.image.description": "Scheduler daemon for recurring singleton tasks under Redis leases",
		"org.opencontainers.image.version":     b.version,
		"org.opencontainers.image.revision":    b.revision,
		"org.opencontainers.image.created":     b.created.Format(time.RFC3339),
		"org.opencontainers.image.source":      "https://github.com/tickd/tickd",
		"org.opencontainers.image.vendor":      "tickd",
		"org.opencontainers.image.licenses":    "Apache-2.0",
	}
}

// entry is a file of the layer, or a directory (a name ending in "/").
type entry struct {
	name string
	mode int64
	data []byte
}

// layer is the image's one layer, as an uncompressed tar.
func (b build) layer(tickd []byte) ([]byte, error) {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\ntickd:x:%d:%d:tickd:/:/sbin/nologin\n", uid, gid)
	group := fmt.Sprintf("root:x:0:\ntickd:x:%d:\n", gid)
	entries := []entry{
		{"etc/", 0o755, nil},
		{"etc/passwd", 0o644, []byte(passwd)},
		{"etc/group", 0o644, []byte(group)},
		{"etc/tickd/", 0o755, nil},
		{"etc/tickd/config.toml", 0o644, b.config},
		{"tmp/", 0o1777, nil},
		{"usr/", 0o755, nil},
		{"usr/bin/", 0o755, nil},
		{"usr/bin/tickd", 0o755, tickd},
	}
	if b.ca != nil {
		entries = append(entries, entry{"etc/ssl/", 0o755, nil}, entry{"etc/ssl/certs/", 0o755, nil}, entry{caBundle, 0o644, b.ca})
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Typeflag: tar.TypeReg, Name: e.name, Mode: e.mode, Size: int64(len(e.data)), ModTime: b.created}
		if strings.HasSuffix(e.name, "/") {
			h.Typeflag = tar.TypeDir
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeArchive writes idx as an OCI layout whose index names it ref, and
// tars the layout into out. The layout's index holds one entry, the
// multi-architecture index: an engine loading the archive takes its own
// architecture's image from it.
func writeArchive(out string, idx v1.ImageIndex, ref string) error {
	dir, err := os.MkdirTemp("", "tickd-image")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	top := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), mutate.IndexAddendum{Add: idx,
		Descriptor: v1.Descriptor{Annotations: map[string]string{"org.opencontainers.image.ref.name": ref}}})
	if _, err := layout.Write(dir, top); err != nil {
		return err
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		return addToTar(tw, dir, path, d)
	})
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// addToTar adds the layout's file or directory at path to tw, named
// relative to dir.
func addToTar(tw *tar.Writer, dir, path string, d fs.DirEntry) error {
	info, err := d.Info()
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(dir, path)
	if err != nil {
		return err
	}
	h, err := tar.FileInfoHeader(info, "")
	if err != nil {
		return err
	}
	h.Name = filepath.ToSlash(rel)
	h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
	if d.IsDir() {
		h.Name += "/"
		return tw.WriteHeader(h)
	}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(tw, f)
	return err
}
