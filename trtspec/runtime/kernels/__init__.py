"""The compiled C++ kernels (row kernel, paged attention, rope write, decoder layers) and their build."""
