"""Environments the checks and the full runs need beyond the checkout's own ``.venv``: the
Colab-like environment the Colab checks run in (``colab_env``), the wheels the lent GPU machine
lacks (``device_wheels``), the queue of GPU work (``gpu_plan``) and the chapters run side by side
on it (``gpu_chapters``)."""
