"""The Docker Engine API (Docker, or Podman's compatible service), shared by the backends that
run containers: the local backend (``adapters/docker``) and the node daemon's executor
(``adapters/node``). They may not import each other (pyproject's import contracts); what both
need lives here: connecting and translating the engine's failures (``engine.py``), requests
through public APIs only (``api.py``), a member's container as the engine sees it
(``spec.py``) and the container operations on it (``containers.py``)."""
