"""Environments the checks and the full runs need beyond the checkout's own ``.venv``: the
Colab-like environment the Colab checks run in (``colab_env``), the wheels the lent GPU machine
lacks (``device_wheels``) and the plan of steps run on it (``gpu_plan``)."""
