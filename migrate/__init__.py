"""ddp-migrate: rewrite single-GPU and DataParallel PyTorch scripts into torchrun-ready DDP code."""

__version__ = "0.1.0"
