"""Native and Triton sources the copy backends build or load, shipped as `toolkit._kernels` (found from the source
tree when not installed: toolkit/copy/kernel_sources.py), and the GPU check (gpu_check.sh, gpu_check.py,
gpu_runner.py) that runs from a plain copy of the repository."""
