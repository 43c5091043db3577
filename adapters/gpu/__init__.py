"""The host's NVIDIA GPUs (``domain.gpus.GpuProbe``): NVML through ``nvidia-ml-py``,
``nvidia-smi`` as the fallback, recorded outputs as the fake. Shared by the node daemon (its
inventory) and the collector (members' GPU samples), so it depends on neither."""
