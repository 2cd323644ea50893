package hf

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
)

// The file names transformers' save_pretrained writes.
const (
	ConfigName       = "config.json"
	WeightsName      = "model.safetensors"
	WeightsIndexName = "model.safetensors.index.json"
)

// MaxIndexSize bounds a model.safetensors.index.json (a large model's
// lists some tens of thousands of tensors, a few megabytes).
const MaxIndexSize = 64 << 20

// Checkpoint is a model's safetensors weights as their headers describe
// them: one file, or the shards a model.safetensors.index.json names.
type Checkpoint struct {
	// Path is the .safetensors file or the index.
	Path string
	// WeightMap is the index's weight_map, tensor → shard file (nil for a
	// single file).
	WeightMap map[string]string
	// Files holds one header per file, sorted by path.
	Files []*Header
}

// Tensors counts the tensors of all files.
func (c *Checkpoint) Tensors() int {
	n := 0
	for _, h := range c.Files {
		n += len(h.Tensors)
	}
	return n
}

func findCheckpoint(fsys fs.FS, dir string) (string, error) {
	for _, name := range []string{WeightsName, WeightsIndexName} {
		p := filepath.Join(dir, name)
		st, err := fs.Stat(fsys, p)
		if err == nil {
			if st.IsDir() {
				return "", fmt.Errorf("%s is a directory", p)
			}
			return p, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
	}
	return "", nil
}

// ReadCheckpoint reads the headers of a safetensors checkpoint: path is a
// .safetensors file or a sharded checkpoint's index (a .json file).
func ReadCheckpoint(path string) (*Checkpoint, error) { return readCheckpoint(osFiles{}, path) }

func readCheckpoint(fsys fs.FS, path string) (*Checkpoint, error) {
	if strings.HasSuffix(path, ".json") {
		return readIndex(fsys, path)
	}
	h, err := readHeader(fsys, path)
	if err != nil {
		return nil, err
	}
	return &Checkpoint{Path: path, Files: []*Header{h}}, nil
}

// ReadIndex reads a model.safetensors.index.json and the header of every
// shard its weight_map names, each file once. Shard names are relative to
// the index's directory and must stay inside it. Every tensor of the
// weight_map must be in the shard it names, and every tensor of a shard
// must be listed there, against that shard.
func ReadIndex(path string) (*Checkpoint, error) { return readIndex(osFiles{}, path) }

func readIndex(fsys fs.FS, path string) (*Checkpoint, error) {
	data, err := readAll(fsys, path, MaxIndexSize, "a safetensors index")
	if err != nil {
		return nil, err
	}
	var index struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(data, &index); err != nil {
		return nil, fmt.Errorf("%s: not a safetensors index: %v", path, err)
	}
	if len(index.WeightMap) == 0 {
		return nil, fmt.Errorf("%s: weight_map: missing or empty", path)
	}
	dir := filepath.Dir(path)
	shards := map[string][]string{} // shard → its tensors in the index
	for tensor, shard := range index.WeightMap {
		if !filepath.IsLocal(shard) {
			return nil, fmt.Errorf("%s: weight_map: tensor %q: shard %q is not a file beside the index", path, tensor, shard)
		}
		shards[shard] = append(shards[shard], tensor)
	}
	names := make([]string, 0, len(shards))
	for s := range shards {
		names = append(names, s)
	}
	sort.Strings(names)
	ck := &Checkpoint{Path: path, WeightMap: index.WeightMap}
	for _, shard := range names {
		h, err := readHeader(fsys, filepath.Join(dir, shard))
		if err != nil {
			return nil, fmt.Errorf("%s: shard %w", path, err)
		}
		have := make(map[string]bool, len(h.Tensors))
		for _, t := range h.Tensors {
			have[t.Name] = true
			switch in, ok := index.WeightMap[t.Name]; {
			case !ok:
				return nil, fmt.Errorf("%s: shard %s holds %q, which the weight_map does not list", path, shard, t.Name)
			case in != shard:
				return nil, fmt.Errorf("%s: shard %s holds %q, which the weight_map puts in %s", path, shard, t.Name, in)
			}
		}
		missing := []string{}
		for _, t := range shards[shard] {
			if !have[t] {
				missing = append(missing, t)
			}
		}
		if len(missing) > 0 {
			sort.Strings(missing)
			return nil, fmt.Errorf("%s: the weight_map puts %d tensors in %s that it does not hold (%s)", path, len(missing), shard, firstNames(missing, 3))
		}
		ck.Files = append(ck.Files, h)
	}
	return ck, nil
}

// firstNames quotes up to n names, saying how many more there are.
func firstNames(names []string, n int) string {
	q := make([]string, 0, n)
	for i, s := range names {
		if i == n {
			q = append(q, fmt.Sprintf("and %d more", len(names)-n))
			break
		}
		q = append(q, fmt.Sprintf("%q", s))
	}
	return strings.Join(q, ", ")
}
