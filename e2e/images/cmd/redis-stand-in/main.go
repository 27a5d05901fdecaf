// Command redis-stand-in serves the Redis protocol from memory on one address,
// for Argo CD's application-controller and repo-server when the local cluster
// runs them as host processes (e2e/cluster/argocd.sh): both only cache in Redis,
// so a store that forgets everything on exit is all they need, and no Redis
// server has to be installed on the host.
//
//	redis-stand-in -addr 127.0.0.1:21185
//
// The store is miniredis, the release Argo CD's own `argocd --core` mode runs in
// process. miniredis moves its clock only when told to: a ticker advances it with
// the wall clock, so that keys expire as Argo CD asks (its cache entries and the
// locks it takes while generating manifests).
package main

import (
	"flag"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:6379", "address to listen on")
	flag.Parse()

	store := miniredis.NewMiniRedis()
	if err := store.StartAddr(*addr); err != nil {
		log.Fatalf("redis-stand-in: listening on %s: %v", *addr, err)
	}
	log.Printf("redis-stand-in: serving on %s", store.Addr())

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	last := time.Now()
	for {
		select {
		case now := <-ticker.C:
			store.FastForward(now.Sub(last))
			last = now
		case <-signals:
			store.Close()
			return
		}
	}
}
