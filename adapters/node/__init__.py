"""The node backend's adapters: what the control plane pins (``backend``), and the node
daemon's building blocks: its capacity, its durable member journal (``journal``) and the
container executor (``executor``)."""
