"""engage-sync: warehouse rows to a customer-engagement service, incrementally and crash-safe."""

__version__ = "0.1.0"
