// Command imagebuild turns static binaries into a one-layer linux/amd64 OCI image
// and writes it as an archive, so images for the local cluster's real nodes need
// neither Docker nor a registry. -format docker (the default) writes what `docker
// load` and `ctr images import` read; -format oci writes an OCI image layout as a
// tar, which skopeo, crane, ctr and registries' tools read.
//
//	imagebuild -o out.tar -t name:tag [-t other:tag] -entrypoint /bin/prog \
//	    [-format docker|oci] [-env K=V] [-user 65532] [-workdir /] src:/dest[:mode] ...
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	var tags, env list
	out := flag.String("o", "", "archive to write")
	entrypoint := flag.String("entrypoint", "", "entrypoint, words separated by spaces")
	user := flag.String("user", "", "user the image runs as by default")
	workdir := flag.String("workdir", "/", "working directory")
	format := flag.String("format", "docker", "archive format: docker or oci")
	flag.Var(&tags, "t", "image reference (repeatable)")
	flag.Var(&env, "env", "environment variable K=V (repeatable)")
	flag.Parse()
	if *out == "" || len(tags) == 0 || *entrypoint == "" || flag.NArg() == 0 || (*format != "docker" && *format != "oci") {
		fmt.Fprintln(os.Stderr, "usage: imagebuild -o out.tar -t ref -entrypoint prog src:/dest[:mode] ...")
		os.Exit(2)
	}
	if err := build(*out, *format, tags, env, strings.Fields(*entrypoint), *user, *workdir, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(1)
	}
}

type entry struct {
	src, dest string
	mode      int64
}

func parseEntry(arg string) (entry, error) {
	parts := strings.Split(arg, ":")
	if len(parts) < 2 || len(parts) > 3 || !strings.HasPrefix(parts[1], "/") {
		return entry{}, fmt.Errorf("%q is not src:/dest[:mode]", arg)
	}
	e := entry{src: parts[0], dest: path.Clean(parts[1]), mode: 0o755}
	if len(parts) == 3 {
		m, err := strconv.ParseInt(parts[2], 8, 32)
		if err != nil {
			return entry{}, fmt.Errorf("mode of %q: %w", arg, err)
		}
		e.mode = m
	}
	return e, nil
}

// layer is a tar of the files with their parent directories and /tmp, owned by
// root, with a fixed time so that the same inputs give the same image ID.
func layer(entries []entry) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	dirs := map[string]bool{"tmp": true}
	for _, e := range entries {
		for d := path.Dir(strings.TrimPrefix(e.dest, "/")); d != "." && d != ""; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	sorted := make([]string, 0, len(dirs))
	for d := range dirs {
		sorted = append(sorted, d)
	}
	sort.Strings(sorted)
	for _, d := range sorted {
		mode := int64(0o755)
		if d == "tmp" {
			// Programs running as a non-root user may need a writable /tmp.
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: mode, ModTime: epoch}); err != nil {
			return nil, err
		}
	}
	for _, e := range entries {
		data, err := os.ReadFile(e.src)
		if err != nil {
			return nil, err
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(e.dest, "/"), Mode: e.mode, Size: int64(len(data)), ModTime: epoch}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func build(out, format string, tags, env, entrypoint []string, user, workdir string, args []string) error {
	var entries []entry
	for _, a := range args {
		e, err := parseEntry(a)
		if err != nil {
			return err
		}
		entries = append(entries, e)
	}
	data, err := layer(entries)
	if err != nil {
		return err
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		return err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", "amd64"
	cfg.Created = v1.Time{Time: time.Unix(0, 0)}
	cfg.Config.Entrypoint = entrypoint
	cfg.Config.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin"}, env...)
	cfg.Config.User = user
	cfg.Config.WorkingDir = workdir
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return err
	}
	tmp := out + ".tmp"
	if format == "oci" {
		if err := writeOCI(tmp, img, tags); err != nil {
			return err
		}
		return os.Rename(tmp, out)
	}
	refs := map[name.Reference]v1.Image{}
	for _, t := range tags {
		ref, err := name.NewTag(t)
		if err != nil {
			return err
		}
		refs[ref] = img
	}
	if err := tarball.MultiRefWriteToFile(tmp, refs); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

// writeOCI writes an OCI image layout holding the image once per tag, annotated
// the way containerd (full reference) and skopeo (tag) look for it, as a tar.
func writeOCI(out string, img v1.Image, tags []string) error {
	dir, err := os.MkdirTemp("", "imagebuild-oci-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	for _, t := range tags {
		ref, err := name.NewTag(t)
		if err != nil {
			return err
		}
		annotations := map[string]string{
			"io.containerd.image.name":          ref.Name(),
			"org.opencontainers.image.ref.name": ref.TagStr(),
		}
		if err := p.AppendImage(img, layout.WithAnnotations(annotations)); err != nil {
			return err
		}
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	if err := tw.AddFS(os.DirFS(dir)); err != nil {
		f.Close()
		return err
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
