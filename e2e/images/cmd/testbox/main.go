// Command testbox is the one program of the test image the real nodes' pods run,
// since the image has no shell or busybox:
//
//	testbox write FILE TEXT   writes TEXT to FILE (parents created), then exits
//	testbox check FILE SHA256 exits 0 if FILE's bytes have that SHA-256 (hex), 1
//	                          otherwise: an exec probe that the pod itself reads
//	                          the data a test expects
//	testbox tree DIR MIB      unless DIR/.tree exists, fills DIR with MIB MiB of
//	                          files in nested directories, with a symlink and
//	                          chosen modes and owners, the same on every run
//	testbox sleep             waits for SIGTERM or SIGINT
//	testbox scribble DIR SECS writes a new small file into DIR every 50 ms, as
//	                          an app that keeps writing does; on SIGTERM or
//	                          SIGINT stops writing, lingers SECS seconds (a
//	                          slow shutdown), then exits
//	testbox api PATH          GETs PATH from the API server with the pod's
//	                          ServiceAccount (in-cluster config), prints the body
//	testbox -p DIR ... -a create|delete
//	                          the local-path provisioner's helper: creates the
//	                          volume's directory (mode 0777) or removes it
package main

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

func main() {
	if len(os.Args) < 2 {
		fail(2, "usage: testbox write FILE TEXT | check FILE SHA256 | tree DIR MIB | sleep | scribble DIR SECS | api PATH | -p DIR -a create|delete")
	}
	var err error
	switch os.Args[1] {
	case "write":
		if len(os.Args) != 4 {
			fail(2, "usage: testbox write FILE TEXT")
		}
		err = write(os.Args[2], os.Args[3])
	case "check":
		if len(os.Args) != 4 {
			fail(2, "usage: testbox check FILE SHA256")
		}
		err = check(os.Args[2], os.Args[3])
	case "tree":
		if len(os.Args) != 4 {
			fail(2, "usage: testbox tree DIR MIB")
		}
		err = tree(os.Args[2], os.Args[3])
	case "scribble":
		if len(os.Args) != 4 {
			fail(2, "usage: testbox scribble DIR SECS")
		}
		err = scribble(os.Args[2], os.Args[3])
	case "sleep":
		signals := make(chan os.Signal, 1)
		signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
		<-signals
	case "api":
		if len(os.Args) != 3 {
			fail(2, "usage: testbox api PATH")
		}
		err = api(os.Args[2])
	case "-p":
		err = localPathHelper(os.Args[1:])
	default:
		fail(2, "testbox: unknown command "+os.Args[1])
	}
	if err != nil {
		fail(1, "testbox: "+err.Error())
	}
}

func scribble(dir, linger string) error {
	var secs int
	if _, err := fmt.Sscanf(linger, "%d", &secs); err != nil {
		return fmt.Errorf("SECS %q: %v", linger, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-signals:
			time.Sleep(time.Duration(secs) * time.Second)
			return nil
		case now := <-tick.C:
			name := filepath.Join(dir, fmt.Sprintf("%08d", n))
			if err := os.WriteFile(name, []byte(now.String()), 0o644); err != nil {
				return err
			}
		}
	}
}

func fail(code int, msg string) {
	fmt.Fprintln(os.Stderr, msg)
	os.Exit(code)
}

func write(file, text string) error {
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		return err
	}
	fmt.Printf("wrote %d bytes to %s\n", len(text), file)
	return nil
}

func check(file, want string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	have := fmt.Sprintf("%x", sha256.Sum256(data))
	if have != strings.ToLower(want) {
		return fmt.Errorf("%s has SHA-256 %s, not %s", file, have, want)
	}
	fmt.Printf("%s has SHA-256 %s\n", file, have)
	return nil
}

