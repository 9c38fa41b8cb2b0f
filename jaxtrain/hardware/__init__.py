"""What the hardware decides: the kernels and product precision per device (`backend`), peak
FLOP/s for MFU (`peaks`), what a figure was measured on (`host_info`) and host memory settings
(`host_malloc`).
"""
