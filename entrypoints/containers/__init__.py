"""One container per deployable process: which adapter serves which port there, and nothing the
process does not use (the table in docs/architecture.md, "Composition").

- `tp serve` (the API and the control loop): ``api.ApiContainer``.
- `tp gateway node`: ``node_gateway.NodeGatewayContainer``.
- `tp gateway telemetry`: ``telemetry_gateway.TelemetryGatewayContainer``.
- `tp node run`: ``node.NodeContainer``.
- `tp collector`: ``collector.CollectorContainer``.
- `tp up`'s set-up steps: ``setup.SetupContainer``; `tp up` composes the others (the gateways
  and the node daemon as child processes, each building its own container; the API in its own).

Every process starts and stops its container the same way (``lifecycle.started``), and import
contracts in pyproject.toml keep each container from reaching what its process does not use.
"""