// api does what a client's in-cluster configuration does: the API server's
// address from KUBERNETES_SERVICE_HOST/PORT, which the kubelet sets from the
// `kubernetes` Service, and the CA and token the kubelet mounts.
func api(path string) error {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return fmt.Errorf("KUBERNETES_SERVICE_HOST/PORT are not set")
	}
	ca, err := os.ReadFile(filepath.Join(serviceAccountDir, "ca.crt"))
	if err != nil {
		return err
	}
	token, err := os.ReadFile(filepath.Join(serviceAccountDir, "token"))
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return fmt.Errorf("no certificate in %s/ca.crt", serviceAccountDir)
	}
	client := &http.Client{
		Timeout:   20 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}
	req, err := http.NewRequest(http.MethodGet, "https://"+net.JoinHostPort(host, port)+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	fmt.Println(string(body))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return nil
}

// localPathHelper takes the arguments the provisioner gives its helper pods'
// setupCommand and teardownCommand: -p DIR -s SIZE -m MODE -a create|delete.
func localPathHelper(args []string) error {
	fs := flag.NewFlagSet("local-path helper", flag.ContinueOnError)
	dir := fs.String("p", "", "volume directory")
	fs.String("s", "", "size in bytes")
	fs.String("m", "", "volume mode")
	action := fs.String("a", "", "create or delete")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if !filepath.IsAbs(*dir) || filepath.Clean(*dir) == "/" {
		return fmt.Errorf("refusing volume directory %q", *dir)
	}
	switch *action {
	case "create":
		if err := os.MkdirAll(*dir, 0o777); err != nil {
			return err
		}
		// MkdirAll's mode passes through the umask; the volume must be writable by
		// any user the consuming pod runs as.
		return os.Chmod(*dir, 0o777)
	case "delete":
		return os.RemoveAll(*dir)
	default:
		return fmt.Errorf("unknown action %q", *action)
	}
}

// tree writes what an application's volume might hold, the same bytes on every
// run: files of several sizes in nested directories, modes other than the
// default, files owned by other users, and a relative symlink. The marker
// .tree is written last, so a restarted pod leaves an existing tree alone.
func tree(dir, mib string) error {
	var total int
	if _, err := fmt.Sscanf(mib, "%d", &total); err != nil || total < 1 {
		return fmt.Errorf("MIB must be a positive number, not %q", mib)
	}
	marker := filepath.Join(dir, ".tree")
	if _, err := os.Stat(marker); err == nil {
		fmt.Println("tree already written")
		return nil
	}
	type file struct {
		path     string
		size     int
		mode     os.FileMode
		uid, gid int
	}
	mb := 1 << 20
	files := []file{
		{"README", 120, 0o644, 0, 0},
		{"db/main.db", total * mb / 2, 0o600, 1000, 1000},
		{"db/wal/000001.log", total * mb / 4, 0o640, 1000, 2000},
		{"db/wal/000002.log", total*mb/4 - 4096, 0o640, 1000, 2000},
		{"etc/app.conf", 700, 0o444, 0, 0},
		{"bin/tool", 4096, 0o755, 0, 0},
	}
	state := uint64(0x9E3779B97F4A7C15)
	for _, f := range files {
		data := make([]byte, f.size)
		for i := range data {
			// xorshift: the same bytes every run, and nothing compresses them.
			state ^= state << 13
			state ^= state >> 7
			state ^= state << 17
			data[i] = byte(state)
		}
		path := filepath.Join(dir, f.path)
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			return err
		}
		if err := os.WriteFile(path, data, f.mode); err != nil {
			return err
		}
		if err := os.Chmod(path, f.mode); err != nil {
			return err
		}
		if err := os.Chown(path, f.uid, f.gid); err != nil {
			return err
		}
	}
	if err := os.Chown(filepath.Join(dir, "db"), 1000, 1000); err != nil {
		return err
	}
	if err := os.Symlink("db/main.db", filepath.Join(dir, "current")); err != nil {
		return err
	}
	if err := os.WriteFile(marker, []byte("written by testbox tree\n"), 0o644); err != nil {
		return err
	}
	fmt.Printf("wrote a tree of %d MiB to %s\n", total, dir)
	return nil
}
