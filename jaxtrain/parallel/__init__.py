"""Running over many devices and processes: the mesh and the logical-axis rules (`sharding`),
starting `jax.distributed` from a launcher's environment (`distributed`) and noticing a lost
process (`peer_watch`).
"""
