package main

import (
	"bufio"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
)

// volumeDir is where a volume's files live under the state directory. The ID is
// the name the provisioner chose (pvc-<uid>), never a path: anything that could
// leave the state directory is refused.
func volumeDir(stateDir, id string) (string, error) {
	if id == "" || id == "." || id == ".." || strings.ContainsAny(id, "/\x00") {
		return "", fmt.Errorf("volume ID %q is not a plain name", id)
	}
	return filepath.Join(stateDir, id), nil
}

// reachable says whether a volume made on node may be used where the
// requirement's topologies allow. A request without topologies (a claim bound
// without a node, which this driver's WaitForFirstConsumer class never makes)
// is taken as allowing any node.
func reachable(node string, requisite, preferred []map[string]string) bool {
	if len(requisite) == 0 && len(preferred) == 0 {
		return true
	}
	for _, segments := range append(append([]map[string]string{}, requisite...), preferred...) {
		if v, ok := segments[topologyKey]; ok && v == node {
			return true
		}
	}
	return false
}

// mountPoints reads /proc/self/mountinfo: the mount point is the fifth field,
// with space, tab, newline and backslash written as octal escapes.
func mountPoints(r io.Reader) ([]string, error) {
	var points []string
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 64*1024), 1024*1024)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 5 {
			return nil, fmt.Errorf("mountinfo line %q has fewer than five fields", s.Text())
		}
		points = append(points, unescapeOctal(fields[4]))
	}
	return points, s.Err()
}

func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// isMountPoint says whether path is in the list, compared as clean paths.
func isMountPoint(points []string, path string) bool {
	path = filepath.Clean(path)
	for _, p := range points {
		if filepath.Clean(p) == path {
			return true
		}
	}
	return false
}
