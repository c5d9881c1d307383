"""Tests of ``tornado_readinto.dask`` (the dask comms, the switch, deployments)."""
