"""logkeeper's Kubernetes operator (kopf): LogVolume, CleanerPolicy and CompactionJob.

Modules, one job each:

- ``names``      API group, kinds, labels, annotations, child object names.
- ``spec``       LogVolume and CleanerPolicy specs parsed and validated (SpecError names the
                 field and why); ``jobspec`` the CompactionJob's and the policy's history limits.
- ``render``     the sidecar's config file rendered from a spec and checked by the sidecar's own
                 loader (logkeeper.server.config); the hash that decides whether a change rolls the pod.
- ``builders``   pure manifest builders: Secret, ConfigMap, Service, PVCs, StatefulSet, Job.
- ``crdgen``     the CRD YAML under crds/, generated from the settings' single definitions;
                 ``schemas`` the LogVolume's spec schema and the CEL rules (``rule``).
- ``status``     the status model: a sidecar's /v1/status + the pod -> LogVolume status, conditions
                 with transitions, and the events those transitions raise.
- ``compaction`` the CompactionJob state machine, conditions, history (pure: state + observations
                 -> next step); ``jobs`` carries it out against the API (hand-offs, ticks, the
                 finalizer and cancelling, pruning); ``cancel`` runs in the cancel Job's pod.
- ``k8s``        the Kubernetes client: server-side apply, create-if-absent, reads.
- ``sidecar_client`` HTTP calls to a sidecar.
- ``handlers``   the kopf change handlers (thin: parse -> build -> apply -> status); ``reconcile``
                 what they and the periodic passes do to LogVolumes (apply, status ticks).
- ``spark_on_k8s`` the offload Job of spec.spark.mode kubernetes (the driver's pod, executors' template).
- ``tokens``     the LogVolumes' bearer tokens, derived (the operator never reads their Secrets).
- ``config``     the operator's own settings; ``chartgen`` the chart's generated parts from them.
- ``__main__``   ``python -m logkeeper_operator``: run the operator (--http, --leader-election).
- ``periodic``   the periodic passes outside kopf (status, drift repair, CompactionJobs).
- ``leader``     leader election over a Lease; ``metrics`` /metrics, /healthz; ``events``
                 Kubernetes events; ``times`` RFC 3339.

docs/operator.md says what the operator promises (deletion, drift, HA, offload jobs) and why.
"""
