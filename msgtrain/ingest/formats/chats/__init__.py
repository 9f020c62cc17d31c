"""Chat exports: ShareGPT-style datasets, msgtrain's typed messages and its native graph log."""
