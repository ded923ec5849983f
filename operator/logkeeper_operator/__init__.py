"""logkeeper's Kubernetes operator (kopf): LogVolume, CleanerPolicy and CompactionJob.

Modules, one job each:

- ``names``      API group, kinds, labels, annotations, child object names.
- ``spec``       LogVolume / CleanerPolicy / CompactionJob specs parsed and validated (SpecError
                 names the field and why).
- ``render``     the sidecar's config file rendered from a spec and checked by the sidecar's own
                 loader (logkeeper.server.config); the hash that decides whether a change rolls the pod.
- ``builders``   pure manifest builders: Secret, ConfigMap, Service, PVCs, StatefulSet, Job.
- ``crdgen``     the CRD YAML under crds/, generated from the settings' single definitions.
- ``status``     the status model: a sidecar's /v1/status + the pod -> LogVolume status, conditions
                 with transitions, and the events those transitions raise.
- ``compaction`` the CompactionJob state machine (pure: state + observations -> next step).
- ``k8s``        the Kubernetes client: server-side apply, create-if-absent, reads.
- ``sidecar_client`` HTTP calls to a sidecar.
- ``handlers``   the kopf handlers (thin: parse -> build -> apply -> status).
"""
