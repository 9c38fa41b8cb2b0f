"""Will a run fit its devices? Memory of the state and the compiled step (`memory`),
compile-only figures of a planned mesh (`compile`) and the devices a config is sized for
(`devices`).
"""
