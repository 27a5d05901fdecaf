package main

import (
	"context"
	"errors"
	"os"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The size reported for a claim that asks for none; nothing enforces sizes, the
// volumes share their node's disk.
const defaultCapacity = 1 << 30

func (d *driver) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: []*csi.ControllerServiceCapability{{
		Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{
			Type: csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		}},
	}}}, nil
}

// CreateVolume makes the volume's directory on this node. Calling it again for
// the same name (the provisioner retries after a timeout) finds the directory
// and answers the same.
func (d *driver) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	dir, err := volumeDir(d.stateDir, req.GetName())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	if req.GetVolumeContentSource() != nil {
		return nil, status.Error(codes.InvalidArgument, "volumes are made empty: no snapshot or clone source")
	}
	reqs := req.GetAccessibilityRequirements()
	if !reachable(d.node, segments(reqs.GetRequisite()), segments(reqs.GetPreferred())) {
		return nil, status.Errorf(codes.ResourceExhausted, "node %s is not among the requested topologies", d.node)
	}
	// World-writable like an empty emptyDir, so that a pod of any user can write;
	// fsGroup (the CSIDriver's File policy) narrows it where a pod asks.
	if err := os.Mkdir(dir, 0o777); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	size := req.GetCapacityRange().GetRequiredBytes()
	if size == 0 {
		size = defaultCapacity
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:           req.GetName(),
		CapacityBytes:      size,
		AccessibleTopology: []*csi.Topology{{Segments: map[string]string{topologyKey: d.node}}},
	}}, nil
}

// DeleteVolume removes the directory and what is in it; a volume already gone
// is deleted.
func (d *driver) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	dir, err := volumeDir(d.stateDir, req.GetVolumeId())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.DeleteVolumeResponse{}, nil
}

func (d *driver) ValidateVolumeCapabilities(_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	dir, err := volumeDir(d.stateDir, req.GetVolumeId())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if _, err := os.Stat(dir); err != nil {
		return nil, status.Errorf(codes.NotFound, "volume %s: %v", req.GetVolumeId(), err)
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: err.Error()}, nil
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeCapabilities: req.GetVolumeCapabilities(),
	}}, nil
}

// checkCapabilities accepts file-system volumes in any access mode: a directory
// is shared by whatever mounts it on its node. Raw block volumes are refused.
func checkCapabilities(caps []*csi.VolumeCapability) error {
	if len(caps) == 0 {
		return status.Error(codes.InvalidArgument, "no volume capabilities")
	}
	for _, c := range caps {
		if c.GetMount() == nil {
			return status.Error(codes.InvalidArgument, "only file-system volumes (no raw block)")
		}
	}
	return nil
}

func segments(topologies []*csi.Topology) []map[string]string {
	out := make([]map[string]string, 0, len(topologies))
	for _, t := range topologies {
		out = append(out, t.GetSegments())
	}
	return out
}
