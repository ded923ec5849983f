"""logkeeper.server: the sidecar process — a LogManager, its cleaner threads and an HTTP API.

``logkeeper sidecar --config FILE`` (the process: ../sidecar_main.py). Modules, one job each:

- config.py        the YAML file (sections sidecar, node, cleaner, topics) and LOGKEEPER_* overrides
- auth.py          the bearer token of the mounted token file (re-read on change, constant-time check)
- topic_store.py   configs of topics created through the API, kept in every log directory
- service.py       Sidecar: start (recovery), shutdown, topics, produce, fetch, offsets
- cleaning.py      pause, resume and clean-now of a partition; the last round of each partition
- status.py        the /v1/status document; status_schema.py: its typed contract (and the schema generator)
- metrics.py       /metrics with Kafka's metric names (JMX name -> Prometheus name mapping)
- record_json.py   records as JSON (produce bodies, fetched records)
- params.py        request parameter parsing; errors.py: failures -> HTTP status and error code
- middleware.py    request metrics, JSON errors, bearer-token checks
- http_limits.py   bounds on what clients can make the sidecar hold: connections, idle time, bodies
- http_api.py      the routes and their thin handlers; openapi.py: the OpenAPI document
- process.py       the sidecar as a subprocess plus a small client (demo, tests, benchmarks)

Every request that mutates needs ``Authorization: Bearer <token>``; every error is a JSON body
``{"error": CODE, "detail": MESSAGE}`` (errors.py lists the codes); the API is described at
``/openapi.json``.
"""
