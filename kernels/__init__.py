"""Native and Triton sources the copy backends build or load; shipped as `toolkit._kernels`."""
