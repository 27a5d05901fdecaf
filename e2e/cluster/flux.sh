# shellcheck shell=bash disable=SC2154 # variables come from lib.sh, nodes.sh, up.sh
# Flux in the local cluster: sourced by up.sh after lib.sh, nodes.sh and velero.sh,
# not run.
#
# Flux's source-controller and kustomize-controller, built from their modules
# (build-flux.sh), run on the host like the control plane, so that a test can
# have Flux reconcile an app from a source served on this machine: a Bucket in
# the S3 server of velero.sh. Hence they run only where that server does.
#   - Both use one identity (group refill:flux) bound to cluster-admin, as Flux's
#     own install binds kustomize-controller: it applies whatever its sources hold.
#   - No leader election: one process of each, and no Lease to wait out when one
#     is restarted.
#   - source-controller serves its artifacts on the host's loopback, where
#     kustomize-controller (also on the host) fetches them; nothing in a pod does.
#   - Their CRDs come from their modules, with Argo CD's Application and
#     AppProject CRDs beside them, so that tests can check objects of either tool
#     against its schema whether or not Argo CD runs (argocd.sh).

flux_namespace=flux-system
# The last two digits (80-84) differ from every other port of lib.sh and nodes.sh,
# so that clusters whose offsets differ by hundreds never share one.
flux_storage_port=$((21180 + port_offset))
source_controller_metrics_port=$((21181 + port_offset))
source_controller_health_port=$((21182 + port_offset))
kustomize_controller_metrics_port=$((21183 + port_offset))
kustomize_controller_health_port=$((21184 + port_offset))

source_controller_ready() { healthy "http://127.0.0.1:$source_controller_health_port/readyz"; }
kustomize_controller_ready() { healthy "http://127.0.0.1:$kustomize_controller_health_port/readyz"; }
# source-controller opens its artifact server a moment after it reports ready;
# any HTTP answer (a 404 for /) shows it listens.
flux_storage_serving() { curl -sS --max-time 2 -o /dev/null "http://127.0.0.1:$flux_storage_port/"; }

start_flux() {
  local built flux_bin crd_dirs
  built="$("$here/build-flux.sh")"
  flux_bin="$(sed -n 1p <<<"$built")"
  mapfile -t crd_dirs < <(sed -n '2,$p' <<<"$built")
  [[ -x "$flux_bin/source-controller" && -x "$flux_bin/kustomize-controller" ]] ||
    { say "build-flux.sh gave no usable bin dir ('$flux_bin')"; exit 1; }
  apply_crds "${crd_dirs[@]}"

  tool_identity flux "$flux_namespace"

  local storage="$cluster_dir/flux/artifacts"
  mkdir -p "$storage"
  # Flux's controllers take their API server from KUBECONFIG (they have no flag
  # for it) and their own namespace from RUNTIME_NAMESPACE, as in a pod. Neither
  # is in the fingerprint: both are the same for every start of a cluster. As no
  # flag of kustomize-controller names a file of the state directory, argv[0]
  # names it (see launch), for down.sh.
  KUBECONFIG="$cluster_dir/flux.kubeconfig" RUNTIME_NAMESPACE="$flux_namespace" bin="$flux_bin" \
    argv0="source-controller@$cluster_dir/" \
    ensure source-controller \
    --storage-path "$storage" \
    --storage-addr "127.0.0.1:$flux_storage_port" \
    --storage-adv-addr "127.0.0.1:$flux_storage_port" \
    --metrics-addr "127.0.0.1:$source_controller_metrics_port" \
    --health-addr "127.0.0.1:$source_controller_health_port" \
    --enable-leader-election=false \
    --watch-all-namespaces=true \
    --log-encoding console
  # Remote bases would be fetched from the internet, which tests never reach.
  KUBECONFIG="$cluster_dir/flux.kubeconfig" RUNTIME_NAMESPACE="$flux_namespace" bin="$flux_bin" \
    argv0="kustomize-controller@$cluster_dir/" \
    ensure kustomize-controller \
    --metrics-addr "127.0.0.1:$kustomize_controller_metrics_port" \
    --health-addr "127.0.0.1:$kustomize_controller_health_port" \
    --enable-leader-election=false \
    --watch-all-namespaces=true \
    --no-remote-bases=true \
    --log-encoding console
  wait_until 60 source-controller "source-controller /readyz" source_controller_ready
  wait_until 30 source-controller "source-controller's artifact server" flux_storage_serving
  wait_until 60 kustomize-controller "kustomize-controller /readyz" kustomize_controller_ready
  say "Flux source-controller $FLUX_SOURCE_CONTROLLER_VERSION and kustomize-controller $FLUX_KUSTOMIZE_CONTROLLER_VERSION ready"
}

# A cluster started again without Flux keeps no Flux process running.
stop_flux() {
  stop_component kustomize-controller
  stop_component source-controller
}
