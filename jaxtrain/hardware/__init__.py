"""What the hardware decides: the kernels and product precision per device (`backend`), the XLA
compiler options a run adds (`xla_options`), the compiled programs kept between starts
(`compile_cache`), peak FLOP/s for MFU (`peaks`), what a figure was measured on (`host_info`),
host memory settings (`host_malloc`) and whether this process can write a folder (`writable`).
"""
