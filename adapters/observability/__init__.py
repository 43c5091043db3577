"""TunePlane's own metrics: the ``Instruments`` port on prometheus_client, and its exposition."""
