"""What the tests share besides fixtures (those are in `conftest.py`): `cluster` (kubectl and the
examples), `operators` (an operator run as a process, waited for by its lines), `kwok` (pods run by
kwok), `audit` (the API server's audit log), `faults` (a proxy that breaks the API's answers),
`forwarding` (bytes piped between sockets), `webhooks` (webhook configurations for the tests),
`olm` (operator-framework's validator), `containers` (podman), `network` (free ports), `metrics`
(the Prometheus endpoint scraped), `contacts` (the conversion example's objects), `otlp` (a
collector's receiver of traces)."""
