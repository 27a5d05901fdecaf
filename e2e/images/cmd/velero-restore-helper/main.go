// Command velero-restore-helper keeps the contract of Velero's restore helper, the
// program of a restore target pod's `restore-wait` init container, for images
// built here: given the UID of the restore, it checks once a second whether
// /restores/<volume>/.velero/<UID> exists for every volume mounted under
// /restores, and when all do it removes each volume's .velero directory and exits
// 0, which lets the pod's other containers start. Only a bad argument or an
// unreadable /restores make it fail.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

const root = "/restores"

func main() {
	if len(os.Args) != 2 || os.Args[1] == "" {
		fmt.Fprintln(os.Stderr, "usage: velero-restore-helper <restore UID>")
		os.Exit(2)
	}
	uid := os.Args[1]
	for {
		done, err := allDone(uid)
		if err != nil {
			fmt.Fprintln(os.Stderr, "velero-restore-helper:", err)
			os.Exit(1)
		}
		if done {
			break
		}
		time.Sleep(time.Second)
	}
	volumes, _ := os.ReadDir(root)
	fmt.Printf("all %d volumes of restore %s are done\n", len(volumes), uid)
	// Like Velero's helper, a done folder it may not remove (it runs as another user
	// than the node agent that wrote it) is reported, not a failure: the data is in
	// place, and the pod must go on.
	for _, v := range volumes {
		if err := os.RemoveAll(filepath.Join(root, v.Name(), ".velero")); err != nil {
			fmt.Fprintln(os.Stderr, "velero-restore-helper: cleaning up:", err)
		}
	}
}

// allDone reports whether every volume under /restores has its done file; with no
// volume mounted there is nothing to wait for, which Velero treats as done too.
func allDone(uid string) (bool, error) {
	volumes, err := os.ReadDir(root)
	if err != nil {
		if os.IsNotExist(err) {
			return true, nil
		}
		return false, err
	}
	for _, v := range volumes {
		if !v.IsDir() {
			continue
		}
		if _, err := os.Stat(filepath.Join(root, v.Name(), ".velero", uid)); err != nil {
			if os.IsNotExist(err) {
				return false, nil
			}
			return false, err
		}
	}
	return true, nil
}
