// Command apiserver-relay lets a real node and its pods reach the API server at its
// in-cluster address without touching the host's network: it opens a listening
// socket inside the node's network namespace (at the `kubernetes` Service's
// ClusterIP, which the node holds on its loopback device) and forwards each
// connection to the API server's loopback address in the host's namespace, where
// this process runs. TLS passes through untouched; the API server's certificate
// carries the ClusterIP.
//
//	apiserver-relay -netns /path/to/netns -listen 10.96.0.1:443 -to 127.0.0.1:16443
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

func main() {
	netns := flag.String("netns", "", "network namespace file to listen in")
	listen := flag.String("listen", "", "address to listen at, inside the namespace")
	to := flag.String("to", "", "address to forward to, in this process's namespace")
	flag.Parse()
	if *netns == "" || *listen == "" || *to == "" {
		fmt.Fprintln(os.Stderr, "usage: apiserver-relay -netns FILE -listen ADDR -to ADDR")
		os.Exit(2)
	}
	ln, err := listenIn(*netns, *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "apiserver-relay:", err)
		os.Exit(1)
	}
	go func() {
		signals := make(chan os.Signal, 1)
		signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
		<-signals
		os.Exit(0)
	}()
	fmt.Printf("relaying %s (in %s) to %s\n", *listen, *netns, *to)
	for {
		conn, err := ln.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, "apiserver-relay: accept:", err)
			os.Exit(1)
		}
		go relay(conn, *to)
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
		fmt.Fprintln(os.Stderr, "apiserver-relay: dial:", err)
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
