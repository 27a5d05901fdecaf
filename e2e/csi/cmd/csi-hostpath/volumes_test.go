package main

import (
	"reflect"
	"strings"
	"testing"
)

func TestVolumeDirTakesOnlyPlainNames(t *testing.T) {
	got, err := volumeDir("/csi-data-dir", "pvc-1234")
	if err != nil || got != "/csi-data-dir/pvc-1234" {
		t.Fatalf("got %q, %v", got, err)
	}
	for _, id := range []string{"", ".", "..", "../etc", "a/b", "/abs", "x\x00y"} {
		if _, err := volumeDir("/csi-data-dir", id); err == nil {
			t.Errorf("volume ID %q was accepted", id)
		}
	}
}

func TestReachableOnlyFromTheRequestedNode(t *testing.T) {
	on := func(node string) map[string]string { return map[string]string{topologyKey: node} }
	cases := []struct {
		name                 string
		requisite, preferred []map[string]string
		want                 bool
	}{
		{"no requirement", nil, nil, true},
		{"this node required", []map[string]string{on("real-a")}, nil, true},
		{"this node preferred", nil, []map[string]string{on("real-b"), on("real-a")}, true},
		{"another node only", []map[string]string{on("real-b")}, []map[string]string{on("real-b")}, false},
		{"another driver's key", []map[string]string{{"kubernetes.io/hostname": "real-a"}}, nil, false},
	}
	for _, c := range cases {
		if got := reachable("real-a", c.requisite, c.preferred); got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

func TestMountPointsUnescapesPaths(t *testing.T) {
	info := `22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/vda rw
310 22 8:1 /csi/pvc-1 /var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/pvc-1/mount rw shared:1 - ext4 /dev/vda rw
311 22 0:5 / /mnt/with\040space rw - tmpfs tmpfs rw
`
	points, err := mountPoints(strings.NewReader(info))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/", "/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/pvc-1/mount", "/mnt/with space"}
	if !reflect.DeepEqual(points, want) {
		t.Fatalf("got %q, want %q", points, want)
	}
	if !isMountPoint(points, "/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/pvc-1/mount/") {
		t.Error("a mounted target with a trailing slash was not found")
	}
	if isMountPoint(points, "/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/pvc-2/mount") {
		t.Error("a target never mounted was found")
	}
	if _, err := mountPoints(strings.NewReader("short line\n")); err == nil {
		t.Error("a malformed line was accepted")
	}
}
