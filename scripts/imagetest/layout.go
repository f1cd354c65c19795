// Package imagetest checks the container image that `make image`
// (scripts/image.sh) builds: its files against the layout the Dockerfile's
// final stage declares, its configuration and labels, and, run with podman,
// that its two binaries carry a passport end to end as user 65532.
//
// The tests need buildah, podman, runc and musl-gcc (Debian: apt-get install
// buildah podman runc musl-tools). Without them they fail and say so, unless
// IMAGE_TEST=off opts out explicitly (then they skip, saying so).
//
// This file holds the two readers the tests compare: the Dockerfile's final
// stage and an OCI image archive.
package imagetest

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
)

// FinalStageFiles returns the image paths the COPY and ADD lines of the last
// stage of a Dockerfile place, one per source file: a destination ending in
// "/" receives each source under its base name. Sources are taken as files
// (the Dockerfile names each file it copies, so that this list is the
// layout).
func FinalStageFiles(dockerfile []byte) ([]string, error) {
	var stage [][]string
	from := false
	for _, line := range logicalLines(dockerfile) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if strings.EqualFold(fields[0], "FROM") {
			stage, from = nil, true
		}
		stage = append(stage, fields)
	}
	if !from {
		return nil, fmt.Errorf("dockerfile: no FROM")
	}
	var files []string
	for _, f := range stage {
		if op := strings.ToUpper(f[0]); op != "COPY" && op != "ADD" {
			continue
		}
		args := f[1:]
		for len(args) > 0 && strings.HasPrefix(args[0], "--") {
			args = args[1:]
		}
		if len(args) > 0 && strings.HasPrefix(args[0], "[") {
			return nil, fmt.Errorf("dockerfile: %s in JSON form is not supported here: %q", f[0], strings.Join(f, " "))
		}
		if len(args) < 2 {
			return nil, fmt.Errorf("dockerfile: %q: want sources and a destination", strings.Join(f, " "))
		}
		srcs, dst := args[:len(args)-1], args[len(args)-1]
		if !strings.HasSuffix(dst, "/") {
			if len(srcs) > 1 {
				return nil, fmt.Errorf("dockerfile: %q: several sources need a destination ending in /", strings.Join(f, " "))
			}
			files = append(files, path.Clean(dst))
			continue
		}
		for _, s := range srcs {
			if strings.HasSuffix(s, "/") || strings.ContainsAny(s, "*?[") {
				return nil, fmt.Errorf("dockerfile: %q: copy named files, not directories or globs, so that the stage declares the layout", strings.Join(f, " "))
			}
			files = append(files, path.Join(dst, path.Base(s)))
		}
	}
	return files, nil
}

// logicalLines joins backslash continuations and drops comments and blank
// lines.
func logicalLines(b []byte) []string {
	var out []string
	var cur strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || (line == "" && cur.Len() == 0) {
			continue
		}
		if cont, ok := strings.CutSuffix(line, "\\"); ok {
			cur.WriteString(cont + " ")
			continue
		}
		cur.WriteString(line)
		out = append(out, cur.String())
		cur.Reset()
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

// File is one entry of an image's filesystem.
type File struct {
	Mode     fs.FileMode
	UID, GID int
	Data     []byte // regular files only
	Link     string // symlinks only
}

// Config is the part of the OCI image configuration the tests check.
type Config struct {
	Created string `json:"created"`
	Config  struct {
		User       string            `json:"User"`
		Cmd        []string          `json:"Cmd"`
		Entrypoint []string          `json:"Entrypoint"`
		Labels     map[string]string `json:"Labels"`
	} `json:"config"`
}

// Image is an OCI archive's single image, its layers applied in order.
type Image struct {
	RefName string // the org.opencontainers.image.ref.name annotation
	Config  Config
	Files   map[string]File // keyed by absolute path
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Annotations map[string]string `json:"annotations"`
}

// ReadArchive reads an OCI image archive (an oci-layout directory as a tar)
// holding one image.
func ReadArchive(file string) (*Image, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("open archive: %w", err)
	}
	defer f.Close()
	entries := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read archive %s: %w", file, err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("read archive entry %s: %w", h.Name, err)
		}
		entries[path.Clean(h.Name)] = b
	}
	blob := func(d descriptor) ([]byte, error) {
		algo, hex, ok := strings.Cut(d.Digest, ":")
		b, found := entries[path.Join("blobs", algo, hex)]
		if !ok || !found {
			return nil, fmt.Errorf("archive %s: no blob %q", file, d.Digest)
		}
		return b, nil
	}

	var index struct{ Manifests []descriptor }
	if err := json.Unmarshal(entries["index.json"], &index); err != nil {
		return nil, fmt.Errorf("archive %s: index.json: %w", file, err)
	}
	if len(index.Manifests) != 1 {
		return nil, fmt.Errorf("archive %s: %d images, want 1", file, len(index.Manifests))
	}
	mb, err := blob(index.Manifests[0])
	if err != nil {
		return nil, err
	}
	var manifest struct {
		Config descriptor
		Layers []descriptor
	}
	if err := json.Unmarshal(mb, &manifest); err != nil {
		return nil, fmt.Errorf("archive %s: manifest: %w", file, err)
	}
	img := &Image{RefName: index.Manifests[0].Annotations["org.opencontainers.image.ref.name"], Files: map[string]File{}}
	cb, err := blob(manifest.Config)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(cb, &img.Config); err != nil {
		return nil, fmt.Errorf("archive %s: config: %w", file, err)
	}
	for _, l := range manifest.Layers {
		lb, err := blob(l)
		if err != nil {
			return nil, err
		}
		if err := applyLayer(img.Files, lb, strings.HasSuffix(l.MediaType, "+gzip")); err != nil {
			return nil, fmt.Errorf("archive %s: layer %s: %w", file, l.Digest, err)
		}
	}
	return img, nil
}

func applyLayer(files map[string]File, layer []byte, gzipped bool) error {
	var r io.Reader = bytes.NewReader(layer)
	if gzipped {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return err
		}
		defer zr.Close()
		r = zr
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Join("/", h.Name)
		if dir, base := path.Split(name); strings.HasPrefix(base, ".wh.") {
			// An OCI whiteout deletes what a lower layer put there.
			delete(files, path.Join(dir, strings.TrimPrefix(base, ".wh.")))
			continue
		}
		f := File{Mode: h.FileInfo().Mode(), UID: h.Uid, GID: h.Gid}
		switch h.Typeflag {
		case tar.TypeReg:
			if f.Data, err = io.ReadAll(tr); err != nil {
				return err
			}
		case tar.TypeSymlink:
			f.Link = h.Linkname
		}
		files[name] = f
	}
}
