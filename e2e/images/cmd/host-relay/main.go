// Command host-relay lets a real node and its pods reach services that run on the
// host (the API server, the S3 server Velero's backups go to) at in-cluster
// addresses, without touching the host's network: for each pair it opens a
// listening socket inside the node's network namespace (at an address the node
// holds on its loopback device, such as the `kubernetes` Service's ClusterIP) and
// forwards each connection to a loopback address in the host's namespace, where
// this process runs. Bytes pass through untouched (TLS included; the API server's
// certificate carries the ClusterIP).
//
//	host-relay -netns /path/to/netns -relay 10.96.0.1:443=127.0.0.1:16443 [-relay ...]
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

type pairs []string

func (p *pairs) String() string     { return strings.Join(*p, ",") }
func (p *pairs) Set(v string) error { *p = append(*p, v); return nil }

func main() {
	netns := flag.String("netns", "", "network namespace file to listen in")
	var relays pairs
	flag.Var(&relays, "relay", "LISTEN=TO: listen at LISTEN inside the namespace, forward to TO here (repeatable)")
	flag.Parse()
	if *netns == "" || len(relays) == 0 {
		fmt.Fprintln(os.Stderr, "usage: host-relay -netns FILE -relay LISTEN=TO [-relay LISTEN=TO]...")
		os.Exit(2)
	}
	for _, pair := range relays {
		listen, to, ok := strings.Cut(pair, "=")
		if !ok || listen == "" || to == "" {
			fmt.Fprintf(os.Stderr, "host-relay: %q is not LISTEN=TO\n", pair)
			os.Exit(2)
		}
		ln, err := listenIn(*netns, listen)
		if err != nil {
			fmt.Fprintln(os.Stderr, "host-relay:", err)
			os.Exit(1)
		}
		fmt.Printf("relaying %s (in %s) to %s\n", listen, *netns, to)
		go serve(ln, to)
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	<-signals
}

func serve(ln net.Listener, to string) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, "host-relay: accept:", err)
			os.Exit(1)
		}
		go relay(conn, to)
	}
}

// listenIn creates the listener on a thread that has entered the namespace. The
// socket stays in that namespace; the thread is never unlocked, so Go ends it
// rather than reuse it for code that expects the host's namespace.
func listenIn(netns, addr string) (net.Listener, error) {
	type result struct {
		ln  net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := unix.Open(netns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- result{err: fmt.Errorf("opening %s: %w", netns, err)}
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			ch <- result{err: fmt.Errorf("entering %s: %w", netns, err)}
			return
		}
		ln, err := net.Listen("tcp", addr)
		ch <- result{ln, err}
	}()
	r := <-ch
	return r.ln, r.err
}

func relay(client net.Conn, to string) {
	defer client.Close()
	server, err := net.Dial("tcp", to)
	if err != nil {
		fmt.Fprintln(os.Stderr, "host-relay: dial:", err)
		return
	}
	defer server.Close()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		// Half-close so the other side sees the end of the stream.
		if tcp, ok := dst.(*net.TCPConn); ok {
			_ = tcp.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(server, client)
	go pipe(client, server)
	<-done
	<-done
}
