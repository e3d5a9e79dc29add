"""Native and Triton sources the copy backends build or load (see toolkit/copy/native.py, triton_backend.py)."""
