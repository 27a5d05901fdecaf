// Command csi-hostpath is the local cluster's CSI driver: each volume is a
// directory under a state directory of the node it was made on, bind-mounted
// into the pods that use it. One process per node serves the CSI identity,
// controller and node services on one socket (the external-provisioner beside
// it, in node-deployment mode, provisions that node's volumes through it), and
// registers the driver with the kubelet through the kubelet's plugin
// registration socket, as node-driver-registrar would.
//
//	csi-hostpath -node NAME -endpoint /var/lib/kubelet/plugins/D/csi.sock \
//	    -registration /var/lib/kubelet/plugins_registry/D-reg.sock -state /csi-data-dir
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	registration "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

const (
	driverName  = "hostpath.csi.refill.dev"
	topologyKey = "topology.hostpath.csi.refill.dev/node"
	version     = "1.0.0"
)

func main() {
	node := flag.String("node", os.Getenv("NODE_NAME"), "name of this node (its volumes' topology)")
	endpoint := flag.String("endpoint", "", "unix socket of the CSI services")
	registrationSocket := flag.String("registration", "", "unix socket in the kubelet's plugins_registry directory")
	stateDir := flag.String("state", "/csi-data-dir", "directory holding the volumes of this node")
	flag.Parse()
	if *node == "" || *endpoint == "" || *registrationSocket == "" {
		fmt.Fprintln(os.Stderr, "usage: csi-hostpath -node NAME -endpoint SOCKET -registration SOCKET [-state DIR]")
		os.Exit(2)
	}
	if err := os.MkdirAll(*stateDir, 0o755); err != nil {
		log.Fatal(err)
	}
	d := &driver{node: *node, stateDir: *stateDir}

	csiServer := grpc.NewServer(grpc.UnaryInterceptor(logCalls))
	csi.RegisterIdentityServer(csiServer, d)
	csi.RegisterControllerServer(csiServer, d)
	csi.RegisterNodeServer(csiServer, d)
	// The kubelet is told the CSI endpoint by path, as it sees the node's file
	// system: the same path is mounted into this container.
	regServer := grpc.NewServer()
	failed := make(chan error, 2)
	registration.RegisterRegistrationServer(regServer, &registrar{endpoint: *endpoint, failed: failed})

	csiListener := listen(*endpoint)
	regListener := listen(*registrationSocket)
	go func() { failed <- csiServer.Serve(csiListener) }()
	go func() { failed <- regServer.Serve(regListener) }()
	log.Printf("%s %s serving node %s at %s (registration %s, volumes in %s)",
		driverName, version, *node, *endpoint, *registrationSocket, *stateDir)

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	select {
	case s := <-stop:
		log.Printf("%s: stopping", s)
	case err := <-failed:
		log.Printf("stopping: %v", err)
		defer os.Exit(1)
	}
	// The registration socket goes first, so that the kubelet deregisters the
	// driver rather than calling a socket nobody serves.
	regServer.Stop()
	csiServer.GracefulStop()
	os.Remove(*registrationSocket)
	os.Remove(*endpoint)
}

// listen binds a unix socket, replacing one a previous run left behind.
func listen(path string) net.Listener {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		log.Fatal(err)
	}
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		log.Fatal(err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		log.Fatal(err)
	}
	return l
}

// logCalls logs every CSI call but the probes and the kubelet's frequent
// capability queries, with its outcome: the driver's only record of what it did.
func logCalls(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	switch info.FullMethod {
	case csi.Identity_Probe_FullMethodName, csi.Node_NodeGetCapabilities_FullMethodName:
	default:
		if err != nil {
			log.Printf("%s %v: %v", filepath.Base(info.FullMethod), req, err)
		} else {
			log.Printf("%s %v: ok", filepath.Base(info.FullMethod), req)
		}
	}
	return resp, err
}

// registrar answers the kubelet's plugin watcher, which finds the registration
// socket in its plugins_registry directory and asks what it serves.
type registrar struct {
	registration.UnimplementedRegistrationServer
	endpoint string
	failed   chan<- error
}

func (r *registrar) GetInfo(context.Context, *registration.InfoRequest) (*registration.PluginInfo, error) {
	return &registration.PluginInfo{
		Type:              registration.CSIPlugin,
		Name:              driverName,
		Endpoint:          r.endpoint,
		SupportedVersions: []string{version},
	}, nil
}

// A refused registration leaves the node without the driver: the process
// exits, so that its pod restarts and tries again, visibly.
func (r *registrar) NotifyRegistrationStatus(_ context.Context, s *registration.RegistrationStatus) (*registration.RegistrationStatusResponse, error) {
	if !s.PluginRegistered {
		r.failed <- fmt.Errorf("the kubelet refused the driver: %s", s.Error)
	} else {
		log.Printf("registered with the kubelet")
	}
	return &registration.RegistrationStatusResponse{}, nil
}
