"""Running over many devices and processes: the mesh and the logical-axis rules (`sharding`),
starting `jax.distributed` from a launcher's environment (`distributed`), noticing a lost
process (`peer_watch`) and keeping JAX's native report of a lost coordinator out of the log
(`native_log_filter`).
"""
