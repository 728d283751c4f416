"""kda-trace: KDA kernel definitions, real workloads, and a runner that judges implementations."""

__version__ = "0.1.0"
